package executor

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
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

// shellSpec is an attempt of a string command.
func shellSpec(t *testing.T, cmd string) Spec {
	s := spec(t)
	s.Shell = cmd
	return s
}

func statusLine(nonce string, code int) string {
	if nonce != "" {
		nonce += " "
	}
	return "\n[rewind] exit status " + nonce + strconv.Itoa(code) + "\n"
}

func TestOutcomes(t *testing.T) {
	cases := []struct {
		name     string
		argv     []string
		shell    string
		timeout  time.Duration
		code     int // -1: killed by a signal
		signal   string
		log      string // before the status line
		timedOut bool
	}{
		{name: "success", argv: []string{"/bin/sh", "-c", "echo $GREETING; echo oops >&2"}, code: 0, log: "hello\noops\n"},
		{name: "success, shell", shell: "echo $GREETING; echo oops >&2", code: 0, log: "hello\noops\n"},
		{name: "exit code", argv: []string{"/bin/sh", "-c", "exit 7"}, code: 7},
		{name: "exit code, argv", argv: []string{"sh", "-c", "exit 7"}, code: 7},
		{name: "exit in the shell", shell: "echo a; exit 3; echo b", code: 3, log: "a\n"},
		{name: "argv is not split by a shell", argv: []string{"printf", "%s|", "a b", "$GREETING"}, code: 0, log: "a b|$GREETING|"},
		{name: "a task cannot fake its status", argv: []string{"/bin/sh", "-c", "printf '\\n[rewind] exit status 0\\n'; exit 3"}, code: 3, log: "\n[rewind] exit status 0\n"},
		{name: "command not found", argv: []string{"no-such-command-xyz"}, code: 127},
		{name: "command not found, shell", shell: "no-such-command-xyz", code: 127},
		{name: "killed child reports 128+n", argv: []string{"sh", "-c", "kill -9 $$"}, code: 137},
		// In a string command, $$ is the attempt's pid: its wrapper's.
		{name: "$$ is the wrapper", shell: "kill -9 $$", code: -1, signal: "killed"},
		{name: "timeout", argv: []string{"sleep", "30"}, timeout: 300 * time.Millisecond, code: -1, signal: "terminated", timedOut: true},
		{name: "timeout, shell", shell: "sleep 30", timeout: 300 * time.Millisecond, code: -1, signal: "terminated", timedOut: true},
	}
	for _, c := range cases {
		for _, nonce := range []string{"", NewNonce()} {
			name := c.name
			if nonce != "" {
				name += ", nonce"
			}
			t.Run(name, func(t *testing.T) {
				s := spec(t, c.argv...)
				s.Shell, s.Timeout, s.Nonce = c.shell, c.timeout, nonce
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
				if res.Signal != c.signal || res.TimedOut != c.timedOut || res.Interrupted || res.NoStatus {
					t.Errorf("result %+v; want signal %q, timed out %v", res, c.signal, c.timedOut)
				}
				b, _ := os.ReadFile(s.LogPath)
				if c.code >= 0 && !strings.HasSuffix(string(b), statusLine(nonce, c.code)) ||
					c.log != "" && string(b) != c.log+statusLine(nonce, c.code) {
					t.Errorf("log %q; want %q and the status line", b, c.log)
				}
				if code, ok := ReadStatusNonce(s.LogPath, nonce); c.code >= 0 && (!ok || code != c.code) {
					t.Errorf("status: %d %v; want %d", code, ok, c.code)
				}
				if res.PeakRSS <= 0 {
					t.Errorf("peak RSS %d", res.PeakRSS)
				}
			})
		}
	}
}

func TestStartErrors(t *testing.T) {
	s := spec(t)
	if _, err := Start(s); err == nil {
		t.Error("no error for an empty command")
	}
	s = spec(t, "true")
	s.Nonce = "not hex"
	if _, err := Start(s); err == nil {
		t.Error("no error for a nonce that is not hex")
	}
	s = spec(t, "true")
	s.Shell = "true"
	if _, err := Start(s); err == nil {
		t.Error("no error for both argv and a shell command")
	}
	s = spec(t, "true")
	s.Dir = filepath.Join(s.Dir, "missing")
	if _, err := Start(s); err == nil || !strings.Contains(err.Error(), "chdir") {
		t.Errorf("error %v; want one about the directory", err)
	}
	// The log's directory is created.
	s = spec(t, "true")
	s.LogPath = filepath.Join(s.Dir, "a", "b", "t.1.log")
	h, err := Start(s)
	if err != nil {
		t.Fatal(err)
	}
	if res := h.Wait(context.Background()); !res.Success() {
		t.Errorf("result %+v", res)
	}
}

