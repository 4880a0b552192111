// Package executor launches task attempts as local processes: each attempt is
// a process group of its own, with its output in one log file and its exit
// status written to a status file by a small /bin/sh wrapper, so that an
// attempt outlives a crash of rewind and its outcome is still known to the
// next rewind. The executor acts on rendered commands; it never reads HCL.
package executor

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// wrapper records its own pid in "$0.pid", runs the attempt's argv ("$@") and
// records its exit status in the file named by $0 before exiting with it. It
// uses only shell builtins, so it costs one /bin/sh process.
const wrapper = `printf '%s\n' "$$" >"$0.pid"; "$@"; rc=$?; printf '%s\n' "$rc" >"$0"; exit "$rc"`

// Spec is one attempt to launch.
type Spec struct {
	Argv       []string
	Env        []string // the complete environment of the process
	Dir        string
	LogPath    string
	StatusPath string
	Timeout    time.Duration // 0 = none
	// Grace is how long a process group gets between SIGTERM and SIGKILL
	// on timeout or interrupt (default 10s).
	Grace time.Duration
}

// Result is how an attempt ended.
type Result struct {
	ExitCode    *int   // nil when killed by a signal
	Signal      string // "killed", "terminated", ... when killed by a signal
	TimedOut    bool
	Interrupted bool // the context was cancelled: rewind is stopping
	PeakRSS     int64
	Duration    time.Duration
}

// Success reports whether the attempt exited 0.
func (r Result) Success() bool { return r.ExitCode != nil && *r.ExitCode == 0 && !r.TimedOut }

// Handle is a started attempt.
type Handle struct {
	PID      int
	PIDStart uint64
	cmd      *exec.Cmd
	spec     Spec
	start    time.Time
	log      *os.File
}

// Start launches the attempt in its own process group.
func Start(spec Spec) (*Handle, error) {
	if len(spec.Argv) == 0 || spec.Argv[0] == "" {
		return nil, errors.New("empty command")
	}
	if spec.Grace <= 0 {
		spec.Grace = 10 * time.Second
	}
	if err := os.MkdirAll(filepath.Dir(spec.LogPath), 0o755); err != nil {
		return nil, fmt.Errorf("log directory: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(spec.StatusPath), 0o755); err != nil {
		return nil, fmt.Errorf("status directory: %w", err)
	}
	_ = os.Remove(spec.StatusPath)
	_ = os.Remove(spec.StatusPath + ".pid")
	logf, err := os.OpenFile(spec.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open log: %w", err)
	}
	args := append([]string{"-c", wrapper, spec.StatusPath}, spec.Argv...)
	cmd := exec.Command("/bin/sh", args...)
	cmd.Env = spec.Env
	cmd.Dir = spec.Dir
	cmd.Stdin = nil
	cmd.Stdout = logf
	cmd.Stderr = logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	h := &Handle{cmd: cmd, spec: spec, log: logf}
	h.start = time.Now()
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start %s: %w", spec.Argv[0], err)
	}
	h.PID = cmd.Process.Pid
	h.PIDStart, _ = ProcessStart(h.PID)
	return h, nil
}

// Wait waits for the attempt to end. When the timeout passes or ctx is
// cancelled, the whole process group gets SIGTERM, then SIGKILL after the
// grace period.
func (h *Handle) Wait(ctx context.Context) Result {
	done := make(chan error, 1)
	go func() { done <- h.cmd.Wait() }()
	var timeout <-chan time.Time
	if h.spec.Timeout > 0 {
		t := time.NewTimer(h.spec.Timeout)
		defer t.Stop()
		timeout = t.C
	}
	var res Result
	var waitErr error
	select {
	case waitErr = <-done:
	case <-timeout:
		res.TimedOut = true
		waitErr = h.stopGroup(done)
	case <-ctx.Done():
		res.Interrupted = true
		waitErr = h.stopGroup(done)
	}
	h.log.Close()
	res.Duration = time.Since(h.start)
	fillResult(&res, h.cmd.ProcessState, waitErr)
	if res.TimedOut {
		appendLine(h.spec.LogPath, fmt.Sprintf("rewind: attempt timed out after %s; process group killed", h.spec.Timeout))
	}
	return res
}

// appendLine adds a line of rewind's own to an attempt's log.
func appendLine(path, line string) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return
	}
	defer f.Close()
	fmt.Fprintln(f, line)
}

// stopGroup sends SIGTERM to the process group, waits for the grace period,
// then SIGKILLs whatever is left of the group.
func (h *Handle) stopGroup(done <-chan error) error {
	pgid := h.PID
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	t := time.NewTimer(h.spec.Grace)
	defer t.Stop()
	select {
	case err := <-done:
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		return err
	case <-t.C:
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		return <-done
	}
}

func fillResult(res *Result, ps *os.ProcessState, waitErr error) {
	if ps == nil {
		code := -1
		res.ExitCode = &code
		return
	}
	if ru, ok := ps.SysUsage().(*syscall.Rusage); ok && ru != nil {
		res.PeakRSS = ru.Maxrss * 1024
	}
	ws, ok := ps.Sys().(syscall.WaitStatus)
	if ok && ws.Signaled() {
		res.Signal = SignalName(ws.Signal())
		return
	}
	code := ps.ExitCode()
	res.ExitCode = &code
	_ = waitErr
}

// SignalName is the short name of a signal: "killed", "terminated", ...
func SignalName(s syscall.Signal) string { return s.String() }

// ProcessStart returns the start time of process pid in clock ticks since
// boot (field 22 of /proc/PID/stat): with the pid, it names one process
// even after the pid is reused.
func ProcessStart(pid int) (uint64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("malformed /proc/%d/stat", pid)
	}
	fields := strings.Fields(s[i+1:])
	// fields[0] is field 3 (state); field 22 is fields[19].
	if len(fields) < 20 {
		return 0, fmt.Errorf("malformed /proc/%d/stat", pid)
	}
	if fields[0] == "Z" {
		return 0, fmt.Errorf("process %d is a zombie", pid)
	}
	return strconv.ParseUint(fields[19], 10, 64)
}

// Alive reports whether pid is still the wrapper of the attempt whose status
// file is statusPath (a reused pid runs something else).
func Alive(pid int, statusPath string) bool {
	if pid <= 0 {
		return false
	}
	if _, err := ProcessStart(pid); err != nil {
		return false // gone, or a zombie
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil {
		return false
	}
	return strings.Contains(string(b), "\x00"+statusPath+"\x00")
}

// WrapperPID returns the pid an attempt's wrapper recorded, or 0.
func WrapperPID(statusPath string) int {
	b, err := os.ReadFile(statusPath + ".pid")
	if err != nil {
		return 0
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return pid
}

// ReadStatus reads the exit status an attempt's wrapper wrote; ok is false
// when the wrapper has not written one (it was killed, or is still running).
func ReadStatus(path string) (code int, ok bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	code, err = strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 0, false
	}
	return code, true
}

// Adopt waits for an attempt started by an earlier rewind that died: it polls
// until the process is gone, then reads the status its wrapper wrote. ok is
// false when no status was written (the attempt is lost).
func Adopt(ctx context.Context, pid int, statusPath string) (code int, ok bool, err error) {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for Alive(pid, statusPath) {
		select {
		case <-ctx.Done():
			return 0, false, ctx.Err()
		case <-tick.C:
		}
	}
	code, ok = ReadStatus(statusPath)
	return code, ok, nil
}
