package backfill

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/rewind-dev/rewind/scheduler"
	"github.com/rewind-dev/rewind/store"
)

// Operator commands on a backfill that another process may be applying:
// each is one change of the store, which the apply sees within a second.

// ErrBackfillState refuses a command the backfill's state does not allow.
var ErrBackfillState = errors.New("backfill state does not allow it")

// CancelBackfill stops a running backfill, or settles a failed one, that
// has not reached its cutover: it is marked cancelled (guarded on the
// state and phase read, so that it never lands after the apply moved on),
// the consumers it paused are unpaused and its unfinished runs fail (a
// later backfill with reprocess failed takes them up again; rewind clear
// hands them back to the pipeline). An apply that runs it stops its
// attempts and does the same. From the cutover on, main holds the
// backfill's data, which a cancel cannot undo: it is refused, naming
// rollback.
func CancelBackfill(ctx context.Context, st store.Store, id string) (store.Backfill, error) {
	for {
		b, err := st.GetBackfill(ctx, id)
		if err != nil {
			return b, err
		}
		if PastCutover(b.Phase) && !b.RolledBack && b.State != store.BackfillCancelled {
			return b, fmt.Errorf("%w: backfill %s is at or past its cutover (%s, phase %s), so main holds its data; cancel cannot undo that: rewind backfill rollback %s restores main",
				ErrBackfillState, b.ID, b.State, b.Phase, b.ID)
		}
		if b.State != store.BackfillRunning && b.State != store.BackfillFailed || b.RolledBack {
			return b, fmt.Errorf("%w: backfill %s is %s already", ErrBackfillState, b.ID, ShownState(b))
		}
		err = st.UpdateBackfill(ctx, store.UpdateBackfillParams{ID: b.ID, FromState: b.State, FromPhase: b.Phase, State: store.BackfillCancelled, Now: time.Now()})
		if errors.Is(err, store.ErrConflict) {
			continue // the apply moved on: decide on what it is now
		}
		if err != nil {
			return b, err
		}
		for _, name := range b.Paused {
			if err := st.SetPaused(ctx, store.SetPausedParams{Name: name, Paused: false, Now: time.Now()}); err != nil && !errors.Is(err, store.ErrNotFound) {
				return b, err
			}
		}
		if err := st.UpdateBackfill(ctx, store.UpdateBackfillParams{ID: b.ID, FromState: store.BackfillCancelled, Paused: []string{}, Now: time.Now()}); err != nil {
			return b, err
		}
		b.State = store.BackfillCancelled
		return b, scheduler.CancelBackfillRuns(ctx, st, b)
	}
}

// PastCutover says whether a backfill at phase has reached its cutover.
func PastCutover(phase string) bool {
	return slices.Index(phases, phase) >= slices.Index(phases, PhaseCutover)
}

// ShownState is the state of a backfill as the operator is told it:
// rolled_back once its rollback restored main, else its state.
func ShownState(b store.Backfill) string {
	if b.RolledBack {
		return "rolled_back"
	}
	return string(b.State)
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
	if err := st.UpdateBackfill(ctx, store.UpdateBackfillParams{ID: b.ID, FromState: b.State, OnHold: &hold, Now: time.Now()}); err != nil {
		return b, err
	}
	b.OnHold = hold
	return b, nil
}
