package backfill

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/rewind-dev/rewind/dsl"
	"github.com/rewind-dev/rewind/executor/requires"
	"github.com/rewind-dev/rewind/lease"
	"github.com/rewind-dev/rewind/scheduler"
	"github.com/rewind-dev/rewind/skew"
	"github.com/rewind-dev/rewind/store"
	"github.com/rewind-dev/rewind/timetable"
)

// ApplyOptions configure `rewind backfill apply`.
type ApplyOptions struct {
	Store     store.Store
	Workspace *dsl.Workspace
	Plan      *Plan  // a new backfill
	ResumeID  string // or the backfill to resume
	Home      string
	Now       time.Time
	// Clock and RefreshEvery: see Options.
	Clock        func() time.Time
	RefreshEvery time.Duration
	Grace        time.Duration
	Wait         bool
	// Force cuts over even when validation finds changes over max_change
	// (never with unfinished dates).
	Force bool
	// IncludePaused applies the backfill of a paused pipeline: its dates
	// run as backfill runs, its scheduled runs stay paused. Recorded in the
	// plan, it holds for the resumes too.
	IncludePaused bool
	// OnPhase is told when a phase starts.
	OnPhase    func(id, phase string)
	OnProgress func(scheduler.Progress)
	Log        *slog.Logger
	// EnsureAgent is scheduler.Options.EnsureAgent for its executions.
	EnsureAgent func() error
	// Holder overrides the identity of this process as the backfill's
	// owner (tests stand in for another host with it).
	Holder *lease.Holder
}

// BackfillResult is what apply did.
type BackfillResult struct {
	ID         string
	State      store.BackfillState
	ReportPath string
	Missing    []string // dates whose sources failed verification: "ds: check: error" (a sub-daily date by its logical date)
	Summary    *scheduler.Summary
	// Corrections are the outputs' per-date changes that validation found.
	Corrections []Correction
	// Unpaused: the consumers unpaused because the backfill failed before
	// its cutover (main untouched).
	Unpaused []string
	// Undelivered: why the report did not reach every notify block; the
	// backfill's state stays what its data is (apply --resume sends the
	// report again).
	Undelivered error
}

// ErrSourcesMissing stops a backfill whose source checks failed before
// anything was written.
var ErrSourcesMissing = errors.New("source data missing")