// A string command runs in a subshell of the wrapper, not in a second shell:
// it must behave as under /bin/sh -c, with the same output, stdin and exit
// status, whatever it does to its shell; with or without a cgroup to enter
// first.
func TestShellCommandIsShC(t *testing.T) {
	bothWays(t, func(t *testing.T, _ bool) { testShellCommandIsShC(t) })
}

func testShellCommandIsShC(t *testing.T) {
	cmds := []string{
		"exit 3",
		"echo out; echo err >&2; exit 4",
		`read x; echo "read: $? [$x]"`,
		"echo $0 $# \"[$*]\"",
		"echo \"[$n$rc$p]\"; set | grep -c exit || true", // nothing of the wrapper in sight
		"exec >/dev/null; echo hidden; exit 5",
		"exec 2>&1 >/dev/null; echo shown >&2; exit 6",
		`trap 'echo bye' EXIT; exit 7`,
		`trap 'echo term' TERM; echo set`,
		`exec sh -c 'echo exec; exit 8'`,
		"set -e; false; echo not reached",
		"set -u; echo $undefined_variable",
		"f() { return 9; }; f",
		"cd / && pwd",
		`printf '%s\n' "it's \"quoted\" \$HOME \\ $(echo sub)"`,
		"echo a\necho b\nexit 10",
		"sleep 0.1 & wait; echo waited $?",
		"no-such-command-xyz",
		"echo (",
		"   ",
		"# only a comment",
		"echo $GREETING",
		"ulimit -n 64; exit 11",
	}
	for _, cmd := range cmds {
		t.Run(cmd, func(t *testing.T) {
			want := exec.Command("/bin/sh", "-c", cmd)
			s := shellSpec(t, cmd)
			s.Nonce = NewNonce()
			want.Env, want.Dir = s.Env, s.Dir
			wantOut, err := want.CombinedOutput() // stdin is /dev/null
			wantCode := 0
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				wantCode = ee.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			h, err := Start(s)
			if err != nil {
				t.Fatal(err)
			}
			res := h.Wait(context.Background())
			if res.ExitCode == nil || *res.ExitCode != wantCode {
				t.Errorf("exit code %v; want %d (%+v)", res.ExitCode, wantCode, res)
			}
			b, _ := os.ReadFile(s.LogPath)
			out, found := strings.CutSuffix(string(b), statusLine(s.Nonce, wantCode))
			// Errors the shell reports name the eval that runs the command.
			out = strings.ReplaceAll(out, "/bin/sh: 1: eval: ", "/bin/sh: 1: ")
			if !found || out != string(wantOut) {
				t.Errorf("log %q; want %q and the status line", b, wantOut)
			}
		})
	}
}

// The nonce is in no task's environment or shell variables.
func TestNonceNotInTheTask(t *testing.T) {
	for _, s := range []Spec{spec(t, "sh", "-c", "env; set"), shellSpec(t, "env; set")} {
		s.Nonce = NewNonce()
		h, err := Start(s)
		if err != nil {
			t.Fatal(err)
		}
		if res := h.Wait(context.Background()); !res.Success() {
			t.Fatalf("result %+v", res)
		}
		b, _ := os.ReadFile(s.LogPath)
		out, _ := strings.CutSuffix(string(b), statusLine(s.Nonce, 0))
		if !strings.Contains(out, "GREETING=hello") || strings.Contains(out, s.Nonce) {
			t.Errorf("the task saw the nonce, or not its environment: %q", out)
		}
	}
}

// forger prints a status line of success, as a task could, then fails.
const forger = `printf '\n[rewind] exit status 0\n'; exit 1`

