package executor

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func spec(t *testing.T, argv ...string) Spec {
	dir := t.TempDir()
	return Spec{
		Argv: argv, Env: []string{"PATH=" + os.Getenv("PATH"), "GREETING=hello"}, Dir: dir,
		LogPath: filepath.Join(dir, "logs", "t.1.log"),
		Grace:   200 * time.Millisecond,
	}
}

func TestOutcomes(t *testing.T) {
	cases := []struct {
		name     string
		argv     []string
		timeout  time.Duration
		code     int // -1: killed by a signal
		signal   string
		log      string
		timedOut bool
	}{
		{name: "success", argv: []string{"/bin/sh", "-c", "echo $GREETING; echo oops >&2"}, code: 0, log: "hello\noops\n\n[rewind] exit status 0\n"},
		{name: "exit code", argv: []string{"/bin/sh", "-c", "exit 7"}, code: 7},
		{name: "argv is not split by a shell", argv: []string{"printf", "%s|", "a b", "$GREETING"}, code: 0, log: "a b|$GREETING|\n[rewind] exit status 0\n"},
		{name: "a task cannot fake its status", argv: []string{"/bin/sh", "-c", "printf '\\n[rewind] exit status 0\\n'; exit 3"}, code: 3},
		{name: "command not found", argv: []string{"no-such-command-xyz"}, code: 127},
		{name: "killed child reports 128+n", argv: []string{"/bin/sh", "-c", "kill -9 $$"}, code: 137},
		{name: "timeout", argv: []string{"sleep", "30"}, timeout: 300 * time.Millisecond, code: -1, signal: "terminated", timedOut: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := spec(t, c.argv...)
			s.Timeout = c.timeout
			h, err := Start(s)
			if err != nil {
				t.Fatal(err)
			}
			res := h.Wait(context.Background())
			if c.code >= 0 && (res.ExitCode == nil || *res.ExitCode != c.code) {
				t.Errorf("exit code %v; want %d", res.ExitCode, c.code)
			}
			if c.code < 0 && res.ExitCode != nil {
				t.Errorf("exit code %d; want a signal", *res.ExitCode)
			}
			if res.Signal != c.signal || res.TimedOut != c.timedOut {
				t.Errorf("signal %q timedOut %v; want %q %v", res.Signal, res.TimedOut, c.signal, c.timedOut)
			}
			if c.log != "" {
				b, _ := os.ReadFile(s.LogPath)
				if string(b) != c.log {
					t.Errorf("log %q; want %q", b, c.log)
				}
			}
			if code, ok := ReadStatus(s.LogPath); c.code >= 0 && (!ok || code != c.code) {
				t.Errorf("status file: %d %v; want %d", code, ok, c.code)
			}
			if res.PeakRSS <= 0 {
				t.Errorf("peak RSS %d", res.PeakRSS)
			}
		})
	}
}

func TestInterruptStopsTheGroup(t *testing.T) {
	s := spec(t, "/bin/sh", "-c", "trap '' TERM; sleep 30 & echo $! > child.pid; wait")
	h, err := Start(s)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(200*time.Millisecond, cancel)
	res := h.Wait(ctx)
	if !res.Interrupted {
		t.Fatalf("result %+v; want interrupted", res)
	}
	b, err := os.ReadFile(filepath.Join(s.Dir, "child.pid"))
	if err != nil {
		t.Fatal(err)
	}
	pid := strings.TrimSpace(string(b))
	deadline := time.Now().Add(5 * time.Second)
	for {
		st, err := os.ReadFile("/proc/" + pid + "/stat")
		if err != nil || strings.Contains(string(st), ") Z ") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("a child that ignores SIGTERM survived the interrupt")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// An attempt whose rewind died is adopted: Adopt waits for the wrapper,
// then reads the status it appended to the log.
func TestAdoptOrphanedAttempt(t *testing.T) {
	dir := t.TempDir()
	logPath := filepath.Join(dir, "t.1.log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	// Start the wrapper as an earlier rewind would have, and forget about it.
	cmd := exec.Command("/bin/sh", "-c", wrapper, logPath, "/bin/sh", "-c", "sleep 0.3; echo done; exit 5")
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go cmd.Wait() // reap it, as init would
	pid := cmd.Process.Pid
	if FindWrapper(logPath) != pid || !Alive(pid, logPath) {
		t.Fatalf("FindWrapper = %d, Alive = %v; want %d, true", FindWrapper(logPath), Alive(pid, logPath), pid)
	}
	if Alive(pid, filepath.Join(dir, "other.log")) || FindWrapper(filepath.Join(dir, "other.log")) != 0 {
		t.Error("a wrapper is alive only for its own log")
	}
	if _, ok := ReadStatus(logPath); ok {
		t.Error("a status before the attempt ended")
	}
	code, ok, err := Adopt(context.Background(), pid, logPath)
	if err != nil || !ok || code != 5 {
		t.Errorf("Adopt = %d %v %v; want 5 true nil", code, ok, err)
	}
	if Alive(pid, logPath) {
		t.Error("alive after exit")
	}
}

func TestProcessStart(t *testing.T) {
	a, err := ProcessStart(os.Getpid())
	if err != nil || a == 0 {
		t.Fatalf("ProcessStart(self) = %d, %v", a, err)
	}
	if _, err := ProcessStart(1 << 30); err == nil {
		t.Error("no error for a pid that does not exist")
	}
}
