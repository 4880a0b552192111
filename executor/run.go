package executor

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Command is a short-lived process that rewind runs for itself, not a task
// attempt: a skew probe, a requires check, a notify command, a pool's setup
// or teardown. Run gives it the same process rules as an attempt: a process
// group of its own, stdin /dev/null unless given, a timeout and cancellation
// as SIGTERM to the group then SIGKILL after the grace period, and nothing of
// the group left once Run returns.
type Command struct {
	Argv []string
	Dir  string
	// Env is the complete environment (nil: rewind's own).
	Env []string
	// Stdin is the command's input (nil: /dev/null).
	Stdin io.Reader
	// LogPath, when set, receives stdout and stderr (appended; created with
	// its directory; never through a symbolic link). Otherwise both are
	// captured in Outcome.Stdout and Outcome.Stderr, bounded by Capture.
	LogPath string
	// Capture is how many bytes of each stream are kept (default 64 KiB):
	// the first and the last halves, with a marker between them.
	Capture int
	Timeout time.Duration // 0 = none
	Grace   time.Duration // SIGTERM to SIGKILL (default 5s)
}

// Outcome is how a Command ended.
type Outcome struct {
	ExitCode    int    // -1 when killed by a signal
	Signal      string // "killed", "terminated", ... when killed by a signal
	TimedOut    bool
	Interrupted bool // ctx was cancelled
	// Stdout and Stderr are the captured output (without LogPath).
	Stdout, Stderr []byte
	Duration       time.Duration
}

// Success reports whether the command exited 0 by itself.
func (o Outcome) Success() bool { return o.ExitCode == 0 && !o.TimedOut && !o.Interrupted }

// Describe says how the command ended, for an error message: "exited 3",
// "killed by signal terminated", "timed out after 1m0s", "interrupted".
func (o Outcome) Describe() string {
	switch {
	case o.TimedOut:
		return "timed out after " + o.Duration.Round(time.Millisecond).String()
	case o.Interrupted:
		return "interrupted"
	case o.Signal != "":
		return "killed by signal " + o.Signal
	default:
		return fmt.Sprintf("exited %d", o.ExitCode)
	}
}

// pipeDelay is how long Run waits, once the command's first process has
// exited, for a process that inherited its stdout or stderr to close them:
// then the output is taken as it is and the rest of the group is stopped.
const pipeDelay = time.Second

var devNullFile = sync.OnceValues(func() (*os.File, error) { return os.Open(os.DevNull) })

// Run runs c to its end. The error is for a command that could not start
// (its outcome is then meaningless); a command that ran and failed returns a
// nil error and an Outcome that says how it ended.
func Run(ctx context.Context, c Command) (Outcome, error) {
	var out Outcome
	if len(c.Argv) == 0 || c.Argv[0] == "" {
		return out, errors.New("empty command")
	}
	if c.Grace <= 0 {
		c.Grace = 5 * time.Second
	}
	if c.Capture <= 0 {
		c.Capture = 64 << 10
	}
	if c.Dir != "" {
		if err := checkDir(c.Dir); err != nil {
			return out, err
		}
	}
	cmd := exec.Command(c.Argv[0], c.Argv[1:]...)
	cmd.Dir, cmd.Env = c.Dir, c.Env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.WaitDelay = pipeDelay
	if c.Stdin != nil {
		cmd.Stdin = c.Stdin
	} else {
		null, err := devNullFile()
		if err != nil {
			return out, fmt.Errorf("open %s: %w", os.DevNull, err)
		}
		cmd.Stdin = null
	}
	var stdout, stderr *boundedBuffer
	if c.LogPath != "" {
		f, err := openAppend(c.LogPath)
		if err != nil {
			return out, err
		}
		defer f.Close()
		cmd.Stdout, cmd.Stderr = f, f
	} else {
		stdout, stderr = &boundedBuffer{max: c.Capture}, &boundedBuffer{max: c.Capture}
		cmd.Stdout, cmd.Stderr = stdout, stderr
	}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		var notFound *exec.Error // names the command already
		if errors.As(err, &notFound) {
			return out, err
		}
		return out, fmt.Errorf("start %s: %w", c.Argv[0], err)
	}
	pgid := cmd.Process.Pid

	exited := make(chan struct{})
	stopped := make(chan struct{}) // closed once the stopper is done
	var timedOut, interrupted bool
	go func() {
		defer close(stopped)
		var timeout <-chan time.Time
		if c.Timeout > 0 {
			t := time.NewTimer(c.Timeout)
			defer t.Stop()
			timeout = t.C
		}
		select {
		case <-exited:
			return
		case <-timeout:
			timedOut = true
		case <-ctx.Done():
			interrupted = true
		}
		_ = syscall.Kill(-pgid, syscall.SIGTERM)
		t := time.NewTimer(c.Grace)
		defer t.Stop()
		select {
		case <-exited:
		case <-t.C:
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
		}
	}()
	err := cmd.Wait()
	close(exited)
	<-stopped
	// Whatever the command left in its group (a background child, a
	// grandchild that held the output open) ends with it.
	EmptyGroup(pgid, c.Grace)

	out.Duration = time.Since(start)
	out.TimedOut, out.Interrupted = timedOut, interrupted
	if stdout != nil {
		out.Stdout, out.Stderr = stdout.Bytes(), stderr.Bytes()
	}
	out.ExitCode = -1
	if st := cmd.ProcessState; st != nil {
		ws, _ := st.Sys().(syscall.WaitStatus)
		if ws.Signaled() {
			out.Signal = SignalName(ws.Signal())
		} else {
			out.ExitCode = ws.ExitStatus()
		}
	}
	var exitErr *exec.ExitError
	if err != nil && !errors.As(err, &exitErr) && !errors.Is(err, exec.ErrWaitDelay) {
		return out, fmt.Errorf("%s: %w", c.Argv[0], err)
	}
	return out, nil
}

