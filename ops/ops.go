// Package ops owns the operator's commands on a state's runs, task
// instances and pipelines: clear (a task with its downstream, only the
// failed ones), mark success or failed, retry now, pause and unpause; and
// the audit trail in which those commands and the backfill commands are
// recorded (who, from where, when, what, with which result). The CLI
// (rewind clear, mark, pause, unpause, audit) and the web view's actions
// call these same functions, so that both take the same selection, check
// the same names and answer the same errors.
//
// Each command is one guarded change of package store that bumps the
// state's epoch, so that a running `rewind run` or `rewind scheduler`
// re-reads within a second. It decides no scheduling (the engine in
// package scheduler does), starts no process, and never touches a running
// task instance. The backfill commands themselves live in package backfill.
package ops

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/rewind-dev/rewind/dsl"
	"github.com/rewind-dev/rewind/store"
	"github.com/rewind-dev/rewind/timetable"
)

// Kind says why a command was refused; the CLI turns it into an exit
// code, the web view into a status.
type Kind int

// Kinds of Error.
const (
	Usage   Kind = iota + 1 // the request is malformed: exit 2, 400
	Unknown                 // an unknown pipeline or task: exit 2, 404
	Refused                 // the state does not allow it: exit 2, 409
)

// Error is a refused command, with the message the operator reads.
type Error struct {
	Kind Kind
	Msg  string
}

func (e *Error) Error() string { return e.Msg }

func errorf(k Kind, format string, args ...any) error {
	return &Error{Kind: k, Msg: fmt.Sprintf(format, args...)}
}

// KindOf is the Kind of err (0 when it is not an *Error).
func KindOf(err error) Kind {
	var e *Error
	if errors.As(err, &e) {
		return e.Kind
	}
	return 0
}

// Selection names task instances as `rewind clear` does: a pipeline, a
// window of runs and optionally one task (with its downstream tasks).
type Selection struct {
	Pipeline string
	// Start and End are the window, inclusive: a date (YYYY-MM-DD) selects
	// whole days by ds in the pipeline's timezone, a timestamp (RFC 3339)
	// exact logical dates. Both are required.
	Start, End string
	// Task is the one task selected ("" every task); with Downstream the
	// tasks that depend on it, directly or not, too.
	Task       string
	Downstream bool
}

// resolved is a selection as the store takes it.
type resolved struct {
	from, to time.Time // zero when no run is in the window
	tasks    []string  // none: every task
	def      *dsl.Pipeline
}

// resolve checks a selection against the workspace (nil when it does not
// load) and the state, and finds its logical dates from the runs: a date
// bound is by ds, in the pipeline's timezone, which the runs know.
func resolve(ctx context.Context, st store.Store, ws *dsl.Workspace, sel Selection, verb string) (resolved, error) {
	var r resolved
	if sel.Start == "" || sel.End == "" {
		return r, errorf(Usage, "%s needs --start and --end", verb)
	}
	window, err := timetable.ParseRange(sel.Start, sel.End, time.UTC)
	if err != nil {
		return r, FlagError(err)
	}
	if sel.Downstream && sel.Task == "" {
		return r, errorf(Usage, "--downstream goes with --task NAME")
	}
	if err := KnownPipeline(ctx, st, ws, sel.Pipeline); err != nil {
		return r, err
	}
	if ws != nil {
		r.def = ws.Pipeline(sel.Pipeline)
	}
	runs, err := st.ListRuns(ctx, store.ListRunsParams{Pipelines: []string{sel.Pipeline}, WithTasks: sel.Task != ""})
	if err != nil {
		return r, err
	}
	if sel.Task != "" {
		if err := checkTask(r.def, sel.Pipeline, sel.Task, runs); err != nil {
			return r, err
		}
		r.tasks = []string{sel.Task}
		if sel.Downstream && r.def != nil {
			r.tasks = downstream(r.def, sel.Task)
		}
	}
	for _, run := range runs {
		if !window.Contains(run.DS, run.LogicalDate) {
			continue
		}
		if r.from.IsZero() || run.LogicalDate.Before(r.from) {
			r.from = run.LogicalDate
		}
		if run.LogicalDate.After(r.to) {
			r.to = run.LogicalDate
		}
	}
	return r, nil
}

// FlagError spells a window error of package timetable as the flags were
// given: a Usage error (other errors as they are).
func FlagError(err error) error {
	var bad *timetable.InputError
	var order *timetable.OrderError
	switch {
	case errors.As(err, &bad):
		return errorf(Usage, "--%s %q: want %s", bad.Input, bad.Value, bad.Want)
	case errors.As(err, &order):
		return errorf(Usage, "--end %s is before --start %s", order.End, order.Start)
	}
	return err
}

// KnownPipeline checks that name is a pipeline of the workspace (nil: none
// loaded) or of the state: an unknown one is refused, naming the known.
func KnownPipeline(ctx context.Context, st store.Store, ws *dsl.Workspace, name string) error {
	names := map[string]bool{}
	if ws != nil {
		for _, p := range ws.Pipelines {
			names[p.Name] = true
		}
	}
	if st != nil {
		sps, err := st.ListPipelines(ctx)
		if err != nil {
			return err
		}
		for _, p := range sps {
			names[p.Name] = true
		}
	}
	if names[name] {
		return nil
	}
	return UnknownName("pipeline", name, names)
}

// checkTask checks that task is a task of the pipeline: in its definition
// or in its runs.
func checkTask(def *dsl.Pipeline, pipeline, task string, runs []store.Run) error {
	known := map[string]bool{}
	if def != nil {
		for _, t := range def.Tasks {
			known[t.Name] = true
		}
	}
	for _, r := range runs {
		for _, t := range r.Tasks {
			known[t.Task] = true
		}
	}
	if known[task] {
		return nil
	}
	return UnknownName("task", task, known, "of pipeline "+pipeline)
}

