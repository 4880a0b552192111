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
// ends is found and killed there; under cgroup v1 an emptied cgroup is kept
// as a spare and renamed for a later attempt rather than made anew.
// Without cgroups, a watchdog samples the
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

// ErrLeave, as the cause of the cancellation of the context given to Wait
// (context.WithCancelCause), leaves the attempt running: Wait returns at
// once with Result.Left, without signalling it or removing its cgroup, and
// the next rewind adopts it. Any other cancellation stops the attempt.
var ErrLeave = errors.New("executor: attempt left running")

// Stop, as the cause of the cancellation of the context given to Wait,
// stops the attempt with at most Grace between SIGTERM and SIGKILL, when
// that is less than its own grace: a rewind that lost its lease must have
// stopped its attempts before another can take over.
type Stop struct {
	Grace time.Duration
	Err   error
}

func (s *Stop) Error() string { return s.Err.Error() }
func (s *Stop) Unwrap() error { return s.Err }

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
	// Left: rewind stopped waiting and the attempt runs on (a Slurm job
	// waited for with Leave, or any attempt whose Wait was cancelled with
	// ErrLeave); its outcome is not known yet.
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
// needed: private to rewind's user (0600, directories 0700), since what an
// attempt prints may be a credential.
func openLog(path string) (int, error) {
	// O_NOFOLLOW: a symbolic link planted at a future log path is refused,
	// never followed (its target would be truncated).
	const flags = syscall.O_CREAT | syscall.O_WRONLY | syscall.O_TRUNC | syscall.O_APPEND | syscall.O_CLOEXEC | syscall.O_NOFOLLOW
	fd, err := syscall.Open(path, flags, 0o600)
	if err == syscall.ENOENT {
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			return -1, fmt.Errorf("log directory: %w", err)
		}
		fd, err = syscall.Open(path, flags, 0o600)
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
