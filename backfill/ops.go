package backfill

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/rewind-dev/rewind/scheduler"
	"github.com/rewind-dev/rewind/store"
)

// Operator commands on a backfill that another process may be applying:
// each is one change of the store, which the apply sees within a second.

// ErrBackfillState refuses a command the backfill's state does not allow.
var ErrBackfillState = errors.New("backfill state does not allow it")

// CancelBackfill stops a running backfill, or settles a failed one: it is
// marked cancelled, the consumers it paused are unpaused and its unfinished
// runs fail (a later backfill with reprocess failed takes them up again;
// rewind clear hands them back to the pipeline). An apply that runs it
// stops its attempts and does the same.
func CancelBackfill(ctx context.Context, st store.Store, id string) (store.Backfill, error) {
	b, err := st.GetBackfill(ctx, id)
	if err != nil {
		return b, err
	}
	if b.State != store.BackfillRunning && b.State != store.BackfillFailed {
		return b, fmt.Errorf("%w: backfill %s is %s already", ErrBackfillState, b.ID, b.State)
	}
	if err := st.UpdateBackfill(ctx, store.UpdateBackfillParams{ID: b.ID, State: store.BackfillCancelled, Now: time.Now()}); err != nil {
		return b, err
	}
	for _, name := range b.Paused {
		if err := st.SetPaused(ctx, store.SetPausedParams{Name: name, Paused: false, Now: time.Now()}); err != nil && !errors.Is(err, store.ErrNotFound) {
			return b, err
		}
	}
	if err := st.UpdateBackfill(ctx, store.UpdateBackfillParams{ID: b.ID, Paused: []string{}, Now: time.Now()}); err != nil {
		return b, err
	}
	b.State = store.BackfillCancelled
	return b, scheduler.CancelBackfillRuns(ctx, st, b)
}

// HoldBackfill pauses (hold true) or unpauses a running backfill, like
// Airflow's backfill pause: on hold, it starts no new run or task; its
// running attempts finish; unpaused, its apply goes on.
func HoldBackfill(ctx context.Context, st store.Store, id string, hold bool) (store.Backfill, error) {
	b, err := st.GetBackfill(ctx, id)
	if err != nil {
		return b, err
	}
	if b.State != store.BackfillRunning {
		return b, fmt.Errorf("%w: backfill %s is %s: only a running backfill can be paused or unpaused", ErrBackfillState, b.ID, b.State)
	}
	if b.OnHold == hold {
		return b, nil
	}
	if err := st.UpdateBackfill(ctx, store.UpdateBackfillParams{ID: b.ID, OnHold: &hold, Now: time.Now()}); err != nil {
		return b, err
	}
	b.OnHold = hold
	return b, nil
}
