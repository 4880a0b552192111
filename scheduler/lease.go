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

// LeaseTTL is how long a lease lasts without renewal; the holder renews it
// every LeaseTTL/3.
const LeaseTTL = 30 * time.Second

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
}

// Self returns the Holder of the running process.
func Self() Holder {
	host, _ := os.Hostname()
	pid := os.Getpid()
	start, _ := executor.ProcessStart(pid)
	return Holder{ID: host + ":" + strconv.Itoa(pid) + ":" + strconv.FormatUint(start, 10) + ":" + randomID(), Host: host, PID: pid, PIDStart: start}
}

// AcquireLease takes the scheduler lease for h and returns it (its
// Generation fences every write of this holder). A lease held by a dead
// process of this host is taken over at once; a live holder makes it return
// a *LeaseBusyError, or, with wait, poll until the lease is free.
func AcquireLease(ctx context.Context, st store.Store, h Holder, wait bool) (store.Lease, error) {
	for {
		p := store.AcquireLeaseParams{Name: LeaseName, Holder: h.ID, Host: h.Host, PID: h.PID, PIDStart: h.PIDStart, TTL: LeaseTTL, Now: time.Now()}
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
		if !wait {
			return l, &LeaseBusyError{Lease: l}
		}
		select {
		case <-ctx.Done():
			return l, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// OwnerTTL is how long an owner's heartbeat lasts; it is renewed with the lease.
const OwnerTTL = LeaseTTL

// heartbeat says, in the store, that h is alive: the attempts it owns are
// not taken over while its heartbeat lasts.
func heartbeat(ctx context.Context, st store.Store, h Holder) error {
	return st.Heartbeat(ctx, store.HeartbeatParams{ID: h.ID, Host: h.Host, PID: h.PID, PIDStart: h.PIDStart, TTL: OwnerTTL, Now: time.Now()})
}

func holderAlive(l store.Lease) bool {
	start, err := executor.ProcessStart(l.PID)
	return err == nil && (l.PIDStart == 0 || start == l.PIDStart)
}

// keepLease renews the lease until ctx ends; it calls lost if the lease is
// lost (another rewind took it after it expired).
func keepLease(ctx context.Context, st store.Store, h Holder, lost func(error)) {
	t := time.NewTicker(LeaseTTL / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			err := st.RenewLease(ctx, store.RenewLeaseParams{Name: LeaseName, Holder: h.ID, TTL: LeaseTTL, Now: time.Now()})
			if err == nil {
				err = heartbeat(ctx, st, h)
			}
			if err != nil && !errors.Is(err, context.Canceled) {
				lost(err)
				return
			}
		}
	}
}

// ReleaseLease gives the lease up.
func ReleaseLease(ctx context.Context, st store.Store, h Holder) error {
	return st.ReleaseLease(ctx, store.ReleaseLeaseParams{Name: LeaseName, Holder: h.ID})
}

// randomID is 8 random hex digits: owner ids stay unique when a pid and its
// start time repeat (containers, a rebooted host).
func randomID() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
