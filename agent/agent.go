// Package agent is the host agent: one small process per machine (per boot
// and pid namespace, see lease.SameNode) and state, which says in the state
// that the machine is alive, and settles the attempts of the machine whose
// rewind died.
//
// A rewind's attempts outlive it (they are process groups of their own,
// with a wrapper that writes their exit status to the log). A rewind on
// another machine cannot see those processes: when the rewind that owns
// them dies, it cannot tell a machine that died with it (the attempts are
// gone: run them again) from a rewind that crashed, froze or was cut off on
// a machine that is alive (the attempts run on: running them again runs
// them twice). The agent tells them apart: while its heartbeat lasts, the
// machine is alive and recovery elsewhere leaves its attempts alone; the
// agent records each one once its wrapper has ended (success when it exited
// 0, otherwise lost: the next rewind runs it again without using a retry,
// since the task's retry policy is in the workspace, which the agent does
// not read). Once its heartbeat has expired, the machine is taken for dead.
//
// rewind starts the agent (Ensure) where the state is shared by several
// machines (PostgreSQL) before it starts an attempt; the agent exits on its
// own once its machine has had no running attempt for a while. It decides
// nothing else: it never claims, retries or starts work.
package agent

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/rewind-dev/rewind/executor"
	"github.com/rewind-dev/rewind/lease"
	"github.com/rewind-dev/rewind/store"
)

// Options configure one agent.
type Options struct {
	Store store.Store
	// Self is the agent's machine (lease.Self of the agent process).
	Self lease.Holder
	// TTL is how long its heartbeat lasts (renewed every TTL/3); recovery
	// on another machine takes this machine for dead once it has expired.
	TTL time.Duration
	// Idle: the agent exits after this long with no running attempt of
	// its machine (0: 2 minutes).
	Idle time.Duration
	Log  *slog.Logger
}