// ApplyBackfill records a backfill and runs its phases, each recorded so
// that `backfill status` shows where it is and `apply --resume` continues a
// backfill whose rewind died, without re-running finished attempts.
func ApplyBackfill(ctx context.Context, o ApplyOptions) (*BackfillResult, error) {
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.Home == "" {
		o.Home = ".rewind"
	}
	st := o.Store
	var b store.Backfill
	var plan Plan
	if o.ResumeID != "" {
		var err error
		if b, err = st.GetBackfill(ctx, o.ResumeID); err != nil {
			return nil, err
		}
	} else {
		plan = *o.Plan
		plan.IncludePaused = plan.IncludePaused || o.IncludePaused
		if err := checkPaused(ctx, st, plan); err != nil {
			return nil, err
		}
		raw, err := json.Marshal(plan)
		if err != nil {
			return nil, err
		}
		def := o.Workspace.Pipeline(plan.Pipeline)
		from, _ := time.ParseInLocation(skew.DateOnly, plan.Start, def.Timezone)
		to, _ := time.ParseInLocation(skew.DateOnly, plan.End, def.Timezone)
		for _, d := range plan.Dates {
			// A sub-daily window ends at its last interval, not at the
			// midnight of its last day.
			if at, err := time.Parse(time.RFC3339, d.LogicalDate); err == nil && at.After(to) {
				to = at
			}
		}
		b = store.Backfill{
			ID: newBackfillID(plan.Pipeline), Pipeline: plan.Pipeline, From: from, To: to,
			Reprocess: plan.Reprocess, Reverse: plan.Reverse, MaxActiveRuns: plan.MaxActiveRuns,
			State: store.BackfillRunning, Phase: PhasePause, Plan: string(raw), CreatedAt: time.Now(),
		}
		// Two backfills of a pipeline within a second get distinct ids.
		base := b.ID
		for n := 2; ; n++ {
			err := st.CreateBackfill(ctx, b)
			if err == nil {
				break
			}
			if !errors.Is(err, store.ErrConflict) || n > 100 {
				return nil, err
			}
			b.ID = fmt.Sprintf("%s_%d", base, n)
		}
	}
	// One owner through every phase: a second apply of the backfill (of
	// another terminal or host) is refused while this one lives.
	ctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	own, err := own(ctx, st, b.ID, holderOf(o.Holder), func(err error) { stop(err) })
	if err != nil {
		return &BackfillResult{ID: b.ID, State: b.State}, err
	}
	defer own.release()
	if b, err = st.GetBackfill(ctx, b.ID); err != nil { // as it is now that it is ours
		return nil, err
	}
	res := &BackfillResult{ID: b.ID, State: b.State}
	if o.ResumeID != "" {
		if err := json.Unmarshal([]byte(b.Plan), &plan); err != nil {
			return res, fmt.Errorf("backfill %s: stored plan: %w", b.ID, err)
		}
	}
	a := &applier{o: o, st: own.st, b: b, plan: plan, res: res, lakes: scheduler.NewLakes(o.Workspace),
		resumed: o.ResumeID != "", hold: new(atomic.Bool)}
	defer a.lakes.Close()
	a.hold.Store(b.OnHold)
	a.def = o.Workspace.Pipeline(plan.Pipeline)
	if a.def == nil {
		return a.res, fmt.Errorf("backfill %s: pipeline %s is not in the workspace", b.ID, plan.Pipeline)
	}
	if o.ResumeID != "" {
		switch {
		case b.RolledBack:
			return res, fmt.Errorf("%w: backfill %s was rolled back: nothing to resume", ErrBackfillState, b.ID)
		case b.State == store.BackfillRunning:
		case b.State == store.BackfillFailed:
			// Resuming a failed backfill retries the phase that failed (after
			// the sources were fixed, or with --force past validation).
			if err := a.update(ctx, store.UpdateBackfillParams{State: store.BackfillRunning}); err != nil {
				return res, err
			}
		case b.State == store.BackfillSuccess && b.Phase == PhaseReport:
			// Its data is final; its report was not delivered: only the
			// report is sent again.
			return res, a.redeliver(ctx)
		default:
			return res, fmt.Errorf("%w: backfill %s is %s: nothing to resume", ErrBackfillState, b.ID, b.State)
		}
		if o.IncludePaused && !plan.IncludePaused {
			a.plan.IncludePaused = true
			raw, err := json.Marshal(a.plan)
			if err != nil {
				return res, err
			}
			text := string(raw)
			if err := a.update(ctx, store.UpdateBackfillParams{Plan: &text}); err != nil {
				return res, err
			}
		}
		if err := checkPaused(ctx, st, a.plan); err != nil {
			return res, err
		}
	}
	res.State = store.BackfillRunning
	return a.res, a.run(ctx)
}

// holderOf is h, or this process.
func holderOf(h *lease.Holder) lease.Holder {
	if h != nil {
		return *h
	}
	return lease.Self()
}

// ErrPipelinePaused refuses a backfill of a paused pipeline without
// IncludePaused: its dates would never run.
var ErrPipelinePaused = errors.New("pipeline is paused")