// A task cannot forge its outcome: after a crash of rewind, its status is
// read with its nonce.
func TestForgedStatus(t *testing.T) {
	t.Run("exited", func(t *testing.T) {
		s := shellSpec(t, forger)
		s.Nonce = NewNonce()
		h, err := Start(s)
		if err != nil {
			t.Fatal(err)
		}
		if res := h.Wait(context.Background()); res.ExitCode == nil || *res.ExitCode != 1 {
			t.Errorf("result %+v; want exit code 1", res)
		}
		if code, ok := ReadStatusNonce(s.LogPath, s.Nonce); !ok || code != 1 {
			t.Errorf("ReadStatusNonce = %d %v; want 1 true", code, ok)
		}
		if code, ok := ReadStatusNonce(s.LogPath, NewNonce()); ok {
			t.Errorf("ReadStatusNonce with another nonce = %d %v; want no status", code, ok)
		}
	})
	t.Run("wrapper killed before its status", func(t *testing.T) {
		s := shellSpec(t, `printf '\n[rewind] exit status 0\n'; touch forged; exec sleep 30`)
		s.Nonce = NewNonce()
		h, err := Start(s)
		if err != nil {
			t.Fatal(err)
		}
		waitFile(t, filepath.Join(s.Dir, "forged"))
		_ = syscall.Kill(-h.PID, syscall.SIGKILL)
		if res := h.Wait(context.Background()); res.Signal != "killed" {
			t.Errorf("result %+v; want killed", res)
		}
		if code, ok := ReadStatusNonce(s.LogPath, s.Nonce); ok {
			t.Errorf("ReadStatusNonce = %d %v; want no status", code, ok)
		}
		// The reason for nonces: without one, the forged line is taken.
		if code, ok := ReadStatus(s.LogPath); !ok || code != 0 {
			t.Errorf("ReadStatus = %d %v; want the forged 0", code, ok)
		}
	})
	t.Run("adopted", func(t *testing.T) {
		s := shellSpec(t, "sleep 0.2; "+forger)
		s.Nonce = NewNonce()
		res := AdoptWait(context.Background(), startElsewhere(t, s))
		if res.ExitCode == nil || *res.ExitCode != 1 || res.NoStatus {
			t.Errorf("result %+v; want exit code 1", res)
		}
	})
	t.Run("adopted, wrapper killed before its status", func(t *testing.T) {
		s := shellSpec(t, `printf '\n[rewind] exit status 0\n'; touch forged; exec sleep 30`)
		s.Nonce = NewNonce()
		a := startElsewhere(t, s)
		waitFile(t, filepath.Join(s.Dir, "forged"))
		_ = syscall.Kill(-a.PID, syscall.SIGKILL)
		if res := AdoptWait(context.Background(), a); !res.NoStatus || res.ExitCode != nil {
			t.Errorf("result %+v; want no status", res)
		}
	})
}

func TestReadStatusNonce(t *testing.T) {
	const n = "0123abcd"
	cases := []struct {
		name, log string
		nonce     string
		code      int
		ok        bool
	}{
		{"empty", "", n, 0, false},
		{"status", "out\n\n[rewind] exit status 0123abcd 3\n", n, 3, true},
		{"empty output", "\n[rewind] exit status 0123abcd 0\n", n, 0, true},
		{"rewind's lines after it", "\n[rewind] exit status 0123abcd 3\nrewind: attempt killed\n", n, 3, true},
		{"the last one", "\n[rewind] exit status 0123abcd 0\n\n[rewind] exit status 0123abcd 1\n", n, 1, true},
		{"forged without the nonce", "\n[rewind] exit status 0\n", n, 0, false},
		{"forged after the real one", "\n[rewind] exit status 0123abcd 1\n\n[rewind] exit status 0\n", n, 1, true},
		{"another nonce", "\n[rewind] exit status 0123abce 0\n", n, 0, false},
		{"a longer nonce", "\n[rewind] exit status 0123abcdef 0\n", n, 0, false},
		{"unfinished", "\n[rewind] exit status 0123abcd 3", n, 0, false},
		{"not a number", "\n[rewind] exit status 0123abcd x\n", n, 0, false},
		{"not only a number", "\n[rewind] exit status 0123abcd 3 4\n", n, 0, false},
		{"no number", "\n[rewind] exit status 0123abcd \n", n, 0, false},
		{"not at the start of a line", "x[rewind] exit status 0123abcd 0\n", n, 0, false},
		{"not hex", "\n[rewind] exit status zz 0\n", "zz", 0, false},
		{"legacy", "\n[rewind] exit status 4\n", "", 4, true},
		{"legacy reads no nonce line", "\n[rewind] exit status 0123abcd 4\n", "", 0, false},
		{"out of the tail", "\n[rewind] exit status 0123abcd 0\n" + strings.Repeat("x", statusTail), n, 0, false},
	}
	dir := t.TempDir()
	for i, c := range cases {
		path := filepath.Join(dir, strconv.Itoa(i))
		if err := os.WriteFile(path, []byte(c.log), 0o644); err != nil {
			t.Fatal(err)
		}
		if code, ok := ReadStatusNonce(path, c.nonce); code != c.code || ok != c.ok {
			t.Errorf("%s: ReadStatusNonce = %d %v; want %d %v", c.name, code, ok, c.code, c.ok)
		}
		if c.nonce == "" {
			if code, ok := ReadStatus(path); code != c.code || ok != c.ok {
				t.Errorf("%s: ReadStatus = %d %v; want %d %v", c.name, code, ok, c.code, c.ok)
			}
		}
	}
	if _, ok := ReadStatusNonce(filepath.Join(dir, "missing"), n); ok {
		t.Error("a status for a missing log")
	}
}

