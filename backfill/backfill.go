package backfill

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"github.com/rewind-dev/rewind/dsl"
	"github.com/rewind-dev/rewind/executor/requires"
	"github.com/rewind-dev/rewind/lake"
	"github.com/rewind-dev/rewind/scheduler"
	"github.com/rewind-dev/rewind/skew"
	"github.com/rewind-dev/rewind/store"
	"github.com/rewind-dev/rewind/timetable"
)

// Reprocess behaviours of a backfill (Airflow 3's): which dates of the
// window that already have a run are run again.
const (
	ReprocessNone      = "none"      // only dates without a run
	ReprocessFailed    = "failed"    // dates without a run, and failed runs
	ReprocessCompleted = "completed" // every date (runs in progress excepted)
)

// Backfill phases, in the order apply runs them (the seeds' plan).
const (
	PhasePause     = "pause"              // freeze the consumers
	PhaseVerify    = "verify"             // every source check of every date
	PhaseWatermark = "reset_watermarks"   // this pipeline's and its consumers'
	PhaseRun       = "run"                // the dates, as runs of kind backfill
	PhaseValidate  = "validate"           // the outputs' branch against main, per date
	PhaseCutover   = "cutover"            // the window's partitions of main replaced by the branch's, old main tagged
	PhaseRebuild   = "rebuild_downstream" // the consumers' affected dates
	PhaseReport    = "report"             // .rewind/backfills/ID.md and notify blocks
	PhaseDone      = "done"
)

var phases = []string{PhasePause, PhaseVerify, PhaseWatermark, PhaseRun, PhaseValidate, PhaseCutover, PhaseRebuild, PhaseReport, PhaseDone}

// PlanParams say what to backfill.
type PlanParams struct {
	Workspace     *dsl.Workspace
	Pipeline      string
	Start, End    time.Time // logical dates, inclusive
	Reprocess     string
	Reverse       bool
	MaxActiveRuns int       // 0: the pipeline's max_active_runs
	Now           time.Time // only due intervals are backfilled; zero = the wall clock
	// IncludeDownstream pauses and rebuilds every pipeline downstream
	// (consumers of consumers too), not only the direct consumers.
	IncludeDownstream bool
	// Tasks restricts the backfill to these tasks of the pipeline (a
	// schema change, a task added to the pipeline): the other tasks keep
	// their outcome. With TaskDownstream, the tasks that depend on them,
	// directly or not, run too.
	Tasks          []string
	TaskDownstream bool
}

// PlanDate is one date of a plan.
type PlanDate struct {
	LogicalDate string `json:"logical_date"`
	DS          string `json:"ds"`
	State       string `json:"state"`  // the current run's state, or "none"
	Action      string `json:"action"` // create | reprocess | skip
	// Result says where the date's current result lives: "main", or
	// "branch" when it lives only on the branch of a backfill that was
	// not cut over (cancelled, failed) or was rolled back; "none" without a
	// successful run. Only for pipelines with outputs.
	Result string `json:"result,omitempty"`
	Pool   string `json:"pool"`
	Reason string `json:"reason"`
}

// WatermarkReset is a watermark a backfill moves back.
type WatermarkReset struct {
	Pipeline string `json:"pipeline"`
	Current  string `json:"current"`  // "" when none
	ResetTo  string `json:"reset_to"` // "" when removed
}

// Plan is what a backfill will do, computed without changing anything.
type Plan struct {
	Pipeline string `json:"pipeline"`
	// Paused: the pipeline is paused. apply refuses it unless
	// IncludePaused (then the backfill's dates run, its scheduled runs
	// stay paused).
	Paused        bool `json:"paused"`
	IncludePaused bool `json:"include_paused"`
	// Outputs: the pipeline has versioned outputs, which the backfill
	// writes to a branch and cuts over (its version of each date wins).
	Outputs bool `json:"outputs"`
	// Tasks: the tasks the backfill runs (empty: all of them).
	Tasks           []string         `json:"tasks"`
	Start           string           `json:"start"`
	End             string           `json:"end"`
	Reprocess       string           `json:"reprocess"`
	Reverse         bool             `json:"reverse"`
	MaxActiveRuns   int              `json:"max_active_runs"`
	Dates           []PlanDate       `json:"dates"`
	Selected        int              `json:"selected"`
	Parallel        int              `json:"parallel"` // runs at once: max_active_runs, bounded by the pool's slots and max_active_tasks
	Waves           int              `json:"waves"`
	RunSeconds      float64          `json:"run_seconds"`      // median duration of a past run
	EstimateSeconds float64          `json:"estimate_seconds"` // waves x run_seconds
	Requires        []string         `json:"requires"`
	Watermarks      []WatermarkReset `json:"watermarks"`
	Downstream      []string         `json:"downstream"` // paused during the backfill, rebuilt after
	// Rebuilt: the consumers whose window dates the backfill cleared for
	// their rebuild (recorded by rebuild_downstream, before unpausing them).
	Rebuilt []string `json:"rebuilt,omitempty"`
}

