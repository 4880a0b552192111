// Package lease says which rewind may act on a state: the identity of a
// rewind process (Holder: host, pid, its start time), the execution lease
// whose generation fences every write of an execution, the leader lease
// that elects the active `rewind scheduler`, and the heartbeat that tells
// others an owner of attempts is alive. Acquire, keep (renew) and release
// are guarded statements of package store.
//
// It decides nothing about runs or tasks, and starts no process.
package lease

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/rewind-dev/rewind/executor"
	"github.com/rewind-dev/rewind/store"
)

// Execution is the lease that one executing rewind holds on a state.
const Execution = "scheduler"

// DefaultTTL is how long a lease (and an owner's Heartbeat) lasts without
// renewal by default; the holder renews it every TTL/8 (RenewEvery).
const DefaultTTL = 30 * time.Second

// EnvHost names the environment variable that overrides the host name this
// rewind gives itself in leases and attempt owners (default: the kernel's
// host name). Two rewinds with the same host name must see each other's
// processes: a lease or attempt of a dead process of "this host" is taken
// over at once, one of another host only when its Heartbeat has expired.
const EnvHost = "REWIND_HOST"

// BusyError says that another live rewind holds the state's lease.
type BusyError struct{ Lease store.Lease }

func (e *BusyError) Error() string {
	return fmt.Sprintf("another rewind (pid %d on %s) is running on this state until it finishes or its lease expires at %s; pass --wait to wait for it",
		e.Lease.PID, e.Lease.Host, e.Lease.ExpiresAt.Local().Format(time.RFC3339))
}

// Leader is the lease that elects the active `rewind scheduler`. It
// elects; it does not fence: every write of an execution is fenced by the
// execution lease, which the active scheduler takes for each execution.
const Leader = "leader"

// Holder identifies this process as a lease holder.
type Holder struct {
	ID       string
	Host     string
	PID      int
	PIDStart uint64
	// TTL is how long its leases and its Heartbeat last without renewal
	// (0: DefaultTTL). A standby takes over within it after this holder dies
	// on another host.
	TTL time.Duration
	// node is nodeID() for Self; "" for a holder made by hand (tests).
	node string
}

// Lifetime is how long h's leases and heartbeat last without renewal.
func (h Holder) Lifetime() time.Duration {
	if h.TTL > 0 {
		return h.TTL
	}
	return DefaultTTL
}

// Self returns the Holder of the running process.
func Self() Holder {
	host := os.Getenv(EnvHost)
	if host == "" {
		host, _ = os.Hostname()
	}
	pid := os.Getpid()
	start, _ := executor.ProcessStart(pid)
	node := nodeID()
	return Holder{
		ID:   host + ":" + strconv.Itoa(pid) + ":" + strconv.FormatUint(start, 10) + ":" + node + ":" + randomID(),
		Host: host, PID: pid, PIDStart: start, node: node,
	}
}

// nodeID names where this process's pids mean something: the boot (pids
// and start times repeat after a reboot) and the pid namespace (containers
// that share a host name, with host networking, each have their own pids).
// It is part of the holder id, and so of every lease and owner row.
func nodeID() string {
	boot, _ := os.ReadFile("/proc/sys/kernel/random/boot_id")
	b := strings.ReplaceAll(strings.TrimSpace(string(boot)), "-", "")
	if len(b) > 12 {
		b = b[:12]
	}
	ns, _ := os.Readlink("/proc/self/ns/pid") // "pid:[4026531836]"
	ns = strings.TrimSuffix(strings.TrimPrefix(ns, "pid:["), "]")
	if b == "" {
		b = "0"
	}
	if ns == "" {
		ns = "0"
	}
	return b + "-" + ns
}

// nodeOf is the node part of a holder id ("" for ids of rewinds before it).
func nodeOf(id string) string {
	id, _, _ = strings.Cut(id, "/")
	parts := strings.Split(id, ":")
	if len(parts) < 5 || !strings.Contains(parts[len(parts)-2], "-") {
		return ""
	}
	return parts[len(parts)-2]
}

// AgentID is the owner id of the host agent (package agent) of h's
// machine: its host name and node.
func (h Holder) AgentID() string { return h.Host + ":0:0:" + h.node + ":agent" }