func TestInterruptStopsTheGroup(t *testing.T) {
	s := spec(t, "/bin/sh", "-c", "trap '' TERM; sleep 30 & echo $! > child.pid; wait")
	h, err := Start(s)
	if err != nil {
		t.Fatal(err)
	}
	waitFile(t, filepath.Join(s.Dir, "child.pid"))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	res := h.Wait(ctx)
	if !res.Interrupted || res.ExitCode != nil {
		t.Fatalf("result %+v; want interrupted", res)
	}
	waitGone(t, readPID(t, filepath.Join(s.Dir, "child.pid")))
	waitGroupGone(t, h.PID)
}

// On interrupt, the group gets its grace period to end, even once the
// wrapper has died of the SIGTERM.
func TestInterruptGivesGrace(t *testing.T) {
	s := shellSpec(t, `trap 'echo cleaned up > cleaned; exit 0' TERM; sleep 30 & touch ready; wait`)
	s.Nonce, s.Grace = NewNonce(), time.Minute
	h, err := Start(s)
	if err != nil {
		t.Fatal(err)
	}
	waitFile(t, filepath.Join(s.Dir, "ready"))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if res := h.Wait(ctx); !res.Interrupted || res.ExitCode != nil || res.Signal != "terminated" {
		t.Errorf("result %+v; want interrupted", res)
	}
	if b, err := os.ReadFile(filepath.Join(s.Dir, "cleaned")); err != nil || string(b) != "cleaned up\n" {
		t.Errorf("the task did not clean up on SIGTERM: %q %v", b, err)
	}
	waitGroupGone(t, h.PID)
}

// An attempt that ended by itself as rewind is interrupted gets its own
// outcome: it is not interrupted, and not run again.
func TestExitAtInterrupt(t *testing.T) {
	t.Run("ended before the interrupt", func(t *testing.T) {
		s := shellSpec(t, "echo done")
		s.Nonce = NewNonce()
		h, err := Start(s)
		if err != nil {
			t.Fatal(err)
		}
		waitStatus(t, s.LogPath, s.Nonce)
		waitEnded(t, h.PID)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if res := h.Wait(ctx); res.Interrupted || res.ExitCode == nil || *res.ExitCode != 0 {
			t.Errorf("result %+v; want exit code 0, not interrupted", res)
		}
	})
	// The wrapper wrote the status, and is still there when the interrupt
	// comes: the task prints its wrapper's status line, then lingers.
	t.Run("status written, wrapper still there", func(t *testing.T) {
		s := shellSpec(t, "")
		s.Nonce = NewNonce()
		s.Shell = `printf '` + statusLine(s.Nonce, 0) + `'; touch written; exec sleep 30`
		h, err := Start(s)
		if err != nil {
			t.Fatal(err)
		}
		waitFile(t, filepath.Join(s.Dir, "written"))
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if res := h.Wait(ctx); res.Interrupted || res.ExitCode == nil || *res.ExitCode != 0 {
			t.Errorf("result %+v; want exit code 0, not interrupted", res)
		}
		waitGroupGone(t, h.PID)
	})
	// A status our SIGTERM causes is an interrupt.
	t.Run("status of our signal", func(t *testing.T) {
		s := shellSpec(t, "")
		s.Nonce = NewNonce()
		s.Shell = `printf '` + statusLine(s.Nonce, 143) + `'; touch written; exec sleep 30`
		h, err := Start(s)
		if err != nil {
			t.Fatal(err)
		}
		waitFile(t, filepath.Join(s.Dir, "written"))
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if res := h.Wait(ctx); !res.Interrupted || res.ExitCode != nil {
			t.Errorf("result %+v; want interrupted", res)
		}
	})
	t.Run("adopted, ended before the interrupt", func(t *testing.T) {
		s := shellSpec(t, "echo done")
		s.Nonce = NewNonce()
		a := startElsewhere(t, s)
		waitStatus(t, s.LogPath, s.Nonce)
		waitEnded(t, a.PID)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if res := AdoptWait(ctx, a); res.Interrupted || res.ExitCode == nil || *res.ExitCode != 0 {
			t.Errorf("result %+v; want exit code 0, not interrupted", res)
		}
	})
	t.Run("adopted, status written, wrapper still there", func(t *testing.T) {
		s := shellSpec(t, "")
		s.Nonce = NewNonce()
		s.Shell = `printf '` + statusLine(s.Nonce, 0) + `'; touch written; exec sleep 30`
		a := startElsewhere(t, s)
		waitFile(t, filepath.Join(s.Dir, "written"))
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if res := AdoptWait(ctx, a); res.Interrupted || res.ExitCode == nil || *res.ExitCode != 0 {
			t.Errorf("result %+v; want exit code 0, not interrupted", res)
		}
		// So is a timeout that comes then.
		s.LogPath = filepath.Join(s.Dir, "t.2.log")
		if err := os.Remove(filepath.Join(s.Dir, "written")); err != nil {
			t.Fatal(err)
		}
		a = startElsewhere(t, s)
		waitFile(t, filepath.Join(s.Dir, "written"))
		a.Timeout, a.StartedAt = time.Second, time.Now().Add(-time.Hour)
		if res := AdoptWait(context.Background(), a); res.TimedOut || res.ExitCode == nil || *res.ExitCode != 0 {
			t.Errorf("result %+v; want exit code 0, not timed out", res)
		}
		waitGroupGone(t, a.PID)
	})
}

