// Package executor launches task attempts as local processes: each attempt is
// a process group of its own, with its output in one log file, which a small
// /bin/sh wrapper ends with the attempt's exit status. An attempt therefore
// outlives a crash of rewind, and its outcome is still known to the next
// rewind. The executor acts on rendered commands; it never reads HCL.
package executor

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// The wrapper is the attempt's first process: a /bin/sh that runs the
// command, then appends its exit status to the log (its own stdout) as a last
// line, "[rewind] exit status <nonce> <rc>" ("[rewind] exit status <rc>"
// without a nonce). It uses only shell builtins: one /bin/sh process, and no
// file of its own, since creating files is what costs most per attempt.
//
// Its command line is /bin/sh -c SCRIPT /bin/sh LOG NONCE COMMAND...: $0 is
// /bin/sh, as for `sh -c`, so that the shell's own messages read as usual;
// LOG names the attempt (Alive, FindWrapper); NONCE is "<nonce> " or "".
const (
	// argvWrapper runs argv ("$@") as a child of the wrapper.
	argvWrapper = `n=$2; shift 2; "$@"; rc=$?; printf '\n` + statusMarker + `%s%s\n' "$n" "$rc"; exit "$rc"`
	// shellWrapper runs a shell command in a subshell of the wrapper, which
	// is a fork of this shell and not a second /bin/sh: the command is eval'd
	// from $3, never spliced into the script's text, with no positional
	// parameter and no variable of the wrapper in sight. Being a subshell,
	// the command's own exec, exit, traps and redirections of the shell's
	// descriptors leave the wrapper alone.
	shellWrapper = `(shift 2; eval "set --; $1"); rc=$?; printf '\n` + statusMarker + `%s%s\n' "$2" "$rc"; exit "$rc"`
	// legacyWrapper is the wrapper of rewinds before nonces, still
	// recognized (/bin/sh -c legacyWrapper LOG ARGV...).
	legacyWrapper = `"$@"; rc=$?; printf '\n%s%s\n' "` + statusMarker + `" "$rc"; exit "$rc"`
)

// statusMarker starts the line the wrapper appends to a log.
const statusMarker = "[rewind] exit status "

// Spec is one attempt to launch.
type Spec struct {
	// Argv is the command. An Argv of exactly ["/bin/sh", "-c", CMD] (what a
	// string command renders to) runs as Shell = CMD.
	Argv []string
	// Shell, when set (and Argv empty), is a shell command run in a subshell
	// of the wrapper rather than in a second /bin/sh: as `/bin/sh -c Shell`,
	// with the same stdin, stdout, stderr, $0 and exit status, except that
	// $$ is the attempt's pid (the wrapper's: its process group) and $PPID
	// the parent of the wrapper.
	Shell   string
	Env     []string // the complete environment of the process (nil: rewind's)
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
	// Nonce is a per-attempt secret (hex digits, see NewNonce) that the
	// wrapper writes in its status line, so that a task cannot forge its
	// outcome by printing one: ReadStatusNonce reads only a line with it.
	// It is not in the task's environment (it is in the wrapper's argv).
	// Record it with the attempt before starting it. "" writes the status
	// line of older rewinds, which ReadStatus reads.
	Nonce string
}

// Result is how an attempt ended.
type Result struct {
	ExitCode    *int   // nil when killed by a signal
	Signal      string // "killed", "terminated", ... when killed by a signal
	TimedOut    bool
	Interrupted bool // the context was cancelled: rewind is stopping
	// OOM: the watchdog killed the attempt for going over its MemoryLimit.
	OOM     bool
	PeakRSS int64
	// NoStatus (AdoptWait only): the attempt's processes are gone and wrote
	// no exit status: the attempt is lost.
	NoStatus bool
	Duration time.Duration
}

// Success reports whether the attempt exited 0.
func (r Result) Success() bool { return r.ExitCode != nil && *r.ExitCode == 0 && !r.TimedOut }

// NewNonce returns a fresh random nonce for Spec.Nonce: 32 hex digits.
func NewNonce() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	return hex.EncodeToString(b[:])
}

func validNonce(n string) bool {
	for i := 0; i < len(n); i++ {
		c := n[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
			return false
		}
	}
	return true
}