// AgentIDOf is the owner id of the host agent of the machine where the
// holder id owner, recorded on host, runs; false for ids of rewinds before
// nodes, whose machine has no agent.
func AgentIDOf(owner, host string) (string, bool) {
	n := nodeOf(owner)
	if n == "" {
		return "", false
	}
	return host + ":0:0:" + n + ":agent", true
}

// SameNode says whether the holder id (of a lease, an owner, an attempt's
// owner) recorded on host is of a process whose pid h can look up: the
// same host name, boot and pid namespace. Ids without a node (older
// rewinds) count as of the host they name.
func (h Holder) SameNode(id, host string) bool {
	if host != h.Host {
		return false
	}
	n := nodeOf(id)
	return n == "" || h.node == "" || n == h.node
}

// ForExecution is h with an identity of its own for one execution: the
// owner of the attempts that execution claims. A long-lived process (rewind
// scheduler) runs one execution after another; when one stops on an error,
// the next one takes its attempts over (adopts them where they run) rather
// than take them for its own.
func (h Holder) ForExecution() Holder {
	h.ID += "/" + randomID()
	return h
}

// Process says whether a holder (a lease's, an owner's) is an execution of
// the process h is one of: it is over unless it is h itself, since a process
// runs one execution at a time.
func (h Holder) Process(id, host string, pid int, pidStart uint64) bool {
	return id != h.ID && h.SameNode(id, host) && pid == h.PID && pidStart == h.PIDStart && pid != 0
}

// AcquireExecution takes the scheduler lease for h and returns it (its
// Generation fences every write of this holder). A lease held by a dead
// process of this host is taken over at once; a live holder makes it return
// a *BusyError, or, with wait, poll until the lease is free.
func AcquireExecution(ctx context.Context, st store.Store, h Holder, wait bool) (store.Lease, error) {
	poll := time.Duration(0)
	if wait {
		poll = 200 * time.Millisecond
	}
	return Acquire(ctx, st, Execution, h, poll, nil)
}