// checkPaused refuses the plan of a paused pipeline unless it includes it.
func checkPaused(ctx context.Context, st store.Store, plan Plan) error {
	if plan.IncludePaused {
		return nil
	}
	sp, err := st.GetPipeline(ctx, plan.Pipeline)
	if errors.Is(err, store.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	if sp.Paused {
		return fmt.Errorf("%w: %s; its backfill would run nothing: unpause it (rewind unpause %s), or pass --include-paused to run the backfill's dates while its scheduled runs stay paused",
			ErrPipelinePaused, plan.Pipeline, plan.Pipeline)
	}
	return nil
}

func newBackfillID(pipeline string) string {
	return pipeline + "_" + time.Now().UTC().Format("20060102T150405")
}

type applier struct {
	o       ApplyOptions
	st      store.Store // fenced by the owner lease: every write of the backfill
	b       store.Backfill
	plan    Plan
	def     *dsl.Pipeline
	res     *BackfillResult
	lakes   *scheduler.Lakes
	resumed bool // apply --resume
	// failedRuns: the report's section on the dates that failed, when a
	// backfill fails with them (sent as a failed validation's report is).
	failedRuns string
	hold       *atomic.Bool // backfill pause, polled from the store
}

func (a *applier) run(ctx context.Context) error {
	start := slices.Index(phases, a.b.Phase)
	if start < 0 {
		start = 0
	}
	if a.resumed && start > slices.Index(phases, PhaseRun) && start <= slices.Index(phases, PhaseCutover) {
		// Resumed past the run phase but before its cutover: a date that
		// is not done (failed, cleared, taken) runs again first.
		if w, err := a.progress(ctx); err != nil {
			return err
		} else if !w.complete() {
			start = slices.Index(phases, PhaseRun)
		}
	}
	if start > 0 && start < slices.Index(phases, PhaseRebuild) {
		// Resumed between freeze and rebuild: the consumers stay frozen
		// (a failed verification had unpaused them).
		if err := a.pause(ctx); err != nil {
			return err
		}
	}
	// A cancel from another rewind stops the phases (not the report of
	// a failed validation, sent under parent).
	parent := ctx
	ctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	go a.watchCancel(ctx, stop)
	steps := map[string]func(context.Context) error{
		PhasePause: a.pause, PhaseVerify: a.verify, PhaseWatermark: a.resetWatermarks,
		PhaseRun: a.runDates, PhaseValidate: a.validate, PhaseCutover: a.cutover,
		PhaseRebuild: a.rebuild, PhaseReport: a.report,
	}
	for _, ph := range phases[start:] {
		if ph == PhaseDone {
			break
		}
		if err := a.setPhase(ph); err != nil {
			if errors.Is(err, store.ErrConflict) && a.wasCancelled() {
				return a.cancelled()
			}
			return err
		}
		if a.o.OnPhase != nil {
			a.o.OnPhase(a.b.ID, ph)
		}
		if err := steps[ph](ctx); err != nil {
			if cause := context.Cause(ctx); errors.Is(cause, errCancelled) {
				return a.cancelled()
			}
			ferr := a.fail(ph, err)
			switch {
			case a.b.State != store.BackfillFailed:
			case errors.Is(err, ErrValidation):
				a.reportValidationFailure(parent, err)
			case errors.Is(err, ErrUnfinished) && a.runsFailed(parent):
				// Dates failed: the operator is told as of a failed
				// validation, with the ways on of a failed run.
				a.failedRuns = runsFailedSection(a.b.ID, a.o.Workspace.RedactError(err))
				a.reportValidationFailure(parent, err)
			}
			return ferr
		}
	}
	state := store.BackfillSuccess
	if a.res.Summary != nil && a.res.Summary.Failed() || a.runsFailed(context.WithoutCancel(ctx)) {
		state = store.BackfillFailed
	}
	a.res.State = state
	// A report that was not delivered leaves the backfill at its report
	// phase, with why: its data is what the state says all the same.
	p := store.UpdateBackfillParams{State: state, Phase: PhaseDone}
	if a.res.Undelivered != nil {
		detail := undeliveredDetail(a.b.ID, a.res.Undelivered)
		p.Phase, p.Detail = PhaseReport, &detail
	}
	a.endPhase(a.b.Phase)
	p.Plan = a.endPhase(p.Phase)
	return a.update(context.WithoutCancel(ctx), p)
}

// reportValidationFailure writes and sends the report of a backfill that
// a.fail just failed at its validation (verr). It changes nothing of the
// backfill's state: a report that is not written or not delivered is
// recorded in its detail, beside why it failed (apply --resume validates
// again and sends the report again).
func (a *applier) reportValidationFailure(ctx context.Context, verr error) {
	if err := a.writeReport(ctx, true); err != nil {
		a.res.Undelivered = a.o.Workspace.RedactError(fmt.Errorf("report not written: %w", err))
		a.o.Log.Warn("backfill report not written", "backfill", a.b.ID, "error", a.res.Undelivered)
	}
	if a.res.Undelivered == nil {
		return
	}
	detail := fmt.Sprintf("%v\nreport not delivered: %v", a.o.Workspace.RedactError(verr), a.res.Undelivered)
	// Guarded on failed at validate: a cancel meanwhile stays as it is.
	if err := a.update(context.WithoutCancel(ctx), store.UpdateBackfillParams{Detail: &detail}); err != nil {
		a.o.Log.Warn("backfill report not delivered, not recorded", "backfill", a.b.ID, "error", err)
	}
}

// undeliveredDetail is what the state records of a report not delivered.
func undeliveredDetail(id string, err error) string {
	return fmt.Sprintf("report not delivered: %v; rewind backfill apply --resume %s sends it again", err, id)
}

// redeliver sends the report of a backfill whose data is final again: on
// delivery the backfill is done, otherwise why is recorded again.
func (a *applier) redeliver(ctx context.Context) error {
	if a.o.OnPhase != nil {
		a.o.OnPhase(a.b.ID, PhaseReport)
	}
	if err := a.report(ctx); err != nil {
		return err
	}
	detail := ""
	p := store.UpdateBackfillParams{Phase: PhaseDone, Detail: &detail}
	if a.res.Undelivered != nil {
		detail = undeliveredDetail(a.b.ID, a.res.Undelivered)
		p.Phase = ""
	}
	p.Plan = a.endPhase(PhaseReport)
	if p.Phase == PhaseDone {
		p.Plan = a.endPhase(PhaseDone)
	}
	return a.update(context.WithoutCancel(ctx), p)
}

// update changes the backfill, guarded on the state and phase this apply
// last saw it in (store.ErrConflict when another rewind changed them:
// a cancel).
func (a *applier) update(ctx context.Context, p store.UpdateBackfillParams) error {
	p.ID, p.FromState, p.FromPhase, p.Now = a.b.ID, a.b.State, a.b.Phase, time.Now()
	if err := a.st.UpdateBackfill(ctx, p); err != nil {
		return err
	}
	if p.State != "" {
		a.b.State = p.State
	}
	if p.Phase != "" {
		a.b.Phase = p.Phase
	}
	if p.Paused != nil {
		a.b.Paused = p.Paused
	}
	return nil
}

// wasCancelled reads whether the backfill was cancelled meanwhile (then
// this apply follows the state it is in).
func (a *applier) wasCancelled() bool {
	b, err := a.o.Store.GetBackfill(context.Background(), a.b.ID)
	if err != nil || b.State != store.BackfillCancelled {
		return false
	}
	a.b.State, a.b.Phase = b.State, b.Phase
	return true
}

var errCancelled = errors.New("backfill cancelled")

func (a *applier) watchCancel(ctx context.Context, stop context.CancelCauseFunc) {
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			b, err := a.o.Store.GetBackfill(ctx, a.b.ID)
			if err != nil {
				continue
			}
			if b.State == store.BackfillCancelled {
				stop(errCancelled)
				return
			}
			if was := a.hold.Swap(b.OnHold); was != b.OnHold {
				if b.OnHold {
					a.o.Log.Info("backfill paused: nothing new starts until rewind backfill unpause", "backfill", a.b.ID)
				} else {
					a.o.Log.Info("backfill unpaused", "backfill", a.b.ID)
				}
			}
		}
	}
}

