package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Helpers of the end-to-end tests that run rewind in the background and
// act on the processes of its attempts.

// liveness bounds every wait of these tests: it detects a hang, it does not
// measure anything (the machines are shared and noisy).
const liveness = 60 * time.Second

// syncBuffer is a bytes.Buffer that a running process writes to while the
// test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// proc is a rewind started in the background.
type proc struct {
	t      *testing.T
	args   []string
	cmd    *exec.Cmd
	stdout *syncBuffer
	stderr *syncBuffer
	done   chan struct{}
	err    error // of Wait, once done is closed
}

// start starts rewind with args in the workspace without waiting for it.
func (w *workspace) start(args ...string) *proc {
	w.t.Helper()
	return w.startEnv(nil, args...)
}

// startEnv is start with env (KEY=value) added to the environment.
func (w *workspace) startEnv(env []string, args ...string) *proc {
	w.t.Helper()
	p := &proc{t: w.t, args: args, cmd: w.command(args...), stdout: &syncBuffer{}, stderr: &syncBuffer{}, done: make(chan struct{})}
	p.cmd.Env = append(p.cmd.Env, env...)
	p.cmd.Stdout, p.cmd.Stderr = p.stdout, p.stderr
	if err := p.cmd.Start(); err != nil {
		w.t.Fatal(err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	// Never leave a rewind behind, whatever the test does.
	w.t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

// exited reports whether the process has ended.
func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// signal sends sig unless the process has ended; it reports whether it sent it.
func (p *proc) signal(sig syscall.Signal) bool {
	if p.exited() {
		return false
	}
	return p.cmd.Process.Signal(sig) == nil
}

// kill9 SIGKILLs the rewind and waits for it (its attempts live on).
func (p *proc) kill9() {
	p.t.Helper()
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// term stops a rewind scheduler with SIGTERM, as systemd does, and fails
// the test unless it exits 0.
func (p *proc) term() {
	p.t.Helper()
	p.signal(syscall.SIGTERM)
	if code := p.wait(); code != 0 {
		p.t.Fatalf("exit %d after SIGTERM, want 0\n%s", code, p.stderr.String())
	}
}

// wait waits for the process to exit, at most for the liveness deadline:
// a rewind still running then is a hang, so it is killed and the test
// fails. It returns the exit code, -1 when the process was killed by a
// signal.
func (p *proc) wait() int {
	p.t.Helper()
	select {
	case <-p.done:
	case <-time.After(liveness):
		_ = p.cmd.Process.Signal(syscall.SIGQUIT) // a goroutine dump on stderr
		select {
		case <-p.done:
		case <-time.After(5 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.done
		}
		p.t.Fatalf("rewind %s did not exit within %s: hung; killed it\nstderr:\n%s", strings.Join(p.args, " "), liveness, tail(p.stderr.String(), 8000))
	}
	return exitCode(p.err)
}

// exitCode is the exit code of a finished command, -1 if a signal killed it.
func exitCode(err error) int {
	if err == nil {
		return 0
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	return -2
}

// describe says how a process ended: its exit code or the signal.
func describe(err error) string {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return "killed by " + ws.Signal().String()
		}
		return fmt.Sprintf("exit %d", ee.ExitCode())
	}
	if err != nil {
		return err.Error()
	}
	return "exit 0"
}

func tail(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}

// warnings returns the WARN and ERROR lines of a rewind's log: what a
// failed test shows of each process, so that a failure in CI says why.
func warnings(s string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, "level=WARN") || strings.Contains(l, "level=ERROR") {
			out = append(out, l)
		}
	}
	return tail(strings.Join(out, "\n"), 6000)
}

// waitFor polls cond until it holds; the test fails if it does not within
// the liveness deadline.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(liveness); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("waited %s for %s", liveness, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// exists reports whether the file name exists in the workspace.
func (w *workspace) exists(name string) bool {
	_, err := os.Stat(filepath.Join(w.dir, name))
	return err == nil
}

func (w *workspace) touch(name string) {
	w.t.Helper()
	if err := os.WriteFile(filepath.Join(w.dir, name), nil, 0o644); err != nil {
		w.t.Fatal(err)
	}
}

// procStat returns the state (field 3) and process group (field 5) of pid
// from /proc/PID/stat.
func procStat(pid int) (state string, pgrp int, err error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return "", 0, err
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return "", 0, fmt.Errorf("malformed /proc/%d/stat", pid)
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 3 {
		return "", 0, fmt.Errorf("malformed /proc/%d/stat", pid)
	}
	pgrp, err = strconv.Atoi(f[2])
	return f[0], pgrp, err
}

// groupAlive reports whether a process that is not a zombie is in the
// process group pgid.
func groupAlive(pgid int) bool {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return false
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if state, g, err := procStat(pid); err == nil && g == pgid && state != "Z" {
			return true
		}
	}
	return false
}

// attemptGroup returns the process group of the attempt whose task wrote
// its shell's pid ($$) to the file pidFile of the workspace: the group the
// executor made for the attempt (its wrapper's).
func (w *workspace) attemptGroup(pidFile string) int {
	w.t.Helper()
	b, err := os.ReadFile(filepath.Join(w.dir, pidFile))
	if err != nil {
		w.t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		w.t.Fatalf("%s: %v", pidFile, err)
	}
	_, pgrp, err := procStat(pid)
	if err != nil {
		w.t.Fatalf("the task (pid %d) is gone: %v", pid, err)
	}
	if pgrp <= 1 || pgrp == syscall.Getpgrp() {
		w.t.Fatalf("the task (pid %d) is in process group %d, not in a group of its own (the test's is %d)", pid, pgrp, syscall.Getpgrp())
	}
	return pgrp
}

// killGroup SIGKILLs a process group of an attempt (never the test's own)
// and waits until none of its processes is left.
func killGroup(t *testing.T, pgid int) {
	t.Helper()
	if pgid <= 1 || pgid == syscall.Getpgrp() {
		t.Fatalf("refusing to kill process group %d", pgid)
	}
	if err := syscall.Kill(-pgid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill -9 -%d: %v", pgid, err)
	}
	waitFor(t, fmt.Sprintf("process group %d to be gone", pgid), func() bool { return !groupAlive(pgid) })
}

// findTask returns the task instance of the run on ds (of the first run
// when ds is "").
func findTask(t *testing.T, runs []runJSON, ds, task string) taskJSON {
	t.Helper()
	for _, r := range runs {
		if ds != "" && r.DS != ds {
			continue
		}
		for _, ti := range r.Tasks {
			if ti.Task == task {
				return ti
			}
		}
	}
	t.Fatalf("no task %q in the run of %q: %+v", task, ds, runs)
	return taskJSON{}
}

// dumpRuns logs the runs as rewind runs --json shows them.
func dumpRuns(t *testing.T, w *workspace) {
	t.Helper()
	code, out, errs := w.rewind("runs", "--json")
	t.Logf("rewind runs --json: exit %d\n%s%s", code, tail(out, 6000), errs)
}
