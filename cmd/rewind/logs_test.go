package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// rewind logs never follows a symbolic link at a log path, reads nothing
// outside the state's log directory, and refuses a negative --try.
func TestLogsRefusesLinksAndBadTries(t *testing.T) {
	w := newWorkspace(t, map[string]string{"main.hcl": `
pipeline "p" {
  schedule   = "@daily"
  start_date = "2025-07-01"
  end_date   = "2025-07-01"
  task "t" { command = "echo hello" }
}
`})
	if code, _, errs := w.rewind("run", "--quiet", "--now", "2025-07-02T00:00:00Z"); code != 0 {
		t.Fatalf("run: exit %d: %s", code, errs)
	}
	code, out, errs := w.rewind("logs", "p", "2025-07-01", "t")
	if code != 0 || !strings.Contains(out, "hello") {
		t.Fatalf("logs: exit %d, %q, %s", code, out, errs)
	}
	if code, _, errs := w.rewind("logs", "p", "2025-07-01", "t", "--try", "-1"); code != exitUsage {
		t.Errorf("--try -1: exit %d (%s), want %d", code, errs, exitUsage)
	}
	secret := filepath.Join(t.TempDir(), "shadow")
	if err := os.WriteFile(secret, []byte("root:SECRET\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	logs, _ := filepath.Glob(filepath.Join(w.dir, ".rewind", "logs", "p", "t", "*.1.log"))
	if len(logs) != 1 {
		t.Fatalf("logs %v", logs)
	}
	if err := os.Remove(logs[0]); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(secret, logs[0]); err != nil {
		t.Fatal(err)
	}
	code, out, errs = w.rewind("logs", "p", "2025-07-01", "t")
	if code == 0 || strings.Contains(out, "SECRET") {
		t.Errorf("logs through a symbolic link: exit %d, printed %q", code, out)
	}
	if !strings.Contains(errs, "symbolic link") {
		t.Errorf("stderr %q does not say why", errs)
	}
}
