package scheduler_test

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rewind-dev/rewind/scheduler"
	"github.com/rewind-dev/rewind/store"
)

// TestMain lets the test binary stand in for a task that needs memory:
// REWIND_TEST_HOG_MB=N makes it hold N MiB for a while, then exit 0.
func TestMain(m *testing.M) {
	if os.Getenv("REWIND_MODEL_CHILD") != "" {
		modelChild() // a child of TestBackfillModel
		os.Exit(0)
	}
	if mb, err := strconv.Atoi(os.Getenv("REWIND_TEST_HOG_MB")); err == nil {
		hog := make([]byte, mb<<20)
		for i := 0; i < len(hog); i += 4096 {
			hog[i] = 1
		}
		time.Sleep(time.Second)
		os.Exit(int(hog[0]) - 1)
	}
	os.Exit(m.Run())
}

// lastAttempt is the latest attempt of a task on a date.
func (e *env) attempts(pipeline, ds, task string) []store.Attempt {
	e.t.Helper()
	for _, r := range e.runs(pipeline) {
		if r.DS != ds {
			continue
		}
		for _, ti := range r.Tasks {
			if ti.Task == task {
				return ti.Attempts
			}
		}
	}
	e.t.Fatalf("no task %s on %s", task, ds)
	return nil
}

// November 2025 with a Black Friday hot_when rule: 2025-11-28 runs in pool
// large, every other date in default, and the attempt says why.
func TestBlackFridayHotWhen(t *testing.T) {
	e := newEnv(t, `
pool "large" {
  slots  = 2
  memory = "8GiB"
  cpus   = 8
}
pipeline "revenue" {
  schedule   = "@daily"
  start_date = "2025-11-01"
  end_date   = "2025-11-30"
  skew {
    hot_when = run.month == 11 && run.weekday == "Friday" && run.day >= 23 && run.day <= 29
    pool     = "large"
  }
  task "aggregate" {
    command = "echo $REWIND_DS $REWIND_POOL $REWIND_POOL_MEMORY >> pools.log"
  }
}
`)
	sum := e.run(scheduler.Options{Now: utc("2025-12-01T00:00:00Z")})
	if sum.Failed() || len(sum.Finished) != 30 {
		t.Fatalf("summary %+v", sum)
	}
	lines := e.events("pools.log")
	sort.Strings(lines)
	for _, l := range lines {
		f := strings.Fields(l)
		want := "default"
		if f[0] == "2025-11-28" {
			want = "large"
			if len(f) != 3 || f[2] != strconv.Itoa(8<<30) {
				t.Errorf("REWIND_POOL_MEMORY on Black Friday: %q", l)
			}
		}
		if f[1] != want {
			t.Errorf("%s ran in %s; want %s", f[0], f[1], want)
		}
	}
	a := e.attempts("revenue", "2025-11-28", "aggregate")[0]
	if a.Pool != "large" || !strings.HasPrefix(a.Reason, "hot_when: run.month == 11") {
		t.Errorf("Black Friday attempt: pool %q reason %q", a.Pool, a.Reason)
	}
	if a := e.attempts("revenue", "2025-11-27", "aggregate")[0]; a.Pool != "default" || a.Reason != "" {
		t.Errorf("ordinary day: pool %q reason %q", a.Pool, a.Reason)
	}
}

// A probe over 30 dates with one date 50 times the median: that date alone
// goes to the large pool.
func TestProbeFindsTheSkewedDate(t *testing.T) {
	e := newEnv(t, `
pool "large" { slots = 2 }
pipeline "events" {
  schedule   = "@daily"
  start_date = "2025-11-01"
  end_date   = "2025-11-30"
  skew {
    probe      = ["sh", "-c", "if [ $0 = 2025-11-28 ]; then echo 5000000; else echo 100000; fi", run.ds]
    hot_factor = 3
    pool       = "large"
  }
  task "load" { command = "echo $REWIND_DS $REWIND_POOL >> pools.log" }
}
`)
	e.run(scheduler.Options{Now: utc("2025-12-01T00:00:00Z")})
	hot := 0
	for _, l := range e.events("pools.log") {
		f := strings.Fields(l)
		if f[1] == "large" {
			hot++
			if f[0] != "2025-11-28" {
				t.Errorf("%s went to large", f[0])
			}
		}
	}
	if hot != 1 {
		t.Errorf("%d dates in large; want 1", hot)
	}
	a := e.attempts("events", "2025-11-28", "load")[0]
	if a.Reason != "probe: 5000000 > 3 x median 100000" {
		t.Errorf("reason %q", a.Reason)
	}
	// The run recorded what it measured, for the web view.
	rows, err := e.st.ListProbes(context.Background(), store.ListProbesParams{Pipeline: "events"})
	if err != nil || len(rows) != 30 {
		t.Fatalf("recorded probes: %d, %v; want 30", len(rows), err)
	}
	for _, r := range rows {
		want := store.ProbeResult{Pipeline: "events", Value: 100000, Median: 100000, Pool: "default"}
		if r.LogicalDate.Format("2006-01-02") == "2025-11-28" {
			want.Value, want.Pool, want.Reason = 5000000, "large", a.Reason
		}
		if r.Value != want.Value || r.Median != want.Median || r.Pool != want.Pool || r.Reason != want.Reason || r.Error != "" || r.Task != "" || r.MeasuredAt.IsZero() {
			t.Errorf("recorded %+v; want %+v", r, want)
		}
	}
}