// MakePlan computes a backfill plan from the workspace and the state.
func MakePlan(ctx context.Context, st store.Store, pp PlanParams) (*Plan, error) {
	def := pp.Workspace.Pipeline(pp.Pipeline)
	if def == nil {
		return nil, fmt.Errorf("unknown pipeline %q", pp.Pipeline)
	}
	switch pp.Reprocess {
	case "":
		pp.Reprocess = ReprocessNone
		if len(pp.Tasks) > 0 {
			pp.Reprocess = ReprocessCompleted // a restatement of some tasks re-runs them everywhere
		}
	case ReprocessNone, ReprocessFailed, ReprocessCompleted:
	default:
		return nil, fmt.Errorf("--reprocess %q: want none, failed or completed", pp.Reprocess)
	}
	if pp.End.Before(pp.Start) {
		return nil, fmt.Errorf("--end %s is before --start %s", pp.End.Format(skew.DateOnly), pp.Start.Format(skew.DateOnly))
	}
	now := pp.Now
	if now.IsZero() {
		now = time.Now()
	}
	maxRuns := def.MaxActiveRuns
	if pp.MaxActiveRuns > 0 {
		maxRuns = pp.MaxActiveRuns
	}
	tt, err := timetable.New(def.Schedule, def.Timezone)
	if err != nil {
		return nil, err
	}
	var ivs []timetable.Interval
	for iv := range tt.Intervals(timetable.Window{StartDate: def.StartDate, EndDate: def.EndDate, From: pp.Start, To: pp.End, Now: now}) {
		ivs = append(ivs, iv)
	}
	runs, err := st.ListRuns(ctx, store.ListRunsParams{Pipelines: []string{def.Name}, From: pp.Start, To: pp.End})
	if err != nil {
		return nil, err
	}
	existing := map[int64]store.Run{}
	for _, r := range runs {
		existing[r.LogicalDate.Unix()] = r
	}
	tasks, err := selectTasks(def, pp.Tasks, pp.TaskDownstream)
	if err != nil {
		return nil, err
	}
	paused := false
	if sp, err := st.GetPipeline(ctx, def.Name); err == nil {
		paused = sp.Paused
	} else if !errors.Is(err, store.ErrNotFound) {
		return nil, err
	}
	results := resultPlace(ctx, st, def)
	stalled := stalledRun(ctx, st)
	routes := skew.DateRoutes(ctx, def, ivs)
	plan := &Plan{
		Pipeline: def.Name, Paused: paused, Outputs: len(def.Outputs) > 0, Tasks: tasks, Start: pp.Start.Format(skew.DateOnly), End: pp.End.Format(skew.DateOnly),
		Reprocess: pp.Reprocess, Reverse: pp.Reverse, MaxActiveRuns: maxRuns,
		Dates: []PlanDate{}, Requires: []string{}, Watermarks: []WatermarkReset{}, Downstream: []string{},
	}
	for i, iv := range ivs {
		d := PlanDate{LogicalDate: iv.Start.Format(time.RFC3339), DS: iv.DS(), State: "none", Action: "create",
			Pool: routes[i].Pool, Reason: routes[i].Reason}
		if r, ok := existing[iv.Start.Unix()]; ok {
			d.State = string(r.State)
			d.Action = "skip"
			place, why := results(r)
			d.Result = place
			stale := stalled(r)
			switch {
			case (r.State == store.RunQueued || r.State == store.RunRunning) && stale != "":
				// Held by a backfill that no longer runs: nobody will run
				// it; this backfill takes it (a reprocess of any kind).
				if pp.Reprocess != ReprocessNone {
					d.Action = "reprocess"
				}
				d.Reason = joinReason(d.Reason, stale)
			case r.State == store.RunQueued || r.State == store.RunRunning:
			case pp.Reprocess == ReprocessCompleted, pp.Reprocess == ReprocessFailed && r.State == store.RunFailed:
				d.Action = "reprocess"
			case place == "branch":
				// Its success lives only on a branch: main holds the
				// version before it, which a later backfill must not take
				// for done.
				if pp.Reprocess == ReprocessFailed {
					d.Action = "reprocess"
				}
				d.Reason = joinReason(d.Reason, why)
			}
		} else if len(def.Outputs) > 0 {
			d.Result = "none"
		}
		if d.Action != "skip" {
			plan.Selected++
		}
		plan.Dates = append(plan.Dates, d)
	}
	plan.Parallel = maxRuns
	base := def.DefaultPool
	if base == "" {
		base = dsl.DefaultPoolName
	}
	if pl := pp.Workspace.Pools[base]; pl != nil && pl.Slots-pl.ReservedForScheduled < plan.Parallel {
		plan.Parallel = pl.Slots - pl.ReservedForScheduled
	}
	if def.MaxActiveTasks > 0 && def.MaxActiveTasks < plan.Parallel {
		plan.Parallel = def.MaxActiveTasks
	}
	if plan.Parallel > 0 {
		plan.Waves = (plan.Selected + plan.Parallel - 1) / plan.Parallel
	}
	if d, err := medianRunDuration(ctx, st, def); err != nil {
		return nil, err
	} else {
		plan.RunSeconds = d.Seconds()
		plan.EstimateSeconds = float64(plan.Waves) * d.Seconds()
	}
	for _, r := range def.Requires {
		plan.Requires = append(plan.Requires, r.Name+": "+r.Describe())
	}
	affected := []*dsl.Pipeline{def}
	for _, c := range downstream(pp.Workspace, def.Name, pp.IncludeDownstream) {
		plan.Downstream = append(plan.Downstream, c.Name)
		affected = append(affected, c)
	}
	for _, p := range affected {
		wr, ok, err := watermarkReset(ctx, st, p, pp.Start)
		if err != nil {
			return nil, err
		}
		if ok {
			plan.Watermarks = append(plan.Watermarks, wr)
		}
	}
	redactPlan(pp.Workspace, plan)
	return plan, nil
}

