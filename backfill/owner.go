package backfill

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/rewind-dev/rewind/lease"
	"github.com/rewind-dev/rewind/store"
)

// OwnerLease names the lease that the rewind applying (or rolling back)
// backfill id holds through every phase: one owner at a time runs its
// validation, cutover, rebuild and report.
func OwnerLease(id string) string { return "backfill:" + id }

// OwnedError says that another live rewind owns the backfill.
type OwnedError struct {
	ID    string
	Lease store.Lease
}

func (e *OwnedError) Error() string {
	return fmt.Sprintf("backfill %s is owned by another rewind (pid %d on %s) until it ends or its lease expires at %s",
		e.ID, e.Lease.PID, e.Lease.Host, e.Lease.ExpiresAt.Local().Format(time.RFC3339))
}

// errOwnerLost stops the phases of a backfill whose owner lease was lost.
var errOwnerLost = errors.New("lost the backfill's owner lease")

// owner is a held owner lease: renewed (the heartbeat) until release, and
// the store whose writes are fenced by its generation.
type owner struct {
	st      store.Store // fenced by the lease
	release func()
}

// own takes the owner lease of backfill id for h (a live holder is an
// *OwnedError) and renews it every lease.RenewEvery until the returned
// owner is released. When the lease is lost, lost is called with why;
// every write made through owner.st fails from then on (store.ErrFenced).
func own(ctx context.Context, st store.Store, id string, h lease.Holder, lost func(error)) (*owner, error) {
	name := OwnerLease(id)
	l, err := lease.Acquire(ctx, st, name, h, 0, nil)
	var busy *lease.BusyError
	if errors.As(err, &busy) {
		return nil, &OwnedError{ID: id, Lease: busy.Lease}
	}
	if err != nil {
		return nil, err
	}
	keep, stop := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() {
		defer close(done)
		lease.Keep(keep, st, name, h, false, func(err error) { lost(fmt.Errorf("%w: %w", errOwnerLost, err)) })
	}()
	return &owner{
		st: st.Fenced(name, h.ID, l.Generation),
		release: func() {
			stop()
			<-done
			_ = lease.Release(context.WithoutCancel(ctx), st, name, h)
		},
	}, nil
}