// setPhase moves the backfill to phase ph, with the times of the phases in
// its plan: the one it leaves ended, ph started, in the same update.
func (a *applier) setPhase(ph string) error {
	if t, ok := a.plan.PhaseTimeOf(ph); ph == a.b.Phase && ok && t.Ended == "" {
		return nil
	}
	now := time.Now()
	p := store.UpdateBackfillParams{}
	if ph != a.b.Phase {
		a.plan.EndPhase(a.b.Phase, now)
		p.Phase = ph
	}
	a.plan.StartPhase(ph, now)
	var err error
	if p.Plan, err = a.planText(); err != nil {
		return err
	}
	return a.update(context.Background(), p)
}

// endPhase records in the plan that the phase apply is at ended now, and
// returns the plan's text for the update that says so.
func (a *applier) endPhase(ph string) *string {
	now := time.Now()
	a.plan.EndPhase(ph, now)
	if ph == PhaseDone {
		a.plan.StartPhase(ph, now)
		a.plan.EndPhase(ph, now)
	}
	text, err := a.planText()
	if err != nil {
		return nil // the times are a record; the transition goes on without them
	}
	return text
}

func (a *applier) planText() (*string, error) {
	raw, err := json.Marshal(a.plan)
	if err != nil {
		return nil, err
	}
	text := string(raw)
	return &text, nil
}