// A task that goes over its pool's memory is killed, recorded oom, retried
// on the escalation pool, and succeeds there without using a retry.
func TestOOMEscalation(t *testing.T) {
	e := newEnv(t, fmt.Sprintf(`
pool "small" {
  memory          = "100MiB"
  oom_escalate_to = "big"
}
pool "big" { memory = "1GiB" }
pipeline "p" {
  schedule   = "@daily"
  start_date = "2025-07-01"
  end_date   = "2025-07-01"
  task "hog" {
    pool    = "small"
    command = [%q]
    env     = { REWIND_TEST_HOG_MB = "300" }
  }
}
`, os.Args[0]))
	sum := e.run(scheduler.Options{Now: utc("2025-08-01T00:00:00Z")})
	if sum.Failed() {
		t.Fatal("the run failed; want success after escalation")
	}
	r := e.runs("p")[0]
	ti := r.Tasks[0]
	if len(ti.Attempts) != 2 || ti.Failures != 0 {
		t.Fatalf("%d attempts, %d failures counted; want 2 attempts, 0 failures", len(ti.Attempts), ti.Failures)
	}
	first, second := ti.Attempts[0], ti.Attempts[1]
	if first.State != store.AttemptOOM || first.Pool != "small" || first.PeakRSS < 100<<20 {
		t.Errorf("first attempt: %s in %s, peak %d; want oom in small over 100 MiB", first.State, first.Pool, first.PeakRSS)
	}
	if second.State != store.AttemptSuccess || second.Pool != "big" || second.Reason != "oom escalation: try 1 ran out of memory in pool small" {
		t.Errorf("second attempt: %s in %s (%q); want success in big", second.State, second.Pool, second.Reason)
	}
}

// A task that kill -9s itself in default is retried in large; after
// clearing, the date starts directly in large.
func TestSigkillEscalatesAndHistoryRemembers(t *testing.T) {
	e := newEnv(t, `
pool "default" { oom_escalate_to = "large" }
pool "large" { slots = 2 }
pipeline "p" {
  schedule   = "@daily"
  start_date = "2025-07-01"
  end_date   = "2025-07-02"
  task "t" {
    command = "echo $REWIND_DS $REWIND_POOL >> pools.log; if [ $REWIND_DS = 2025-07-02 ] && [ $REWIND_POOL = default ]; then kill -9 $$; fi"
  }
}
`)
	now := utc("2025-08-01T00:00:00Z")
	if sum := e.run(scheduler.Options{Now: now}); sum.Failed() {
		t.Fatal("the run failed")
	}
	atts := e.attempts("p", "2025-07-02", "t")
	if len(atts) != 2 || atts[0].State != store.AttemptOOM || atts[0].Pool != "default" || atts[1].Pool != "large" {
		t.Fatalf("attempts %+v; want oom in default, then large", atts)
	}
	if a := e.attempts("p", "2025-07-01", "t"); len(a) != 1 || a[0].Pool != "default" {
		t.Errorf("2025-07-01: %+v; want one attempt in default", a)
	}

	if _, err := e.st.ClearTasks(context.Background(), store.ClearTasksParams{Pipeline: "p", From: utc("2025-07-02T00:00:00Z"), To: utc("2025-07-02T00:00:00Z"), Now: time.Now()}); err != nil {
		t.Fatal(err)
	}
	e.run(scheduler.Options{Now: now})
	atts = e.attempts("p", "2025-07-02", "t")
	if len(atts) != 3 || atts[2].Pool != "large" || atts[2].State != store.AttemptSuccess {
		t.Fatalf("after clear: %+v; want a third attempt straight in large", atts)
	}
}

