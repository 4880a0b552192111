package backfill

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/rewind-dev/rewind/store"
)

// Where each date of a backfill stands, read from the store: the one
// record of its progress. Every phase decides from it, so that a phase
// resumed at any point does exactly the remaining work.

// windowProgress sorts the selected dates of a backfill by the state of
// their run.
type windowProgress struct {
	selected int
	// The selected dates, by logical date (RFC 3339):
	done    []string // the backfill's own run succeeded
	failed  []string // the backfill's own run failed
	pending []string // the backfill's own run is queued or running
	// foreign: the date's run is not the backfill's (the nightly run took
	// the date, an operator cleared it, another backfill has it), or it
	// has no run.
	foreign []string
	runs    map[string]store.Run // by logical date (RFC 3339), the runs of the selected dates
	label   map[string]string    // logical date -> how messages name it
}

// labels names the dates of a list (logical dates) for a message.
func (w windowProgress) labels(keys []string) []string {
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = w.label[k]
	}
	return out
}

// complete reports whether every selected date succeeded in this backfill.
func (w windowProgress) complete() bool { return len(w.done) == w.selected }

// progress reads the window's runs.
func (a *applier) progress(ctx context.Context) (windowProgress, error) {
	runs, err := a.o.Store.ListRuns(ctx, store.ListRunsParams{Pipelines: []string{a.def.Name}, From: a.b.From, To: a.b.To})
	if err != nil {
		return windowProgress{}, err
	}
	byDate := make(map[int64]store.Run, len(runs))
	for _, r := range runs {
		byDate[r.LogicalDate.Unix()] = r
	}
	w := windowProgress{runs: map[string]store.Run{}, label: map[string]string{}}
	for _, d := range a.selected() {
		w.selected++
		// A date is named by its ds, an interval of a sub-daily pipeline
		// by its logical date.
		w.label[d.LogicalDate] = a.plan.DateName(d)
		at, err := time.Parse(time.RFC3339, d.LogicalDate)
		if err != nil {
			return w, fmt.Errorf("backfill %s: plan date %q: %w", a.b.ID, d.LogicalDate, err)
		}
		r, ok := byDate[at.Unix()]
		switch {
		case !ok:
			w.foreign = append(w.foreign, d.LogicalDate)
			continue
		case r.BackfillID != a.b.ID:
			w.foreign = append(w.foreign, d.LogicalDate)
		case r.State == store.RunSuccess:
			w.done = append(w.done, d.LogicalDate)
		case r.State == store.RunFailed:
			w.failed = append(w.failed, d.LogicalDate)
		default:
			w.pending = append(w.pending, d.LogicalDate)
		}
		w.runs[d.LogicalDate] = r
	}
	return w, nil
}

// taskSpecs are the pipeline's tasks, for the runs the backfill takes.
func (a *applier) taskSpecs() []store.TaskSpec {
	out := make([]store.TaskSpec, len(a.def.Tasks))
	for i, t := range a.def.Tasks {
		out[i] = store.TaskSpec{Name: t.Name, Pool: t.Pool}
	}
	return out
}

// ErrUnfinished stops validate and cutover while a date of the window has
// not succeeded in the backfill: --force passes a failing validation, never
// unfinished dates.
var ErrUnfinished = errors.New("dates of the window are unfinished")

// requireComplete fails unless every selected date succeeded in this
// backfill.
func (a *applier) requireComplete(ctx context.Context, phase string) error {
	if len(a.selected()) == 0 {
		return errNothingSelected
	}
	w, err := a.progress(ctx)
	if err != nil {
		return err
	}
	if w.complete() {
		return nil
	}
	var parts []string
	for _, g := range []struct {
		what  string
		dates []string
	}{{"failed", w.failed}, {"unfinished", w.pending}, {"not run by this backfill", w.foreign}} {
		if len(g.dates) > 0 {
			parts = append(parts, fmt.Sprintf("%s: %s", g.what, abbreviate(w.labels(g.dates), 8)))
		}
	}
	return fmt.Errorf("%w: %d of %d dates succeeded (%s); %s runs only once every date has, main is untouched (rewind backfill apply --resume %s runs the rest)",
		ErrUnfinished, len(w.done), w.selected, strings.Join(parts, "; "), phase, a.b.ID)
}

// errNothingSelected: a backfill whose plan selected no date has nothing to
// validate or cut over (and no branch).
var errNothingSelected = errors.New("no date selected")

// abbreviate lists at most n items, then how many more.
func abbreviate(items []string, n int) string {
	if len(items) <= n {
		return strings.Join(items, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(items[:n], ", "), len(items)-n)
}

// takeOver makes every selected date the backfill's before it runs them:
// a date's run that is not the backfill's (the nightly run, or a clear,
// took it since the plan) is handed to it if it is not running, and, on a
// resume, the backfill's own failed runs run their failed tasks again. Its
// own succeeded dates are left alone: a resume never re-runs them.
func (a *applier) takeOver(ctx context.Context, resumed bool) error {
	w, err := a.progress(ctx)
	if err != nil {
		return err
	}
	st := a.st
	stalled := stalledRun(ctx, st)
	for _, ds := range w.foreign {
		r, ok := w.runs[ds]
		if !ok {
			continue // no run: created by MaterializeRuns
		}
		states := []store.RunState{store.RunSuccess, store.RunFailed, store.RunQueued}
		switch {
		case stalled(r) != "":
			// Held by a backfill that no longer runs: nobody else will.
			states = append(states, store.RunRunning)
		case r.Kind == store.KindBackfill && (r.State == store.RunQueued || r.State == store.RunRunning):
			continue // a running backfill's: its apply runs it
		}
		if _, err := st.ReprocessRuns(ctx, store.ReprocessRunsParams{Pipeline: a.def.Name, BackfillID: a.b.ID,
			From: r.LogicalDate, To: r.LogicalDate, States: states, Tasks: a.plan.Tasks, Add: a.taskSpecs(), Now: time.Now()}); err != nil {
			return err
		}
	}
	if !resumed {
		return nil
	}
	for _, ds := range w.failed {
		r := w.runs[ds]
		if _, err := st.ClearTasks(ctx, store.ClearTasksParams{Pipeline: a.def.Name, From: r.LogicalDate, To: r.LogicalDate,
			OnlyFailed: true, Now: time.Now()}); err != nil {
			return err
		}
	}
	return nil
}