func (a *applier) fail(ph string, err error) error {
	ctx := context.Background()
	// The detail is stored in the state and the error printed: what a
	// check or a notify command said may hold a sensitive value.
	err = a.o.Workspace.RedactError(err)
	detail := err.Error()
	a.res.State = store.BackfillFailed
	switch ph {
	case PhaseVerify, PhaseWatermark, PhaseRun, PhaseValidate:
		// main was not touched: the consumers go back to how they were (a
		// resume freezes them again).
		if len(a.b.Paused) > 0 {
			a.res.Unpaused = slices.Clone(a.b.Paused)
		}
		if uerr := a.unpause(ctx); uerr != nil {
			err = errors.Join(err, uerr)
		}
	}
	if uerr := a.update(ctx, store.UpdateBackfillParams{State: store.BackfillFailed, Detail: &detail, Plan: a.endPhase(ph)}); errors.Is(uerr, store.ErrConflict) && a.wasCancelled() {
		return errors.Join(err, a.cancelled())
	} else if uerr != nil {
		err = errors.Join(err, uerr)
	}
	return err
}

// cancelled leaves a consistent state: the consumers unpaused, the
// backfill's unfinished runs failed (a later backfill with reprocess failed
// takes them up again).
func (a *applier) cancelled() error {
	a.res.State = store.BackfillCancelled
	ctx := context.Background()
	a.wasCancelled()
	return errors.Join(a.unpause(ctx), scheduler.CancelBackfillRuns(ctx, a.st, a.b))
}

// pause freezes the consumers (the seeds' step 1), remembering which ones
// this backfill paused so that it unpauses only those.
func (a *applier) pause(ctx context.Context) error {
	st := a.st
	paused := slices.Clone(a.b.Paused)
	for _, name := range a.plan.Downstream {
		c := a.o.Workspace.Pipeline(name)
		if c == nil || slices.Contains(paused, c.Name) {
			continue
		}
		sp, err := st.UpsertPipeline(ctx, store.UpsertPipelineParams{Name: c.Name, Hash: c.Hash, Now: time.Now()})
		if err != nil {
			return err
		}
		if sp.Paused {
			continue // paused by someone else: left as it is
		}
		if err := st.SetPaused(ctx, store.SetPausedParams{Name: c.Name, Paused: true, Now: time.Now()}); err != nil {
			return err
		}
		paused = append(paused, c.Name)
		if err := a.update(ctx, store.UpdateBackfillParams{Paused: slices.Clone(paused)}); err != nil {
			return err
		}
	}
	a.b.Paused = paused
	return nil
}

func (a *applier) unpause(ctx context.Context) error {
	for _, name := range a.b.Paused {
		if err := a.st.SetPaused(ctx, store.SetPausedParams{Name: name, Paused: false, Now: time.Now()}); err != nil && !errors.Is(err, store.ErrNotFound) {
			return err
		}
	}
	return a.update(ctx, store.UpdateBackfillParams{Paused: []string{}})
}

// selected are the plan's dates that run.
func (a *applier) selected() []PlanDate {
	var out []PlanDate
	for _, d := range a.plan.Dates {
		if d.Action != "skip" {
			out = append(out, d)
		}
	}
	return out
}