// A pool can reserve slots for scheduled runs: a backfill saturating the
// pool leaves them free, and scheduled attempts go first.
func TestReservedSlotsIsolateScheduledRuns(t *testing.T) {
	e := newEnv(t, `
pool "shared" {
  slots                  = 3
  reserved_for_scheduled = 1
}
pipeline "p" {
  schedule        = "@daily"
  start_date      = "2025-05-01"
  max_active_runs = 10
  default_pool    = "shared"
  task "t" { command = "echo start $REWIND_RUN_KIND >> events.log; sleep 0.2; echo end $REWIND_RUN_KIND >> events.log" }
}
`)
	ctx := context.Background()
	// A 60-day backfill is queued before the nightly run is due.
	var specs []store.RunSpec
	for d := utc("2025-05-01T00:00:00Z"); d.Before(utc("2025-06-30T00:00:00Z")); d = d.AddDate(0, 0, 1) {
		specs = append(specs, store.RunSpec{LogicalDate: d, DS: d.Format("2006-01-02"), DataIntervalStart: d, DataIntervalEnd: d.AddDate(0, 0, 1)})
	}
	if _, err := e.st.MaterializeRuns(ctx, store.MaterializeRunsParams{Pipeline: "p", Kind: store.KindBackfill, BackfillID: "b1", Runs: specs, Tasks: []store.TaskSpec{{Name: "t", Pool: "shared"}}, Now: time.Now()}); err != nil {
		t.Fatal(err)
	}
	// Applying the backfill also runs what is due: 2025-06-30, scheduled.
	e.run(scheduler.Options{Now: utc("2025-07-01T00:00:00Z"), Backfill: &scheduler.BackfillRun{ID: "b1", Pipeline: "p"}})
	backfill, peak, scheduledAt, starts := 0, 0, -1, 0
	for _, l := range e.events("events.log") {
		switch l {
		case "start backfill":
			backfill++
			starts++
		case "end backfill":
			backfill--
		case "start scheduled":
			scheduledAt = starts
			starts++
		}
		peak = max(peak, backfill)
	}
	if peak != 2 {
		t.Errorf("at most %d backfill attempts at once; want 2 (3 slots, 1 reserved)", peak)
	}
	// First means claimed first: the order of the attempt rows (the start
	// lines of processes launched a millisecond apart may interleave).
	_ = scheduledAt
	var scheduledID, firstBackfill int64
	for _, r := range e.runs("p") {
		for _, ti := range r.Tasks {
			for _, a := range ti.Attempts {
				if r.Kind == store.KindScheduled {
					scheduledID = a.ID
				} else if firstBackfill == 0 || a.ID < firstBackfill {
					firstBackfill = a.ID
				}
			}
		}
	}
	if scheduledID == 0 || scheduledID > firstBackfill {
		t.Errorf("the scheduled attempt (id %d) was claimed after the first backfill attempt (id %d); want first", scheduledID, firstBackfill)
	}
}

// A limit with concurrency = 2 never has more than 2 attempts using it at
// once; a rate limit spaces the starts.
func TestLimits(t *testing.T) {
	e := newEnv(t, `
limit "oltp" { concurrency = 2 }
limit "api" { rate = "4/s" }
pipeline "p" {
  schedule        = "@daily"
  start_date      = "2025-07-01"
  end_date        = "2025-07-12"
  max_active_runs = 12
  task "extract" {
    limits  = [limit.oltp]
    command = "echo start >> oltp.log; sleep 0.1; echo end >> oltp.log"
  }
  task "call" {
    depends_on = [task.extract]
    limits     = [limit.api]
    command    = "true"
  }
}
`)
	e.run(scheduler.Options{Now: utc("2025-08-01T00:00:00Z")})
	active, peak := 0, 0
	for _, l := range e.events("oltp.log") {
		if l == "start" {
			active++
		} else {
			active--
		}
		peak = max(peak, active)
	}
	if peak != 2 {
		t.Errorf("peak concurrency on limit oltp: %d; want 2", peak)
	}
	// The same from the attempts' recorded start and end times.
	type edge struct {
		at    time.Time
		delta int
	}
	var edges []edge
	for _, r := range e.runs("p") {
		for _, ti := range r.Tasks {
			if ti.Task == "extract" {
				a := ti.Attempts[0]
				edges = append(edges, edge{a.StartedAt, 1}, edge{a.EndedAt, -1})
			}
		}
	}
	sort.Slice(edges, func(i, j int) bool {
		if !edges[i].at.Equal(edges[j].at) {
			return edges[i].at.Before(edges[j].at)
		}
		return edges[i].delta < edges[j].delta // an end before a start at the same instant
	})
	active, peak = 0, 0
	for _, ed := range edges {
		active += ed.delta
		peak = max(peak, active)
	}
	if peak != 2 {
		t.Errorf("peak concurrency on limit oltp from the recorded attempts: %d; want 2", peak)
	}
	var starts []time.Time
	for _, r := range e.runs("p") {
		for _, ti := range r.Tasks {
			if ti.Task == "call" {
				starts = append(starts, ti.Attempts[0].StartedAt)
			}
		}
	}
	sort.Slice(starts, func(i, j int) bool { return starts[i].Before(starts[j]) })
	for i := 4; i < len(starts); i++ {
		if starts[i].Sub(starts[i-4]) < time.Second-250*time.Millisecond { // slack: an attempt starts a little after its claim
			t.Errorf("5 starts within %s on a 4/s limit", starts[i].Sub(starts[i-4]))
		}
	}
}

