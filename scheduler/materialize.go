package scheduler

import (
	"context"
	"fmt"
	"time"

	"github.com/rewind-dev/rewind/dsl"
	"github.com/rewind-dev/rewind/store"
	"github.com/rewind-dev/rewind/timetable"
)

// materializeBatch bounds how many runs one store call creates, so that a
// catchup over millions of intervals runs in bounded memory.
const materializeBatch = 5000

// MaterializeParams says which intervals of a pipeline get runs.
type MaterializeParams struct {
	Pipeline *dsl.Pipeline
	// Catchup: every due interval since start_date; otherwise only the latest due one.
	Catchup bool
	Now     time.Time // the logical clock: intervals with end <= Now are due
	Kind    store.RunKind
	// From, To restrict logical dates (inclusive); zero = unbounded.
	From, To time.Time
	// Cursor is the pipeline's catchup cursor (store.Pipeline.CatchupThrough):
	// every due interval up to it has a run. With Catchup and no From/To, the
	// walk starts after it and moves it forward, so that a pass costs what
	// is newly due, not the pipeline's history.
	Cursor time.Time
}

// Materialize creates the runs of the due intervals that have none yet and
// returns how many it created. Existing runs are never touched: calling it
// twice is a no-op.
func Materialize(ctx context.Context, st store.Store, p MaterializeParams) (int, error) {
	pl := p.Pipeline
	tt, err := timetable.New(pl.Schedule, pl.Timezone)
	if err != nil {
		return 0, fmt.Errorf("pipeline %s: %w", pl.Name, err)
	}
	kind := p.Kind
	if kind == "" {
		kind = store.KindScheduled
	}
	w := timetable.Window{StartDate: pl.StartDate, EndDate: pl.EndDate, From: p.From, To: p.To, Now: p.Now}
	cursor := p.Catchup && p.From.IsZero() && p.To.IsZero() && kind == store.KindScheduled
	if cursor && !p.Cursor.IsZero() {
		w.From = p.Cursor.Add(time.Second) // ticks are whole seconds
	}
	tasks := make([]store.TaskSpec, len(pl.Tasks))
	for i, t := range pl.Tasks {
		tasks[i] = store.TaskSpec{Name: t.Name, Pool: t.Pool}
	}
	created := 0
	var first time.Time       // the earliest interval of a batch that created runs
	var batch []store.RunSpec // grows with what is due: most passes have nothing
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		mp := store.MaterializeRunsParams{
			Pipeline: pl.Name, Kind: kind, Runs: batch, Tasks: tasks, Now: time.Now(),
		}
		if cursor {
			mp.Through = batch[len(batch)-1].LogicalDate
		}
		n, err := st.MaterializeRuns(ctx, mp)
		if n > 0 && first.IsZero() {
			first = batch[0].LogicalDate
		}
		created += n
		batch = batch[:0]
		return err
	}
	add := func(iv timetable.Interval) error {
		batch = append(batch, store.RunSpec{
			LogicalDate: iv.Start, DS: iv.DS(), DataIntervalStart: iv.Start, DataIntervalEnd: iv.End,
		})
		if len(batch) == materializeBatch {
			return flush()
		}
		return nil
	}
	if p.Catchup {
		for iv := range tt.Intervals(w) {
			if err := ctx.Err(); err != nil {
				return created, err
			}
			if err := add(iv); err != nil {
				return created, err
			}
		}
	} else if iv, ok := tt.Latest(w); ok {
		if err := add(iv); err != nil {
			return created, err
		}
	}
	if err := flush(); err != nil {
		return created, err
	}
	if kind == store.KindScheduled && pl.ReprocessLookback > 0 && !first.IsZero() {
		if err := lookback(ctx, st, pl, first); err != nil {
			return created, err
		}
	}
	return created, nil
}

// lookback runs again, for a pipeline with reprocess_lookback, its finished
// runs of the span before the first new scheduled run: late-arriving data
// of those intervals lands with tonight's run, each re-run replacing its
// partition in a new snapshot of its outputs. Runs of the span that never
// finished (new in the same catchup) are left to run once.
func lookback(ctx context.Context, st store.Store, pl *dsl.Pipeline, first time.Time) error {
	from := first.Add(-pl.ReprocessLookback)
	if from.Before(pl.StartDate) {
		from = pl.StartDate
	}
	to := first.Add(-time.Second)
	if to.Before(from) {
		return nil
	}
	_, err := st.ClearTasks(ctx, store.ClearTasksParams{Pipeline: pl.Name, From: from, To: to, SparingBackfills: true, Now: time.Now()})
	if err != nil {
		return fmt.Errorf("pipeline %s: reprocess_lookback: %w", pl.Name, err)
	}
	return nil
}