// selectTasks checks the tasks a backfill is restricted to, and adds the
// tasks downstream of them (within the pipeline) with downstream.
func selectTasks(def *dsl.Pipeline, names []string, downstream bool) ([]string, error) {
	if len(names) == 0 {
		return []string{}, nil
	}
	known := make([]string, len(def.Tasks))
	for i, t := range def.Tasks {
		known[i] = t.Name
	}
	want := map[string]bool{}
	for _, n := range names {
		if !slices.Contains(known, n) {
			return nil, fmt.Errorf("unknown task %q of pipeline %s (known: %s)", n, def.Name, strings.Join(known, ", "))
		}
		want[n] = true
	}
	for changed := downstream; changed; {
		changed = false
		for _, t := range def.Tasks {
			if want[t.Name] {
				continue
			}
			for _, up := range t.DependsOn {
				if want[up] {
					want[t.Name], changed = true, true
					break
				}
			}
		}
	}
	var out []string
	for _, t := range def.Tasks {
		if want[t.Name] {
			out = append(out, t.Name)
		}
	}
	return out, nil
}

// resultPlace returns a function that says where a run's result lives
// ("main", "branch", "none") and, for a branch, why: a successful run of a
// backfill that was not cut over (cancelled, failed, still running) or
// that was rolled back left its result on the backfill's branch only.
func resultPlace(ctx context.Context, st store.Store, def *dsl.Pipeline) func(store.Run) (string, string) {
	backfills := map[string]*store.Backfill{}
	return func(r store.Run) (string, string) {
		if len(def.Outputs) == 0 {
			return "", ""
		}
		if r.State != store.RunSuccess {
			return "none", ""
		}
		if r.Kind != store.KindBackfill || r.BackfillID == "" {
			return "main", ""
		}
		b, ok := backfills[r.BackfillID]
		if !ok {
			if got, err := st.GetBackfill(ctx, r.BackfillID); err == nil {
				b = &got
			}
			backfills[r.BackfillID] = b
		}
		switch {
		case b == nil:
			return "main", ""
		case b.RolledBack:
			return "branch", fmt.Sprintf("backfill %s was rolled back: main holds the version before it", b.ID)
		case b.State == store.BackfillSuccess:
			return "main", ""
		default:
			return "branch", fmt.Sprintf("its result is only on %s (backfill %s %s, not cut over): main holds the version before it", scheduler.BranchName(b.ID), b.ID, b.State)
		}
	}
}

