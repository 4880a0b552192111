package scheduler_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rewind-dev/rewind/dsl"
	"github.com/rewind-dev/rewind/scheduler"
	"github.com/rewind-dev/rewind/store"
	"github.com/rewind-dev/rewind/store/pgtest"
)

// engineStateEnv, set to "postgres", runs every engine test that uses
// newEnv on a fresh PostgreSQL database instead of SQLite (CI does both).
const engineStateEnv = "REWIND_TEST_ENGINE_STATE"

// env is one workspace and one state, in a temporary directory.
type env struct {
	t    *testing.T
	dir  string
	st   store.Store
	ws   *dsl.Workspace
	home string
	// state is the DSN of st.
	state string
}

func newEnv(t *testing.T, hcl string) *env {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "main.hcl"), []byte(hcl), 0o644); err != nil {
		t.Fatal(err)
	}
	ws, diags := dsl.Load(dir, dsl.LoadOptions{})
	if diags.HasErrors() {
		t.Fatalf("load: %s", diags.Error())
	}
	state := "sqlite:" + filepath.Join(dir, ".rewind", "state.db")
	if os.Getenv(engineStateEnv) == "postgres" {
		state = pgtest.DSN(t)
	}
	st, err := store.Open(context.Background(), state)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return &env{t: t, dir: dir, st: st, ws: ws, home: filepath.Join(dir, ".rewind"), state: state}
}

func (e *env) run(o scheduler.Options) *scheduler.Summary {
	e.t.Helper()
	o.Store, o.Workspace, o.Home = e.st, e.ws, e.home
	sum, err := scheduler.Run(context.Background(), o)
	if err != nil {
		e.t.Fatalf("run: %v", err)
	}
	return sum
}

func (e *env) runs(pipeline string) []store.Run {
	e.t.Helper()
	runs, err := e.st.ListRuns(context.Background(), store.ListRunsParams{Pipelines: []string{pipeline}, WithTasks: true, WithAttempts: true})
	if err != nil {
		e.t.Fatal(err)
	}
	return runs
}

// events reads the lines tasks appended to a file of the workspace.
func (e *env) events(name string) []string {
	e.t.Helper()
	f, err := os.Open(filepath.Join(e.dir, name))
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		e.t.Fatal(err)
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		out = append(out, sc.Text())
	}
	return out
}

func utc(s string) time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t
}

// A 180-day catchup with max_active_runs = 5 and two dependent tasks: every
// task of every date runs exactly once, upstream first, and exactly five runs
// overlap at the peak (the limit is used, never exceeded).
func TestCatchup180DaysMaxActiveRuns(t *testing.T) {
	e := newEnv(t, `
pipeline "daily" {
  schedule        = "@daily"
  start_date      = "2025-01-01"
  max_active_runs = 5
  task "extract" {
    command = "echo \"start $REWIND_DS extract\" >> events.log; sleep 0.05; echo \"end $REWIND_DS extract\" >> events.log"
  }
  task "load" {
    depends_on = [task.extract]
    command    = "echo \"start $REWIND_DS load\" >> events.log; sleep 0.05; echo \"end $REWIND_DS load\" >> events.log"
  }
}
`)
	now := utc("2025-06-30T00:00:00Z") // 180 due days: 2025-01-01 .. 2025-06-29
	sum := e.run(scheduler.Options{Catchup: true, Now: now})
	if sum.Created != 180 || len(sum.Finished) != 180 || sum.Failed() {
		t.Fatalf("created %d, finished %d, failed %v; want 180 runs, all successful", sum.Created, len(sum.Finished), sum.Failed())
	}
	for _, r := range e.runs("daily") {
		if r.State != store.RunSuccess {
			t.Errorf("run %s is %s", r.DS, r.State)
		}
	}
	count := map[string]int{}
	active := map[string]bool{}
	maxActive := 0
	for _, line := range e.events("events.log") {
		f := strings.Fields(line)
		ev, ds, task := f[0], f[1], f[2]
		count[ev+" "+ds+" "+task]++
		switch {
		case ev == "start" && task == "extract":
			active[ds] = true
		case ev == "start" && task == "load":
			if count["end "+ds+" extract"] != 1 {
				t.Errorf("%s: load started before extract ended", ds)
			}
		case ev == "end" && task == "load":
			delete(active, ds)
		}
		maxActive = max(maxActive, len(active))
	}
	for d := utc("2025-01-01T00:00:00Z"); d.Before(now); d = d.AddDate(0, 0, 1) {
		ds := d.Format("2006-01-02")
		for _, k := range []string{"start " + ds + " extract", "end " + ds + " extract", "start " + ds + " load", "end " + ds + " load"} {
			if count[k] != 1 {
				t.Errorf("%q happened %d times, want once", k, count[k])
			}
		}
	}
	if maxActive != 5 {
		t.Errorf("at most %d runs overlapped; want exactly 5 (max_active_runs)", maxActive)
	}
	wm, err := e.st.GetWatermark(context.Background(), "daily")
	if err != nil || wm.LogicalDate.Format("2006-01-02") != "2025-06-29" {
		t.Errorf("watermark = %v, %v; want 2025-06-29", wm.LogicalDate, err)
	}

	again := e.run(scheduler.Options{Catchup: true, Now: now})
	if again.Created != 0 || len(again.Finished) != 0 || again.Attempts != 0 {
		t.Errorf("second catchup: created %d, finished %d, attempts %d; want nothing", again.Created, len(again.Finished), again.Attempts)
	}
}

