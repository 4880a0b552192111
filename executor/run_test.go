package executor

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestRunOutcomes(t *testing.T) {
	ctx := context.Background()
	cases := []struct {
		name   string
		argv   []string
		exit   int
		signal string
		stdout string
		stderr string
	}{
		{"success", []string{"/bin/sh", "-c", "echo out; echo err >&2"}, 0, "", "out\n", "err\n"},
		{"exit 3", []string{"/bin/sh", "-c", "exit 3"}, 3, "", "", ""},
		{"killed", []string{"/bin/sh", "-c", "kill -9 $$"}, -1, "killed", "", ""},
		{"stdin is /dev/null", []string{"/bin/sh", "-c", "cat; echo done"}, 0, "", "done\n", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			o, err := Run(ctx, Command{Argv: c.argv})
			if err != nil {
				t.Fatal(err)
			}
			if o.ExitCode != c.exit || o.Signal != c.signal || string(o.Stdout) != c.stdout || string(o.Stderr) != c.stderr {
				t.Fatalf("got exit %d signal %q stdout %q stderr %q", o.ExitCode, o.Signal, o.Stdout, o.Stderr)
			}
			if o.Success() != (c.exit == 0) {
				t.Fatalf("Success() = %v", o.Success())
			}
		})
	}
}

func TestRunStartErrors(t *testing.T) {
	ctx := context.Background()
	if _, err := Run(ctx, Command{}); err == nil {
		t.Fatal("empty command started")
	}
	_, err := Run(ctx, Command{Argv: []string{"true"}, Dir: "/nonexistent/dir"})
	if err == nil || err.Error() != "workdir /nonexistent/dir does not exist" {
		t.Fatalf("missing workdir: %v", err)
	}
	_, err = Run(ctx, Command{Argv: []string{"true"}, Dir: "/etc/passwd"})
	if err == nil || !strings.Contains(err.Error(), "is not a directory") {
		t.Fatalf("workdir a file: %v", err)
	}
	_, err = Run(ctx, Command{Argv: []string{"/nonexistent/cmd"}})
	if err == nil || !strings.Contains(err.Error(), "/nonexistent/cmd") {
		t.Fatalf("missing command: %v", err)
	}
}

// pidAlive reports whether pid runs and is not a zombie.
func pidAlive(pid int) bool {
	_, err := ProcessStart(pid)
	return err == nil
}

// A grandchild that keeps stdout open does not hang Run, and it is stopped
// with the rest of the group.
func TestRunGrandchildHoldingOutput(t *testing.T) {
	o, err := Run(context.Background(), Command{Argv: []string{"/bin/sh", "-c", "sleep 1000 & echo $!; echo 42"}})
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Fields(string(o.Stdout))
	if len(lines) != 2 || lines[1] != "42" || !o.Success() {
		t.Fatalf("outcome %+v stdout %q", o, o.Stdout)
	}
	pid, _ := strconv.Atoi(lines[0])
	if pidAlive(pid) {
		t.Fatalf("background sleep %d outlived the command", pid)
	}
}

// A process left behind in the group by a command that exited is stopped,
// even when its output goes to a log (no pipe to wait for).
func TestRunLeavesNothingBehind(t *testing.T) {
	dir := t.TempDir()
	log := filepath.Join(dir, "logs", "x.log")
	pidfile := filepath.Join(dir, "pid")
	o, err := Run(context.Background(), Command{
		Argv:    []string{"/bin/sh", "-c", "sleep 1000 & echo $! > " + pidfile + "; echo started"},
		LogPath: log,
	})
	if err != nil || !o.Success() {
		t.Fatal(o, err)
	}
	b, _ := os.ReadFile(pidfile)
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	if pid == 0 || pidAlive(pid) {
		t.Fatalf("background sleep %d outlived the command", pid)
	}
	got, _ := os.ReadFile(log)
	if string(got) != "started\n" {
		t.Fatalf("log %q", got)
	}
}

// A timeout is SIGTERM to the group, and a handler gets the grace period to
// clean up; past the grace, SIGKILL.
func TestRunTimeoutGrace(t *testing.T) {
	dir := t.TempDir()
	script := func(marker string) []string {
		return []string{"/bin/sh", "-c", "trap 'sleep 0.5; echo cleaned > " + marker + "; exit 7' TERM; while :; do sleep 0.05; done"}
	}
	m1 := filepath.Join(dir, "m1")
	o, err := Run(context.Background(), Command{Argv: script(m1), Timeout: 200 * time.Millisecond, Grace: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if !o.TimedOut || o.ExitCode != 7 {
		t.Fatalf("with grace: %+v", o)
	}
	if _, err := os.Stat(m1); err != nil {
		t.Fatal("the TERM handler did not finish its cleanup")
	}
	m2 := filepath.Join(dir, "m2")
	o, err = Run(context.Background(), Command{Argv: script(m2), Timeout: 200 * time.Millisecond, Grace: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if !o.TimedOut || o.Signal != "killed" {
		t.Fatalf("past the grace: %+v", o)
	}
	if _, err := os.Stat(m2); err == nil {
		t.Fatal("the handler was not killed at the end of the grace period")
	}
	if o.Describe() != "timed out after "+o.Duration.Round(time.Millisecond).String() {
		t.Fatal(o.Describe())
	}
}

func TestRunInterrupt(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	o, err := Run(ctx, Command{Argv: []string{"sleep", "1000"}})
	if err != nil {
		t.Fatal(err)
	}
	if !o.Interrupted || o.Signal != syscall.SIGTERM.String() || o.Success() || o.Describe() != "interrupted" {
		t.Fatalf("%+v", o)
	}
}

func TestRunStdin(t *testing.T) {
	o, err := Run(context.Background(), Command{Argv: []string{"cat"}, Stdin: strings.NewReader("report")})
	if err != nil || string(o.Stdout) != "report" {
		t.Fatal(o, err)
	}
}

func TestRunLogSymlinkRefused(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "target")
	os.WriteFile(target, []byte("keep"), 0o644)
	link := filepath.Join(dir, "log")
	os.Symlink(target, link)
	if _, err := Run(context.Background(), Command{Argv: []string{"echo", "x"}, LogPath: link}); err == nil {
		t.Fatal("log through a symbolic link")
	}
	if b, _ := os.ReadFile(target); string(b) != "keep" {
		t.Fatalf("target changed: %q", b)
	}
}

func TestBoundedBuffer(t *testing.T) {
	b := &boundedBuffer{max: 10}
	b.Write([]byte("abc"))
	if string(b.Bytes()) != "abc" {
		t.Fatal(string(b.Bytes()))
	}
	for i := 0; i < 100; i++ {
		b.Write([]byte("0123456789"))
	}
	got := b.Bytes()
	if !bytes.HasPrefix(got, []byte("abc01")) || !bytes.HasSuffix(got, []byte("56789")) || !bytes.Contains(got, []byte("[... 993 bytes omitted ...]")) {
		t.Fatalf("%q", got)
	}
	// Output far larger than the bound is read to its end.
	o, err := Run(context.Background(), Command{Argv: []string{"/bin/sh", "-c", "head -c 10000000 /dev/zero; echo 12"}, Capture: 1024})
	if err != nil || !bytes.HasSuffix(o.Stdout, []byte("12\n")) || len(o.Stdout) > 1100 {
		t.Fatal(len(o.Stdout), err)
	}
}