func (a *applier) runVars(d PlanDate) dsl.RunVars {
	start, _ := time.Parse(time.RFC3339, d.LogicalDate)
	start = start.In(a.def.Timezone)
	end := start
	if tt, err := timetable.New(a.def.Schedule, a.def.Timezone); err == nil {
		end = tt.Next(start)
	}
	return dsl.RunVars{ID: store.RunID(store.KindBackfill, start), Pipeline: a.def.Name, LogicalDate: start,
		DataIntervalStart: start, DataIntervalEnd: end, Kind: string(store.KindBackfill)}
}

// verify runs every source check of every selected date before any task:
// a missing source stops the backfill with the dates listed.
func (a *applier) verify(ctx context.Context) error {
	var missing []string
	dates := map[string]bool{}
	for _, d := range a.selected() {
		rv := a.runVars(d)
		for _, r := range a.def.Requires {
			if err := requires.Check(ctx, r, rv); err != nil {
				// An interval of a sub-daily pipeline is named by its
				// logical date, as the plan names it.
				missing = append(missing, a.o.Workspace.Redact(fmt.Sprintf("%s: %s: %v", a.plan.DateName(d), r.Name, err)))
				dates[d.LogicalDate] = true
			}
		}
	}
	if len(missing) > 0 {
		a.res.Missing = missing
		return fmt.Errorf("%w for %d dates; nothing was written:\n  %s", ErrSourcesMissing, len(dates), strings.Join(missing, "\n  "))
	}
	return nil
}

func (a *applier) resetWatermarks(ctx context.Context) error {
	for _, w := range a.plan.Watermarks {
		var to time.Time
		if w.ResetTo != "" {
			to, _ = time.Parse(time.RFC3339, w.ResetTo)
		}
		if err := a.st.SetWatermark(ctx, store.SetWatermarkParams{Pipeline: w.Pipeline, LogicalDate: to, Now: time.Now()}); err != nil {
			return err
		}
	}
	return nil
}

// runDates creates the backfill's runs (and hands over the existing runs the
// reprocess behaviour selects), then runs them beside whatever else is due:
// scheduled runs keep their priority.
func (a *applier) runDates(ctx context.Context) error {
	st := a.st
	var specs []store.RunSpec
	for _, d := range a.selected() {
		if d.Action != "create" {
			continue
		}
		rv := a.runVars(d)
		specs = append(specs, store.RunSpec{LogicalDate: rv.LogicalDate, DS: d.DS, DataIntervalStart: rv.DataIntervalStart, DataIntervalEnd: rv.DataIntervalEnd})
	}
	tasks := make([]store.TaskSpec, len(a.def.Tasks))
	for i, t := range a.def.Tasks {
		tasks[i] = store.TaskSpec{Name: t.Name, Pool: t.Pool}
	}
	if _, err := st.MaterializeRuns(ctx, store.MaterializeRunsParams{Pipeline: a.def.Name, Kind: store.KindBackfill, BackfillID: a.b.ID, Runs: specs, Tasks: tasks, Now: time.Now()}); err != nil {
		return err
	}
	var states []store.RunState
	switch a.plan.Reprocess {
	case ReprocessFailed:
		states = []store.RunState{store.RunFailed}
	case ReprocessCompleted:
		states = []store.RunState{store.RunFailed, store.RunSuccess}
	}
	// Only the dates the plan selected: a run of the window that the plan
	// skipped (in progress then) stays out of the backfill, which would
	// otherwise run it without cutting it over.
	var reprocess []time.Time
	for _, d := range a.selected() {
		if at, err := time.Parse(time.RFC3339, d.LogicalDate); err == nil && d.Action == "reprocess" {
			reprocess = append(reprocess, at)
		}
	}
	if len(reprocess) == 0 {
		states = nil
	}
	if _, err := st.ReprocessRuns(ctx, store.ReprocessRunsParams{Pipeline: a.def.Name, BackfillID: a.b.ID, From: a.b.From, To: a.b.To,
		Dates: reprocess, States: states, Tasks: a.plan.Tasks, Add: tasks, Now: time.Now()}); err != nil {
		return err
	}
	// The dates that the window-wide hand-over did not reach: taken since
	// the plan by the nightly run or a clear, a success that lived only on
	// another branch; on a resume, this backfill's own failed dates.
	if err := a.takeOver(ctx, a.resumed); err != nil {
		return err
	}
	if err := a.setBatches(ctx); err != nil {
		return err
	}
	sum, err := scheduler.Run(ctx, scheduler.Options{
		Store: a.o.Store, Workspace: a.o.Workspace, Now: a.o.Now, Clock: a.o.Clock, RefreshEvery: a.o.RefreshEvery,
		Home: a.o.Home, Wait: true, Grace: a.o.Grace,
		Backfill: &scheduler.BackfillRun{ID: a.b.ID, Pipeline: a.def.Name, MaxActiveRuns: a.plan.MaxActiveRuns, Reverse: a.plan.Reverse,
			IncludePaused: a.plan.IncludePaused, Hold: a.hold},
		OnProgress: a.o.OnProgress, Log: a.o.Log, EnsureAgent: a.o.EnsureAgent,
	})
	a.res.Summary = sum
	if err != nil {
		return err
	}
	if sum.Interrupted {
		return context.Cause(ctx)
	}
	return nil
}