func TestCatchupFalseEndDateAndSelection(t *testing.T) {
	e := newEnv(t, `
pipeline "latest_only" {
  schedule   = "@daily"
  start_date = "2025-07-01"
  catchup    = false
  task "t" { command = "echo $REWIND_DS >> latest.log" }
}
pipeline "bounded" {
  schedule   = "@daily"
  start_date = "2025-07-01"
  end_date   = "2025-07-05"
  task "t" { command = "echo $REWIND_DS >> bounded.log" }
}
`)
	now := utc("2025-07-20T12:00:00Z")
	sum := e.run(scheduler.Options{Now: now, Pipelines: []string{"latest_only"}})
	if got := e.events("latest.log"); len(got) != 1 || got[0] != "2025-07-19" {
		t.Errorf("catchup = false ran %v; want only the latest interval 2025-07-19", got)
	}
	if len(e.runs("bounded")) != 0 || sum.Created != 1 {
		t.Errorf("--pipeline latest_only created %d runs and bounded has %d; want 1 and 0", sum.Created, len(e.runs("bounded")))
	}

	e.run(scheduler.Options{Now: now})
	got := e.events("bounded.log")
	slices.Sort(got) // the five runs run concurrently
	if strings.Join(got, ",") != "2025-07-01,2025-07-02,2025-07-03,2025-07-04,2025-07-05" {
		t.Errorf("bounded ran %v; want 2025-07-01..2025-07-05 (end_date inclusive)", got)
	}

	// --catchup overrides catchup = false for the selected pipeline.
	e.run(scheduler.Options{Now: now, Catchup: true, Pipelines: []string{"latest_only"}})
	if got := e.events("latest.log"); len(got) != 19 {
		t.Errorf("--catchup ran %d intervals of latest_only in all; want 19", len(got))
	}
}

func TestRetriesThenUpstreamFailed(t *testing.T) {
	e := newEnv(t, `
pipeline "p" {
  schedule   = "@daily"
  start_date = "2025-07-01"
  end_date   = "2025-07-01"
  task "flaky" {
    command     = "echo try $REWIND_TRY_NUMBER >> tries.log; exit 3"
    retries     = 2
    retry_delay = "0s"
  }
  task "after" {
    depends_on = [task.flaky]
    command    = "echo ran >> after.log"
  }
}
`)
	sum := e.run(scheduler.Options{Now: utc("2025-08-01T00:00:00Z")})
	if !sum.Failed() {
		t.Fatal("the run should fail")
	}
	if got := e.events("tries.log"); strings.Join(got, ",") != "try 1,try 2,try 3" {
		t.Errorf("tries: %v", got)
	}
	if got := e.events("after.log"); len(got) != 0 {
		t.Errorf("downstream ran: %v", got)
	}
	runs := e.runs("p")
	if len(runs) != 1 || runs[0].State != store.RunFailed {
		t.Fatalf("runs = %+v", runs)
	}
	for _, ti := range runs[0].Tasks {
		switch ti.Task {
		case "flaky":
			if ti.State != store.TaskFailed || len(ti.Attempts) != 3 {
				t.Errorf("flaky: %s with %d attempts", ti.State, len(ti.Attempts))
			}
			for i, a := range ti.Attempts {
				if a.TryNumber != i+1 || a.ExitCode == nil || *a.ExitCode != 3 || a.State != store.AttemptFailed {
					t.Errorf("attempt %d: %+v", i, a)
				}
			}
		case "after":
			if ti.State != store.TaskUpstreamFailed || len(ti.Attempts) != 0 {
				t.Errorf("after: %s with %d attempts", ti.State, len(ti.Attempts))
			}
		}
	}
}