// stalledRun returns a function that says, for a queued or running run of
// a backfill that no longer runs (failed, cancelled, done), why it is
// stalled ("" for any other run): no apply will run it.
func stalledRun(ctx context.Context, st store.Store) func(store.Run) string {
	states := map[string]store.BackfillState{}
	return func(r store.Run) string {
		if r.Kind != store.KindBackfill || r.BackfillID == "" || (r.State != store.RunQueued && r.State != store.RunRunning) {
			return ""
		}
		state, ok := states[r.BackfillID]
		if !ok {
			if b, err := st.GetBackfill(ctx, r.BackfillID); err == nil {
				state = b.State
			}
			states[r.BackfillID] = state
		}
		if state == store.BackfillRunning || state == "" {
			return ""
		}
		return fmt.Sprintf("%s by backfill %s, which is %s", r.State, r.BackfillID, state)
	}
}

func joinReason(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}

// redactPlan scrubs the workspace's sensitive values from the plan's text
// (reasons, source checks): a plan is printed and stored with the backfill.
func redactPlan(ws *dsl.Workspace, plan *Plan) {
	if !ws.HasSecrets() {
		return
	}
	for i := range plan.Dates {
		plan.Dates[i].Pool = ws.Redact(plan.Dates[i].Pool)
		plan.Dates[i].Reason = ws.Redact(plan.Dates[i].Reason)
	}
	for i := range plan.Requires {
		plan.Requires[i] = ws.Redact(plan.Requires[i])
	}
}

// downstream lists the consumers of a pipeline; with all, their consumers
// too, and so on (consumes has no cycles).
func downstream(ws *dsl.Workspace, name string, all bool) []*dsl.Pipeline {
	var out []*dsl.Pipeline
	seen := map[string]bool{name: true}
	queue := []string{name}
	for len(queue) > 0 {
		cur := queue[0]
		queue = queue[1:]
		for _, c := range ws.Consumers(cur) {
			if seen[c.Name] {
				continue
			}
			seen[c.Name] = true
			out = append(out, c)
			if all {
				queue = append(queue, c.Name)
			}
		}
	}
	return out
}

// medianRunDuration is the median wall time of the pipeline's recent
// successful runs; without any, the sum of its tasks' median durations.
func medianRunDuration(ctx context.Context, st store.Store, def *dsl.Pipeline) (time.Duration, error) {
	runs, err := st.ListRuns(ctx, store.ListRunsParams{Pipelines: []string{def.Name}, States: []store.RunState{store.RunSuccess}})
	if err != nil {
		return 0, err
	}
	var ds []time.Duration
	for _, r := range runs {
		if !r.StartedAt.IsZero() && !r.EndedAt.IsZero() {
			ds = append(ds, r.EndedAt.Sub(r.StartedAt))
		}
	}
	if len(ds) > 0 {
		return skew.MedianDuration(ds), nil
	}
	tasks, err := st.TaskDurations(ctx, store.TaskDurationsParams{Pipeline: def.Name, Limit: 100})
	if err != nil {
		return 0, err
	}
	var sum time.Duration
	for _, d := range tasks {
		sum += skew.MedianDuration(d)
	}
	return sum, nil
}

// watermarkReset says where a pipeline's watermark goes when the window
// from start is re-run: back to the interval before start (removed when
// there is none). ok is false when the watermark is already before start.
func watermarkReset(ctx context.Context, st store.Store, p *dsl.Pipeline, start time.Time) (WatermarkReset, bool, error) {
	wm, err := st.GetWatermark(ctx, p.Name)
	if errors.Is(err, store.ErrNotFound) {
		return WatermarkReset{}, false, nil
	}
	if err != nil {
		return WatermarkReset{}, false, err
	}
	if wm.LogicalDate.Before(start) {
		return WatermarkReset{}, false, nil
	}
	wr := WatermarkReset{Pipeline: p.Name, Current: wm.LogicalDate.Format(time.RFC3339)}
	if tt, err := timetable.New(p.Schedule, p.Timezone); err == nil {
		if prev := tt.Prev(start); !prev.IsZero() && !prev.Before(p.StartDate) {
			wr.ResetTo = prev.Format(time.RFC3339)
		}
	}
	return wr, true, nil
}

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
}

