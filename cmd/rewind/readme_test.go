package main

import (
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// readmeCommand is one `$ command` of a console block of the README's
// quick start, with the output lines the README shows for it.
type readmeCommand struct {
	line int
	cmd  string
	want []string
}

// readmeStory reads the console blocks of the README's quick start.
func readmeStory(t *testing.T) []readmeCommand {
	t.Helper()
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	start := strings.Index(text, "## Quick start\n")
	if start < 0 {
		t.Fatal("README has no quick start")
	}
	end := strings.Index(text[start+1:], "\n## ")
	section := text[start:]
	if end >= 0 {
		section = text[start : start+1+end]
	}
	first := strings.Count(text[:start], "\n") + 1
	var out []readmeCommand
	in := false
	for i, l := range strings.Split(section, "\n") {
		switch {
		case l == "```console":
			in = true
		case in && l == "```":
			in = false
		case in && strings.HasPrefix(l, "$ "):
			out = append(out, readmeCommand{line: first + i, cmd: strings.TrimPrefix(l, "$ ")})
		case in && len(out) > 0:
			out[len(out)-1].want = append(out[len(out)-1].want, l)
		}
	}
	return out
}

// What differs from one run to the next: durations, backfill ids,
// snapshot ids, the secret of a status line.
var readmeVolatile = []struct {
	re   *regexp.Regexp
	with string
}{
	{regexp.MustCompile(`daily_revenue_\d{8}T\d{6}(_\d+)?`), "daily_revenue_<ID>"},
	{regexp.MustCompile(`\b(\d+h)?(\d+m)?\d+(\.\d+)?(ns|µs|ms|s)\b`), "<duration>"},
	{regexp.MustCompile(`\b[0-9a-f]{32}\b`), "<secret>"},
	{regexp.MustCompile(`\b\d{12,}\b`), "<id>"},
}

func normalizeReadme(s string) string {
	s = strings.TrimRight(s, " \t")
	for _, v := range readmeVolatile {
		s = v.re.ReplaceAllString(s, v.with)
	}
	return s
}

// The quick start of the README works when followed in order, and each
// output line it shows is one the current binary prints (up to durations
// and ids; "..." stands for lines left out).
func TestReadmeQuickStart(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the 90-day catchup and backfill of the example")
	}
	story := readmeStory(t)
	if len(story) < 5 {
		t.Fatalf("the quick start has %d console commands; want the whole story", len(story))
	}
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	// bin/rewind is this test binary, which runs as rewind with
	// REWIND_TEST_AS_MAIN=1.
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(self, filepath.Join(dir, "bin", "rewind")); err != nil {
		t.Fatal(err)
	}
	copyTree(t, "../../examples/daily_revenue", filepath.Join(dir, "examples", "daily_revenue"))
	id, compared := "", 0
	idRE := regexp.MustCompile(`daily_revenue_\d{8}T\d{6}(_\d+)?`)
	for _, c := range story {
		cmdline := c.cmd
		if id != "" {
			cmdline = idRE.ReplaceAllString(cmdline, id)
		}
		cmd := exec.Command("/bin/sh", "-c", cmdline)
		cmd.Dir = dir
		for _, kv := range os.Environ() {
			if !strings.HasPrefix(kv, "REWIND_") {
				cmd.Env = append(cmd.Env, kv)
			}
		}
		cmd.Env = append(cmd.Env, "REWIND_TEST_AS_MAIN=1")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("README.md:%d: %s: %v\n%s", c.line, c.cmd, err, out)
		}
		if m := idRE.Find(out); m != nil && id == "" && strings.Contains(c.cmd, "backfill apply") {
			id = string(m)
		}
		got := map[string]bool{}
		for _, l := range strings.Split(string(out), "\n") {
			got[normalizeReadme(l)] = true
		}
		for _, w := range c.want {
			if strings.TrimSpace(w) == "..." {
				continue
			}
			compared++
			if !got[normalizeReadme(w)] {
				t.Errorf("README.md:%d: %s: the README shows\n\t%s\nwhich the binary does not print; it printed:\n%s", c.line, c.cmd, w, out)
			}
		}
	}
	t.Logf("%d commands of the README run, %d output lines compared", len(story), compared)
}

// copyTree copies the files of src to dst, leaving out what running the
// example in place leaves behind.
func copyTree(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		if d.IsDir() {
			if rel == ".rewind" || rel == "out" {
				return filepath.SkipDir
			}
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), data, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
}
