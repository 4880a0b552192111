package scheduler_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rewind-dev/rewind/backfill"
	"github.com/rewind-dev/rewind/dsl"
	"github.com/rewind-dev/rewind/scheduler"
	"github.com/rewind-dev/rewind/store"
)

// ledgerHCL is the revenue pipeline whose tasks also append
// "ds run_id factor" to ledger.log as their last step: which dates ran to
// the end, in which run, with which version of the code (the factor). An
// attempt interrupted before its end (a resume runs it again) leaves no
// line. A consumer reads it.
const ledgerHCL = `
catalog "local" {
  uri       = ".rewind/catalog.db"
  warehouse = ".rewind/warehouse"
}
pipeline "revenue" {
  schedule        = "@daily"
  start_date      = "2025-07-01"
  max_active_runs = 3
  task "compute" {
    command = "f=$(cat factor); awk -v ds=$REWIND_DS -v f=$f 'BEGIN { print \"ds,currency,amount_usd\"; print ds \",EUR,\" 100*f }' > $REWIND_RUN_DIR/revenue.csv && echo \"$REWIND_DS $REWIND_RUN_ID $f\" >> ledger.log"
  }
  output "revenue" {
    table     = "analytics.fct_daily_revenue"
    from      = "${run.dir}/revenue.csv"
    columns   = { ds = "date", currency = "string", amount_usd = "double" }
    partition = "ds"
    validate {
      max_change = { amount_usd = 10 }
    }
  }
}
pipeline "kpis" {
  schedule   = "@daily"
  start_date = "2025-07-01"
  consumes   = [pipeline.revenue]
  task "t" { command = "echo \"$REWIND_DS\" >> kpis.log" }
}
`

// ledger counts, per date, the attempts that ran to the end with each factor.
func (e *env) ledger() map[string][]string {
	out := map[string][]string{}
	for _, line := range e.events("ledger.log") {
		f := strings.Fields(line)
		if len(f) == 3 {
			out[f[0]] = append(out[f[0]], f[2])
		}
	}
	return out
}

// mainAmounts is main's amount per date.
func (e *env) mainAmounts() map[string]float64 {
	out := map[string]float64{}
	for ds, s := range e.stats("main") {
		out[ds] = s.Sums["amount_usd"]
	}
	return out
}

// noWedgedRuns fails when a run is left queued or running: every test here
// ends with no process.
func (e *env) noWedgedRuns(pipelines ...string) {
	e.t.Helper()
	for _, p := range pipelines {
		for _, r := range e.runs(p) {
			if r.State == store.RunQueued || r.State == store.RunRunning {
				e.t.Errorf("%s %s is %s with no process (kind %s, backfill %q)", p, r.DS, r.State, r.Kind, r.BackfillID)
			}
		}
	}
}

func dates(from, to string) []string {
	a, _ := time.Parse(time.DateOnly, from)
	b, _ := time.Parse(time.DateOnly, to)
	var out []string
	for d := a; !d.After(b); d = d.AddDate(0, 0, 1) {
		out = append(out, d.Format(time.DateOnly))
	}
	return out
}

// interruptAfter returns a context cancelled once n runs of the execution
// have finished, and the OnProgress that counts them.
func interruptAfter(n int) (context.Context, func(scheduler.Progress)) {
	ctx, cancel := context.WithCancel(context.Background())
	return ctx, func(p scheduler.Progress) {
		if p.Done() >= n {
			cancel()
		}
	}
}