// A timeout kills the attempt's whole process group: the child the task
// spawned dies with it.
func TestTimeoutKillsProcessGroup(t *testing.T) {
	e := newEnv(t, `
pipeline "p" {
  schedule   = "@daily"
  start_date = "2025-07-01"
  end_date   = "2025-07-01"
  task "hang" {
    command = "sleep 1000 & echo $! > child.pid; wait"
    timeout = "1s"
  }
}
`)
	sum := e.run(scheduler.Options{Now: utc("2025-08-01T00:00:00Z"), Grace: 500 * time.Millisecond})
	if !sum.Failed() {
		t.Fatal("a timed-out task should fail its run")
	}
	b, err := os.ReadFile(filepath.Join(e.dir, "child.pid"))
	if err != nil {
		t.Fatal(err)
	}
	pid := strings.TrimSpace(string(b))
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, err := os.Stat("/proc/" + pid)
		stat, _ := os.ReadFile("/proc/" + pid + "/stat")
		if os.IsNotExist(err) || strings.Contains(string(stat), ") Z ") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("child %s of the timed-out task still runs", pid)
		}
		time.Sleep(50 * time.Millisecond)
	}
	a := e.runs("p")[0].Tasks[0].Attempts[0]
	if a.Signal != "timeout" || a.State != store.AttemptFailed {
		t.Errorf("attempt = %+v; want failed with signal timeout", a)
	}
}

// The task environment of DESIGN.md reaches every attempt.
func TestTaskEnvironment(t *testing.T) {
	e := newEnv(t, `
pool "big" {
  slots  = 2
  memory = "1GiB"
  cpus   = 4
}
pipeline "p" {
  schedule   = "@daily"
  timezone   = "Europe/Rome"
  start_date = "2025-03-30"
  end_date   = "2025-03-30"
  task "show" {
    pool    = "big"
    command = ["sh", "-c", "env | grep ^REWIND_ | grep -v -e ^REWIND_TEST_ -e ^REWIND_PG_ | sort > env.txt"]
  }
}
`)
	// (The test's own REWIND_TEST_* / REWIND_PG_* settings, inherited from
	// the environment of the tests, are left out.)
	e.run(scheduler.Options{Now: utc("2025-04-01T00:00:00Z")})
	got := strings.Join(e.events("env.txt"), "\n")
	runDir := filepath.Join(e.home, "runs", "p", "2025-03-30T000000+0100")
	want := strings.Join([]string{
		"REWIND_DATA_INTERVAL_END=2025-03-31T00:00:00+02:00",
		"REWIND_DATA_INTERVAL_START=2025-03-30T00:00:00+01:00",
		"REWIND_DS=2025-03-30",
		"REWIND_DS_NODASH=20250330",
		"REWIND_LOGICAL_DATE=2025-03-30T00:00:00+01:00",
		"REWIND_PIPELINE=p",
		"REWIND_POOL=big",
		"REWIND_POOL_CPUS=4",
		fmt.Sprintf("REWIND_POOL_MEMORY=%d", 1<<30),
		"REWIND_RUN_DIR=" + runDir,
		"REWIND_RUN_ID=scheduled__2025-03-30T00:00:00+01:00",
		"REWIND_RUN_KIND=scheduled",
		"REWIND_TASK=show",
		"REWIND_TRY_NUMBER=1",
	}, "\n")
	if got != want {
		t.Errorf("environment:\n%s\nwant:\n%s", got, want)
	}
}