// runsFailed reports whether a run of the backfill failed.
func (a *applier) runsFailed(ctx context.Context) bool {
	runs, err := a.o.Store.ListRuns(ctx, store.ListRunsParams{Pipelines: []string{a.def.Name}, From: a.b.From, To: a.b.To, States: []store.RunState{store.RunFailed}})
	if err != nil {
		return true
	}
	for _, r := range runs {
		if r.BackfillID == a.b.ID {
			return true
		}
	}
	return false
}

// rebuild clears the consumers' affected dates, unpauses them and runs them.
// The clear happens once: the consumers to rebuild are recorded in the plan
// before they are unpaused, so that a resume in this phase runs what is
// left of them and never clears (re-runs) a consumer date already rebuilt.
// A consumer that someone else paused (another backfill of the pipeline, an
// operator) is cleared too, since main changed under it, and left paused:
// its dates run when it is unpaused.
func (a *applier) rebuild(ctx context.Context) error {
	if len(a.b.Paused) > 0 || len(a.plan.Rebuilt) == 0 {
		consumers := slices.Clone(a.b.Paused)
		for _, name := range a.plan.Downstream {
			sp, err := a.st.GetPipeline(ctx, name)
			if err == nil && sp.Paused && !slices.Contains(consumers, name) && a.o.Workspace.Pipeline(name) != nil {
				consumers = append(consumers, name)
			} else if err != nil && !errors.Is(err, store.ErrNotFound) {
				return err
			}
		}
		for _, c := range consumers {
			// While a consumer is paused, nothing of it has run since the
			// clear: clearing again after a crash here changes nothing.
			if _, err := a.st.ClearTasks(ctx, store.ClearTasksParams{Pipeline: c, From: a.b.From, To: a.b.To, Now: time.Now()}); err != nil {
				return err
			}
		}
		if len(consumers) > 0 {
			a.plan.Rebuilt = consumers
			raw, err := json.Marshal(a.plan)
			if err != nil {
				return err
			}
			text := string(raw)
			if err := a.update(ctx, store.UpdateBackfillParams{Plan: &text}); err != nil {
				return err
			}
		}
		if err := a.unpause(ctx); err != nil {
			return err
		}
	}
	var run []string
	for _, c := range a.plan.Rebuilt {
		if sp, err := a.st.GetPipeline(ctx, c); err == nil && !sp.Paused {
			run = append(run, c)
		}
	}
	if len(run) == 0 {
		return nil
	}
	_, err := scheduler.Run(ctx, scheduler.Options{Store: a.o.Store, Workspace: a.o.Workspace, Pipelines: run, Now: a.o.Now, Home: a.o.Home, Wait: true, Grace: a.o.Grace, Log: a.o.Log, EnsureAgent: a.o.EnsureAgent})
	return err
}