// The seeds' first sequence: a pipeline paused during an interrupted
// backfill. The resume refuses to run nothing silently; with
// --include-paused it runs exactly the dates left (none twice), the
// scheduled runs stay paused, and --force cannot cut over unfinished dates.
func TestBackfillPausedPipelineAndResume(t *testing.T) {
	e := newEnv(t, ledgerHCL)
	ctx := context.Background()
	e.setFactor("1")
	now := utc("2025-07-31T00:00:00Z")
	e.run(scheduler.Options{Now: now, Pipelines: []string{"revenue"}})
	e.setFactor("2")
	plan := e.plan(backfill.PlanParams{Pipeline: "revenue", Start: utc("2025-07-01T00:00:00Z"), End: utc("2025-07-29T00:00:00Z"), Reprocess: "completed", Now: now})
	ictx, onProgress := interruptAfter(10)
	res, _ := backfill.ApplyBackfill(ictx, backfill.ApplyOptions{Store: e.st, Workspace: e.ws, Home: e.home, Plan: plan, Now: now,
		Grace: time.Second, OnProgress: onProgress})
	if res == nil || res.State == store.BackfillSuccess {
		t.Fatalf("the interrupted backfill: %+v", res)
	}
	id := res.ID
	if err := e.st.SetPaused(ctx, store.SetPausedParams{Name: "revenue", Paused: true, Now: time.Now()}); err != nil {
		t.Fatal(err)
	}
	// --force never cuts over unfinished dates, and a paused pipeline is
	// not resumed into running nothing.
	_, err := e.apply(backfill.ApplyOptions{ResumeID: id, Now: now, Force: true})
	if !errors.Is(err, backfill.ErrPipelinePaused) {
		t.Fatalf("resume of a paused pipeline: %v", err)
	}
	before := e.ledger()
	res, err = e.apply(backfill.ApplyOptions{ResumeID: id, Now: now, IncludePaused: true})
	if err != nil || res.State != store.BackfillSuccess {
		t.Fatalf("resume with --include-paused: %v (%+v)", err, res)
	}
	after := e.ledger()
	for _, ds := range dates("2025-07-01", "2025-07-29") {
		var v2 int
		for _, f := range after[ds] {
			if f == "2" {
				v2++
			}
		}
		if v2 != 1 {
			t.Errorf("%s ran %d times with the new code (before the resume %v, after %v); want once", ds, v2, before[ds], after[ds])
		}
		if got := e.mainAmounts()[ds]; got != 200 {
			t.Errorf("main %s = %g; want the new version 200", ds, got)
		}
	}
	if p, _ := e.st.GetPipeline(ctx, "revenue"); !p.Paused {
		t.Error("the backfill unpaused the pipeline")
	}
	e.noWedgedRuns("revenue")
}

// Validate and cutover wait for every date: a backfill with a failed date
// stops before validation even with --force, main untouched, consumers
// unpaused; the failed date is retried by the resume, which then cuts over.
func TestBackfillForceNeverCutsOverUnfinishedDates(t *testing.T) {
	e := newEnv(t, strings.Replace(ledgerHCL, `f=$(cat factor);`, `f=$(cat factor); if [ $REWIND_DS = 2025-07-03 ] && [ -e fail ]; then exit 1; fi;`, 1))
	ctx := context.Background()
	e.setFactor("1")
	now := utc("2025-07-06T00:00:00Z")
	e.run(scheduler.Options{Now: now})
	e.setFactor("2")
	e.touch("fail")
	plan := e.plan(backfill.PlanParams{Pipeline: "revenue", Start: utc("2025-07-01T00:00:00Z"), End: utc("2025-07-05T00:00:00Z"), Reprocess: "completed", Now: now})
	res, err := e.apply(backfill.ApplyOptions{Plan: plan, Now: now, Force: true})
	if !errors.Is(err, backfill.ErrUnfinished) || res.State != store.BackfillFailed {
		t.Fatalf("apply with a failed date and --force: %v (%s)", err, res.State)
	}
	if !strings.Contains(err.Error(), "failed: 2025-07-03") {
		t.Errorf("the error does not name the failed date: %v", err)
	}
	for ds, got := range e.mainAmounts() {
		if got != 100 {
			t.Errorf("main %s = %g after a failed backfill; want it untouched (100)", ds, got)
		}
	}
	if p, _ := e.st.GetPipeline(ctx, "kpis"); p.Paused {
		t.Error("the consumer stays paused although main is untouched")
	}
	if len(res.Unpaused) != 1 || res.Unpaused[0] != "kpis" {
		t.Errorf("result says unpaused %v; want [kpis]", res.Unpaused)
	}
	e.remove("fail")
	before := e.ledger()
	res, err = e.apply(backfill.ApplyOptions{ResumeID: res.ID, Now: now})
	if err != nil || res.State != store.BackfillSuccess {
		t.Fatalf("resume: %v (%+v)", err, res)
	}
	after := e.ledger()
	for _, ds := range dates("2025-07-01", "2025-07-05") {
		want := 0
		if ds == "2025-07-03" {
			want = 1 // only the failed date runs again
		}
		if n := len(after[ds]) - len(before[ds]); n != want {
			t.Errorf("the resume ran %s %d times; want %d", ds, n, want)
		}
		if got := e.mainAmounts()[ds]; got != 200 {
			t.Errorf("main %s = %g; want 200", ds, got)
		}
	}
	e.noWedgedRuns("revenue", "kpis")
}