// Handle is a started attempt.
type Handle struct {
	PID      int
	PIDStart uint64
	spec     Spec
	start    time.Time
	w        *watch
}

var devNull = sync.OnceValues(func() (int, error) {
	return syscall.Open(os.DevNull, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
})

// Start launches the attempt in its own process group.
func Start(spec Spec) (*Handle, error) {
	if spec.Shell == "" && len(spec.Argv) == 3 && spec.Argv[0] == "/bin/sh" && spec.Argv[1] == "-c" && spec.Argv[2] != "" {
		spec.Shell, spec.Argv = spec.Argv[2], nil
	}
	name := spec.Shell
	switch {
	case spec.Shell != "" && len(spec.Argv) > 0:
		return nil, errors.New("both a shell command and argv")
	case spec.Shell == "" && (len(spec.Argv) == 0 || spec.Argv[0] == ""):
		return nil, errors.New("empty command")
	case spec.Shell == "":
		name = spec.Argv[0]
	}
	if !validNonce(spec.Nonce) {
		return nil, errors.New("nonce: not hex digits")
	}
	if spec.Grace <= 0 {
		spec.Grace = 10 * time.Second
	}
	null, err := devNull()
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", os.DevNull, err)
	}
	logfd, err := openLog(spec.LogPath)
	if err != nil {
		return nil, err
	}
	defer syscall.Close(logfd)
	nonce := spec.Nonce
	if nonce != "" {
		nonce += " "
	}
	var argv []string
	if spec.Shell != "" {
		argv = []string{"/bin/sh", "-c", shellWrapper, "/bin/sh", spec.LogPath, nonce, spec.Shell}
	} else {
		argv = append([]string{"/bin/sh", "-c", argvWrapper, "/bin/sh", spec.LogPath, nonce}, spec.Argv...)
	}
	env, err := environ(spec)
	if err != nil {
		return nil, err
	}
	sys := &syscall.SysProcAttr{Setpgid: true}
	pidfd := -1
	if pidfdWorks() {
		sys.PidFD = &pidfd
	}
	h := &Handle{spec: spec, start: time.Now()}
	pid, err := syscall.ForkExec("/bin/sh", argv, &syscall.ProcAttr{
		Dir: spec.Dir, Env: env, Files: []uintptr{uintptr(null), uintptr(logfd), uintptr(logfd)}, Sys: sys,
	})
	if err != nil {
		if spec.Dir != "" {
			if _, serr := os.Stat(spec.Dir); serr != nil {
				err = fmt.Errorf("chdir %s: %w", spec.Dir, err)
			}
		}
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	h.PID = pid
	h.PIDStart, _ = ProcessStart(pid)
	h.w = watchChild(pid, pidfd)
	return h, nil
}

// environ is the environment of the attempt's process as os/exec makes it:
// nil is rewind's own, with PWD set to Dir; a variable set twice has its
// last value.
func environ(spec Spec) ([]string, error) {
	env := spec.Env
	if env == nil {
		env = os.Environ()
		if spec.Dir != "" {
			pwd, err := filepath.Abs(spec.Dir)
			if err != nil {
				return nil, err
			}
			env = append(env, "PWD="+pwd)
		}
	}
	// Keep the last occurrence of each variable, in order.
	out := make([]string, 0, len(env))
	seen := make(map[string]bool, len(env))
	for i := len(env) - 1; i >= 0; i-- {
		kv := env[i]
		if strings.IndexByte(kv, 0) >= 0 {
			return nil, errors.New("environment variable contains NUL")
		}
		k, _, ok := strings.Cut(kv, "=")
		if !ok {
			if kv != "" {
				out = append(out, kv)
			}
			continue
		}
		if !seen[k] {
			seen[k] = true
			out = append(out, kv)
		}
	}
	slices.Reverse(out)
	return out, nil
}

// openLog creates (or truncates) an attempt's log, and its directory if
// needed.
func openLog(path string) (int, error) {
	// O_NOFOLLOW: a symbolic link planted at a future log path is refused,
	// never followed (its target would be truncated).
	const flags = syscall.O_CREAT | syscall.O_WRONLY | syscall.O_TRUNC | syscall.O_APPEND | syscall.O_CLOEXEC | syscall.O_NOFOLLOW
	fd, err := syscall.Open(path, flags, 0o644)
	if err == syscall.ENOENT {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return -1, fmt.Errorf("log directory: %w", err)
		}
		fd, err = syscall.Open(path, flags, 0o644)
	}
	if err != nil {
		return -1, fmt.Errorf("open log: %w", &os.PathError{Op: "open", Path: path, Err: err})
	}
	return fd, nil
}