// EmptyGroup ends what is left of process group pgid: SIGTERM, then
// SIGKILL once grace has passed with live members. It returns once no live
// process is left in the group.
func EmptyGroup(pgid int, grace time.Duration) {
	if pgid <= 1 || syscall.Kill(-pgid, 0) == syscall.ESRCH {
		return
	}
	if len(liveMembers(pgid)) == 0 {
		return
	}
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	deadline := time.Now().Add(grace)
	for time.Now().Before(deadline) {
		time.Sleep(groupScan)
		if syscall.Kill(-pgid, 0) == syscall.ESRCH || len(liveMembers(pgid)) == 0 {
			return
		}
	}
	for i := 0; i < 100; i++ {
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		if syscall.Kill(-pgid, 0) == syscall.ESRCH || len(liveMembers(pgid)) == 0 {
			return
		}
		time.Sleep(groupPoll)
	}
}

// checkDir says clearly that a command's working directory is missing,
// rather than the "fork/exec /bin/sh: no such file or directory" of a
// failed chdir.
func checkDir(dir string) error {
	st, err := os.Stat(dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return fmt.Errorf("workdir %s does not exist", dir)
	case err != nil:
		return fmt.Errorf("workdir: %w", err)
	case !st.IsDir():
		return fmt.Errorf("workdir %s is not a directory", dir)
	}
	return nil
}

// openAppend opens a log of rewind's own for appending, creating it and its
// directory, private to rewind's user (0600 in 0700 directories); a
// symbolic link at its path is refused.
func openAppend(path string) (*os.File, error) {
	const flags = os.O_CREATE | os.O_WRONLY | os.O_APPEND | syscall.O_NOFOLLOW
	f, err := os.OpenFile(path, flags, 0o600)
	if errors.Is(err, os.ErrNotExist) {
		if err := os.MkdirAll(dirOf(path), 0o700); err != nil {
			return nil, fmt.Errorf("log directory: %w", err)
		}
		f, err = os.OpenFile(path, flags, 0o600)
	}
	if err != nil {
		return nil, fmt.Errorf("open log: %w", err)
	}
	return f, nil
}

func dirOf(path string) string {
	if i := strings.LastIndexByte(path, '/'); i > 0 {
		return path[:i]
	}
	return "."
}

// boundedBuffer keeps the first and the last max/2 bytes written to it.
type boundedBuffer struct {
	mu      sync.Mutex
	max     int
	head    []byte
	tail    []byte // a window of the latest bytes past head, at most max/2
	skipped int64  // bytes dropped between head and tail
}

func (b *boundedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := len(p)
	half := b.max / 2
	if room := half - len(b.head); room > 0 {
		k := min(room, len(p))
		b.head = append(b.head, p[:k]...)
		p = p[k:]
	}
	b.tail = append(b.tail, p...)
	if over := len(b.tail) - (b.max - half); over > 0 {
		b.skipped += int64(over)
		b.tail = append(b.tail[:0], b.tail[over:]...)
	}
	return n, nil
}

// Bytes is what was kept, with a marker where bytes were dropped.
func (b *boundedBuffer) Bytes() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out bytes.Buffer
	out.Write(b.head)
	if b.skipped > 0 {
		fmt.Fprintf(&out, "\n[... %d bytes omitted ...]\n", b.skipped)
	}
	out.Write(b.tail)
	return out.Bytes()
}
