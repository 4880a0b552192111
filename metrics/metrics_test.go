package metrics_test

import (
	"context"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/rewind-dev/rewind/dsl"
	"github.com/rewind-dev/rewind/lease"
	"github.com/rewind-dev/rewind/metrics"
	"github.com/rewind-dev/rewind/metrics/metricstest"
	"github.com/rewind-dev/rewind/store"
)

var ctx = context.Background()

const workspaceHCL = `
pool "large" {
  slots                  = 4
  reserved_for_scheduled = 1
}
pipeline "hourly" {
  schedule   = "@hourly"
  start_date = "2024-01-01T00:00:00Z"
  task "extract" { command = "true" }
  task "load" {
    depends_on = [task.extract]
    pool       = "large"
    command    = "true"
  }
}
pipeline "daily" {
  schedule   = "@daily"
  start_date = "2024-01-01"
  task "t" { command = "true" }
}
`

// fixture is a workspace and its real SQLite state, served by a metrics
// endpoint as `rewind scheduler --metrics-listen` serves it.
type fixture struct {
	t   *testing.T
	st  store.Store
	ws  *dsl.Workspace
	url string
	m   *metrics.Scheduler
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "main.hcl"), []byte(workspaceHCL), 0o644); err != nil {
		t.Fatal(err)
	}
	ws, diags := dsl.Load(dir, dsl.LoadOptions{})
	if diags.HasErrors() {
		t.Fatal(diags.Error())
	}
	st, err := store.Open(ctx, "sqlite:"+filepath.Join(dir, "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	m := metrics.NewScheduler()
	reg := metrics.NewRegistry(metrics.NewState(metrics.StateOptions{State: st, Workspace: func() *dsl.Workspace { return ws }}), m)
	srv := httptest.NewServer(metrics.Handler(reg, nil))
	t.Cleanup(srv.Close)
	return &fixture{t: t, st: st, ws: ws, url: srv.URL + metrics.Path, m: m}
}

// addRuns materializes n more hourly runs after the first, and runs the
// tasks of every tenth new run: extract in default, load in large, with
// outcomes in turn success, failed, oom, skipped, lost; one attempt of
// the first batch stays running and one task queued. One InTx per call.
func (f *fixture) addRuns(first, n int) {
	f.t.Helper()
	start := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
	specs := make([]store.RunSpec, n)
	for i := range specs {
		d := start.Add(time.Duration(first+i) * time.Hour)
		specs[i] = store.RunSpec{LogicalDate: d, DS: d.Format("2006-01-02"), DataIntervalStart: d, DataIntervalEnd: d.Add(time.Hour)}
	}
	now := time.Now()
	err := f.st.InTx(ctx, func(tx store.Store) error {
		if _, err := tx.MaterializeRuns(ctx, store.MaterializeRunsParams{Pipeline: "hourly", Kind: store.KindScheduled, Runs: specs,
			Tasks: []store.TaskSpec{{Name: "extract", Pool: "default"}, {Name: "load", Pool: "large"}}, Now: now}); err != nil {
			return err
		}
		runs, err := tx.ListRuns(ctx, store.ListRunsParams{Pipelines: []string{"hourly"}, From: specs[0].LogicalDate, To: specs[n-1].LogicalDate, WithTasks: true})
		if err != nil {
			return err
		}
		outcomes := []store.AttemptState{store.AttemptSuccess, store.AttemptFailed, store.AttemptOOM, store.AttemptSkipped, store.AttemptLost}
		for i, r := range runs {
			if i%10 != 0 {
				continue
			}
			for _, ti := range r.Tasks {
				a, err := tx.ClaimTask(ctx, store.ClaimTaskParams{TaskInstanceID: ti.ID, Pool: ti.Pool, Host: "host-a", Now: now})
				if err != nil {
					return err
				}
				if i == 0 && first == 0 && ti.Task == "load" {
					continue // left running
				}
				o := outcomes[(i/10)%len(outcomes)]
				ts := map[store.AttemptState]store.TaskState{store.AttemptSuccess: store.TaskSuccess, store.AttemptFailed: store.TaskFailed,
					store.AttemptOOM: store.TaskFailed, store.AttemptSkipped: store.TaskSkipped, store.AttemptLost: store.TaskScheduled}[o]
				code := 0
				if err := tx.FinishAttempt(ctx, store.FinishAttemptParams{AttemptID: a.ID, State: o, ExitCode: &code, TaskState: ts, Now: now}); err != nil {
					return err
				}
			}
		}
		if first == 0 {
			_, err := tx.EnqueueTasks(ctx, store.EnqueueTasksParams{Items: []store.EnqueueItem{{TaskInstanceID: runs[1].Tasks[0].ID, Pool: "default"}}, Now: now.Add(-time.Minute)})
			return err
		}
		return nil
	})
	if err != nil {
		f.t.Fatalf("add %d runs: %v", n, err)
	}
}

// labelNames are every label the rewind_ series may have: none holds a
// date, a run, an attempt or a backfill id.
var labelNames = []string{"pipeline", "state", "pool", "outcome", "host", "result", "le"}

var dateLike = regexp.MustCompile(`\d{4}-\d{2}-\d{2}|^\d+$`)

// The series count does not grow with the history: 100 runs and 10,000
// runs of a real SQLite state (with attempts of every outcome, a backfill
// in progress and a leader) give the same rewind_ series, under an
// explicit bound for the whole scrape, and the counts are those of the
// state.
func TestSeriesBoundedFor10000Runs(t *testing.T) {
	f := newFixture(t)
	f.addRuns(0, 100)
	if err := f.st.CreateBackfill(ctx, store.Backfill{ID: "bf-20240101", Pipeline: "daily", From: time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC),
		To: time.Date(2024, 1, 3, 0, 0, 0, 0, time.UTC), Reprocess: "none", CreatedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	var specs []store.RunSpec
	for d := range 3 {
		day := time.Date(2024, 1, 1+d, 0, 0, 0, 0, time.UTC)
		specs = append(specs, store.RunSpec{LogicalDate: day, DS: day.Format("2006-01-02"), DataIntervalStart: day, DataIntervalEnd: day.AddDate(0, 0, 1)})
	}
	if _, err := f.st.MaterializeRuns(ctx, store.MaterializeRunsParams{Pipeline: "daily", Kind: store.KindBackfill, BackfillID: "bf-20240101",
		Runs: specs, Tasks: []store.TaskSpec{{Name: "t", Pool: "default"}}, Now: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if _, held, err := f.st.AcquireLease(ctx, store.AcquireLeaseParams{Name: lease.Leader, Holder: "host-a:1:1", Host: "host-a", PID: 1, TTL: time.Hour}); err != nil || !held {
		t.Fatalf("AcquireLease: %v, held %v", err, held)
	}
	f.m.Executed(2*time.Second, nil)

	small := metricstest.Scrape(t, f.url)
	f.addRuns(100, 9900)
	big := metricstest.Scrape(t, f.url)

	if got, _ := big.Value("rewind_state_up"); got != 1 {
		t.Fatalf("rewind_state_up = %v, want 1", got)
	}
	if got := big.Sum("rewind_runs", "pipeline", "hourly"); got != 10000 {
		t.Fatalf("rewind_runs{pipeline=hourly} add up to %v, want 10000", got)
	}
	if got, _ := big.Value("rewind_backfill_runs", "pipeline", "daily", "state", "queued"); got != 3 {
		t.Errorf("rewind_backfill_runs{daily,queued} = %v, want 3", got)
	}
	// Every tenth run ran both tasks: 1,000 runs, 2,000 attempts less the one running.
	if got := big.Sum("rewind_attempts_total"); got != 1999 {
		t.Errorf("rewind_attempts_total add up to %v, want 1999", got)
	}
	if got, _ := big.Value("rewind_attempts_running", "pool", "large"); got != 1 {
		t.Errorf("rewind_attempts_running{large} = %v, want 1", got)
	}
	if got, _ := big.Value("rewind_tasks_queued", "pool", "default"); got != 1 {
		t.Errorf("rewind_tasks_queued{default} = %v, want 1", got)
	}
	if got, _ := big.Value("rewind_tasks_queued_oldest_age_seconds", "pool", "default"); got < 60 {
		t.Errorf("rewind_tasks_queued_oldest_age_seconds{default} = %v, want at least the minute it was queued before", got)
	}
	if got, _ := big.Value("rewind_leader", "host", "host-a"); got != 1 {
		t.Errorf("rewind_leader{host-a} = %v, want 1", got)
	}

	s, b := small.Series("rewind_"), big.Series("rewind_")
	t.Logf("rewind_ series: %d with 100 runs, %d with 10,000; whole scrape: %d series", s, b, big.Series(""))
	if s != b || !slices.Equal(small.Names("rewind_"), big.Names("rewind_")) {
		t.Fatalf("rewind_ series: %d (%v) with 100 runs, %d (%v) with 10,000: they grow with the runs", s, small.Names("rewind_"), b, big.Names("rewind_"))
	}
	const bound = 200
	if all := big.Series(""); all >= bound {
		t.Fatalf("%d series in the scrape, want fewer than %d", all, bound)
	}
	for _, name := range big.Names("rewind_") {
		for _, ls := range big.Labels(name) {
			for k, v := range ls {
				if !slices.Contains(labelNames, k) {
					t.Errorf("%s has the label %s=%q: not one of %v", name, k, v, labelNames)
				}
				if dateLike.MatchString(v) && k != "le" {
					t.Errorf("%s{%s=%q}: a date or an id as a label value", name, k, v)
				}
			}
		}
	}
}

// A state that cannot be read is rewind_state_up 0 in a scrape that
// still answers, with the scheduler's own metrics.
func TestStateDownIsAGauge(t *testing.T) {
	f := newFixture(t)
	f.m.Leading(true, true)
	if err := f.st.Close(); err != nil {
		t.Fatal(err)
	}
	fams := metricstest.Scrape(t, f.url)
	if got, ok := fams.Value("rewind_state_up"); !ok || got != 0 {
		t.Errorf("rewind_state_up = %v (%v), want 0", got, ok)
	}
	if _, ok := fams.Value("rewind_runs", "pipeline", "hourly", "state", "queued"); ok {
		t.Errorf("rewind_runs served from a state that could not be read")
	}
	if got, _ := fams.Value("rewind_scheduler_takeovers_total"); got != 1 {
		t.Errorf("rewind_scheduler_takeovers_total = %v, want 1", got)
	}
	if got, _ := fams.Value("rewind_scheduler_leading"); got != 1 {
		t.Errorf("rewind_scheduler_leading = %v, want 1", got)
	}
}

// The names follow Prometheus's conventions, checked by its own linter
// of descriptions: rewind_ prefix, _total on counters and on nothing else,
// base units.
func TestNamesFollowConventions(t *testing.T) {
	f := newFixture(t)
	f.addRuns(0, 10)
	fams := metricstest.Scrape(t, f.url)
	for _, name := range fams.Names("") {
		fam := fams[name]
		if !regexp.MustCompile(`^(rewind|go|process)_`).MatchString(name) {
			t.Errorf("%s: not under rewind_ (or the Go client's go_, process_)", name)
		}
		isCounter := fam.GetType().String() == "COUNTER"
		if hasTotal := regexp.MustCompile(`_total$`).MatchString(name); hasTotal != isCounter && strings.HasPrefix(name, "rewind_") {
			t.Errorf("%s is a %s: _total is for counters, and every counter has it", name, fam.GetType())
		}
		if fam.GetHelp() == "" {
			t.Errorf("%s has no help", name)
		}
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(metrics.NewState(metrics.StateOptions{State: f.st, Workspace: func() *dsl.Workspace { return f.ws }}), metrics.NewScheduler())
	if _, err := reg.Gather(); err != nil {
		t.Fatalf("the pedantic registry refuses the metrics: %v", err)
	}
	want := []string{"rewind_attempts_running", "rewind_attempts_total", "rewind_backfills",
		"rewind_pool_slots", "rewind_pool_slots_reserved", "rewind_pool_slots_used", "rewind_runs",
		"rewind_scheduler_execution_duration_seconds", "rewind_scheduler_executions_total", "rewind_scheduler_leading",
		"rewind_scheduler_takeovers_total", "rewind_state_read_duration_seconds", "rewind_state_up", "rewind_tasks_queued",
		"rewind_tasks_queued_oldest_age_seconds"}
	for _, name := range want {
		if fams[name] == nil {
			t.Errorf("%s missing from the scrape: %v", name, fams.Names("rewind_"))
		}
	}
	if got, _ := fams.Value("rewind_pool_slots", "pool", "large"); got != 4 {
		t.Errorf("rewind_pool_slots{large} = %v, want 4", got)
	}
	if got, _ := fams.Value("rewind_pool_slots_reserved", "pool", "large"); got != 1 {
		t.Errorf("rewind_pool_slots_reserved{large} = %v, want 1", got)
	}
	if got, _ := fams.Value("rewind_pool_slots", "pool", "default"); got != float64(dsl.DefaultPoolSlots) {
		t.Errorf("rewind_pool_slots{default} = %v, want %d", got, dsl.DefaultPoolSlots)
	}
}
