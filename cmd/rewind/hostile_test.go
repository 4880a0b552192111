package main

import (
	"bytes"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Hostile or broken HCL files get a clear error naming the file, a non-zero
// exit and no Go stack trace, from validate and from run alike, and rewind
// answers at once (the durations are logged; the only bound is the liveness
// deadline that detects a hang).
func TestHostileInputFiles(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		create func(t *testing.T, path string)
		want   string // in stderr, besides the path
	}{
		{"random bytes (1 MB)", func(t *testing.T, path string) {
			b := make([]byte, 1<<20)
			r := rand.NewChaCha8([32]byte{1})
			r.Read(b)
			write(t, path, b)
		}, "more diagnostics"},
		{"100,000 nested brackets", func(t *testing.T, path string) {
			write(t, path, []byte("locals { x = "+strings.Repeat("[", 100000)+strings.Repeat("]", 100000)+" }\n"))
		}, "nest"},
		{"100,000 nested parentheses", func(t *testing.T, path string) {
			write(t, path, []byte("locals { x = "+strings.Repeat("(", 100000)+"1"+strings.Repeat(")", 100000)+" }\n"))
		}, "nest"},
		{"link to /dev/zero", func(t *testing.T, path string) {
			if err := os.Symlink("/dev/zero", path); err != nil {
				t.Fatal(err)
			}
		}, "not a regular file"},
		{"fifo", func(t *testing.T, path string) {
			if err := syscall.Mkfifo(path, 0o644); err != nil {
				t.Fatal(err)
			}
		}, "not a regular file"},
		{"20 MB file", func(t *testing.T, path string) {
			write(t, path, bytes.Repeat([]byte("# padding\n"), 2<<20))
		}, "16 MiB"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			w := newWorkspace(t, nil)
			path := filepath.Join(w.dir, "p.hcl")
			c.create(t, path)
			for _, cmd := range [][]string{{"validate"}, {"run", "--now", "2025-07-02T00:00:00Z"}} {
				start := time.Now()
				p := w.start(cmd...)
				code := p.wait()
				t.Logf("rewind %s: exit %d in %s", cmd[0], code, time.Since(start).Round(time.Millisecond))
				stderr := p.stderr.String()
				if code == 0 {
					t.Fatalf("rewind %s: exit 0", cmd[0])
				}
				for _, trace := range []string{"goroutine ", "panic", "runtime."} {
					if strings.Contains(stderr, trace) {
						t.Fatalf("rewind %s printed a Go trace:\n%s", cmd[0], tail(stderr, 2000))
					}
				}
				if !strings.Contains(stderr, "p.hcl") || !strings.Contains(stderr, c.want) {
					t.Fatalf("rewind %s: stderr does not name p.hcl and say %q:\n%s", cmd[0], c.want, tail(stderr, 2000))
				}
				if i := strings.IndexFunc(stderr, func(r rune) bool { return r < 0x20 && r != '\n' && r != '\t' || r == 0x7f }); i >= 0 {
					t.Fatalf("rewind %s copied a control character (%q) of the file to the terminal", cmd[0], stderr[i])
				}
				if len(stderr) > 64<<10 {
					t.Fatalf("rewind %s printed %d bytes of diagnostics", cmd[0], len(stderr))
				}
			}
			if w.exists(".rewind/state.db") {
				t.Errorf("a broken workspace created a state")
			}
		})
	}
}

func write(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}
