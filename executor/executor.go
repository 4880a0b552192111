// Package executor launches task attempts as local processes: each attempt is
// a process group of its own, with its output in one log file, which a small
// /bin/sh wrapper ends with the attempt's exit status. An attempt therefore
// outlives a crash of rewind, and its outcome is still known to the next
// rewind. The executor acts on rendered commands; it never reads HCL.
//
// Where the kernel offers cgroups (v2 with the memory controller delegated
// to rewind's cgroup, else v1), each attempt runs in a cgroup of its own,
// nested below rewind's and named after the attempt, which its wrapper
// enters before it runs the command: the kernel enforces the attempt's
// memory limit and CPU quota on every process of it, detached or not,
// counts its peak memory and its OOM kills, and what is left of it when it
// ends is found and killed there. Without cgroups, a watchdog samples the
// PSS of the attempt's processes and kills them over the limit. Enforcement
// says which is in use.
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

	// cgroupArgvWrapper and cgroupShellWrapper are argvWrapper and
	// shellWrapper for an attempt with a cgroup: /bin/sh -c SCRIPT /bin/sh
	// LOG NONCE CG1 CG2 COMMAND..., where CG1 and CG2 are the cgroup's
	// directories ("" for none). The wrapper first moves itself into them
	// (echo, a builtin), so that every process of the attempt starts inside;
	// if it cannot, it runs nothing and exits 125.
	cgroupArgvWrapper  = joinCgroup + `n=$2; shift 4; "$@"; rc=$?; printf '\n` + statusMarker + `%s%s\n' "$n" "$rc"; exit "$rc"`
	cgroupShellWrapper = joinCgroup + `(shift 4; eval "set --; $1"); rc=$?; printf '\n` + statusMarker + `%s%s\n' "$2" "$rc"; exit "$rc"`
	// joinCgroup leaves no variable behind for the command to see.
	joinCgroup = `for g in "$3" "$4"; do [ -z "$g" ] || echo $$ >"$g/cgroup.procs" || { printf 'rewind: cannot enter the cgroup %s\n\n` + statusMarker + `%s125\n' "$g" "$2"; exit 125; }; done; unset g; `
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
	// MemoryLimit, when > 0, is enforced on every process of the attempt:
	// by the kernel in the attempt's cgroup (swap included), else by a
	// watchdog that samples the sum of their PSS and kills them all, like
	// the kernel's OOM killer, when it goes over.
	MemoryLimit int64
	// CPUs, when > 0, is a CPU quota: the attempt's processes together get
	// at most this many CPUs' worth of time, where the cgroup has the cpu
	// controller (else it is not enforced: see Enforcement).
	CPUs int
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
	// OOM: the attempt ran out of memory: the kernel killed a process of
	// its cgroup for memory (it is then killed whole), or the watchdog
	// killed it for going over its MemoryLimit. It counts as killed
	// (Signal "killed", no exit code) even if its wrapper went on to exit
	// by itself.
	OOM bool
	// PeakRSS is the most memory the attempt used at once: its cgroup's
	// peak (anonymous memory, page cache and kernel memory charged to it),
	// or without a cgroup the largest PSS sum the watchdog saw (0 if it
	// took no sample). Never the memory of rewind.
	PeakRSS int64
	// NoStatus (AdoptWait only): the attempt's processes are gone and wrote
	// no exit status: the attempt is lost.
	NoStatus bool
	// Left (Slurm jobs waited for with Leave): rewind stopped waiting and
	// the job runs on; its outcome is not known yet.
	Left     bool
	Duration time.Duration
}

// Success reports whether the attempt exited 0.
func (r Result) Success() bool {
	return r.ExitCode != nil && *r.ExitCode == 0 && !r.TimedOut && !r.OOM
}

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
	cg       *cgroup   // nil: none
	dog      *watchdog // without a cgroup
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
	env, err := environ(spec)
	if err != nil {
		return nil, err
	}
	cg, note := attemptCgroup(spec)
	if note != "" {
		_, _ = syscall.Write(logfd, []byte(note+"\n"))
	}
	argv := wrapperArgv(spec, cg)
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
		cg.remove()
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
	h.cg = cg
	if cg == nil {
		h.dog = startWatchdog(pid, spec.MemoryLimit, h.w.done)
	}
	return h, nil
}