// A cancelled backfill's finished dates live only on its branch: a later
// backfill with --reprocess failed runs them again, so main never mixes the
// old and the new code.
func TestBackfillAfterCancelDoesNotMixVersions(t *testing.T) {
	e := newEnv(t, ledgerHCL)
	ctx := context.Background()
	e.setFactor("1")
	now := utc("2025-07-13T00:00:00Z")
	e.run(scheduler.Options{Now: now})
	e.setFactor("2")
	plan := e.plan(backfill.PlanParams{Pipeline: "revenue", Start: utc("2025-07-01T00:00:00Z"), End: utc("2025-07-12T00:00:00Z"), Reprocess: "completed", Now: now})
	ictx, onProgress := interruptAfter(4)
	res, _ := backfill.ApplyBackfill(ictx, backfill.ApplyOptions{Store: e.st, Workspace: e.ws, Home: e.home, Plan: plan, Now: now,
		Grace: time.Second, OnProgress: onProgress})
	if _, err := backfill.CancelBackfill(ctx, e.st, res.ID); err != nil {
		t.Fatalf("cancel of the interrupted backfill: %v", err)
	}
	e.noWedgedRuns("revenue", "kpis")
	plan = e.plan(backfill.PlanParams{Pipeline: "revenue", Start: utc("2025-07-01T00:00:00Z"), End: utc("2025-07-12T00:00:00Z"), Reprocess: "failed", Now: now})
	if plan.Selected != 12 {
		var lines []string
		for _, d := range plan.Dates {
			lines = append(lines, fmt.Sprintf("%s %s %s %s %s", d.DS, d.State, d.Action, d.Result, d.Reason))
		}
		t.Fatalf("reprocess failed after a cancel selects %d dates; want all 12:\n%s", plan.Selected, strings.Join(lines, "\n"))
	}
	e.setFactor("3")
	res, err := e.apply(backfill.ApplyOptions{Plan: plan, Now: now})
	if err != nil || res.State != store.BackfillSuccess {
		t.Fatalf("second backfill: %v", err)
	}
	for _, ds := range dates("2025-07-01", "2025-07-12") {
		if got := e.mainAmounts()[ds]; got != 300 {
			t.Errorf("main %s = %g; want 300 everywhere (no mix of versions)", ds, got)
		}
	}
}

// A failed backfill's unfinished runs are not wedged: rewind clear hands
// them back to the pipeline and rewind run runs them onto main.
func TestFailedBackfillRunsCanBeCleared(t *testing.T) {
	e := newEnv(t, ledgerHCL)
	ctx := context.Background()
	e.setFactor("1")
	now := utc("2025-07-11T00:00:00Z")
	e.run(scheduler.Options{Now: now})
	e.setFactor("2")
	plan := e.plan(backfill.PlanParams{Pipeline: "revenue", Start: utc("2025-07-01T00:00:00Z"), End: utc("2025-07-10T00:00:00Z"), Reprocess: "completed", Now: now})
	ictx, onProgress := interruptAfter(3)
	res, _ := backfill.ApplyBackfill(ictx, backfill.ApplyOptions{Store: e.st, Workspace: e.ws, Home: e.home, Plan: plan, Now: now,
		Grace: time.Second, OnProgress: onProgress})
	if res.State != store.BackfillFailed {
		t.Fatalf("interrupted backfill is %s", res.State)
	}
	n, err := e.st.ClearTasks(ctx, store.ClearTasksParams{Pipeline: "revenue", From: utc("2025-07-01T00:00:00Z"), To: utc("2025-07-10T00:00:00Z"), Now: time.Now()})
	if err != nil || n == 0 {
		t.Fatalf("clear: %d, %v", n, err)
	}
	sum := e.run(scheduler.Options{Now: now})
	if sum.Failed() {
		t.Fatalf("run: %+v", sum)
	}
	e.noWedgedRuns("revenue", "kpis")
	for _, ds := range dates("2025-07-01", "2025-07-10") {
		if got := e.mainAmounts()[ds]; got != 200 {
			t.Errorf("main %s = %g; want 200 (cleared and run onto main)", ds, got)
		}
	}
}

