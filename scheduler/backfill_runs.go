package scheduler

import (
	"context"
	"errors"
	"time"

	"github.com/rewind-dev/rewind/store"
)

// CancelBackfillRuns marks a backfill's unfinished runs failed: their task
// instances that wait (scheduled, queued, up for retry) fail, and each run
// whose task instances are then all finished fails with them. A run with a
// task instance still running is left to the apply that runs it, which
// stops it and calls this again.
func CancelBackfillRuns(ctx context.Context, st store.Store, b store.Backfill) error {
	runs, err := st.ListRuns(ctx, store.ListRunsParams{Pipelines: []string{b.Pipeline}, States: []store.RunState{store.RunQueued, store.RunRunning}, WithTasks: true})
	if err != nil {
		return err
	}
	for _, r := range runs {
		if r.BackfillID != b.ID {
			continue
		}
		var waiting []int64
		for _, ti := range r.Tasks {
			waiting = append(waiting, ti.ID)
		}
		if _, err := st.SetTaskStates(ctx, store.SetTaskStatesParams{
			IDs: waiting, From: []store.TaskState{store.TaskScheduled, store.TaskQueued, store.TaskUpForRetry},
			To: store.TaskFailed, Now: time.Now(),
		}); err != nil {
			return err
		}
		if err := st.FinishRun(ctx, store.FinishRunParams{RunID: r.ID, State: store.RunFailed, Now: time.Now()}); err != nil && !errors.Is(err, store.ErrConflict) {
			return err
		}
	}
	return nil
}