// wrapperArgv is the command line of the attempt's wrapper: one of the
// cgroup wrappers with a cgroup, else one of the plain ones.
func wrapperArgv(spec Spec, cg *cgroup) []string {
	nonce := spec.Nonce
	if nonce != "" {
		nonce += " "
	}
	script, args := argvWrapper, []string{spec.LogPath, nonce}
	if spec.Shell != "" {
		script = shellWrapper
	}
	if cg != nil {
		dirs := cg.dirs()
		script, args = cgroupArgvWrapper, append(args, dirs[0], dirs[1])
		if spec.Shell != "" {
			script = cgroupShellWrapper
		}
	}
	argv := append([]string{"/bin/sh", "-c", script, "/bin/sh"}, args...)
	if spec.Shell != "" {
		return append(argv, spec.Shell)
	}
	return append(argv, spec.Argv...)
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
// cancelled, the whole process group and every process of the attempt's
// cgroup get SIGTERM, then SIGKILL once the grace period has passed with
// processes left. An attempt that ended by itself at that moment (before
// the signal) gets its own outcome.
//
// Once the wrapper has ended, whatever is left of the attempt in its
// process group and its cgroup (a `sleep 1000 &` left behind) gets
// SIGTERM, then SIGKILL after the grace period, without changing the
// attempt's outcome: Wait returns once they are empty, having removed the
// attempt's cgroup.
func (h *Handle) Wait(ctx context.Context) Result {
	s := h.spec
	return supervise(ctx, h.w, supervision{
		logPath: s.LogPath, nonce: s.Nonce, start: h.start,
		timeout: s.Timeout, deadline: h.start.Add(s.Timeout), memory: s.MemoryLimit, grace: s.Grace,
		cg: h.cg, dog: h.dog,
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
// its process group and cgroup. Its exit code is the status its wrapper wrote in the log
// (with a.Nonce); NoStatus says it wrote none (lost). A pid that is not, or
// no longer, the attempt's wrapper counts as gone.
//
// The attempt's cgroup, if it has one, is found again from a (see
// adoptedCgroup): its peak and OOM kills are read from there, and
// a.MemoryLimit, if set, becomes its limit; an attempt that uses more
// already is killed as out of memory. Without a cgroup, the watchdog
// samples it from now on.
func AdoptWait(ctx context.Context, a AdoptSpec) Result {
	if a.Grace <= 0 {
		a.Grace = 10 * time.Second
	}
	start := a.StartedAt
	if start.IsZero() {
		start = time.Now()
	}
	w := watchAdopted(a.PID, a.PIDStart, a.LogPath)
	s := supervision{
		adopted: true, logPath: a.LogPath, nonce: a.Nonce, start: start,
		timeout: a.Timeout, deadline: start.Add(a.Timeout), memory: a.MemoryLimit, grace: a.Grace,
	}
	s.cg = adoptedCgroup(a, !w.isDone())
	switch {
	case s.cg != nil:
		if err := s.cg.setMemoryLimit(a.MemoryLimit); errors.Is(err, errOverLimit) {
			s.overAlready = s.cg.usage()
		}
		if s.memory <= 0 {
			s.memory = s.cg.limit
		}
	case !w.isDone():
		s.dog = startWatchdog(a.PID, a.MemoryLimit, w.done)
	}
	return supervise(ctx, w, s)
}

type supervision struct {
	adopted  bool
	logPath  string
	nonce    string
	start    time.Time
	timeout  time.Duration // 0 = none
	deadline time.Time
	memory   int64 // the limit: 0 = none
	grace    time.Duration
	cg       *cgroup   // the attempt's cgroup; nil: none
	dog      *watchdog // without a cgroup (nil for a wrapper already gone)
	// overAlready (adopted attempts): the limit could not be set on the
	// cgroup, which used this much memory already.
	overAlready int64
}

// supervise waits for the watched wrapper to end, enforcing the limits of s,
// then ends what is left of the attempt and removes its cgroup.
func supervise(ctx context.Context, w *watch, s supervision) Result {
	defer s.cg.remove()
	if s.dog != nil {
		defer s.dog.close()
	}
	var res Result
	var timeout <-chan time.Time
	if s.timeout > 0 {
		t := time.NewTimer(time.Until(s.deadline))
		defer t.Stop()
		timeout = t.C
	}
	stop := make(chan struct{})
	defer close(stop)
	over := s.overLimit(stop)
	stopped := false // we signalled the group to end it
	var lastSignal syscall.Signal
	select {
	case <-w.done:
	case <-timeout:
		if !w.ended() {
			res.TimedOut, stopped = true, true
			lastSignal = stopAll(w, s.cg, s.grace)
		}
	case <-ctx.Done():
		if !w.ended() {
			res.Interrupted, stopped = true, true
			lastSignal = stopAll(w, s.cg, s.grace)
		}
	case used := <-over:
		if !w.ended() || s.cg != nil {
			res.OOM, stopped = true, true
			if s.dog != nil {
				s.dog.kill()
			}
			lastSignal = killAll(w, s.cg)
			AppendLine(s.logPath, s.oomLine(used))
		}
	}
	<-w.done
	if leftovers(w, s.cg) {
		stopAll(w, s.cg, s.grace)
	}
	res.Duration = time.Since(s.start)
	s.memoryOutcome(&res)

	// The attempt's own outcome, when it has one: a timeout or an interrupt
	// that came as it ended by itself does not count.
	if (res.TimedOut || res.Interrupted) && ownExit(w, s, &res) {
		res.TimedOut, res.Interrupted = false, false
		return res
	}
	switch {
	case res.OOM:
		res.Signal = SignalName(syscall.SIGKILL)
	case w.waited():
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

// overLimit delivers the memory used once the attempt is out of memory:
// the kernel killed a process of its cgroup for memory (looked at every
// memoryPoll while it has a limit), or the watchdog saw it over the limit.
func (s *supervision) overLimit(stop <-chan struct{}) <-chan int64 {
	switch {
	case s.overAlready > 0:
		c := make(chan int64, 1)
		c <- s.overAlready
		return c
	case s.cg != nil && s.memory > 0:
		return s.cg.watchOOM(stop)
	case s.dog != nil:
		return s.dog.over
	}
	return nil
}

// memoryOutcome sets the attempt's peak, and whether it ran out of memory
// (its cgroup's OOM kills, which the kernel may have made as it ended),
// writing why in its log if it did.
func (s *supervision) memoryOutcome(res *Result) {
	switch {
	case s.cg != nil:
		res.PeakRSS = s.cg.peak()
		if !res.OOM && !res.TimedOut && !res.Interrupted && s.cg.oomKills() > 0 {
			res.OOM = true
			AppendLine(s.logPath, s.oomLine(res.PeakRSS))
		}
	case s.dog != nil:
		res.PeakRSS = s.dog.maxPSS()
	}
	if res.OOM {
		res.ExitCode, res.NoStatus = nil, false
	}
}

// oomLine is what rewind writes in the log of an attempt out of memory,
// that used the given memory.
func (s *supervision) oomLine(used int64) string {
	switch {
	case s.overAlready > 0:
		return fmt.Sprintf("rewind: attempt killed: its processes used %s of memory, over the pool's limit of %s", formatBytes(used), formatBytes(s.memory))
	case s.cg == nil:
		return fmt.Sprintf("rewind: attempt killed: its processes used %s of memory (PSS), over the pool's limit of %s", formatBytes(used), formatBytes(s.memory))
	case s.memory > 0:
		return fmt.Sprintf("rewind: attempt killed: out of memory in its cgroup (peak %s), over the pool's limit of %s", formatBytes(s.cg.peak()), formatBytes(s.memory))
	}
	return fmt.Sprintf("rewind: attempt killed: out of memory: the kernel killed one of its processes (peak %s)", formatBytes(s.cg.peak()))
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

// groupPoll is how often stopAll looks whether the group is empty;
// groupScan how often at most it scans /proc for live members, when only
// zombies may be left (processes whose parent died are reaped by init, some
// time after they end).
const (
	groupPoll = 5 * time.Millisecond
	groupScan = 50 * time.Millisecond
)

// killPatience bounds how long killAll waits for SIGKILLed processes to
// be gone (one stuck in the kernel may never be).
const killPatience = time.Minute

// stopAll sends SIGTERM to the wrapper's process group and to every
// process of the attempt's cgroup (cg may be nil), gives them the grace
// period to end, then SIGKILLs whatever is left. It returns once the
// wrapper has ended and both are empty, with the last signal sent.
func stopAll(w *watch, cg *cgroup, grace time.Duration) syscall.Signal {
	signalGroup(w.pgid(), syscall.SIGTERM)
	cg.signal(syscall.SIGTERM)
	deadline := time.NewTimer(grace)
	defer deadline.Stop()
	tick := time.NewTicker(groupPoll)
	defer tick.Stop()
	g := group{pgid: w.pgid()}
	for {
		select {
		case <-deadline.C:
			return killAll(w, cg)
		case <-tick.C:
			if w.isDone() && g.gone() && cg.empty() {
				return syscall.SIGTERM
			}
		}
	}
}

// killAll SIGKILLs the wrapper's process group and the attempt's cgroup
// (cg may be nil), again until the wrapper has ended and both are empty
// (or killPatience has passed). It returns SIGKILL.
func killAll(w *watch, cg *cgroup) syscall.Signal {
	g := group{pgid: w.pgid()}
	deadline := time.Now().Add(killPatience)
	for {
		signalGroup(g.pgid, syscall.SIGKILL)
		cg.kill()
		if w.isDone() && g.gone() && cg.empty() || time.Now().After(deadline) {
			break
		}
		time.Sleep(groupPoll)
	}
	<-w.done
	return syscall.SIGKILL
}

// leftovers reports whether processes of an attempt whose wrapper has
// ended are still there, in its process group or its cgroup.
func leftovers(w *watch, cg *cgroup) bool {
	g := group{pgid: w.pgid()}
	return !g.gone() || !cg.empty()
}

// signalGroup sends sig to process group pgid (none for 0).
func signalGroup(pgid int, sig syscall.Signal) {
	if pgid > 1 {
		_ = syscall.Kill(-pgid, sig)
	}
}

// group looks whether a process group has live members: at once when it
// has none at all, else from a scan of /proc at most every groupScan (only
// zombies may be left: processes whose parent died are reaped by init,
// some time after they end).
type group struct {
	pgid    int // 0: none (always gone)
	scanned time.Time
	live    bool
}

// gone reports whether the group has no live member.
func (g *group) gone() bool {
	if g.pgid <= 1 || syscall.Kill(-g.pgid, 0) == syscall.ESRCH {
		return true
	}
	if g.scanned.IsZero() || time.Since(g.scanned) >= groupScan {
		g.scanned = time.Now()
		g.live = len(liveMembers(g.pgid)) > 0
	}
	return !g.live
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

// readProc reads /proc/PID/NAME (see readFile).
func readProc(pid int, name string) (string, error) {
	return readFile("/proc/" + strconv.Itoa(pid) + "/" + name)
}

// readFile reads a file of /proc or of a cgroup with plain system calls
// (open, read, close), cheaper than os.ReadFile for these small files.
func readFile(path string) (string, error) {
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
	for _, script := range [...]string{argvWrapper, shellWrapper, cgroupArgvWrapper, cgroupShellWrapper} {
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