// backfill pause holds a running backfill: nothing new starts while its
// running attempts finish; unpause lets it go on to success.
func TestBackfillPauseHolds(t *testing.T) {
	e := newEnv(t, strings.Replace(ledgerHCL, `f=$(cat factor);`, `f=$(cat factor); sleep 0.3;`, 1))
	ctx := context.Background()
	e.setFactor("1")
	now := utc("2025-07-13T00:00:00Z")
	plan := e.plan(backfill.PlanParams{Pipeline: "revenue", Start: utc("2025-07-01T00:00:00Z"), End: utc("2025-07-12T00:00:00Z"), Now: now})
	ids := make(chan string, 20)
	var done atomic.Int64
	finished := make(chan *backfill.BackfillResult, 1)
	go func() {
		res, err := e.apply(backfill.ApplyOptions{Plan: plan, Now: now, OnPhase: func(id, _ string) { ids <- id },
			OnProgress: func(p scheduler.Progress) { done.Store(int64(p.Done())) }})
		if err != nil {
			t.Log(err)
		}
		finished <- res
	}()
	id := <-ids
	for deadline := time.Now().Add(30 * time.Second); done.Load() < 2; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no run finished")
		}
	}
	if _, err := backfill.HoldBackfill(ctx, e.st, id, true); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second) // the apply sees the hold within 250 ms; running attempts (0.3 s) end
	held := len(e.events("ledger.log"))
	time.Sleep(1500 * time.Millisecond)
	if now := len(e.events("ledger.log")); now != held {
		t.Fatalf("%d attempts started while the backfill was paused", now-held)
	}
	select {
	case res := <-finished:
		t.Fatalf("apply ended while paused: %+v", res)
	default:
	}
	if _, err := backfill.HoldBackfill(ctx, e.st, id, false); err != nil {
		t.Fatal(err)
	}
	select {
	case res := <-finished:
		if res.State != store.BackfillSuccess {
			for _, r := range e.runs("revenue") {
				for _, ti := range r.Tasks {
					for _, a := range ti.Attempts {
						b, _ := os.ReadFile(a.LogPath)
						t.Logf("%s %s %s: %s", r.DS, ti.State, a.State, b)
					}
				}
			}
			t.Fatalf("after unpause: %s", res.State)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the backfill did not go on after unpause")
	}
	if got := len(e.ledger()); got != 12 {
		t.Errorf("%d dates ran; want 12", got)
	}
}

// --task re-runs only that task (and, with --downstream, what depends on
// it) over the window: the other tasks keep their successes.
func TestBackfillOfOneTaskAndDownstream(t *testing.T) {
	e := newEnv(t, `
pipeline "p" {
  schedule   = "@daily"
  start_date = "2025-07-01"
  task "extract"   { command = "echo \"extract $REWIND_DS\" >> events.log" }
  task "transform" {
    command    = "echo \"transform $REWIND_DS\" >> events.log"
    depends_on = [task.extract]
  }
  task "load" {
    command    = "echo \"load $REWIND_DS\" >> events.log"
    depends_on = [task.transform]
  }
}
`)
	now := utc("2025-07-11T00:00:00Z")
	e.run(scheduler.Options{Now: now})
	before := counts(e.events("events.log"))
	plan := e.plan(backfill.PlanParams{Pipeline: "p", Start: utc("2025-07-01T00:00:00Z"), End: utc("2025-07-10T00:00:00Z"), Tasks: []string{"transform"}, TaskDownstream: true, Now: now})
	if fmt.Sprint(plan.Tasks) != "[transform load]" || plan.Selected != 10 {
		t.Fatalf("plan: tasks %v, %d dates", plan.Tasks, plan.Selected)
	}
	if res, err := e.apply(backfill.ApplyOptions{Plan: plan, Now: now}); err != nil || res.State != store.BackfillSuccess {
		t.Fatalf("apply: %v", err)
	}
	after := counts(e.events("events.log"))
	for _, ds := range dates("2025-07-01", "2025-07-10") {
		for task, want := range map[string]int{"extract": 0, "transform": 1, "load": 1} {
			if n := after[task+" "+ds] - before[task+" "+ds]; n != want {
				t.Errorf("%s %s ran %d more times; want %d", task, ds, n, want)
			}
		}
	}
	if _, err := backfill.MakePlan(context.Background(), e.st, backfill.PlanParams{Workspace: e.ws, Pipeline: "p",
		Start: utc("2025-07-01T00:00:00Z"), End: utc("2025-07-10T00:00:00Z"), Tasks: []string{"transfrom"}, Now: now}); err == nil ||
		!strings.Contains(err.Error(), `unknown task "transfrom" of pipeline p (known: extract, transform, load)`) {
		t.Errorf("misspelled task: %v", err)
	}
}