// Wait waits for the attempt to end. When the timeout passes or ctx is
// cancelled, the whole process group gets SIGTERM, then SIGKILL once the
// grace period has passed with processes left in it. An attempt that ended
// by itself at that moment (before the signal) gets its own outcome.
func (h *Handle) Wait(ctx context.Context) Result {
	s := h.spec
	return supervise(ctx, h.w, supervision{
		logPath: s.LogPath, nonce: s.Nonce, start: h.start,
		timeout: s.Timeout, deadline: h.start.Add(s.Timeout), memory: s.MemoryLimit, grace: s.Grace,
	})
}

// AdoptSpec is an attempt started by an earlier rewind, to adopt: what was
// recorded about it, and the limits it runs under.
type AdoptSpec struct {
	PID int
	// PIDStart is the wrapper's start time (Handle.PIDStart): with it, a
	// reused pid is not taken for the attempt. 0 = unknown: the pid is then
	// checked with Alive.
	PIDStart  uint64
	LogPath   string
	Nonce     string    // Spec.Nonce of the attempt ("" for older attempts)
	StartedAt time.Time // when it started: the timeout runs from there
	Timeout   time.Duration
	// MemoryLimit and Grace are as in Spec.
	MemoryLimit int64
	Grace       time.Duration
}

// AdoptWait waits for an attempt started by an earlier rewind (not a child of
// this process) as Wait does for one of ours: the rest of its timeout (none
// left: at once) and its memory limit are enforced, and a cancelled ctx stops
// its process group. Its exit code is the status its wrapper wrote in the log
// (with a.Nonce); NoStatus says it wrote none (lost). A pid that is not, or
// no longer, the attempt's wrapper counts as gone.
func AdoptWait(ctx context.Context, a AdoptSpec) Result {
	if a.Grace <= 0 {
		a.Grace = 10 * time.Second
	}
	start := a.StartedAt
	if start.IsZero() {
		start = time.Now()
	}
	return supervise(ctx, watchAdopted(a.PID, a.PIDStart, a.LogPath), supervision{
		adopted: true, logPath: a.LogPath, nonce: a.Nonce, start: start,
		timeout: a.Timeout, deadline: start.Add(a.Timeout), memory: a.MemoryLimit, grace: a.Grace,
	})
}

type supervision struct {
	adopted  bool
	logPath  string
	nonce    string
	start    time.Time
	timeout  time.Duration // 0 = none
	deadline time.Time
	memory   int64
	grace    time.Duration
}

// supervise waits for the watched wrapper to end, enforcing the limits of s.
func supervise(ctx context.Context, w *watch, s supervision) Result {
	var res Result
	var timeout <-chan time.Time
	if s.timeout > 0 {
		t := time.NewTimer(time.Until(s.deadline))
		defer t.Stop()
		timeout = t.C
	}
	var oom <-chan int64
	var peak *peakRSS
	if s.memory > 0 {
		stop := make(chan struct{})
		defer close(stop)
		peak = new(peakRSS)
		oom = watchMemory(w.pid, s.memory, peak, stop)
	}
	stopped := false // we signalled the group to end it
	var lastSignal syscall.Signal
	select {
	case <-w.done:
	case <-timeout:
		if !w.ended() {
			res.TimedOut, stopped = true, true
			lastSignal = stopGroup(w, s.grace)
		}
	case <-ctx.Done():
		if !w.ended() {
			res.Interrupted, stopped = true, true
			lastSignal = stopGroup(w, s.grace)
		}
	case rss := <-oom:
		if !w.ended() {
			res.OOM, stopped = true, true
			killTree(w.pid)
			lastSignal = syscall.SIGKILL
			AppendLine(s.logPath, fmt.Sprintf("rewind: attempt killed: its processes used %s of memory, over the pool's limit of %s", formatBytes(rss), formatBytes(s.memory)))
		}
		res.PeakRSS = rss
	}
	<-w.done
	res.Duration = time.Since(s.start)
	if peak != nil {
		res.PeakRSS = max(res.PeakRSS, peak.get())
	}

	// The attempt's own outcome, when it has one: a timeout or an interrupt
	// that came as it ended by itself does not count.
	if (res.TimedOut || res.Interrupted) && ownExit(w, s, &res) {
		res.TimedOut, res.Interrupted = false, false
		return res
	}
	switch {
	case w.waited():
		if ru := w.rusage; ru.Maxrss > 0 {
			res.PeakRSS = max(res.PeakRSS, ru.Maxrss*1024)
		}
		if w.status.Signaled() {
			res.Signal = SignalName(w.status.Signal())
		} else {
			code := w.status.ExitStatus()
			res.ExitCode = &code
		}
	case stopped:
		// Not our child: its wait status is its parent's. It died of the
		// last signal we sent, or of an earlier one.
		res.Signal = SignalName(lastSignal)
	case s.adopted || s.nonce != "":
		if code, ok := ReadStatusNonce(s.logPath, s.nonce); ok {
			res.ExitCode = &code
		} else {
			res.NoStatus = s.adopted
		}
	default:
		code := -1 // a child whose wait status is lost
		res.ExitCode = &code
	}
	if res.TimedOut {
		AppendLine(s.logPath, fmt.Sprintf("rewind: attempt timed out after %s; process group killed", s.timeout))
	}
	return res
}