// BackfillResult is what apply did.
type BackfillResult struct {
	ID         string
	State      store.BackfillState
	ReportPath string
	Missing    []string // dates whose sources failed verification: "ds: check: error"
	Summary    *scheduler.Summary
	// Corrections are the outputs' per-date changes that validation found.
	Corrections []Correction
	// Unpaused: the consumers unpaused because the backfill failed before
	// its cutover (main untouched).
	Unpaused []string
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
		switch b.State {
		case store.BackfillRunning:
		case store.BackfillFailed:
			// Resuming a failed backfill retries the phase that failed (after
			// the sources were fixed, or with --force past validation).
			if err := st.UpdateBackfill(ctx, store.UpdateBackfillParams{ID: b.ID, State: store.BackfillRunning, Now: time.Now()}); err != nil {
				return nil, err
			}
		default:
			return &BackfillResult{ID: b.ID, State: b.State}, fmt.Errorf("backfill %s is %s: nothing to resume", b.ID, b.State)
		}
		if err := json.Unmarshal([]byte(b.Plan), &plan); err != nil {
			return nil, fmt.Errorf("backfill %s: stored plan: %w", b.ID, err)
		}
		if o.IncludePaused && !plan.IncludePaused {
			plan.IncludePaused = true
			raw, err := json.Marshal(plan)
			if err != nil {
				return nil, err
			}
			text := string(raw)
			if err := st.UpdateBackfill(ctx, store.UpdateBackfillParams{ID: b.ID, Plan: &text, Now: time.Now()}); err != nil {
				return nil, err
			}
		}
		if err := checkPaused(ctx, st, plan); err != nil {
			return &BackfillResult{ID: b.ID, State: b.State}, err
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
	a := &applier{o: o, b: b, plan: plan, res: &BackfillResult{ID: b.ID, State: store.BackfillRunning}, lakes: scheduler.NewLakes(o.Workspace),
		resumed: o.ResumeID != "", hold: new(atomic.Bool)}
	a.hold.Store(b.OnHold)
	a.def = o.Workspace.Pipeline(plan.Pipeline)
	if a.def == nil {
		return a.res, fmt.Errorf("backfill %s: pipeline %s is not in the workspace", b.ID, plan.Pipeline)
	}
	return a.res, a.run(ctx)
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
	b       store.Backfill
	plan    Plan
	def     *dsl.Pipeline
	res     *BackfillResult
	lakes   *scheduler.Lakes
	resumed bool         // apply --resume
	hold    *atomic.Bool // backfill pause, polled from the store
}

// ErrValidation stops a backfill whose outputs changed more than their
// validate rules allow: main is left untouched, the branch kept.
var ErrValidation = errors.New("validation failed")

// validate compares each output's branch with main for every date of the
// backfill (write-audit-publish): main stays untouched until cutover.
func (a *applier) validate(ctx context.Context) error {
	if err := a.requireComplete(ctx, "validation"); errors.Is(err, errNothingSelected) {
		return nil // no date: nothing to compare or cut over
	} else if err != nil {
		return err
	}
	if len(a.def.Outputs) == 0 {
		return nil
	}
	cs, err := Corrections(ctx, a.lakes, a.def, "main", scheduler.BranchName(a.b.ID), a.selected())
	if err != nil {
		return err
	}
	a.res.Corrections = cs
	var over []string
	for _, c := range cs {
		for _, r := range c.FailedRules {
			over = append(over, fmt.Sprintf("%s %s: rule %s is false", c.Output, c.DS, r))
		}
		if c.Limit > 0 && c.OldRows > 0 && c.Change > c.Limit {
			over = append(over, fmt.Sprintf("%s %s %s: %.2f -> %.2f (%.2f%% > %.2f%%)", c.Output, c.DS, c.Column, c.Old, c.New, 100*c.Change, 100*c.Limit))
		}
	}
	if len(over) > 0 && !a.o.Force {
		return fmt.Errorf("%w: %d changes over their rules; main is untouched, branch %s kept (apply --resume %s --force cuts over anyway):\n  %s",
			ErrValidation, len(over), scheduler.BranchName(a.b.ID), a.b.ID, strings.Join(over, "\n  "))
	}
	return nil
}

// cutover makes the window's partitions of each output's main the
// backfill branch's, in one catalog commit per output that tags the old main
// pre_backfill_<ID>. It works on today's main: every other partition keeps
// what main gained meanwhile (the nightly runs). A cutover repeated after a
// crash finds its commit in main's history and does nothing.
func (a *applier) cutover(ctx context.Context) error {
	if err := a.requireComplete(ctx, "the cutover"); errors.Is(err, errNothingSelected) {
		return nil // no date: nothing to compare or cut over
	} else if err != nil {
		return err
	}
	dates := a.selected()
	for _, o := range a.def.Outputs {
		lk, err := a.lakes.Get(ctx, o.Catalog)
		if err != nil {
			return err
		}
		window, err := WindowValues(o, dates)
		if err != nil {
			return err
		}
		if _, err := lk.ReplaceWindow(ctx, o.Table, lake.MainBranch, scheduler.BranchName(a.b.ID), window, TagName(a.b.ID),
			"cutover:"+a.b.ID, map[string]string{"rewind.backfill": a.b.ID, "rewind.kind": "cutover"}); err != nil {
			return fmt.Errorf("cutover of %s: %w", o.Table, err)
		}
	}
	return nil
}

// RollbackBackfill restores, on main of each output of a backfill's
// pipeline, the partitions of the dates it ran (its plan's dates that are
// not skipped) as they were before its cutover (from the pre_backfill_<ID>
// tag); the other partitions stay: those outside the window, the nightly
// runs committed since the cutover, and the dates its plan skipped (held by
// another backfill, which may have cut them over since).
func RollbackBackfill(ctx context.Context, st store.Store, ws *dsl.Workspace, id string) error {
	b, err := st.GetBackfill(ctx, id)
	if err != nil {
		return err
	}
	def := ws.Pipeline(b.Pipeline)
	if def == nil {
		return fmt.Errorf("backfill %s: pipeline %s is not in the workspace", id, b.Pipeline)
	}
	if len(def.Outputs) == 0 {
		return fmt.Errorf("pipeline %s has no outputs: nothing to roll back", b.Pipeline)
	}
	var plan Plan
	if err := json.Unmarshal([]byte(b.Plan), &plan); err != nil {
		return fmt.Errorf("backfill %s: its plan: %w", id, err)
	}
	var dates []PlanDate
	for _, d := range plan.Dates {
		if d.Action != "skip" {
			dates = append(dates, d)
		}
	}
	if b.State != store.BackfillSuccess {
		return fmt.Errorf("%w: backfill %s is %s: it never cut over, main holds nothing of it to roll back", ErrBackfillState, id, b.State)
	}
	if len(dates) == 0 {
		return fmt.Errorf("%w: backfill %s ran no date: nothing to roll back", ErrBackfillState, id)
	}
	lakes := scheduler.NewLakes(ws)
	defer lakes.Close()
	for _, o := range def.Outputs {
		lk, err := lakes.Get(ctx, o.Catalog)
		if err != nil {
			return err
		}
		window, err := WindowValues(o, dates)
		if err != nil {
			return err
		}
		if _, err := lk.ReplaceWindow(ctx, o.Table, lake.MainBranch, TagName(id), window, "",
			"rollback:"+id, map[string]string{"rewind.backfill": id, "rewind.kind": "rollback"}); err != nil {
			return fmt.Errorf("rollback of %s: %w", o.Table, err)
		}
	}
	detail := fmt.Sprintf("rolled back: the %d dates of the window are on main as at %s; later dates kept", len(dates), TagName(id))
	yes := true
	return st.UpdateBackfill(ctx, store.UpdateBackfillParams{ID: id, Detail: &detail, RolledBack: &yes, Now: time.Now()})
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
	// A cancel from another rewind stops the phases.
	ctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	go a.watchCancel(ctx, stop)
	steps := map[string]func(context.Context) error{
		PhasePause: a.pause, PhaseVerify: a.verify, PhaseWatermark: a.resetWatermarks,
		PhaseRun: a.runDates, PhaseValidate: a.validate, PhaseCutover: a.cutover,
		PhaseRebuild: a.rebuild, PhaseReport: a.report,
	}
	defer a.lakes.Close()
	for _, ph := range phases[start:] {
		if ph == PhaseDone {
			break
		}
		if err := a.setPhase(ph); err != nil {
			return err
		}
		if a.o.OnPhase != nil {
			a.o.OnPhase(a.b.ID, ph)
		}
		if err := steps[ph](ctx); err != nil {
			if cause := context.Cause(ctx); errors.Is(cause, errCancelled) {
				return a.cancelled()
			}
			return a.fail(ph, err)
		}
	}
	state := store.BackfillSuccess
	if a.res.Summary != nil && a.res.Summary.Failed() || a.runsFailed(context.WithoutCancel(ctx)) {
		state = store.BackfillFailed
	}
	a.res.State = state
	return a.o.Store.UpdateBackfill(context.WithoutCancel(ctx), store.UpdateBackfillParams{ID: a.b.ID, State: state, Phase: PhaseDone, Now: time.Now()})
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

func (a *applier) setPhase(ph string) error {
	a.b.Phase = ph
	return a.o.Store.UpdateBackfill(context.Background(), store.UpdateBackfillParams{ID: a.b.ID, Phase: ph, Now: time.Now()})
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
	if uerr := a.o.Store.UpdateBackfill(ctx, store.UpdateBackfillParams{ID: a.b.ID, State: store.BackfillFailed, Detail: &detail, Now: time.Now()}); uerr != nil {
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
	return errors.Join(a.unpause(ctx), scheduler.CancelBackfillRuns(ctx, a.o.Store, a.b))
}

// pause freezes the consumers (the seeds' step 1), remembering which ones
// this backfill paused so that it unpauses only those.
func (a *applier) pause(ctx context.Context) error {
	st := a.o.Store
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
		if err := st.UpdateBackfill(ctx, store.UpdateBackfillParams{ID: a.b.ID, Paused: paused, Now: time.Now()}); err != nil {
			return err
		}
	}
	a.b.Paused = paused
	return nil
}

func (a *applier) unpause(ctx context.Context) error {
	for _, name := range a.b.Paused {
		if err := a.o.Store.SetPaused(ctx, store.SetPausedParams{Name: name, Paused: false, Now: time.Now()}); err != nil && !errors.Is(err, store.ErrNotFound) {
			return err
		}
	}
	a.b.Paused = nil
	return a.o.Store.UpdateBackfill(ctx, store.UpdateBackfillParams{ID: a.b.ID, Paused: []string{}, Now: time.Now()})
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
	for _, d := range a.selected() {
		rv := a.runVars(d)
		for _, r := range a.def.Requires {
			if err := requires.Check(ctx, r, rv); err != nil {
				missing = append(missing, a.o.Workspace.Redact(fmt.Sprintf("%s: %s: %v", d.DS, r.Name, err)))
			}
		}
	}
	if len(missing) > 0 {
		a.res.Missing = missing
		dates := map[string]bool{}
		for _, m := range missing {
			dates[m[:strings.Index(m, ":")]] = true
		}
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
		if err := a.o.Store.SetWatermark(ctx, store.SetWatermarkParams{Pipeline: w.Pipeline, LogicalDate: to, Now: time.Now()}); err != nil {
			return err
		}
	}
	return nil
}

// runDates creates the backfill's runs (and hands over the existing runs the
// reprocess behaviour selects), then runs them beside whatever else is due:
// scheduled runs keep their priority.
func (a *applier) runDates(ctx context.Context) error {
	st := a.o.Store
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
	sum, err := scheduler.Run(ctx, scheduler.Options{
		Store: st, Workspace: a.o.Workspace, Now: a.o.Now, Clock: a.o.Clock, RefreshEvery: a.o.RefreshEvery,
		Home: a.o.Home, Wait: true, Grace: a.o.Grace,
		Backfill: &scheduler.BackfillRun{ID: a.b.ID, Pipeline: a.def.Name, MaxActiveRuns: a.plan.MaxActiveRuns, Reverse: a.plan.Reverse,
			IncludePaused: a.plan.IncludePaused, Hold: a.hold},
		OnProgress: a.o.OnProgress, Log: a.o.Log,
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
func (a *applier) rebuild(ctx context.Context) error {
	if len(a.b.Paused) > 0 {
		consumers := slices.Clone(a.b.Paused)
		for _, c := range consumers {
			// While a consumer is paused, nothing of it has run since the
			// clear: clearing again after a crash here changes nothing.
			if _, err := a.o.Store.ClearTasks(ctx, store.ClearTasksParams{Pipeline: c, From: a.b.From, To: a.b.To, Now: time.Now()}); err != nil {
				return err
			}
		}
		a.plan.Rebuilt = consumers
		raw, err := json.Marshal(a.plan)
		if err != nil {
			return err
		}
		text := string(raw)
		if err := a.o.Store.UpdateBackfill(ctx, store.UpdateBackfillParams{ID: a.b.ID, Plan: &text, Now: time.Now()}); err != nil {
			return err
		}
		if err := a.unpause(ctx); err != nil {
			return err
		}
	}
	if len(a.plan.Rebuilt) == 0 {
		return nil
	}
	_, err := scheduler.Run(ctx, scheduler.Options{Store: a.o.Store, Workspace: a.o.Workspace, Pipelines: a.plan.Rebuilt, Now: a.o.Now, Home: a.o.Home, Wait: true, Grace: a.o.Grace, Log: a.o.Log})
	return err
}

func (a *applier) report(ctx context.Context) error {
	text, err := BackfillReport(ctx, a.o.Store, a.b, a.plan)
	if err != nil {
		return err
	}
	if len(a.def.Outputs) > 0 {
		cs := a.res.Corrections
		if cs == nil && len(a.selected()) > 0 { // resumed after validation: the tag holds the old main
			if cs, err = Corrections(ctx, a.lakes, a.def, TagName(a.b.ID), "main", a.selected()); errors.Is(err, lake.ErrNoSuchRef) {
				cs = nil // main had nothing to tag: no correction to show
			} else if err != nil {
				return err
			}
		}
		text += "\n## Corrections of the outputs\n\n" + correctionsTable(cs)
	}
	// The report is stored and sent: never a sensitive value in it.
	text = a.o.Workspace.Redact(text)
	path := filepath.Join(a.o.Home, "backfills", a.b.ID+".md")
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		return err
	}
	a.res.ReportPath = path
	return notifyAll(ctx, a.o.Workspace, a.b, a.runsFailed(ctx), path, text)
}

// BackfillReport is the Markdown summary of a backfill: window, dates,
// attempts, failures, durations, pools, downstream.
func BackfillReport(ctx context.Context, st store.Store, b store.Backfill, plan Plan) (string, error) {
	runs, err := st.ListRuns(ctx, store.ListRunsParams{Pipelines: []string{b.Pipeline}, From: b.From, To: b.To, WithTasks: true, WithAttempts: true})
	if err != nil {
		return "", err
	}
	var (
		ok, failed, attempts int
		failedDates          []string
		durations            []time.Duration
		pools                = map[string]int{}
		first, last          time.Time
	)
	for _, r := range runs {
		if r.BackfillID != b.ID {
			continue
		}
		switch r.State {
		case store.RunSuccess:
			ok++
		case store.RunFailed:
			failed++
			failedDates = append(failedDates, r.DS)
		}
		if !r.StartedAt.IsZero() && !r.EndedAt.IsZero() {
			durations = append(durations, r.EndedAt.Sub(r.StartedAt))
			if first.IsZero() || r.StartedAt.Before(first) {
				first = r.StartedAt
			}
			if r.EndedAt.After(last) {
				last = r.EndedAt
			}
		}
		for _, ti := range r.Tasks {
			for _, at := range ti.Attempts {
				if at.StartedAt.Before(b.CreatedAt) {
					continue // an attempt of the run before the backfill took it over
				}
				attempts++
				pools[at.Pool]++
			}
		}
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "# Backfill %s\n\n", b.ID)
	fmt.Fprintf(&sb, "- pipeline: %s\n- window: %s .. %s (reprocess %s%s)\n", b.Pipeline, plan.Start, plan.End, plan.Reprocess, map[bool]string{true: ", newest first", false: ""}[plan.Reverse])
	fmt.Fprintf(&sb, "- dates: %d planned, %d succeeded, %d failed\n", plan.Selected, ok, failed)
	fmt.Fprintf(&sb, "- attempts: %d\n", attempts)
	if len(durations) > 0 {
		fmt.Fprintf(&sb, "- wall clock: %s; median run %s; %d waves of up to %d runs\n", last.Sub(first).Round(time.Second), skew.MedianDuration(durations).Round(time.Millisecond), plan.Waves, plan.MaxActiveRuns)
	}
	names := make([]string, 0, len(pools))
	for p := range pools {
		names = append(names, p)
	}
	sort.Strings(names)
	for _, p := range names {
		fmt.Fprintf(&sb, "- pool %s: %d attempts\n", p, pools[p])
	}
	if len(plan.Watermarks) > 0 {
		sb.WriteString("\n## Watermarks reset\n\n")
		for _, w := range plan.Watermarks {
			fmt.Fprintf(&sb, "- %s: %s -> %s\n", w.Pipeline, w.Current, orNone(w.ResetTo))
		}
	}
	if len(plan.Downstream) > 0 {
		fmt.Fprintf(&sb, "\n## Downstream\n\nPaused during the backfill, then rebuilt for the window: %s\n", strings.Join(plan.Downstream, ", "))
	}
	if failed > 0 {
		fmt.Fprintf(&sb, "\n## Failed dates\n\n%s\n", strings.Join(failedDates, ", "))
	}
	return sb.String(), nil
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}
