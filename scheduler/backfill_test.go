package scheduler_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rewind-dev/rewind/backfill"
	"github.com/rewind-dev/rewind/scheduler"
	"github.com/rewind-dev/rewind/store"
)

func (e *env) plan(pp backfill.PlanParams) *backfill.Plan {
	e.t.Helper()
	pp.Workspace = e.ws
	plan, err := backfill.MakePlan(context.Background(), e.st, pp)
	if err != nil {
		e.t.Fatalf("plan: %v", err)
	}
	return plan
}

func (e *env) apply(o backfill.ApplyOptions) (*backfill.BackfillResult, error) {
	e.t.Helper()
	o.Store, o.Workspace, o.Home = e.st, e.ws, e.home
	return backfill.ApplyBackfill(context.Background(), o)
}

// rollback rolls backfill id back, its consumers rebuilt with the clock now.
func (e *env) rollback(id string, now time.Time) error {
	e.t.Helper()
	_, err := backfill.RollbackBackfill(context.Background(), backfill.RollbackOptions{Store: e.st, Workspace: e.ws, ID: id, Home: e.home, Now: now})
	return err
}

func day(i int) time.Time { return utc("2025-01-01T00:00:00Z").AddDate(0, 0, i) }

// A 90-day window with 10 failed and 5 missing dates: reprocess failed
// selects those 15, completed all 90, none the 5 missing.
func TestPlanReprocess(t *testing.T) {
	e := newEnv(t, `
pipeline "p" {
  schedule   = "@daily"
  start_date = "2025-01-01"
  task "t" { command = "true" }
}
`)
	ctx := context.Background()
	var specs []store.RunSpec
	for i := range 90 {
		if i%18 == 7 { // 5 missing dates
			continue
		}
		d := day(i)
		specs = append(specs, store.RunSpec{LogicalDate: d, DS: d.Format("2006-01-02"), DataIntervalStart: d, DataIntervalEnd: d.AddDate(0, 0, 1)})
	}
	if _, err := e.st.MaterializeRuns(ctx, store.MaterializeRunsParams{Pipeline: "p", Kind: store.KindScheduled, Runs: specs, Tasks: []store.TaskSpec{{Name: "t", Pool: "default"}}, Now: time.Now()}); err != nil {
		t.Fatal(err)
	}
	runs := e.runs("p")
	for i, r := range runs {
		state := store.RunSuccess
		if i%8 == 3 && i < 80 { // 10 failed runs
			state = store.RunFailed
		}
		if err := e.st.AdmitRun(ctx, store.AdmitRunParams{RunID: r.ID, Now: time.Now()}); err != nil {
			t.Fatal(err)
		}
		// A run finishes only once its task instances say so.
		ts := store.TaskSuccess
		if state == store.RunFailed {
			ts = store.TaskFailed
		}
		if _, err := e.st.SetTaskStates(ctx, store.SetTaskStatesParams{IDs: []int64{r.Tasks[0].ID}, From: []store.TaskState{store.TaskScheduled}, To: ts, Now: time.Now()}); err != nil {
			t.Fatal(err)
		}
		if err := e.st.FinishRun(ctx, store.FinishRunParams{RunID: r.ID, State: state, Now: time.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	for reprocess, want := range map[string]int{"failed": 15, "completed": 90, "none": 5} {
		plan := e.plan(backfill.PlanParams{Pipeline: "p", Start: day(0), End: day(89), Reprocess: reprocess, MaxActiveRuns: 30, Now: utc("2025-06-01T00:00:00Z")})
		b, _ := json.Marshal(plan)
		var got struct {
			Selected int `json:"selected"`
			Dates    []struct {
				State, Action string
			} `json:"dates"`
		}
		if err := json.Unmarshal(b, &got); err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, d := range got.Dates {
			if d.Action != "skip" {
				n++
			}
			if reprocess == "failed" && (d.Action != "skip") != (d.State == "failed" || d.State == "none") {
				t.Errorf("reprocess failed: %s date -> %s", d.State, d.Action)
			}
		}
		if got.Selected != want || n != want || len(got.Dates) != 90 {
			t.Errorf("reprocess %s: selected %d (%d actions) of %d dates; want %d of 90", reprocess, got.Selected, n, len(got.Dates), want)
		}
	}
}

// A requires check failing for 3 dates stops apply before any task runs,
// naming the 3 dates; nothing changes but the backfill record.
func TestApplyStopsOnMissingSources(t *testing.T) {
	e := newEnv(t, `
pipeline "p" {
  schedule   = "@daily"
  start_date = "2025-01-01"
  requires "transactions" { path = "data/${run.ds}.csv" }
  task "t" { command = "echo ran >> ran.log" }
}
`)
	if err := os.MkdirAll(filepath.Join(e.dir, "data"), 0o755); err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		if i == 2 || i == 5 || i == 7 {
			continue
		}
		if err := os.WriteFile(filepath.Join(e.dir, "data", day(i).Format("2006-01-02")+".csv"), []byte("x\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	plan := e.plan(backfill.PlanParams{Pipeline: "p", Start: day(0), End: day(9), Now: utc("2025-02-01T00:00:00Z")})
	res, err := e.apply(backfill.ApplyOptions{Plan: plan, Now: utc("2025-02-01T00:00:00Z")})
	if !errors.Is(err, backfill.ErrSourcesMissing) {
		t.Fatalf("apply: %v; want missing sources", err)
	}
	for _, d := range []string{"2025-01-03", "2025-01-06", "2025-01-08"} {
		if !strings.Contains(err.Error(), d+": transactions:") {
			t.Errorf("the error does not name %s: %v", d, err)
		}
	}
	if len(res.Missing) != 3 {
		t.Errorf("missing %v; want 3 dates", res.Missing)
	}
	if runs := e.runs("p"); len(runs) != 0 || len(e.events("ran.log")) != 0 {
		t.Errorf("%d runs created, tasks ran: %v", len(runs), e.events("ran.log"))
	}
	b, err := e.st.GetBackfill(context.Background(), res.ID)
	if err != nil || b.State != store.BackfillFailed || b.Phase != backfill.PhaseVerify {
		t.Errorf("backfill record %+v, %v; want failed at verify", b, err)
	}
}

// Apply: the consumer is paused during the backfill, its affected dates run
// again after it, and it is unpaused at the end; the report goes to the
// notify command and to a webhook on 127.0.0.1; --reverse runs newest first.
func TestApplyRebuildsDownstreamAndNotifies(t *testing.T) {
	var hook []byte
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hook, _ = io.ReadAll(r.Body)
	}))
	defer srv.Close()
	e := newEnv(t, `
pipeline "revenue" {
  schedule        = "@daily"
  start_date      = "2025-01-01"
  max_active_runs = 1
  task "t" { command = "echo revenue $REWIND_DS $REWIND_RUN_KIND >> events.log" }
}
pipeline "report" {
  schedule   = "@daily"
  start_date = "2025-01-01"
  consumes   = [pipeline.revenue]
  task "t" { command = "echo report $REWIND_DS >> events.log" }
}
notify "finance" {
  command = ["sh", "-c", "cat > notified.md; echo $REWIND_BACKFILL_ID > notified.id"]
  webhook = "`+srv.URL+`/hook"
}
`)
	now := utc("2025-01-11T00:00:00Z")
	e.run(scheduler.Options{Now: now}) // ten days of both pipelines
	plan := e.plan(backfill.PlanParams{Pipeline: "revenue", Start: day(3), End: day(5), Reprocess: "completed", Reverse: true, Now: now})
	if len(plan.Downstream) != 1 || plan.Downstream[0] != "report" || len(plan.Watermarks) != 2 {
		t.Fatalf("plan: downstream %v, watermarks %v", plan.Downstream, plan.Watermarks)
	}
	pausedDuringRun := false
	res, err := e.apply(backfill.ApplyOptions{Plan: plan, Now: now, OnPhase: func(id, phase string) {
		if phase == backfill.PhaseRun {
			p, _ := e.st.GetPipeline(context.Background(), "report")
			pausedDuringRun = p.Paused
		}
	}})
	if err != nil || res.State != store.BackfillSuccess {
		t.Fatalf("apply: %v (%+v)", err, res)
	}
	if !pausedDuringRun {
		t.Error("the consumer was not paused while the backfill ran")
	}
	if p, _ := e.st.GetPipeline(context.Background(), "report"); p.Paused {
		t.Error("the consumer is still paused")
	}
	count := map[string]int{}
	var backfillOrder []string
	for _, l := range e.events("events.log") {
		f := strings.Fields(l)
		count[f[0]+" "+f[1]]++
		if f[0] == "revenue" && len(f) == 3 && f[2] == "backfill" {
			backfillOrder = append(backfillOrder, f[1])
		}
	}
	for i := range 10 {
		ds := day(i).Format("2006-01-02")
		want := 1
		if i >= 3 && i <= 5 {
			want = 2
		}
		if count["revenue "+ds] != want || count["report "+ds] != want {
			t.Errorf("%s: revenue ran %d, report %d times; want %d", ds, count["revenue "+ds], count["report "+ds], want)
		}
	}
	if strings.Join(backfillOrder, ",") != "2025-01-06,2025-01-05,2025-01-04" {
		t.Errorf("backfill order %v; want newest first", backfillOrder)
	}
	report, err := os.ReadFile(res.ReportPath)
	if err != nil || !strings.Contains(string(report), "- dates: 3 planned, 3 succeeded, 0 failed") {
		t.Errorf("report %q, %v", report, err)
	}
	if got := e.events("notified.md"); strings.Join(got, "\n")+"\n" != string(report) {
		t.Errorf("the notify command got %q", got)
	}
	if got := e.events("notified.id"); len(got) != 1 || got[0] != res.ID {
		t.Errorf("REWIND_BACKFILL_ID = %v; want %s", got, res.ID)
	}
	var body struct{ ID, Pipeline, State, Report string }
	if err := json.Unmarshal(hook, &body); err != nil || body.ID != res.ID || body.State != "success" || body.Report != string(report) {
		t.Errorf("webhook body %s (%v)", hook, err)
	}
}

// 180 dates of equal duration with max-active-runs 30 run in 6 waves: in the
// plan's estimate and in the attempts' timings. A scheduled run due at the
// same time runs first. (The attempts last 3 s so that the spread of the
// starts within a wave on a loaded machine stays below one attempt.)
func TestBackfillWaves(t *testing.T) {
	e := newEnv(t, `
pool "default" {
  slots                  = 31
  reserved_for_scheduled = 1 # the nightly run's slot
}
pipeline "p" {
  schedule        = "@daily"
  start_date      = "2025-01-01"
  max_active_runs  = 30
  max_active_tasks = 31
  task "t" { command = "sleep 3" }
}
`)
	// History: two ordinary days ran before (they give the plan its run duration).
	e.run(scheduler.Options{Now: day(2)})
	// The window: 180 days with no run yet; the nightly run of the day after is due too.
	plan := e.plan(backfill.PlanParams{Pipeline: "p", Start: day(2), End: day(181), MaxActiveRuns: 30, Now: day(183)})
	if plan.Selected != 180 || plan.Waves != 6 {
		t.Fatalf("plan: %d dates in %d waves; want 180 in 6", plan.Selected, plan.Waves)
	}
	if plan.RunSeconds < 3 || plan.EstimateSeconds != 6*plan.RunSeconds {
		t.Errorf("estimate %gs from a run of %gs; want 6 waves of at least 3s", plan.EstimateSeconds, plan.RunSeconds)
	}
	res, err := e.apply(backfill.ApplyOptions{Plan: plan, Now: day(183)})
	if err != nil || res.State != store.BackfillSuccess {
		t.Fatalf("apply: %v", err)
	}
	// An attempt's wave is one more than the latest wave of an attempt that
	// ended before it started: the waves are the longest chain of attempts
	// that had to wait for one another, whatever the machine's load.
	type span struct{ start, end time.Time }
	var spans []span
	var scheduledStart time.Time
	for _, r := range e.runs("p") {
		a := r.Tasks[0].Attempts[len(r.Tasks[0].Attempts)-1]
		if r.BackfillID == res.ID {
			spans = append(spans, span{a.StartedAt, a.EndedAt})
		} else if r.DS == day(182).Format("2006-01-02") {
			scheduledStart = a.StartedAt
		}
	}
	sort.Slice(spans, func(i, j int) bool { return spans[i].start.Before(spans[j].start) })
	wave := make([]int, len(spans))
	waves, sizes := 0, map[int]int{}
	for i := range spans {
		wave[i] = 1
		for j := 0; j < i; j++ {
			if !spans[j].end.After(spans[i].start) && wave[j]+1 > wave[i] {
				wave[i] = wave[j] + 1
			}
		}
		waves = max(waves, wave[i])
		sizes[wave[i]]++
	}
	if len(spans) != 180 || waves != 6 {
		t.Errorf("%d backfill attempts in %d waves (sizes %v); want 180 in 6", len(spans), waves, sizes)
	}
	starts := []time.Time{spans[0].start}
	if scheduledStart.IsZero() || scheduledStart.After(starts[0]) {
		t.Errorf("the due scheduled run started at %v, the backfill at %v; want the scheduled one first", scheduledStart, starts[0])
	}
}

// A scheduled run that becomes due while a backfill saturates its pool
// still runs on time: the execution picks it up at its next refresh and it
// takes the slot the pool reserves for scheduled runs.
func TestScheduledRunDueDuringBackfill(t *testing.T) {
	e := newEnv(t, `
pool "default" {
  slots                  = 3
  reserved_for_scheduled = 1
}
pipeline "p" {
  schedule        = "@daily"
  start_date      = "2025-01-01"
  catchup         = false
  max_active_runs = 2
  task "t" { command = "sleep 0.3" }
}
`)
	var mu sync.Mutex
	clock := day(20)
	now := func() time.Time { mu.Lock(); defer mu.Unlock(); return clock }
	plan := e.plan(backfill.PlanParams{Pipeline: "p", Start: day(0), End: day(15), Now: day(20)})
	var switched time.Time
	res, err := e.apply(backfill.ApplyOptions{Plan: plan, Clock: now, RefreshEvery: 100 * time.Millisecond,
		OnPhase: func(id, phase string) {
			if phase == backfill.PhaseRun {
				time.AfterFunc(500*time.Millisecond, func() {
					mu.Lock()
					clock, switched = day(21), time.Now() // 2025-01-21 is now due
					mu.Unlock()
				})
			}
		}})
	if err != nil || res.State != store.BackfillSuccess {
		t.Fatalf("apply: %v", err)
	}
	var nightly time.Time
	var lastBackfill time.Time
	for _, r := range e.runs("p") {
		a := r.Tasks[0].Attempts[0]
		switch {
		case r.BackfillID == res.ID:
			if a.StartedAt.After(lastBackfill) {
				lastBackfill = a.StartedAt
			}
		case r.DS == day(20).Format("2006-01-02"):
			if r.State != store.RunSuccess {
				t.Errorf("the nightly run is %s", r.State)
			}
			nightly = a.StartedAt
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if nightly.IsZero() || switched.IsZero() || nightly.Before(switched) || !nightly.Before(lastBackfill) {
		t.Errorf("nightly run started at %v, due at %v, last backfill attempt at %v; want it between", nightly, switched, lastBackfill)
	}
}

// Cancel stops a running apply cleanly: its attempts are stopped and
// recorded, its unfinished runs failed, the consumers unpaused.
func TestCancelStopsApply(t *testing.T) {
	e := newEnv(t, `
pipeline "p" {
  schedule        = "@daily"
  start_date      = "2025-01-01"
  max_active_runs = 2
  task "t" { command = "echo start >> events.log; sleep 30" }
}
pipeline "c" {
  schedule   = "@daily"
  start_date = "2025-01-01"
  catchup    = false
  consumes   = [pipeline.p]
  task "t" { command = "true" }
}
`)
	plan := e.plan(backfill.PlanParams{Pipeline: "p", Start: day(0), End: day(9), Now: day(10)})
	ids := make(chan string, 10)
	done := make(chan *backfill.BackfillResult)
	go func() {
		res, _ := e.apply(backfill.ApplyOptions{Plan: plan, Now: day(10), Grace: 200 * time.Millisecond,
			OnPhase: func(bid, phase string) { ids <- bid }})
		done <- res
	}()
	id := <-ids
	for deadline := time.Now().Add(10 * time.Second); len(e.events("events.log")) < 2; {
		if time.Now().After(deadline) {
			t.Fatal("no attempt started")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if p, _ := e.st.GetPipeline(context.Background(), "c"); !p.Paused {
		t.Error("the consumer is not paused during the backfill")
	}
	if err := e.st.UpdateBackfill(context.Background(), store.UpdateBackfillParams{ID: id, State: store.BackfillCancelled, Now: time.Now()}); err != nil {
		t.Fatal(err)
	}
	var res *backfill.BackfillResult
	select {
	case res = <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("apply did not stop after cancel")
	}
	if res.State != store.BackfillCancelled {
		t.Errorf("state %s; want cancelled", res.State)
	}
	if p, _ := e.st.GetPipeline(context.Background(), "c"); p.Paused {
		t.Error("the consumer is still paused")
	}
	for _, r := range e.runs("p") {
		if r.BackfillID != id {
			continue
		}
		if r.State != store.RunFailed {
			t.Errorf("%s: %s; want failed", r.DS, r.State)
		}
		for _, a := range r.Tasks[0].Attempts {
			if a.State == store.AttemptRunning {
				t.Errorf("%s: an attempt is still running", r.DS)
			}
		}
	}
}

// --include-downstream takes the consumers of consumers too.
func TestPlanIncludeDownstream(t *testing.T) {
	e := newEnv(t, `
pipeline "raw" {
  schedule   = "@daily"
  start_date = "2025-01-01"
  task "t" { command = "true" }
}
pipeline "revenue" {
  schedule   = "@daily"
  start_date = "2025-01-01"
  consumes   = [pipeline.raw]
  task "t" { command = "true" }
}
pipeline "board_pack" {
  schedule   = "@daily"
  start_date = "2025-01-01"
  consumes   = [pipeline.revenue]
  task "t" { command = "true" }
}
`)
	pp := backfill.PlanParams{Pipeline: "raw", Start: day(0), End: day(2), Now: day(3)}
	if got := e.plan(pp).Downstream; strings.Join(got, ",") != "revenue" {
		t.Errorf("downstream %v; want the direct consumer", got)
	}
	pp.IncludeDownstream = true
	if got := e.plan(pp).Downstream; strings.Join(got, ",") != "revenue,board_pack" {
		t.Errorf("downstream %v; want revenue and board_pack", got)
	}
}
