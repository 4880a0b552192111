package executor

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

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
	left := false
	defer func() {
		if left {
			s.cg.release()
		} else {
			s.cg.recycle()
		}
	}()
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
	// Runs before the cgroup is recycled: the OOM watch reads the cgroup
	// until it has stopped.
	stop := make(chan struct{})
	var watching sync.WaitGroup
	defer func() {
		close(stop)
		watching.Wait()
	}()
	over := s.overLimit(stop, &watching)
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
		if w.ended() {
			break
		}
		if errors.Is(context.Cause(ctx), ErrLeave) {
			// Left running: the next rewind adopts it, with its limits.
			left = true
			return Result{Left: true, Duration: time.Since(s.start)}
		}
		res.Interrupted, stopped = true, true
		grace := s.grace
		if st := (*Stop)(nil); errors.As(context.Cause(ctx), &st) && st.Grace < grace {
			grace = st.Grace
		}
		lastSignal = stopAll(w, s.cg, grace)
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
func (s *supervision) overLimit(stop <-chan struct{}, watching *sync.WaitGroup) <-chan int64 {
	switch {
	case s.overAlready > 0:
		c := make(chan int64, 1)
		c <- s.overAlready
		return c
	case s.cg != nil && s.memory > 0:
		return s.cg.watchOOM(stop, watching)
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
	_ = os.MkdirAll(filepath.Dir(path), 0o700)
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
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
