package backfill

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/rewind-dev/rewind/dsl"
	"github.com/rewind-dev/rewind/ops"
	"github.com/rewind-dev/rewind/skew"
	"github.com/rewind-dev/rewind/store"
	"github.com/rewind-dev/rewind/timetable"
)

// Request is a backfill as an operator asks for it, in the words of
// `backfill plan` and `apply`'s flags (and of the web view's form): Check
// and Params read it the same way for both, and Compute plans it.
type Request struct {
	Pipeline   string
	Start, End string // a ds (YYYY-MM-DD) or a logical date (RFC 3339), inclusive
	Reprocess  string // none (""), failed, completed
	Reverse    bool
	// MaxActiveRuns is the backfill's runs at once; 0 the pipeline's
	// max_active_runs. MaxActiveRunsSet says it was given (then it must
	// be 1 or more).
	MaxActiveRuns    int
	MaxActiveRunsSet bool
	Now              string // the clock, RFC 3339 ("" the wall clock)
	// IncludeDownstream pauses and rebuilds every pipeline downstream.
	IncludeDownstream bool
	Tasks             []string
	TaskDownstream    bool
	Batch             string // a span: 6h, 1d, 1w, 1mo ("" the pipeline's backfill { batch })
	NoBatch           bool
}

// Check reads what a request says by itself, before a workspace or a
// state is opened: a malformed one is an *ops.Error of kind Usage, with
// the message the CLI prints.
func (q Request) Check() error {
	if q.Start == "" || q.End == "" {
		return &ops.Error{Kind: ops.Usage, Msg: "backfill needs --start and --end"}
	}
	if _, err := timetable.ParseRange(q.Start, q.End, time.UTC); err != nil {
		return usage(err)
	}
	if q.TaskDownstream && len(q.Tasks) == 0 {
		return &ops.Error{Kind: ops.Usage, Msg: "--downstream goes with --task NAME"}
	}
	if q.MaxActiveRunsSet && q.MaxActiveRuns < 1 {
		return &ops.Error{Kind: ops.Usage, Msg: fmt.Sprintf("--max-active-runs %d: want a number of runs, 1 or more", q.MaxActiveRuns)}
	}
	if q.Batch != "" {
		if q.NoBatch {
			return &ops.Error{Kind: ops.Usage, Msg: "--batch and --no-batch are exclusive"}
		}
		if _, err := dsl.ParseBatch(q.Batch); err != nil {
			return &ops.Error{Kind: ops.Usage, Msg: fmt.Sprintf("--%v", err)}
		}
	}
	if _, err := timetable.ParseNow(q.Now); err != nil {
		return usage(err)
	}
	return nil
}

// usage is a window or clock error of package timetable as the flags
// were given.
func usage(err error) error {
	var bad *timetable.InputError
	var order *timetable.OrderError
	switch {
	case errors.As(err, &bad):
		return &ops.Error{Kind: ops.Usage, Msg: fmt.Sprintf("--%s %q: want %s", bad.Input, bad.Value, bad.Want)}
	case errors.As(err, &order):
		return &ops.Error{Kind: ops.Usage, Msg: fmt.Sprintf("--end %s is before --start %s", order.End, order.Start)}
	}
	return err
}

// Params checks the request against the workspace (its pipeline and
// tasks: an unknown one is an *ops.Error of kind Unknown) and returns the
// parameters of MakePlan.
func (q Request) Params(ws *dsl.Workspace) (PlanParams, error) {
	if err := q.Check(); err != nil {
		return PlanParams{}, err
	}
	def := ws.Pipeline(q.Pipeline)
	if def == nil {
		known := map[string]bool{}
		for _, p := range ws.Pipelines {
			known[p.Name] = true
		}
		return PlanParams{}, ops.UnknownName("pipeline", q.Pipeline, known)
	}
	known := map[string]bool{}
	for _, t := range def.Tasks {
		known[t.Name] = true
	}
	for _, t := range q.Tasks {
		if !known[t] {
			return PlanParams{}, ops.UnknownName("task", t, known, "of pipeline "+q.Pipeline)
		}
	}
	window, _ := timetable.ParseRange(q.Start, q.End, time.UTC)
	start, end := window.Bounds(def.Timezone)
	now, _ := timetable.ParseNow(q.Now)
	var batch dsl.Batch
	if q.Batch != "" {
		batch, _ = dsl.ParseBatch(q.Batch)
	}
	reprocess := q.Reprocess
	if reprocess == "" {
		reprocess = ReprocessNone
	}
	return PlanParams{
		Workspace: ws, Pipeline: q.Pipeline, Start: start, End: end, Reprocess: reprocess,
		Reverse: q.Reverse, MaxActiveRuns: q.MaxActiveRuns, Now: now, IncludeDownstream: q.IncludeDownstream,
		Tasks: q.Tasks, TaskDownstream: q.TaskDownstream, Batch: batch, NoBatch: q.NoBatch,
	}, nil
}

// RoutesError is a plan whose dates could not be routed (PlanRoutes):
// its Err is skew.ErrProbe when a probe failed.
type RoutesError struct{ Err error }

func (e *RoutesError) Error() string { return e.Err.Error() }
func (e *RoutesError) Unwrap() error { return e.Err }

// Compute makes the plan of pp and routes its dates: MakePlan, then
// PlanRoutes, as `backfill plan` shows it and `backfill apply` records
// it. The plan routes its dates twice (skew rules, then the history of
// their runs): the probes run once. It changes nothing in the state.
func Compute(ctx context.Context, st store.Store, pp PlanParams) (*Plan, error) {
	ctx = skew.ProbeContext(ctx, pp.Now)
	plan, err := MakePlan(ctx, st, pp)
	if err != nil {
		return nil, err
	}
	if err := PlanRoutes(ctx, st, pp.Workspace, plan); err != nil {
		return nil, &RoutesError{Err: err}
	}
	return plan, nil
}