// An attempt whose rewind died is adopted by the next rewind, which waits
// for it under its limits.
func TestAdoptWait(t *testing.T) {
	t.Run("exit code", func(t *testing.T) {
		s := shellSpec(t, "until [ -e go ]; do sleep 0.01; done; echo done; exit 5")
		s.Nonce = NewNonce()
		a := startElsewhere(t, s)
		waitExec(t, a.PID)
		if !Alive(a.PID, s.LogPath) || FindWrapper(s.LogPath) != a.PID {
			t.Errorf("Alive = %v, FindWrapper = %d; want true, %d", Alive(a.PID, s.LogPath), FindWrapper(s.LogPath), a.PID)
		}
		time.AfterFunc(100*time.Millisecond, func() { os.WriteFile(filepath.Join(s.Dir, "go"), nil, 0o644) })
		res := AdoptWait(context.Background(), a)
		if res.ExitCode == nil || *res.ExitCode != 5 || res.NoStatus || res.Duration <= 0 {
			t.Errorf("result %+v; want exit code 5", res)
		}
		if Alive(a.PID, s.LogPath) {
			t.Error("alive after exit")
		}
	})
	t.Run("timeout", func(t *testing.T) {
		s := spec(t, "sleep", "8")
		s.Nonce = NewNonce()
		a := startElsewhere(t, s)
		a.Timeout = time.Second
		res := AdoptWait(context.Background(), a)
		if !res.TimedOut || res.ExitCode != nil || res.Signal != "terminated" || res.NoStatus {
			t.Errorf("result %+v; want timed out", res)
		}
		if b, _ := os.ReadFile(s.LogPath); !strings.Contains(string(b), "rewind: attempt timed out after 1s") {
			t.Errorf("log %q does not say the attempt timed out", b)
		}
		waitGroupGone(t, a.PID)
	})
	t.Run("timeout already over", func(t *testing.T) {
		s := spec(t, "sleep", "30")
		s.Nonce = NewNonce()
		a := startElsewhere(t, s)
		a.Timeout, a.StartedAt = time.Minute, time.Now().Add(-time.Hour)
		if res := AdoptWait(context.Background(), a); !res.TimedOut || res.ExitCode != nil {
			t.Errorf("result %+v; want timed out", res)
		}
		waitGroupGone(t, a.PID)
	})
	t.Run("interrupt", func(t *testing.T) {
		s := spec(t, "/bin/sh", "-c", "trap '' TERM; sleep 30 & echo $! > child.pid; wait")
		s.Nonce = NewNonce()
		a := startElsewhere(t, s)
		waitFile(t, filepath.Join(s.Dir, "child.pid"))
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(100*time.Millisecond, cancel)
		res := AdoptWait(ctx, a)
		if !res.Interrupted || res.ExitCode != nil || res.NoStatus {
			t.Errorf("result %+v; want interrupted", res)
		}
		waitGone(t, readPID(t, filepath.Join(s.Dir, "child.pid")))
		waitGroupGone(t, a.PID)
	})
	t.Run("lost", func(t *testing.T) {
		s := spec(t, "sleep", "30")
		s.Nonce = NewNonce()
		a := startElsewhere(t, s)
		_ = syscall.Kill(-a.PID, syscall.SIGKILL)
		if res := AdoptWait(context.Background(), a); !res.NoStatus || res.ExitCode != nil {
			t.Errorf("result %+v; want no status", res)
		}
	})
	t.Run("pid not recorded", func(t *testing.T) {
		s := shellSpec(t, "sleep 0.2; exit 4")
		s.Nonce = NewNonce()
		a := startElsewhere(t, s)
		a.PIDStart = 0 // known by FindWrapper only
		if res := AdoptWait(context.Background(), a); res.ExitCode == nil || *res.ExitCode != 4 {
			t.Errorf("result %+v; want exit code 4", res)
		}
	})
	// A pid that is no longer the attempt's is not touched.
	t.Run("reused pid", func(t *testing.T) {
		other := exec.Command("sleep", "30")
		other.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := other.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { other.Process.Kill(); other.Wait() }()
		st, err := ProcessStart(other.Process.Pid)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range []AdoptSpec{
			{PID: other.Process.Pid, PIDStart: st + 1},
			{PID: other.Process.Pid, LogPath: filepath.Join(t.TempDir(), "t.1.log")},
			{PID: 0}, {PID: -1},
		} {
			a.Timeout, a.StartedAt, a.MemoryLimit = time.Second, time.Now().Add(-time.Hour), 1
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			if res := AdoptWait(ctx, a); !res.NoStatus || res.TimedOut || res.Interrupted || res.OOM {
				t.Errorf("%+v: result %+v; want no status", a, res)
			}
		}
		if _, err := ProcessStart(other.Process.Pid); err != nil {
			t.Errorf("the other process was killed: %v", err)
		}
	})
}