// UnknownName is the error for a name that is not one of known.
func UnknownName(what, name string, known map[string]bool, of ...string) error {
	list := make([]string, 0, len(known))
	for n := range known {
		list = append(list, n)
	}
	sort.Strings(list)
	text := "none"
	if len(list) > 0 {
		text = strings.Join(list, ", ")
	}
	what = fmt.Sprintf("%s %q", what, name)
	if len(of) > 0 {
		what += " " + strings.Join(of, " ")
	}
	return errorf(Unknown, "unknown %s (known: %s)", what, text)
}

// downstream is task and every task of def that depends on it, directly
// or not, in the order def declares them.
func downstream(def *dsl.Pipeline, task string) []string {
	want := map[string]bool{task: true}
	for changed := true; changed; {
		changed = false
		for _, t := range def.Tasks {
			if want[t.Name] {
				continue
			}
			if slices.ContainsFunc(t.DependsOn, func(up string) bool { return want[up] }) {
				want[t.Name], changed = true, true
			}
		}
	}
	out := []string{task}
	for _, t := range def.Tasks {
		if want[t.Name] && t.Name != task {
			out = append(out, t.Name)
		}
	}
	return out
}

// ClearParams are a clear: the selection, and only its failed and
// upstream_failed task instances with OnlyFailed.
type ClearParams struct {
	Selection
	OnlyFailed bool
	Now        time.Time
}

// Clear puts the selected task instances back to scheduled, like Airflow's
// "clear": the next execution runs them again with a fresh retry budget.
// Running attempts are never cleared. It returns how many it cleared.
func Clear(ctx context.Context, st store.Store, ws *dsl.Workspace, p ClearParams) (int, error) {
	r, err := resolve(ctx, st, ws, p.Selection, "clear")
	if err != nil || r.from.IsZero() {
		return 0, err
	}
	cp := store.ClearTasksParams{Pipeline: p.Pipeline, From: r.from, To: r.to, OnlyFailed: p.OnlyFailed, Now: now(p.Now)}
	if len(r.tasks) > 0 {
		cp.Task, cp.Tasks = r.tasks[0], r.tasks[1:]
	}
	return st.ClearTasks(ctx, cp)
}

// MarkParams are a mark: the selection and the state, success or failed.
type MarkParams struct {
	Selection
	State store.TaskState
	Now   time.Time
}

// Mark marks the selected task instances success or failed, like
// Airflow's "mark success" and "mark failed"; their runs follow (see
// store.MarkTasksParams). A selection with a running task instance is
// refused whole: its attempt decides its state.
func Mark(ctx context.Context, st store.Store, ws *dsl.Workspace, p MarkParams) (store.MarkResult, error) {
	if p.State != store.TaskSuccess && p.State != store.TaskFailed {
		return store.MarkResult{}, errorf(Usage, "mark %q: want success or failed", p.State)
	}
	r, err := resolve(ctx, st, ws, p.Selection, "mark")
	if err != nil || r.from.IsZero() {
		return store.MarkResult{}, err
	}
	outputs := r.def != nil && len(r.def.Outputs) > 0
	res, err := st.MarkTasks(ctx, store.MarkTasksParams{Pipeline: p.Pipeline, From: r.from, To: r.to, Tasks: r.tasks, State: p.State, Outputs: outputs, Now: now(p.Now)})
	if errors.Is(err, store.ErrConflict) {
		return res, errorf(Refused, "%s from %s to %s: a selected task instance is running, and mark never overrides a running one: nothing was marked (wait for it to end, or narrow the selection)",
			p.Pipeline, p.Start, p.End)
	}
	return res, err
}

// RetryNow makes the selected up_for_retry task instances eligible at
// once, rather than after their retry delay. None up_for_retry is refused.
func RetryNow(ctx context.Context, st store.Store, ws *dsl.Workspace, sel Selection, at time.Time) (int, error) {
	r, err := resolve(ctx, st, ws, sel, "retry")
	if err != nil {
		return 0, err
	}
	n := 0
	if !r.from.IsZero() {
		n, err = st.RetryNow(ctx, store.RetryNowParams{Pipeline: sel.Pipeline, From: r.from, To: r.to, Tasks: r.tasks, Now: now(at)})
		if err != nil {
			return 0, err
		}
	}
	if n == 0 {
		return 0, errorf(Refused, "%s from %s to %s: no task instance is up_for_retry: nothing to retry now", sel.Pipeline, sel.Start, sel.End)
	}
	return n, nil
}

// SetPaused pauses (paused true) or unpauses a pipeline of the workspace
// or of the state. A pipeline the state does not know yet is recorded
// (its hash is filled in by the next run).
func SetPaused(ctx context.Context, st store.Store, ws *dsl.Workspace, name string, paused bool, at time.Time) error {
	if err := KnownPipeline(ctx, st, ws, name); err != nil {
		return err
	}
	p := store.SetPausedParams{Name: name, Paused: paused, Now: now(at)}
	err := st.SetPaused(ctx, p)
	if errors.Is(err, store.ErrNotFound) {
		if _, err = st.UpsertPipeline(ctx, store.UpsertPipelineParams{Name: name, Now: p.Now}); err == nil {
			err = st.SetPaused(ctx, p)
		}
	}
	return err
}

func now(t time.Time) time.Time {
	if t.IsZero() {
		return time.Now()
	}
	return t
}