// Run heartbeats the machine and settles its orphaned attempts until ctx
// ends or the machine has been idle for Options.Idle. Its owner row is
// removed when it exits.
func Run(ctx context.Context, o Options) error {
	if o.TTL <= 0 {
		o.TTL = lease.DefaultTTL
	}
	if o.Idle <= 0 {
		o.Idle = 2 * time.Minute
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	h := o.Self
	h.ID, h.TTL = h.AgentID(), o.TTL
	if err := lease.Heartbeat(ctx, o.Store, h); err != nil {
		return err
	}
	defer func() { _ = o.Store.RemoveOwner(context.WithoutCancel(ctx), h.ID) }()
	// The heartbeat has a goroutine of its own, renewed every TTL/4 whatever
	// settling takes: a machine under load must not look dead for a moment.
	beat, stopBeat := context.WithCancel(ctx)
	defer stopBeat()
	go func() {
		for {
			select {
			case <-beat.Done():
				return
			case <-time.After(o.TTL / 4):
			}
			if err := lease.Heartbeat(beat, o.Store, h); err != nil && beat.Err() == nil {
				o.Log.Warn("heartbeat failed", "error", err)
			}
		}
	}()
	busy := time.Now()
	failing := time.Time{}
	for {
		n, err := settle(ctx, o.Store, o.Self, o.Log)
		if n > 0 {
			busy = time.Now()
		}
		switch {
		case err == nil:
			failing = time.Time{}
		case ctx.Err() != nil:
			return nil
		case failing.IsZero():
			failing = time.Now()
			o.Log.Warn("the state is unavailable", "error", err)
		case time.Since(failing) > o.Idle:
			return fmt.Errorf("agent: the state has been unavailable for %s: %w", o.Idle, err)
		}
		if time.Since(busy) > o.Idle {
			o.Log.Info("no attempt of this machine is running: the agent exits")
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(o.TTL / 3):
		}
	}
}

// settle looks at the running attempts of this machine: those whose owner
// died and whose wrapper has ended are recorded. It returns how many of
// this machine's attempts are still running.
func settle(ctx context.Context, st store.Store, self lease.Holder, log *slog.Logger) (int, error) {
	running, err := st.RunningAttempts(ctx)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, a := range running {
		if a.JobID != "" || !self.SameNode(a.Owner, a.Host) {
			continue // a Slurm job (Slurm knows), or an attempt of another machine
		}
		n++
		alive, err := ownerAlive(ctx, st, a.Owner)
		if err != nil {
			return n, err
		}
		if alive {
			continue // its rewind supervises it
		}
		pid := a.PID
		if pid == 0 {
			pid = executor.FindWrapper(a.LogPath)
		}
		if executor.Alive(pid, a.LogPath) {
			continue // runs on; this heartbeat keeps it from being run twice
		}
		p := store.FinishAttemptParams{AttemptID: a.ID, State: store.AttemptLost, TaskState: store.TaskScheduled, Now: time.Now()}
		if code, ok := executor.ReadStatusNonce(a.LogPath, a.Nonce); ok {
			p.ExitCode = &code
			if code == 0 {
				p.State, p.TaskState = store.AttemptSuccess, store.TaskSuccess
			}
		}
		if err := st.FinishAttempt(ctx, p); err != nil && !errors.Is(err, store.ErrConflict) {
			return n, err
		}
		log.Info("recorded an attempt whose rewind died", "pipeline", a.Pipeline, "task", a.Task, "try", a.TryNumber, "state", p.State)
	}
	return n, nil
}

// ownerAlive says whether the rewind execution that owns an attempt of
// this machine is alive: its process (pid and start time) exists and its
// heartbeat lasts on the state's clock. A process that exists with an
// expired heartbeat is frozen (SIGSTOP), cut off, or has moved on to
// another execution: the attempt is no longer its to record.
func ownerAlive(ctx context.Context, st store.Store, owner string) (bool, error) {
	if owner == "" {
		return false, nil
	}
	ow, err := st.GetOwner(ctx, owner)
	if errors.Is(err, store.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if start, err := executor.ProcessStart(ow.PID); err != nil || (ow.PIDStart != 0 && start != ow.PIDStart) {
		return false, nil
	}
	now, err := st.Now(ctx)
	if err != nil {
		return false, err
	}
	return ow.ExpiresAt.After(now), nil
}

// Alive says whether the agent of the machine that ran an attempt (whose
// owner id is owner, on host) has a heartbeat that lasts, on the state's
// clock: the machine is alive, and its attempts are not to be run again.
func Alive(ctx context.Context, st store.Store, owner, host string) (bool, error) {
	id, ok := lease.AgentIDOf(owner, host)
	if !ok {
		return false, nil // a rewind before agents
	}
	ag, err := st.GetOwner(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	now, err := st.Now(ctx)
	if err != nil {
		return false, err
	}
	return ag.ExpiresAt.After(now), nil
}

// Ensure starts the agent of this machine for the state dsn unless it
// runs: command is the rewind binary and its arguments up to the agent's
// ("rewind agent"), to which Ensure adds --ttl. The agent gets the DSN in
// its environment (never in argv), runs in a session of its own and writes
// its log to logPath. One agent per machine and state: it holds a lock
// (flock) named after both while it runs.
func Ensure(dsn string, command []string, ttl time.Duration, logPath string) error {
	lock := LockPath(dsn, lease.Self())
	if held, err := Locked(lock); err != nil || held {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(logPath), 0o700); err != nil {
		return err
	}
	logf, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer logf.Close()
	null, err := os.Open(os.DevNull)
	if err != nil {
		return err
	}
	defer null.Close()
	args := append(append([]string{}, command[1:]...), "--ttl", ttl.String(), "--lock", lock)
	cmd := exec.Command(command[0], args...)
	cmd.Env = append(agentEnv(os.Environ()), store.EnvState+"="+dsn)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = null, logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("agent: start: %w", err)
	}
	go func() { _ = cmd.Wait() }() // reaped if it exits while this rewind runs
	return nil
}

// agentEnv is the agent's environment, from rewind's (from): the agent is
// rewind itself and reads what rewind reads to reach the state (the
// PostgreSQL client's PG* variables, REWIND_HOST, TMPDIR where its lock
// is), but not what only the web view and the workspace's commands use:
// REWIND_UI_TOKEN, and the workspace's variables (REWIND_VAR_*, sensitive
// ones included), since the agent never reads the workspace.
func agentEnv(from []string) []string {
	out := make([]string, 0, len(from))
	for _, kv := range from {
		k, _, _ := strings.Cut(kv, "=")
		if k == "REWIND_UI_TOKEN" || strings.HasPrefix(k, "REWIND_VAR_") || strings.HasPrefix(k, "REWIND_SECRET_") {
			continue
		}
		out = append(out, kv)
	}
	return out
}

// LockPath is the lock the agent of this machine for the state dsn holds.
func LockPath(dsn string, self lease.Holder) string {
	sum := sha256.Sum256([]byte(dsn + "\x00" + self.AgentID()))
	return filepath.Join(os.TempDir(), fmt.Sprintf("rewind-agent-%x.lock", sum[:8]))
}

// Locked says whether an agent holds the lock at path.
func Locked(path string) (bool, error) {
	fd, err := Lock(path)
	if errors.Is(err, errLocked) {
		return true, nil
	}
	if err != nil {
		return false, err
	}
	_ = syscall.Close(fd)
	return false, nil
}

var errLocked = errors.New("agent: another agent holds the lock")

// Lock takes the lock at path (held until fd is closed or the process
// exits), or fails with an error that says another holds it.
func Lock(path string) (int, error) {
	fd, err := syscall.Open(path, syscall.O_RDWR|syscall.O_CREAT|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return -1, fmt.Errorf("agent: lock %s: %w", path, err)
	}
	if err := syscall.Flock(fd, syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		_ = syscall.Close(fd)
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return -1, errLocked
		}
		return -1, fmt.Errorf("agent: lock %s: %w", path, err)
	}
	return fd, nil
}

// ErrLocked reports whether err says that another agent holds the lock.
func ErrLocked(err error) bool { return errors.Is(err, errLocked) }
