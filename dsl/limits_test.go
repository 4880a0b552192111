package dsl

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/hcl/v2"
)

// Hostile workspace files are refused quickly with a diagnostic naming the
// file: a link to a device, a FIFO, an oversized file, brackets nested past
// the parser's depth. None blocks, none crashes.
func TestHostileFiles(t *testing.T) {
	cases := map[string]func(t *testing.T, path string){
		"link to /dev/zero": func(t *testing.T, path string) {
			if err := os.Symlink("/dev/zero", path); err != nil {
				t.Fatal(err)
			}
		},
		"fifo": func(t *testing.T, path string) {
			if err := syscall.Mkfifo(path, 0o644); err != nil {
				t.Skip("mkfifo:", err)
			}
		},
		"17 MiB": func(t *testing.T, path string) {
			if err := os.WriteFile(path, bytes.Repeat([]byte("# padding\n"), 17<<20/10), 0o644); err != nil {
				t.Fatal(err)
			}
		},
		"100,000 nested (": func(t *testing.T, path string) {
			src := "locals { x = " + strings.Repeat("(", 100000) + "1" + strings.Repeat(")", 100000) + " }\n"
			if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
				t.Fatal(err)
			}
		},
		"100,000 nested [": func(t *testing.T, path string) {
			src := "locals { x = " + strings.Repeat("[", 100000) + strings.Repeat("]", 100000) + " }\n"
			if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
				t.Fatal(err)
			}
		},
	}
	for name, create := range cases {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "p.hcl")
			create(t, path)
			done := make(chan hcl.Diagnostics, 1)
			go func() {
				_, diags := Load(dir, LoadOptions{})
				done <- diags
			}()
			var diags hcl.Diagnostics
			select {
			case diags = <-done:
			case <-time.After(30 * time.Second):
				t.Fatal("Load never returned")
			}
			if !diags.HasErrors() {
				t.Fatal("no error")
			}
			if d := diags[0]; d.Subject == nil || d.Subject.Filename != path {
				t.Errorf("diagnostic %v does not name %s", d, path)
			}
		})
	}
}

// Thousands of diagnostics print the first MaxDiagnostics and a count.
func TestDiagnosticsCapped(t *testing.T) {
	var diags hcl.Diagnostics
	for range 5000 {
		diags = append(diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: "bad"})
	}
	var b bytes.Buffer
	WriteDiagnostics(&b, nil, diags, false, 80)
	if n := strings.Count(b.String(), "Error: bad"); n != MaxDiagnostics {
		t.Errorf("%d diagnostics printed, want %d", n, MaxDiagnostics)
	}
	if !strings.Contains(b.String(), "and 4950 more diagnostics") {
		t.Errorf("no count of the rest: %q", b.String()[len(b.String())-200:])
	}
}

// A name that cannot be a file name is refused at load, with its place.
func TestNameTooLong(t *testing.T) {
	long := strings.Repeat("t", 300)
	lines := map[string]int{"task": 4, "for_each": 5}
	for name, src := range map[string]string{
		"task":     `pipeline "p" {` + "\n" + `  schedule = "@daily"` + "\n" + `  start_date = "2025-07-01"` + "\n" + `  task "` + long + `" { command = "true" }` + "\n}\n",
		"for_each": `pipeline "p" {` + "\n" + `  schedule = "@daily"` + "\n" + `  start_date = "2025-07-01"` + "\n" + `  task "t" {` + "\n" + `    for_each = toset(["` + long + `"])` + "\n" + `    command = "true"` + "\n  }\n}\n",
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, "p.hcl"), []byte(src), 0o644); err != nil {
				t.Fatal(err)
			}
			_, diags := Load(dir, LoadOptions{})
			if !diags.HasErrors() || diags[0].Summary != "Name too long" || diags[0].Subject == nil || diags[0].Subject.Start.Line != lines[name] {
				t.Fatalf("diagnostics %v; want Name too long at line %d", diags, lines[name])
			}
		})
	}
}