// depends_on_past: a day runs only after the same task of the previous day
// succeeded; once a day fails, later days do not run that task.
func TestDependsOnPast(t *testing.T) {
	e := newEnv(t, `
pipeline "p" {
  schedule        = "@daily"
  start_date      = "2025-07-01"
  end_date        = "2025-07-06"
  max_active_runs = 6
  task "cumulative" {
    depends_on_past = true
    command = "echo $REWIND_DS >> order.log; sleep 0.02; test $REWIND_DS != 2025-07-04"
  }
}
`)
	sum := e.run(scheduler.Options{Now: utc("2025-08-01T00:00:00Z")})
	if !sum.Failed() {
		t.Fatal("2025-07-04 should fail")
	}
	if got := strings.Join(e.events("order.log"), ","); got != "2025-07-01,2025-07-02,2025-07-03,2025-07-04" {
		t.Errorf("ran %s; want the days in order up to the failing one", got)
	}
	for _, r := range e.runs("p") {
		want := store.TaskSuccess
		switch {
		case r.DS == "2025-07-04":
			want = store.TaskFailed
		case r.DS > "2025-07-04":
			want = store.TaskUpstreamFailed
		}
		if r.Tasks[0].State != want {
			t.Errorf("%s: %s; want %s", r.DS, r.Tasks[0].State, want)
		}
	}
	wm, err := e.st.GetWatermark(context.Background(), "p")
	if err != nil || wm.LogicalDate.Format("2006-01-02") != "2025-07-03" {
		t.Errorf("watermark %v (%v); want 2025-07-03, the last day before the failure", wm.LogicalDate, err)
	}
}

// Exit code 99 skips a task (Airflow's BashOperator convention) and the
// tasks downstream of it; the run succeeds.
func TestSkipExitCode(t *testing.T) {
	e := newEnv(t, `
pipeline "p" {
  schedule   = "@daily"
  start_date = "2025-07-01"
  end_date   = "2025-07-01"
  task "check" { command = "exit 99" }
  task "after" {
    depends_on = [task.check]
    command    = "echo ran >> after.log"
  }
}
`)
	sum := e.run(scheduler.Options{Now: utc("2025-08-01T00:00:00Z")})
	if sum.Failed() || len(sum.Finished) != 1 {
		t.Fatalf("summary %+v", sum)
	}
	r := e.runs("p")[0]
	for _, ti := range r.Tasks {
		if ti.State != store.TaskSkipped {
			t.Errorf("%s: %s; want skipped", ti.Task, ti.State)
		}
	}
	if len(e.events("after.log")) != 0 {
		t.Error("the task downstream of a skipped one ran")
	}
}