func (e *env) touch(name string) {
	e.t.Helper()
	if err := os.WriteFile(filepath.Join(e.dir, name), nil, 0o644); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) remove(name string) {
	e.t.Helper()
	if err := os.Remove(filepath.Join(e.dir, name)); err != nil {
		e.t.Fatal(err)
	}
}

func counts(lines []string) map[string]int {
	out := map[string]int{}
	for _, l := range lines {
		out[l]++
	}
	return out
}

// Every run of a catchup with outputs and a consumer finishes: SQLite
// reuses the id of a deleted outbox row, and a committer that knew entries
// by id alone dropped the new one, leaving its run committing and the
// execution ended with 18 of 24 runs unfinished.
func TestOutboxIDReuse(t *testing.T) {
	for i := 0; i < 3; i++ {
		e := newEnv(t, ledgerHCL)
		e.setFactor("1")
		sum := e.run(scheduler.Options{Now: utc("2025-07-13T00:00:00Z")})
		if sum.Unfinished > 0 || len(sum.Finished) != 24 || sum.Failed() {
			t.Fatalf("%d finished, %d unfinished; want the 24 runs of revenue and kpis", len(sum.Finished), sum.Unfinished)
		}
	}
}

// A failed validation leaves main untouched and unpauses the consumers
// (the seeds' sixth sequence); --force then cuts over.
func TestFailedValidationUnpausesConsumers(t *testing.T) {
	e := newEnv(t, strings.Replace(ledgerHCL, "max_change = { amount_usd = 10 }", "max_change = { amount_usd = 0.5 }", 1))
	ctx := context.Background()
	e.setFactor("1")
	now := utc("2025-07-06T00:00:00Z")
	e.run(scheduler.Options{Now: now})
	e.setFactor("3") // +200 %, over the 50 % rule
	plan := e.plan(backfill.PlanParams{Pipeline: "revenue", Start: utc("2025-07-01T00:00:00Z"), End: utc("2025-07-05T00:00:00Z"), Reprocess: "completed", Now: now})
	res, err := e.apply(backfill.ApplyOptions{Plan: plan, Now: now})
	if !errors.Is(err, backfill.ErrValidation) {
		t.Fatalf("apply: %v; want a validation failure", err)
	}
	if p, _ := e.st.GetPipeline(ctx, "kpis"); p.Paused {
		t.Error("the consumer stays paused after a failed validation, main untouched")
	}
	if fmt.Sprint(res.Unpaused) != "[kpis]" {
		t.Errorf("the result says unpaused %v", res.Unpaused)
	}
	for ds, got := range e.mainAmounts() {
		if got != 100 {
			t.Errorf("main %s = %g after a failed validation", ds, got)
		}
	}
	res, err = e.apply(backfill.ApplyOptions{ResumeID: res.ID, Now: now, Force: true})
	if err != nil || res.State != store.BackfillSuccess {
		t.Fatalf("resume --force: %v", err)
	}
	for _, ds := range dates("2025-07-01", "2025-07-05") {
		if got := e.mainAmounts()[ds]; got != 300 {
			t.Errorf("main %s = %g after --force; want 300", ds, got)
		}
	}
	e.noWedgedRuns("revenue", "kpis")
}