// ownExit reports whether an attempt that we stopped had in fact ended by
// itself, before our signal reached its wrapper: the wrapper exited rather
// than being killed, or wrote a status line (with the attempt's nonce: one
// without cannot be told from a forged one), with a status that our signals
// do not cause (128+SIGTERM, 128+SIGKILL). It sets res's exit code if so.
func ownExit(w *watch, s supervision, res *Result) bool {
	ours := func(code int) bool { return code == 128+int(syscall.SIGTERM) || code == 128+int(syscall.SIGKILL) }
	code, ok := 0, false
	if w.waited() && w.status.Exited() {
		code, ok = w.status.ExitStatus(), true
	} else if s.nonce != "" {
		code, ok = ReadStatusNonce(s.logPath, s.nonce)
	}
	if !ok || ours(code) {
		return false
	}
	res.ExitCode = &code
	if w.waited() && w.rusage.Maxrss > 0 {
		res.PeakRSS = max(res.PeakRSS, w.rusage.Maxrss*1024)
	}
	return true
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

// groupPoll is how often stopGroup looks whether the group is empty;
// groupScan how often at most it scans /proc for live members, when only
// zombies may be left (processes whose parent died are reaped by init, some
// time after they end).
const (
	groupPoll = 5 * time.Millisecond
	groupScan = 50 * time.Millisecond
)

// stopGroup sends SIGTERM to the wrapper's process group, gives the group
// the grace period to end, then SIGKILLs whatever is left of it. It returns
// once the wrapper has ended, with the last signal sent.
func stopGroup(w *watch, grace time.Duration) syscall.Signal {
	pgid := w.pid
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	deadline := time.NewTimer(grace)
	defer deadline.Stop()
	tick := time.NewTicker(groupPoll)
	defer tick.Stop()
	var scanned time.Time
	for {
		select {
		case <-deadline.C:
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
			<-w.done
			return syscall.SIGKILL
		case <-tick.C:
			if !w.isDone() {
				continue
			}
			if syscall.Kill(-pgid, 0) == syscall.ESRCH {
				return syscall.SIGTERM
			}
			if time.Since(scanned) >= groupScan {
				scanned = time.Now()
				if len(liveMembers(pgid)) == 0 {
					return syscall.SIGTERM
				}
			}
		}
	}
}

// liveMembers lists the processes of group pgid that are not zombies.
func liveMembers(pgid int) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return []int{pgid} // unknown: assume the leader
	}
	group := strconv.Itoa(pgid)
	var out []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		s, err := readProc(pid, "stat")
		if err != nil {
			continue
		}
		// After the command: state, ppid, pgrp.
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(f) > 2 && f[0] != "Z" && f[2] == group {
			out = append(out, pid)
		}
	}
	return out
}

// SignalName is the short name of a signal: "killed", "terminated", ...
func SignalName(s syscall.Signal) string { return s.String() }

