// Package executor launches task attempts as local processes: each attempt is
// a process group of its own, with its output in one log file, which a small
// /bin/sh wrapper ends with the attempt's exit status. An attempt therefore
// outlives a crash of rewind, and its outcome is still known to the next
// rewind. The executor acts on rendered commands; it never reads HCL.
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

// wrapper runs the attempt's argv ("$@"), then appends its exit status to the
// log (its own stdout) as a last line of the form written by StatusLine. $0
// is the log's path, so that the wrapper's command line names its attempt.
// It uses only shell builtins: one /bin/sh process, and no file of its own,
// since creating files is what costs most per attempt.
const wrapper = `"$@"; rc=$?; printf '\n%s%s\n' "` + statusMarker + `" "$rc"; exit "$rc"`

// statusMarker starts the line the wrapper appends to a log.
const statusMarker = "[rewind] exit status "

// Spec is one attempt to launch.
type Spec struct {
	Argv    []string
	Env     []string // the complete environment of the process
	Dir     string
	LogPath string        // the attempt's output, ended by its exit status
	Timeout time.Duration // 0 = none
	// MemoryLimit, when > 0, is enforced on the attempt's whole process tree:
	// a watchdog samples its resident memory and kills the tree, like the
	// kernel's OOM killer, when the sum goes over it.
	MemoryLimit int64
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
	// OOM: the watchdog killed the attempt for going over its MemoryLimit.
	OOM      bool
	PeakRSS  int64
	Duration time.Duration
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
	logf, err := os.OpenFile(spec.LogPath, os.O_CREATE|os.O_WRONLY|os.O_TRUNC|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open log: %w", err)
	}
	args := append([]string{"-c", wrapper, spec.LogPath}, spec.Argv...)
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
	var oom <-chan int64
	if h.spec.MemoryLimit > 0 {
		stop := make(chan struct{})
		defer close(stop)
		oom = watchMemory(h.PID, h.spec.MemoryLimit, stop)
	}
	var waitErr error
	select {
	case waitErr = <-done:
	case <-timeout:
		res.TimedOut = true
		waitErr = h.stopGroup(done)
	case <-ctx.Done():
		res.Interrupted = true
		waitErr = h.stopGroup(done)
	case rss := <-oom:
		res.OOM = true
		killTree(h.PID)
		waitErr = <-done
		AppendLine(h.spec.LogPath, fmt.Sprintf("rewind: attempt killed: its processes used %s of memory, over the pool's limit of %s", formatBytes(rss), formatBytes(h.spec.MemoryLimit)))
		res.PeakRSS = rss
	}
	h.log.Close()
	res.Duration = time.Since(h.start)
	peak := res.PeakRSS
	fillResult(&res, h.cmd.ProcessState, waitErr)
	res.PeakRSS = max(res.PeakRSS, peak)
	if res.TimedOut {
		AppendLine(h.spec.LogPath, fmt.Sprintf("rewind: attempt timed out after %s; process group killed", h.spec.Timeout))
	}
	return res
}

// AppendLine adds a line of rewind's own to a log (creating it and its
// directory if needed); a log that cannot be written is left as it is.
func AppendLine(path, line string) {
	_ = os.MkdirAll(filepath.Dir(path), 0o755)
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

// Alive reports whether pid is still the wrapper of the attempt logging to
// logPath (a reused pid runs something else).
func Alive(pid int, logPath string) bool {
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
	return isWrapperOf(b, logPath)
}

func isWrapperOf(cmdline []byte, logPath string) bool {
	return strings.HasPrefix(string(cmdline), "/bin/sh\x00-c\x00"+wrapper+"\x00"+logPath+"\x00")
}

// FindWrapper returns the pid of the live wrapper of the attempt logging to
// logPath, or 0. It scans /proc: recovery uses it for an attempt whose pid
// was not recorded because rewind died right after starting it.
func FindWrapper(logPath string) int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if Alive(pid, logPath) {
			return pid
		}
	}
	return 0
}

// ReadStatus reads the exit status the wrapper appended to an attempt's log;
// ok is false when there is none (the wrapper was killed, or still runs).
func ReadStatus(logPath string) (code int, ok bool) {
	f, err := os.Open(logPath)
	if err != nil {
		return 0, false
	}
	defer f.Close()
	const tail = 64 << 10
	st, err := f.Stat()
	if err != nil {
		return 0, false
	}
	off := max(0, st.Size()-tail)
	buf := make([]byte, st.Size()-off)
	if _, err := f.ReadAt(buf, off); err != nil {
		return 0, false
	}
	i := strings.LastIndex(string(buf), "\n"+statusMarker)
	if i < 0 {
		return 0, false
	}
	rest := string(buf[i+1+len(statusMarker):])
	digits, _, found := strings.Cut(rest, "\n")
	if !found {
		return 0, false
	}
	code, err = strconv.Atoi(digits)
	return code, err == nil
}

// Adopt waits for an attempt started by an earlier rewind that died: it polls
// until the wrapper is gone, then reads the status it wrote. ok is false when
// no status was written (the attempt is lost).
func Adopt(ctx context.Context, pid int, logPath string) (code int, ok bool, err error) {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for Alive(pid, logPath) {
		select {
		case <-ctx.Done():
			return 0, false, ctx.Err()
		case <-tick.C:
		}
	}
	code, ok = ReadStatus(logPath)
	return code, ok, nil
}

// memoryPoll is how often the watchdog samples an attempt's memory.
const memoryPoll = 100 * time.Millisecond

// watchMemory samples the resident memory of the process tree under pid
// until stop is closed; it sends the sample that goes over limit.
func watchMemory(pid int, limit int64, stop <-chan struct{}) <-chan int64 {
	over := make(chan int64, 1)
	go func() {
		t := time.NewTicker(memoryPoll)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				if rss := treeRSS(pid); rss > limit {
					over <- rss
					return
				}
			}
		}
	}()
	return over
}

var pageSize = int64(os.Getpagesize())

// treeRSS sums the resident memory of pid and every process below it,
// including those that left its process group.
func treeRSS(pid int) int64 {
	var total int64
	for _, p := range tree(pid) {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(p) + "/statm")
		if err != nil {
			continue
		}
		f := strings.Fields(string(b))
		if len(f) < 2 {
			continue
		}
		pages, _ := strconv.ParseInt(f[1], 10, 64)
		total += pages * pageSize
	}
	return total
}

// tree lists pid and its descendants, from /proc/PID/task/TID/children.
func tree(pid int) []int {
	out := []int{pid}
	for i := 0; i < len(out); i++ {
		p := strconv.Itoa(out[i])
		tasks, err := os.ReadDir("/proc/" + p + "/task")
		if err != nil {
			continue
		}
		for _, t := range tasks {
			b, err := os.ReadFile("/proc/" + p + "/task/" + t.Name() + "/children")
			if err != nil {
				continue
			}
			for _, c := range strings.Fields(string(b)) {
				if n, err := strconv.Atoi(c); err == nil {
					out = append(out, n)
				}
			}
		}
	}
	return out
}

// killTree SIGKILLs the process group of pid and every descendant of pid.
func killTree(pid int) {
	procs := tree(pid)
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	for _, p := range procs {
		_ = syscall.Kill(p, syscall.SIGKILL)
	}
}

func formatBytes(n int64) string {
	return strconv.FormatFloat(float64(n)/(1<<20), 'f', 1, 64) + " MiB"
}
