package backfill

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/rewind-dev/rewind/dsl"
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
	// Batch: one run per span of it (zero: the pipeline's backfill
	// batch; none there either: one run per date).
	Batch dsl.Batch
	// NoBatch: one run per date, whatever the pipeline's default.
	NoBatch bool
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
	// Batch is the logical date of the batch's run that covers this date
	// (its first date; "" without batches).
	Batch string `json:"batch,omitempty"`
	// Detector names the detector that routed the date to Pool
	// (hot_dates, hot_when, probe, history, oom_escalation; skew.Detector*);
	// "" when none did.
	Detector string `json:"detector"`
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
	// Batch: one run covers the selected dates of each span of it ("1d",
	// "1w", ...; "" without batches); Batches are those runs, oldest
	// first.
	Batch   string      `json:"batch,omitempty"`
	Batches []PlanBatch `json:"batches,omitempty"`
	// Rebuilt: the consumers whose window dates the backfill cleared for
	// their rebuild (recorded by rebuild_downstream, before unpausing them).
	Rebuilt []string `json:"rebuilt,omitempty"`
	// PhaseTimes: when apply started and ended each phase, recorded with
	// the phase in the state as it goes (status and the web view show
	// them); none in a plan not applied yet.
	PhaseTimes []PhaseTime `json:"phase_times,omitempty"`
}

// PhaseTime is when a backfill's phase ran: its first start and its last
// end (RFC 3339, UTC); Ended is "" while it runs, or when the apply that
// ran it died in it (a resumed apply ends it).
type PhaseTime struct {
	Phase   string `json:"phase"`
	Started string `json:"started"`
	Ended   string `json:"ended,omitempty"`
}

// PhaseTimeOf is the record of phase ph's times, if it started.
func (p Plan) PhaseTimeOf(ph string) (PhaseTime, bool) {
	for _, t := range p.PhaseTimes {
		if t.Phase == ph {
			return t, true
		}
	}
	return PhaseTime{}, false
}

// StartPhase records that phase ph started at t: a phase started before
// (a resumed apply) keeps its first start and is running again.
func (p *Plan) StartPhase(ph string, t time.Time) {
	for i := range p.PhaseTimes {
		if p.PhaseTimes[i].Phase == ph {
			p.PhaseTimes[i].Ended = ""
			return
		}
	}
	p.PhaseTimes = append(p.PhaseTimes, PhaseTime{Phase: ph, Started: t.UTC().Format(time.RFC3339)})
}

// EndPhase records that phase ph ended at t (nothing for a phase that did
// not start).
func (p *Plan) EndPhase(ph string, t time.Time) {
	for i := range p.PhaseTimes {
		if p.PhaseTimes[i].Phase == ph {
			p.PhaseTimes[i].Ended = t.UTC().Format(time.RFC3339)
		}
	}
}

// SubDaily reports whether the plan names its dates by their logical
// date-time (RFC 3339 with the pipeline's offset) rather than by their ds:
// when a day has several of them (a sub-daily schedule), 24 lines of one
// day say nothing.
func (p Plan) SubDaily() bool {
	for i := 1; i < len(p.Dates); i++ {
		if p.Dates[i].DS == p.Dates[i-1].DS {
			return true
		}
	}
	return false
}

// DateName is how the plan's date d is named to the operator: its ds, or
// its logical date when the plan is SubDaily.
func (p Plan) DateName(d PlanDate) string {
	if p.SubDaily() {
		return d.LogicalDate
	}
	return d.DS
}

// Window names the plan's window: its first and last day (Start, End), or,
// for a SubDaily plan, its first and last logical dates.
func (p Plan) Window() (from, to string) {
	if !p.SubDaily() {
		return p.Start, p.End
	}
	return p.Dates[0].LogicalDate, p.Dates[len(p.Dates)-1].LogicalDate
}

// WindowOf names backfill b's window as status and list show it: the
// first and last day, or, for a sub-daily backfill, the first and last
// logical dates of its plan (Plan.Window).
func WindowOf(b store.Backfill) (from, to string) {
	var p Plan
	if b.Plan != "" && json.Unmarshal([]byte(b.Plan), &p) == nil && p.SubDaily() {
		return p.Window()
	}
	return b.From.Format(skew.DateOnly), b.To.Format(skew.DateOnly)
}

// Skipped says why a backfill of the plan passes phase without anything
// to do ("" when it does the phase): a pipeline without outputs has nothing
// to validate or cut over, nor has a plan that selected no date.
func (p Plan) Skipped(phase string) string {
	if phase != PhaseValidate && phase != PhaseCutover {
		return ""
	}
	switch {
	case !p.Outputs:
		return "no outputs"
	case p.Selected == 0:
		return "no date selected"
	}
	return ""
}

