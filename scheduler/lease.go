package scheduler

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/rewind-dev/rewind/executor"
	"github.com/rewind-dev/rewind/store"
)

// LeaseName is the lease that one executing rewind holds on a state.
const LeaseName = "scheduler"

// LeaseTTL is how long a lease (and an owner's heartbeat) lasts without
// renewal by default; the holder renews it every TTL/3.
const LeaseTTL = 30 * time.Second

// EnvHost names the environment variable that overrides the host name this
// rewind gives itself in leases and attempt owners (default: the kernel's
// host name). Two rewinds with the same host name must see each other's
// processes: a lease or attempt of a dead process of "this host" is taken
// over at once, one of another host only when its heartbeat has expired.
const EnvHost = "REWIND_HOST"

// LeaseBusyError says that another live rewind holds the state's lease.
type LeaseBusyError struct{ Lease store.Lease }

func (e *LeaseBusyError) Error() string {
	return fmt.Sprintf("another rewind (pid %d on %s) is running on this state until it finishes or its lease expires at %s; pass --wait to wait for it",
		e.Lease.PID, e.Lease.Host, e.Lease.ExpiresAt.Local().Format(time.RFC3339))
}

// Holder identifies this process as a lease holder.
type Holder struct {
	ID       string
	Host     string
	PID      int
	PIDStart uint64
	// TTL is how long its leases and its heartbeat last without renewal
	// (0: LeaseTTL). A standby takes over within it after this holder dies
	// on another host.
	TTL time.Duration
}

func (h Holder) ttl() time.Duration {
	if h.TTL > 0 {
		return h.TTL
	}
	return LeaseTTL
}

// Self returns the Holder of the running process.
func Self() Holder {
	host := os.Getenv(EnvHost)
	if host == "" {
		host, _ = os.Hostname()
	}
	pid := os.Getpid()
	start, _ := executor.ProcessStart(pid)
	return Holder{ID: host + ":" + strconv.Itoa(pid) + ":" + strconv.FormatUint(start, 10) + ":" + randomID(), Host: host, PID: pid, PIDStart: start}
}

// AcquireLease takes the scheduler lease for h and returns it (its
// Generation fences every write of this holder). A lease held by a dead
// process of this host is taken over at once; a live holder makes it return
// a *LeaseBusyError, or, with wait, poll until the lease is free.
func AcquireLease(ctx context.Context, st store.Store, h Holder, wait bool) (store.Lease, error) {
	poll := time.Duration(0)
	if wait {
		poll = 200 * time.Millisecond
	}
	return acquire(ctx, st, LeaseName, h, poll, nil)
}

// acquire takes the lease name for h. With poll 0 it tries once (a live
// holder is a *LeaseBusyError); otherwise it tries every poll until it holds
// the lease or ctx ends, calling busy (when set) with the holder each time
// it finds another one.
func acquire(ctx context.Context, st store.Store, name string, h Holder, poll time.Duration, busy func(store.Lease)) (store.Lease, error) {
	for {
		p := store.AcquireLeaseParams{Name: name, Holder: h.ID, Host: h.Host, PID: h.PID, PIDStart: h.PIDStart, TTL: h.ttl(), Now: time.Now()}
		l, ok, err := st.AcquireLease(ctx, p)
		if err != nil {
			return l, fmt.Errorf("acquire lease: %w", err)
		}
		if ok {
			return l, nil
		}
		if l.Host == h.Host && !holderAlive(l) {
			p.Stale = l.Holder
			if l, ok, err = st.AcquireLease(ctx, p); err != nil {
				return l, fmt.Errorf("acquire lease: %w", err)
			} else if ok {
				return l, nil
			}
			continue
		}
		if poll <= 0 {
			return l, &LeaseBusyError{Lease: l}
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

// heartbeat says, in the store, that h is alive: the attempts it owns are
// not taken over while its heartbeat lasts.
func heartbeat(ctx context.Context, st store.Store, h Holder) error {
	return st.Heartbeat(ctx, store.HeartbeatParams{ID: h.ID, Host: h.Host, PID: h.PID, PIDStart: h.PIDStart, TTL: h.ttl(), Now: time.Now()})
}

func holderAlive(l store.Lease) bool {
	start, err := executor.ProcessStart(l.PID)
	return err == nil && (l.PIDStart == 0 || start == l.PIDStart)
}

// keepLease renews the lease name (and, with beat, h's heartbeat) every
// TTL/3 until ctx ends. A renewal that fails because the state is
// unavailable is tried again every TTL/10; lost is called when the lease is
// lost: another rewind took it, or no renewal succeeded for half the TTL
// (so the holder stops, and its attempts get their grace period, before
// another can take over).
func keepLease(ctx context.Context, st store.Store, name string, h Holder, beat bool, lost func(error)) {
	ttl := h.ttl()
	lastOK := time.Now()
	wait := ttl / 3
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		now := time.Now()
		err := st.RenewLease(ctx, store.RenewLeaseParams{Name: name, Holder: h.ID, TTL: ttl, Now: now})
		if err == nil && beat {
			err = heartbeat(ctx, st, h)
		}
		switch {
		case err == nil:
			lastOK, wait = now, ttl/3
		case ctx.Err() != nil:
			return
		case errors.Is(err, store.ErrConflict) || time.Since(lastOK) >= ttl/2:
			lost(err)
			return
		default:
			wait = ttl / 10 // the state is unavailable for now: try again soon
		}
	}
}

// ReleaseLease gives the lease up.
func ReleaseLease(ctx context.Context, st store.Store, h Holder) error {
	return st.ReleaseLease(ctx, store.ReleaseLeaseParams{Name: LeaseName, Holder: h.ID})
}

// releaseLease gives the lease name up.
func releaseLease(ctx context.Context, st store.Store, name string, h Holder) error {
	return st.ReleaseLease(ctx, store.ReleaseLeaseParams{Name: name, Holder: h.ID})
}

// randomID is 8 random hex digits: owner ids stay unique when a pid and its
// start time repeat (containers, a rebooted host).
func randomID() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