// Alive and FindWrapper know the wrappers of both forms, with a cgroup or
// without.
func TestAliveAndFindWrapper(t *testing.T) {
	bothWays(t, func(t *testing.T, _ bool) { testAliveAndFindWrapper(t) })
}

func testAliveAndFindWrapper(t *testing.T) {
	for _, s := range []Spec{spec(t, "sleep", "30"), shellSpec(t, "sleep 30")} {
		s.Nonce = NewNonce()
		h, err := Start(s)
		if err != nil {
			t.Fatal(err)
		}
		waitExec(t, h.PID)
		if !Alive(h.PID, s.LogPath) || FindWrapper(s.LogPath) != h.PID {
			t.Errorf("Alive = %v, FindWrapper = %d; want true, %d", Alive(h.PID, s.LogPath), FindWrapper(s.LogPath), h.PID)
		}
		other := filepath.Join(s.Dir, "other.log")
		if Alive(h.PID, other) || FindWrapper(other) != 0 {
			t.Error("a wrapper is alive only for its own log")
		}
		_ = syscall.Kill(-h.PID, syscall.SIGKILL)
		h.Wait(context.Background())
		if Alive(h.PID, s.LogPath) {
			t.Error("alive after exit")
		}
	}
}

// An attempt of an older rewind (no nonce, the wrapper of then) is adopted:
// Adopt waits for the wrapper, then reads the status it appended to the log.
func TestAdoptOrphanedAttempt(t *testing.T) {
	dir := t.TempDir()
	logPath := filepath.Join(dir, "t.1.log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	// Start the wrapper as an earlier rewind would have, and forget about it.
	start := func(cmd string) (int, uint64) {
		c := exec.Command("/bin/sh", "-c", legacyWrapper, logPath, "/bin/sh", "-c", cmd)
		c.Stdout, c.Stderr = logf, logf
		c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		go c.Wait() // reap it, as init would
		st, _ := ProcessStart(c.Process.Pid)
		return c.Process.Pid, st
	}
	gate := filepath.Join(dir, "go")
	pid, _ := start("until [ -e " + gate + " ]; do sleep 0.01; done; echo done; exit 5")
	if FindWrapper(logPath) != pid || !Alive(pid, logPath) {
		t.Fatalf("FindWrapper = %d, Alive = %v; want %d, true", FindWrapper(logPath), Alive(pid, logPath), pid)
	}
	if Alive(pid, filepath.Join(dir, "other.log")) || FindWrapper(filepath.Join(dir, "other.log")) != 0 {
		t.Error("a wrapper is alive only for its own log")
	}
	if _, ok := ReadStatus(logPath); ok {
		t.Error("a status before the attempt ended")
	}
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	code, ok, err := Adopt(context.Background(), pid, logPath)
	if err != nil || !ok || code != 5 {
		t.Errorf("Adopt = %d %v %v; want 5 true nil", code, ok, err)
	}
	if Alive(pid, logPath) {
		t.Error("alive after exit")
	}

	// AdoptWait without a nonce reads the status as ReadStatus does.
	pid, st := start("sleep 0.3; exit 6")
	res := AdoptWait(context.Background(), AdoptSpec{PID: pid, PIDStart: st, LogPath: logPath})
	if res.ExitCode == nil || *res.ExitCode != 6 {
		t.Errorf("AdoptWait: %+v; want exit code 6", res)
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

// Without pidfds (kernels before 5.3), children are waited for by a
// blocking wait4, adopted wrappers polled.
func TestWithoutPidfd(t *testing.T) {
	defer func(f func() bool) { pidfdWorks = f }(pidfdWorks)
	pidfdWorks = func() bool { return false }
	s := shellSpec(t, "exit 3")
	s.Nonce = NewNonce()
	h, err := Start(s)
	if err != nil {
		t.Fatal(err)
	}
	if h.w.pidfd != nil {
		t.Fatal("a pidfd")
	}
	if res := h.Wait(context.Background()); res.ExitCode == nil || *res.ExitCode != 3 || res.PeakRSS <= 0 {
		t.Errorf("result %+v; want exit code 3", res)
	}

	s = shellSpec(t, "echo done")
	s.Nonce = NewNonce()
	h, err = Start(s)
	if err != nil {
		t.Fatal(err)
	}
	waitStatus(t, s.LogPath, s.Nonce)
	waitEnded(t, h.PID)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if res := h.Wait(ctx); res.Interrupted || res.ExitCode == nil || *res.ExitCode != 0 {
		t.Errorf("result %+v; want exit code 0, not interrupted", res)
	}

	s = shellSpec(t, "sleep 0.2; exit 4")
	s.Nonce = NewNonce()
	if res := AdoptWait(context.Background(), startElsewhere(t, s)); res.ExitCode == nil || *res.ExitCode != 4 {
		t.Errorf("adopted: %+v; want exit code 4", res)
	}
	s = spec(t, "sleep", "30")
	s.Nonce = NewNonce()
	a := startElsewhere(t, s)
	a.Timeout, a.StartedAt = time.Second, time.Now().Add(-time.Hour)
	if res := AdoptWait(context.Background(), a); !res.TimedOut || res.ExitCode != nil {
		t.Errorf("adopted: %+v; want timed out", res)
	}
	waitGroupGone(t, a.PID)
}

type started struct {
	PID      int
	PIDStart uint64
}

// startElsewhere starts s from another process, a copy of the test binary
// that exits at once, as a rewind that dies after starting an attempt: the
// attempt's wrapper is no child of this process. It returns what the next
// rewind knows of it.
func startElsewhere(t *testing.T, s Spec) AdoptSpec {
	t.Helper()
	js, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), "REWIND_TEST_START="+string(js))
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	var st started
	if err := json.Unmarshal(out, &st); err != nil {
		t.Fatalf("%q: %v", out, err)
	}
	t.Cleanup(func() {
		if start, err := ProcessStart(st.PID); err == nil && start == st.PIDStart {
			_ = syscall.Kill(-st.PID, syscall.SIGKILL)
		}
	})
	return AdoptSpec{PID: st.PID, PIDStart: st.PIDStart, LogPath: s.LogPath, Nonce: s.Nonce, StartedAt: now, Grace: s.Grace}
}

// The waits below poll for an outcome; the bound only keeps a broken test
// from hanging.
const patience = time.Minute

func eventually(t *testing.T, what string, f func() bool) {
	t.Helper()
	deadline := time.Now().Add(patience)
	for !f() {
		if time.Now().After(deadline) {
			t.Fatalf("still waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func waitFile(t *testing.T, path string) {
	t.Helper()
	eventually(t, path, func() bool { _, err := os.Stat(path); return err == nil })
}

func waitStatus(t *testing.T, logPath, nonce string) {
	t.Helper()
	eventually(t, "the status line", func() bool { _, ok := ReadStatusNonce(logPath, nonce); return ok })
}

// waitExec waits until the exec of process pid is through: Start returns
// as the new program replaces the old, and for a moment after, the process's
// command line reads empty.
func waitExec(t *testing.T, pid int) {
	t.Helper()
	eventually(t, "the exec of process "+strconv.Itoa(pid), func() bool {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
		return err != nil || len(b) > 0
	})
}

// waitEnded waits for process pid to be a zombie or gone.
func waitEnded(t *testing.T, pid int) {
	t.Helper()
	eventually(t, "the end of process "+strconv.Itoa(pid), func() bool { _, err := ProcessStart(pid); return err != nil })
}

func waitGone(t *testing.T, pid int) { waitEnded(t, pid) }

// waitGroupGone waits until no live process is left in process group pgid.
func waitGroupGone(t *testing.T, pgid int) {
	t.Helper()
	eventually(t, "the end of process group "+strconv.Itoa(pgid), func() bool { return len(liveMembers(pgid)) == 0 })
}

func readPID(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

// The environment is as os/exec makes it: a variable set twice has its last
// value (a task's env overrides rewind's), nil is rewind's own.
func TestEnviron(t *testing.T) {
	s := spec(t, "sh", "-c", `echo "$A $B"`)
	s.Env = append(s.Env, "A=1", "B=1", "A=2", "bogus")
	h, err := Start(s)
	if err != nil {
		t.Fatal(err)
	}
	h.Wait(context.Background())
	if b, _ := os.ReadFile(s.LogPath); !strings.HasPrefix(string(b), "2 1\n") {
		t.Errorf("log %q; want the last value of A", b)
	}
	env, err := environ(Spec{Env: []string{"A=1", "B=2", "A=3", "", "C"}})
	if err != nil || strings.Join(env, " ") != "B=2 A=3 C" {
		t.Errorf("environ = %q, %v", env, err)
	}
	env, err = environ(Spec{Dir: "/tmp"})
	if err != nil || env[len(env)-1] != "PWD=/tmp" || len(env) < len(os.Environ()) {
		t.Errorf("environ = %q, %v; want rewind's environment with PWD=/tmp", env, err)
	}
	s.Env = []string{"A=\x00"}
	if _, err := Start(s); err == nil {
		t.Error("no error for a NUL in the environment")
	}
}

// Waiting for an attempt holds no thread: a wait is a goroutine parked on
// the attempt's pidfd, not a thread blocked in wait4 (as it is without
// pidfds, which shows that the test sees such threads).
func TestWaitHoldsNoThread(t *testing.T) {
	if !pidfdWorks() {
		t.Skip("no pidfds")
	}
	waiting := func(withPidfd bool) (blocked func() int, stop func()) {
		if !withPidfd {
			defer func(f func() bool) { pidfdWorks = f }(pidfdWorks)
			pidfdWorks = func() bool { return false }
		}
		var hs []*Handle
		var done []chan Result
		for range 20 {
			h, err := Start(spec(t, "sleep", "30"))
			if err != nil {
				t.Fatal(err)
			}
			c := make(chan Result, 1)
			go func() { c <- h.Wait(context.Background()) }()
			hs, done = append(hs, h), append(done, c)
		}
		return threadsInWait, func() {
			for _, h := range hs {
				_ = syscall.Kill(-h.PID, syscall.SIGKILL)
			}
			for _, c := range done {
				<-c
			}
		}
	}
	blocked, stop := waiting(false)
	eventually(t, "threads blocked in wait4 without pidfds", func() bool { return blocked() > 0 })
	stop()
	eventually(t, "no thread blocked in wait4", func() bool { return threadsInWait() == 0 })

	blocked, stop = waiting(true)
	defer stop()
	for range 20 {
		if n := blocked(); n > 0 {
			t.Fatalf("%d threads blocked in wait4", n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// threadsInWait counts the threads of this process blocked in wait4 or
// waitid.
func threadsInWait() int {
	tasks, _ := os.ReadDir("/proc/self/task")
	n := 0
	for _, task := range tasks {
		b, err := os.ReadFile("/proc/self/task/" + task.Name() + "/wchan")
		if err == nil && string(b) == "do_wait" {
			n++
		}
	}
	return n
}

// A symbolic link planted at an attempt's log path is not followed: the
// attempt does not start and the link's target is left as it was.
func TestLogSymlinkNotFollowed(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "precious")
	if err := os.WriteFile(target, []byte("keep me\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	log := filepath.Join(dir, "a.log")
	if err := os.Symlink(target, log); err != nil {
		t.Fatal(err)
	}
	if _, err := Start(Spec{Argv: []string{"true"}, LogPath: log}); err == nil {
		t.Fatal("started an attempt logging through a symbolic link")
	}
	if b, _ := os.ReadFile(target); string(b) != "keep me\n" {
		t.Errorf("the link's target became %q", b)
	}
}