// RenamePlan is a recorded plan (JSON, as apply stores it) with pipeline
// from named to wherever the plan names a pipeline: the one backfilled,
// the consumers, the watermarks reset. renamed says whether it named from
// at all; a plan that does not is returned as it was.
func RenamePlan(raw, from, to string) (out string, renamed bool, err error) {
	if raw == "" {
		return raw, false, nil
	}
	var plan Plan
	if err := json.Unmarshal([]byte(raw), &plan); err != nil {
		return raw, false, fmt.Errorf("plan: %w", err)
	}
	swap := func(name *string) {
		if *name == from {
			*name, renamed = to, true
		}
	}
	swap(&plan.Pipeline)
	for i := range plan.Watermarks {
		swap(&plan.Watermarks[i].Pipeline)
	}
	for i := range plan.Downstream {
		swap(&plan.Downstream[i])
	}
	for i := range plan.Rebuilt {
		swap(&plan.Rebuilt[i])
	}
	if !renamed {
		return raw, false, nil
	}
	b, err := json.Marshal(plan)
	if err != nil {
		return raw, false, fmt.Errorf("plan: %w", err)
	}
	return string(b), true, nil
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
	if len(ivs) == 0 {
		return nil, emptyWindow(tt, def, pp.Start, pp.End, now)
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
	if err := checkDependsOnPast(def, tasks, pp, ivs, existing); err != nil {
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
			Pool: routes[i].Pool, Reason: routes[i].Reason, Detector: routes[i].Detector}
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
	batch := pp.Batch
	if batch.N == 0 && !pp.NoBatch {
		batch = def.BackfillBatch
	}
	if batch.N > 0 {
		ends := make([]time.Time, len(ivs))
		for i, iv := range ivs {
			ends[i] = iv.End
		}
		plan.Batch = batch.String()
		if err := makeBatches(plan, batch, def.Timezone, pp.Start, ends); err != nil {
			return nil, err
		}
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
	nruns := plan.Selected // one run per date, or per batch
	if plan.Batch != "" {
		nruns = len(plan.Batches)
	}
	if plan.Parallel > 0 {
		plan.Waves = (nruns + plan.Parallel - 1) / plan.Parallel
	}
	if d, err := medianRunDuration(ctx, st, def); err != nil {
		return nil, err
	} else {
		plan.RunSeconds = d.Seconds()
		plan.EstimateSeconds = float64(plan.Waves) * d.Seconds()
		if nruns > 0 && plan.Batch != "" {
			// A batch's run does the work of its intervals.
			plan.EstimateSeconds *= float64(plan.Selected) / float64(nruns)
		}
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

// emptyWindow says why a window holds no interval to backfill: no
// schedule slot in it, or not due yet (wholly after now).
func emptyWindow(tt *timetable.Timetable, def *dsl.Pipeline, start, end, now time.Time) error {
	if start.After(now) {
		return fmt.Errorf("the window %s..%s is in the future (now is %s): nothing of it is due; nothing was changed",
			stampOf(def, start), stampOf(def, end), stampOf(def, now))
	}
	for range tt.Intervals(timetable.Window{StartDate: def.StartDate, EndDate: def.EndDate, From: start, To: end}) {
		// A slot, not due yet: its interval has not ended.
		return fmt.Errorf("no interval of %s between %s and %s has ended yet (now is %s): nothing is due; nothing was changed",
			def.Name, stampOf(def, start), stampOf(def, end), stampOf(def, now))
	}
	return fmt.Errorf("no schedule slot of %s (%s) between %s and %s: nothing to backfill; nothing was changed",
		def.Name, def.Schedule, stampOf(def, start), stampOf(def, end))
}

// stampOf is t as a plan names a bound: the day at midnight (or at the
// last second of a day, as --end DAY is taken), else the date-time, in the
// pipeline's zone.
func stampOf(def *dsl.Pipeline, t time.Time) string {
	t = t.In(def.Timezone)
	if t.Hour() == 0 && t.Minute() == 0 && t.Second() == 0 || t.Hour() == 23 && t.Minute() == 59 && t.Second() == 59 {
		return t.Format(skew.DateOnly)
	}
	return t.Format(time.RFC3339)
}

// checkDependsOnPast refuses the backfills that a depends_on_past task
// would leave unable to finish: one in reverse (every date would wait for
// the later one), and one that skips a date that did not succeed (every
// later date would wait for it). The first date of a backfill does not wait
// for the date before the window (the scheduler's firstOfBackfill).
func checkDependsOnPast(def *dsl.Pipeline, selected []string, pp PlanParams, ivs []timetable.Interval, existing map[int64]store.Run) error {
	var dop string
	for _, t := range def.Tasks {
		if t.DependsOnPast && (len(selected) == 0 || slices.Contains(selected, t.Name)) {
			dop = t.Name
			break
		}
	}
	if dop == "" {
		return nil
	}
	if pp.Reverse {
		return fmt.Errorf("--reverse with task %q of %s, which depends_on_past: each date would wait for the one before it, run later; backfill it oldest first (without --reverse)", dop, def.Name)
	}
	for _, iv := range ivs[:len(ivs)-1] {
		r, ok := existing[iv.Start.Unix()]
		if !ok || r.State == store.RunSuccess || r.State == store.RunQueued || r.State == store.RunRunning {
			continue
		}
		if pp.Reprocess == ReprocessNone {
			return fmt.Errorf("--reprocess none would skip the %s run of %s %s, and task %q depends_on_past: every later date of the window would wait for it; use --reprocess failed (runs it again) or start the window after it", r.State, def.Name, stampOf(def, iv.Start), dop)
		}
	}
	return nil
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