// A pool's setup runs once before its first attempt and its teardown once
// after idle_timeout.
func TestPoolSetupAndTeardown(t *testing.T) {
	e := newEnv(t, `
pool "cluster" {
  slots        = 2
  setup        = "echo setup ${pool.name} >> markers.log"
  teardown     = "echo teardown ${pool.name} >> markers.log"
  idle_timeout = "300ms"
}
pipeline "p" {
  schedule     = "@daily"
  start_date   = "2025-07-01"
  end_date     = "2025-07-04"
  default_pool = "cluster"
  task "t" { command = "echo attempt >> markers.log" }
}
`)
	e.run(scheduler.Options{Now: utc("2025-08-01T00:00:00Z")})
	got := e.events("markers.log")
	want := []string{"setup cluster", "attempt", "attempt", "attempt", "attempt", "teardown cluster"}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("markers %v; want %v", got, want)
	}
}

// A pool's launcher prefixes every attempt's argv, templated with pool.*.
func TestPoolLauncher(t *testing.T) {
	e := newEnv(t, `
pool "remote" {
  memory   = "2GiB"
  launcher = ["env", "LAUNCHED_ON=${pool.name}", "LAUNCH_MEMORY=${pool.memory}"]
}
pipeline "p" {
  schedule     = "@daily"
  start_date   = "2025-07-01"
  end_date     = "2025-07-01"
  default_pool = "remote"
  task "t" { command = "echo $LAUNCHED_ON $LAUNCH_MEMORY > launched.txt" }
}
`)
	if sum := e.run(scheduler.Options{Now: utc("2025-08-01T00:00:00Z")}); sum.Failed() {
		t.Fatal("run failed")
	}
	if got := e.events("launched.txt"); len(got) != 1 || got[0] != "remote "+strconv.Itoa(2<<30) {
		t.Errorf("launched.txt = %v", got)
	}
}

// History: a date whose last successful attempt ran far longer than the
// task's median, and at least history_min_duration, goes straight to the
// large pool when it runs again.
func TestHistoryRoutesSlowDates(t *testing.T) {
	e := newEnv(t, `
pool "large" { slots = 2 }
pipeline "p" {
  schedule        = "@daily"
  start_date      = "2025-07-01"
  end_date        = "2025-07-07"
  max_active_runs = 7
  skew {
    hot_factor           = 3
    history_min_duration = "1s"
    pool                 = "large"
  }
  task "t" {
    command = "echo $REWIND_DS $REWIND_POOL >> pools.log; if [ $REWIND_DS = 2025-07-04 ]; then sleep 2; else sleep 0.2; fi"
  }
}
`)
	now := utc("2025-08-01T00:00:00Z")
	e.run(scheduler.Options{Now: now})
	for _, l := range e.events("pools.log") {
		if !strings.HasSuffix(l, " default") {
			t.Errorf("first run: %q; want every date in default", l)
		}
	}
	if _, err := e.st.ClearTasks(context.Background(), store.ClearTasksParams{Pipeline: "p", From: utc("2025-07-01T00:00:00Z"), To: utc("2025-07-07T00:00:00Z"), Now: time.Now()}); err != nil {
		t.Fatal(err)
	}
	e.run(scheduler.Options{Now: now})
	for _, d := range []string{"2025-07-03", "2025-07-04"} {
		atts := e.attempts("p", d, "t")
		last := atts[len(atts)-1]
		want := "default"
		if d == "2025-07-04" {
			want = "large"
			if !strings.HasPrefix(last.Reason, "history: try 1 ran ") {
				t.Errorf("%s: reason %q", d, last.Reason)
			}
		}
		if last.Pool != want {
			t.Errorf("%s ran again in %s; want %s", d, last.Pool, want)
		}
	}
}