// ProcessStart returns the start time of process pid in clock ticks since
// boot (field 22 of /proc/PID/stat): with the pid, it names one process
// even after the pid is reused.
func ProcessStart(pid int) (uint64, error) {
	s, err := readProc(pid, "stat")
	if err != nil {
		return 0, err
	}
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

// readProc reads /proc/PID/NAME with plain system calls (open, read, close),
// cheaper than os.ReadFile for these small files.
func readProc(pid int, name string) (string, error) {
	path := "/proc/" + strconv.Itoa(pid) + "/" + name
	fd, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return "", &os.PathError{Op: "open", Path: path, Err: err}
	}
	defer syscall.Close(fd)
	buf := make([]byte, 0, 512)
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := syscall.Read(fd, buf[len(buf):cap(buf)])
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return "", &os.PathError{Op: "read", Path: path, Err: err}
		}
		if n == 0 {
			return string(buf), nil
		}
		buf = buf[:len(buf)+n]
	}
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
	s := string(cmdline)
	for _, script := range [...]string{argvWrapper, shellWrapper} {
		if strings.HasPrefix(s, "/bin/sh\x00-c\x00"+script+"\x00/bin/sh\x00"+logPath+"\x00") {
			return true
		}
	}
	return strings.HasPrefix(s, "/bin/sh\x00-c\x00"+legacyWrapper+"\x00"+logPath+"\x00")
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

// statusTail is how much of the end of a log is searched for its status.
const statusTail = 64 << 10

// ReadStatus reads the exit status the wrapper appended to an attempt's log,
// for attempts started without a nonce (by older rewinds); ok is false when
// there is none (the wrapper was killed, or still runs). A task can forge
// this line: use ReadStatusNonce for attempts with a nonce.
func ReadStatus(logPath string) (code int, ok bool) {
	return readStatus(logPath, "")
}

// ReadStatusNonce reads the exit status the wrapper of the attempt with the
// given nonce appended to its log: the last status line carrying that nonce
// in the log's last 64 KiB. A line without it (printed by the task, or by
// another attempt) is ignored. nonce "" (an attempt of an older rewind)
// reads as ReadStatus.
func ReadStatusNonce(logPath, nonce string) (code int, ok bool) {
	if nonce != "" && !validNonce(nonce) {
		return 0, false
	}
	return readStatus(logPath, nonce)
}

func readStatus(logPath, nonce string) (code int, ok bool) {
	f, err := os.Open(logPath)
	if err != nil {
		return 0, false
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return 0, false
	}
	off := max(0, st.Size()-statusTail)
	buf := make([]byte, st.Size()-off)
	if _, err := f.ReadAt(buf, off); err != nil {
		return 0, false
	}
	marker := "\n" + statusMarker
	if nonce != "" {
		marker += nonce + " "
	}
	i := strings.LastIndex(string(buf), marker)
	if i < 0 {
		return 0, false
	}
	digits, _, found := strings.Cut(string(buf[i+len(marker):]), "\n")
	if !found || digits == "" || strings.TrimLeft(digits, "0123456789") != "" {
		return 0, false
	}
	code, err = strconv.Atoi(digits)
	return code, err == nil
}

// Adopt waits for an attempt started by an earlier rewind that died: it polls
// until the wrapper is gone, then reads the status it wrote (without a
// nonce). ok is false when no status was written (the attempt is lost).
// AdoptWait supersedes it.
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

// peakRSS is the largest sample of the watchdog.
type peakRSS struct {
	mu sync.Mutex
	n  int64
}

func (p *peakRSS) add(n int64) {
	p.mu.Lock()
	p.n = max(p.n, n)
	p.mu.Unlock()
}

func (p *peakRSS) get() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.n
}

// watchMemory samples the resident memory of the process tree under pid
// until stop is closed; it sends the sample that goes over limit.
func watchMemory(pid int, limit int64, peak *peakRSS, stop <-chan struct{}) <-chan int64 {
	over := make(chan int64, 1)
	go func() {
		t := time.NewTicker(memoryPoll)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				rss := treeRSS(pid)
				peak.add(rss)
				if rss > limit {
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
		s, err := readProc(p, "statm")
		if err != nil {
			continue
		}
		f := strings.Fields(s)
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