// The nightly runs go on during a 30-date backfill and commit their dates
// to main: the cutover succeeds, the window holds the backfill's data, the
// nightly dates keep theirs; a rollback brings back the old window and
// keeps the nightly dates.
func TestNightlyRunsDuringA30DateBackfill(t *testing.T) {
	e := newEnv(t, ledgerHCL)
	e.setFactor("1")
	e.run(scheduler.Options{Now: utc("2025-07-31T00:00:00Z")})
	plan := e.plan(backfill.PlanParams{Pipeline: "revenue", Start: utc("2025-07-01T00:00:00Z"), End: utc("2025-07-30T00:00:00Z"), Reprocess: "completed", Now: utc("2025-07-31T00:00:00Z")})
	e.setFactor("2")
	nightlies := 0
	res, err := e.apply(backfill.ApplyOptions{Plan: plan, Now: utc("2025-07-31T00:00:00Z"), OnPhase: func(id, phase string) {
		if phase != backfill.PhaseValidate {
			return
		}
		// Three nights pass while the backfill validates: each commits
		// its date to main, with the code of that night (version 5).
		e.setFactor("5")
		for _, now := range []string{"2025-08-01", "2025-08-02", "2025-08-03"} {
			if sum := e.run(scheduler.Options{Now: utc(now + "T00:00:00Z"), Pipelines: []string{"revenue"}}); sum.Failed() {
				t.Errorf("nightly run of %s failed", now)
			}
			nightlies++
		}
	}})
	if err != nil || res.State != store.BackfillSuccess {
		t.Fatalf("apply over three nightly commits: %v (%+v)", err, res)
	}
	main := e.mainAmounts()
	for _, ds := range dates("2025-07-01", "2025-07-30") {
		if main[ds] != 200 {
			t.Errorf("main %s = %g; want the backfill's 200", ds, main[ds])
		}
	}
	for _, ds := range dates("2025-07-31", "2025-08-02") {
		if main[ds] != 500 {
			t.Errorf("nightly date %s = %g on main; want its own 500", ds, main[ds])
		}
	}
	if err := e.rollback(res.ID, utc("2025-08-03T00:00:00Z")); err != nil {
		t.Fatal(err)
	}
	main = e.mainAmounts()
	for _, ds := range dates("2025-07-01", "2025-07-30") {
		if main[ds] != 100 {
			t.Errorf("after rollback main %s = %g; want the old 100", ds, main[ds])
		}
	}
	for _, ds := range dates("2025-07-31", "2025-08-02") {
		if main[ds] != 500 {
			t.Errorf("after rollback nightly date %s = %g; want its own 500 kept", ds, main[ds])
		}
	}
}

// A task added to a pipeline reaches its history with a backfill of that
// task: the old runs get its task instance, it runs on every date, and
// the tasks that were there keep their successes.
func TestNewTaskReachesHistory(t *testing.T) {
	before := `
pipeline "p" {
  schedule   = "@daily"
  start_date = "2025-07-01"
  task "extract" { command = "echo \"extract $REWIND_DS\" >> events.log" }
}
`
	e := newEnv(t, before)
	now := utc("2025-07-11T00:00:00Z")
	e.run(scheduler.Options{Now: now})
	after := strings.Replace(before, "\n}\n", `
  task "enrich" {
    command    = "echo \"enrich $REWIND_DS\" >> events.log"
    depends_on = [task.extract]
  }
}
`, 1)
	if err := os.WriteFile(filepath.Join(e.dir, "main.hcl"), []byte(after), 0o644); err != nil {
		t.Fatal(err)
	}
	ws, diags := dsl.Load(e.dir, dsl.LoadOptions{})
	if diags.HasErrors() {
		t.Fatal(diags.Error())
	}
	e.ws = ws
	plan := e.plan(backfill.PlanParams{Pipeline: "p", Start: utc("2025-07-01T00:00:00Z"), End: utc("2025-07-10T00:00:00Z"), Tasks: []string{"enrich"}, Now: now})
	if res, err := e.apply(backfill.ApplyOptions{Plan: plan, Now: now}); err != nil || res.State != store.BackfillSuccess {
		t.Fatalf("apply: %v", err)
	}
	got := counts(e.events("events.log"))
	for _, ds := range dates("2025-07-01", "2025-07-10") {
		if got["extract "+ds] != 1 || got["enrich "+ds] != 1 {
			t.Errorf("%s: extract ran %d times, enrich %d; want 1 and 1", ds, got["extract "+ds], got["enrich "+ds])
		}
	}
}
