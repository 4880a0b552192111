package scheduler

import (
	"context"
	"fmt"
	"time"

	"github.com/rewind-dev/rewind/dsl"
	"github.com/rewind-dev/rewind/store"
	"github.com/rewind-dev/rewind/timetable"
)

// SkippedIntervals are the due intervals of a pipeline with catchup = false
// that an execution passed over when it gave the latest due interval a
// run: every interval after the pipeline's previous run (or from its
// start_date) up to the latest, none of which has a run. They are said
// once, by the execution that created the latest run; `rewind run
// --catchup`, or a backfill of First through Last, runs them.
type SkippedIntervals struct {
	Pipeline string
	Count    int
	// First and Last are the logical dates of the first and the last of
	// them, with the pipeline's offset.
	First, Last time.Time
}

// skippedBefore finds what catchup = false passed over in p when the run of
// its latest interval due at now was created. It looks for the previous
// run back from the latest interval in windows that double, so that it
// reads and enumerates what was skipped, not the pipeline's history.
func skippedBefore(ctx context.Context, st store.Store, p *dsl.Pipeline, now time.Time) (SkippedIntervals, bool, error) {
	out := SkippedIntervals{Pipeline: p.Name}
	tt, err := timetable.New(p.Schedule, p.Timezone)
	if err != nil {
		return out, false, fmt.Errorf("pipeline %s: %w", p.Name, err)
	}
	w := timetable.Window{StartDate: p.StartDate, EndDate: p.EndDate, Now: now}
	latest, ok := tt.Latest(w)
	if !ok {
		return out, false, nil
	}
	before := latest.Start.Add(-time.Second) // ticks are whole seconds
	if before.Before(p.StartDate) {
		return out, false, nil
	}
	// The previous run: the newest one before the latest interval.
	var prev time.Time
	span := latest.End.Sub(latest.Start)
	for to := before; ; span *= 2 {
		from := to.Add(-span)
		if from.Before(p.StartDate) {
			from = p.StartDate
		}
		runs, err := st.ListRuns(ctx, store.ListRunsParams{Pipelines: []string{p.Name}, From: from, To: to})
		if err != nil {
			return out, false, err
		}
		if n := len(runs); n > 0 {
			prev = runs[n-1].LogicalDate // by logical date
			break
		}
		if from.Equal(p.StartDate) {
			break
		}
		to = from.Add(-time.Second)
	}
	w.To = before
	if !prev.IsZero() {
		w.From = prev.Add(time.Second)
	}
	for iv := range tt.Intervals(w) {
		if err := ctx.Err(); err != nil {
			return out, false, err
		}
		if out.Count == 0 {
			out.First = iv.Start
		}
		out.Last = iv.Start
		out.Count++
	}
	return out, out.Count > 0, nil
}