// Probe checks that h could execute on st now, as a command that executes
// later checks it first: it takes the execution lease and gives it back at
// once. A live holder is a *BusyError; with wait, waiting (when set) is
// told once who holds it, and Probe waits until the lease is free or ctx
// ends (then the error is ctx's).
func Probe(ctx context.Context, st store.Store, h Holder, wait bool, waiting func(store.Lease)) error {
	_, err := AcquireExecution(ctx, st, h, false)
	var busy *BusyError
	if errors.As(err, &busy) && wait {
		if waiting != nil {
			waiting(busy.Lease)
		}
		_, err = AcquireExecution(ctx, st, h, true)
	}
	if err != nil {
		if errors.As(err, &busy) {
			return busy
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return err
	}
	return ReleaseExecution(context.WithoutCancel(ctx), st, h)
}

// Acquire takes the lease name for h. With poll 0 it tries once (a live
// holder is a *BusyError); otherwise it tries every poll until it holds
// the lease or ctx ends, calling busy (when set) with the holder each time
// it finds another one.
func Acquire(ctx context.Context, st store.Store, name string, h Holder, poll time.Duration, busy func(store.Lease)) (store.Lease, error) {
	for {
		p := store.AcquireLeaseParams{Name: name, Holder: h.ID, Host: h.Host, PID: h.PID, PIDStart: h.PIDStart, TTL: h.Lifetime()}
		l, ok, err := st.AcquireLease(ctx, p)
		if err != nil {
			return l, fmt.Errorf("acquire lease: %w", err)
		}
		if ok {
			return l, nil
		}
		if h.SameNode(l.Holder, l.Host) && (!holderAlive(l) || h.Process(l.Holder, l.Host, l.PID, l.PIDStart)) {
			p.Stale = l.Holder
			if l, ok, err = st.AcquireLease(ctx, p); err != nil {
				return l, fmt.Errorf("acquire lease: %w", err)
			} else if ok {
				return l, nil
			}
			continue
		}
		if poll <= 0 {
			return l, &BusyError{Lease: l}
		}
		if busy != nil {
			busy(l)
		}
		select {
		case <-ctx.Done():
			return l, ctx.Err()
		case <-time.After(poll):
		}
	}
}

// Heartbeat says, in the store, that h is alive: the attempts it owns are
// not taken over while its Heartbeat lasts.
func Heartbeat(ctx context.Context, st store.Store, h Holder) error {
	return st.Heartbeat(ctx, store.HeartbeatParams{ID: h.ID, Host: h.Host, PID: h.PID, PIDStart: h.PIDStart, TTL: h.Lifetime()})
}

func holderAlive(l store.Lease) bool {
	start, err := executor.ProcessStart(l.PID)
	return err == nil && (l.PIDStart == 0 || start == l.PIDStart)
}

// RenewEvery is how often a holder renews a lease of the given TTL: four
// renewals fit in the half TTL after which it steps down, so that one
// slow answer of a loaded server (or one lost) does not end a leadership.
func RenewEvery(ttl time.Duration) time.Duration { return ttl / 8 }

// Keep renews the lease name (and, with beat, h's Heartbeat) every
// RenewEvery(TTL) until ctx ends. A renewal that fails because the state is
// unavailable is tried again every TTL/20; lost is called when the lease is
// lost: another rewind took it, or no renewal succeeded for half the TTL
// (so the holder stops, and its attempts get their grace period, before
// another can take over).
//
// Half the TTL is kept by a timer of this process, not by the state's
// answers: every renewal has the time left until then as its deadline, and
// a renewal that does not return by then (a partition that drops packets,
// a server that hangs) does not hold the step-down back.
func Keep(ctx context.Context, st store.Store, name string, h Holder, beat bool, lost func(error)) {
	ttl := h.Lifetime()
	lastOK := time.Now() // when the last renewal that succeeded was sent
	stepDown := time.NewTimer(ttl / 2)
	defer stepDown.Stop()
	wait := RenewEvery(ttl)
	var lastErr error // of the renewals since the last that succeeded
	stop := func(how string) {
		err := fmt.Errorf("no renewal of the %s lease succeeded for %s (half its TTL)%s", name, ttl/2, how)
		if lastErr != nil {
			err = fmt.Errorf("%w: %w", err, lastErr)
		}
		lost(err)
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-stepDown.C:
			stop("")
			return
		case <-time.After(wait):
		}
		sent := time.Now()
		rctx, cancel := context.WithDeadline(ctx, lastOK.Add(ttl/2))
		done := make(chan error, 1)
		go func() {
			err := st.RenewLease(rctx, store.RenewLeaseParams{Name: name, Holder: h.ID, TTL: ttl})
			if err == nil && beat {
				err = Heartbeat(rctx, st, h)
			}
			done <- err
		}()
		var err error
		select {
		case err = <-done:
		case <-stepDown.C:
			cancel()
			stop(": the state did not answer")
			return
		case <-ctx.Done():
			cancel()
			return
		}
		cancel()
		switch {
		case err == nil:
			// The next renewal is sent RenewEvery after this one was:
			// a slow answer does not push it later.
			lastOK, wait, lastErr = sent, max(0, RenewEvery(ttl)-time.Since(sent)), nil
			if !stepDown.Stop() {
				select {
				case <-stepDown.C:
				default:
				}
			}
			stepDown.Reset(time.Until(sent.Add(ttl / 2)))
		case ctx.Err() != nil:
			return
		case errors.Is(err, store.ErrConflict):
			lost(err)
			return
		case time.Since(lastOK) >= ttl/2:
			lastErr = err
			stop("")
			return
		default:
			lastErr = err
			wait = ttl / 20
		}
	}
}

// ReleaseExecution gives the lease up.
func ReleaseExecution(ctx context.Context, st store.Store, h Holder) error {
	return st.ReleaseLease(ctx, store.ReleaseLeaseParams{Name: Execution, Holder: h.ID})
}

// Release gives the lease name up.
func Release(ctx context.Context, st store.Store, name string, h Holder) error {
	return st.ReleaseLease(ctx, store.ReleaseLeaseParams{Name: name, Holder: h.ID})
}

// randomID is 8 random hex digits: owner ids stay unique when a pid and its
// start time repeat (containers, a rebooted host).
func randomID() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