func TestPausedPipelineDoesNotRun(t *testing.T) {
	e := newEnv(t, `
pipeline "p" {
  schedule   = "@daily"
  start_date = "2025-07-01"
  task "t" { command = "echo ran >> ran.log" }
}
`)
	ctx := context.Background()
	if _, err := e.st.UpsertPipeline(ctx, store.UpsertPipelineParams{Name: "p", Now: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if err := e.st.SetPaused(ctx, store.SetPausedParams{Name: "p", Paused: true, Now: time.Now()}); err != nil {
		t.Fatal(err)
	}
	sum := e.run(scheduler.Options{Now: utc("2025-07-10T00:00:00Z")})
	if len(sum.Paused) != 1 || sum.Created != 0 || len(e.events("ran.log")) != 0 {
		t.Fatalf("paused pipeline ran: %+v", sum)
	}
	if err := e.st.SetPaused(ctx, store.SetPausedParams{Name: "p", Paused: false, Now: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if sum := e.run(scheduler.Options{Now: utc("2025-07-10T00:00:00Z")}); len(sum.Finished) != 9 {
		t.Errorf("after unpause %d runs finished; want the 9 missed days", len(sum.Finished))
	}
}

// Pool slots bound concurrency across pipelines, and max_active_tasks within one.
func TestPoolSlotsAndMaxActiveTasks(t *testing.T) {
	e := newEnv(t, `
pool "narrow" { slots = 2 }
pipeline "a" {
  schedule   = "@daily"
  start_date = "2025-07-01"
  end_date   = "2025-07-06"
  task "t" {
    pool    = "narrow"
    command = "echo start >> events.log; sleep 0.1; echo end >> events.log"
  }
}
pipeline "b" {
  schedule   = "@daily"
  start_date = "2025-07-01"
  end_date   = "2025-07-06"
  task "t" {
    pool    = "narrow"
    command = "echo start >> events.log; sleep 0.1; echo end >> events.log"
  }
}
pipeline "c" {
  schedule         = "@daily"
  start_date       = "2025-07-01"
  end_date         = "2025-07-06"
  max_active_tasks = 1
  task "t" { command = "echo start >> c.log; sleep 0.05; echo end >> c.log" }
}
`)
	e.run(scheduler.Options{Now: utc("2025-08-01T00:00:00Z")})
	for file, limit := range map[string]int{"events.log": 2, "c.log": 1} {
		active, peak, n := 0, 0, 0
		for _, l := range e.events(file) {
			if l == "start" {
				active++
				n++
			} else {
				active--
			}
			peak = max(peak, active)
		}
		if peak != limit || n == 0 {
			t.Errorf("%s: peak concurrency %d over %d attempts; want exactly %d", file, peak, n, limit)
		}
	}
}

// consumes is a sensor: date D of a consumer starts only once the
// producer's run of date D has succeeded, in the same execution or an
// earlier one; a failed producer date holds its consumer back.
func TestConsumesWaitsForProducer(t *testing.T) {
	e := newEnv(t, `
pipeline "revenue" {
  schedule        = "@daily"
  start_date      = "2025-07-01"
  end_date        = "2025-07-04"
  max_active_runs = 1
  task "t" { command = "echo start revenue $REWIND_DS >> events.log; sleep 0.1; test $REWIND_DS != 2025-07-03 || exit 1; echo end revenue $REWIND_DS >> events.log" }
}
pipeline "report" {
  schedule   = "@daily"
  start_date = "2025-07-01"
  end_date   = "2025-07-04"
  consumes   = [pipeline.revenue]
  task "t" { command = "echo start report $REWIND_DS >> events.log" }
}
`)
	e.run(scheduler.Options{Now: utc("2025-08-01T00:00:00Z")})
	seen := map[string]bool{}
	for _, l := range e.events("events.log") {
		f := strings.Fields(l)
		if f[0] == "start" && f[1] == "report" && !seen["end revenue "+f[2]] {
			t.Errorf("report %s started before revenue %s ended", f[2], f[2])
		}
		seen[f[0]+" "+f[1]+" "+f[2]] = true
	}
	for _, ds := range []string{"2025-07-01", "2025-07-02", "2025-07-04"} {
		if !seen["start report "+ds] {
			t.Errorf("report %s did not run", ds)
		}
	}
	if seen["start report 2025-07-03"] {
		t.Error("report 2025-07-03 ran although revenue 2025-07-03 failed")
	}
	// The producer's date is fixed and re-run: the consumer follows in a later execution.
	if _, err := e.st.ClearTasks(context.Background(), store.ClearTasksParams{Pipeline: "revenue", From: utc("2025-07-03T00:00:00Z"), To: utc("2025-07-03T00:00:00Z"), Now: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(e.dir, "main.hcl"), []byte(strings.Replace(string(must(os.ReadFile(filepath.Join(e.dir, "main.hcl")))), "test $REWIND_DS != 2025-07-03 || exit 1; ", "", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	ws, diags := dsl.Load(e.dir, dsl.LoadOptions{})
	if diags.HasErrors() {
		t.Fatal(diags.Error())
	}
	e.ws = ws
	e.run(scheduler.Options{Now: utc("2025-08-01T00:00:00Z"), Pipelines: []string{"revenue"}})
	e.run(scheduler.Options{Now: utc("2025-08-01T00:00:00Z"), Pipelines: []string{"report"}})
	if !strings.Contains(strings.Join(e.events("events.log"), "\n"), "start report 2025-07-03") {
		t.Error("report 2025-07-03 did not run once revenue 2025-07-03 succeeded")
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
