package scheduler_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/rewind-dev/rewind/backfill"
	"github.com/rewind-dev/rewind/lake"
	"github.com/rewind-dev/rewind/scheduler"
	"github.com/rewind-dev/rewind/store"
)

// An hourly pipeline whose output is partitioned by data interval: each
// run writes the rows of its hour, the hour column holding the interval's
// start; the views depend on a factor file.
const hourlyHCL = `
pipeline "views" {
  schedule        = "@hourly"
  start_date      = "2025-07-01"
  max_active_runs = 8
  task "count" {
    command = "awk -v h=$REWIND_DATA_INTERVAL_START -v f=$(cat factor) 'BEGIN { print \"hour,page,views\"; print h \",/home,\" 10*f; print h \",/cart,\" 5*f }' > $REWIND_RUN_DIR/views.csv"
  }
  output "views" {
    table     = "analytics.page_views"
    from      = "${run.dir}/views.csv"
    columns   = { hour = "timestamp", page = "string", views = "long" }
    partition = "hour"
    validate {
      max_change = { views = 0.5 }
    }
  }
}
`

func (e *env) hourlyStats(ref string) map[string]lake.PartitionStat {
	e.t.Helper()
	lakes := scheduler.NewLakes(e.ws)
	defer lakes.Close()
	lk, err := lakes.Get(context.Background(), "local")
	if err != nil {
		e.t.Fatal(err)
	}
	st, err := lk.PartitionStats(context.Background(), "analytics.page_views", ref, []string{"views"})
	if err != nil {
		e.t.Fatal(err)
	}
	return st
}

// checkDay checks the 24 hourly partitions of day ds: 2 rows each, views
// summing to sum.
func checkDay(t *testing.T, st map[string]lake.PartitionStat, ds string, sum float64) {
	t.Helper()
	for h := range 24 {
		key := fmt.Sprintf("%sT%02d:00:00Z", ds, h)
		got, ok := st[key]
		if !ok {
			t.Errorf("no partition %s", key)
			continue
		}
		if got.Rows != 2 || got.Sums["views"] != sum {
			t.Errorf("%s: %d rows, %g views; want 2 rows, %g", key, got.Rows, got.Sums["views"], sum)
		}
	}
}

// catchupHourly runs the hourly pipeline over two days: 48 runs, each
// committing its own hour.
func catchupHourly(t *testing.T) (*env, time.Time) {
	t.Helper()
	e := newEnv(t, hourlyHCL)
	e.setFactor("1")
	now := utc("2025-07-03T00:00:00Z")
	if sum := e.run(scheduler.Options{Now: now}); sum.Failed() || len(sum.Finished) != 48 {
		t.Fatalf("catchup: %d finished, failed %v", len(sum.Finished), sum.Failed())
	}
	return e, now
}

// An hourly pipeline with an output keeps 24 partitions (24 interval
// values) per day after a catchup of two days.
func TestHourlyOutputKeepsEveryHour(t *testing.T) {
	e, _ := catchupHourly(t)
	main := e.hourlyStats("main")
	if len(main) != 48 {
		t.Fatalf("%d partitions on main after 48 hourly runs, want 48", len(main))
	}
	checkDay(t, main, "2025-07-01", 15)
	checkDay(t, main, "2025-07-02", 15)

	// The window values of a backfill's dates are the hours' starts.
	o := e.ws.Pipeline("views").Output("views")
	got, err := backfill.WindowValues(o, []backfill.PlanDate{{LogicalDate: "2025-07-01T03:00:00Z", DS: "2025-07-01"}, {LogicalDate: "2025-07-01T05:00:00+02:00", DS: "2025-07-01"}})
	if err != nil || strings.Join(got, " ") != "2025-07-01T03:00:00Z 2025-07-01T03:00:00Z" {
		t.Fatalf("WindowValues: %v %v", got, err)
	}
	if _, err := backfill.WindowValues(o, []backfill.PlanDate{{LogicalDate: "2025-07-01", DS: "2025-07-01"}}); err == nil {
		t.Errorf("WindowValues took a date for an interval")
	}
}

// A backfill of one day of an hourly pipeline replaces exactly that day's
// 24 hours on main (validated and reported per hour) while the other day's
// stay, and a rollback restores them.
func TestHourlyBackfillCutsOverOneDay(t *testing.T) {
	e, now := catchupHourly(t)
	e.setFactor("1.2") // a fix of +20%, within max_change
	plan := e.plan(backfill.PlanParams{Pipeline: "views", Start: utc("2025-07-01T00:00:00Z"), End: utc("2025-07-01T23:00:00Z"), Reprocess: "completed", Now: now})
	if plan.Selected != 24 {
		t.Fatalf("the plan selects %d intervals, want the day's 24", plan.Selected)
	}
	res, err := e.apply(backfill.ApplyOptions{Plan: plan, Now: now})
	if err != nil || res.State != store.BackfillSuccess {
		t.Fatalf("apply: %v (%s)", err, res.State)
	}
	main := e.hourlyStats("main")
	if len(main) != 48 {
		t.Fatalf("%d partitions on main after the cutover, want 48", len(main))
	}
	checkDay(t, main, "2025-07-01", 18)
	checkDay(t, main, "2025-07-02", 15)
	if len(res.Corrections) != 24 {
		t.Fatalf("%d corrections, want one per hour of the window: %+v", len(res.Corrections), res.Corrections)
	}
	for h, c := range res.Corrections {
		if want := fmt.Sprintf("2025-07-01T%02d:00:00Z", h); c.DS != want || c.Old != 15 || c.New != 18 || c.OldRows != 2 || c.NewRows != 2 {
			t.Errorf("correction %d: %+v; want %s 15 -> 18", h, c, want)
		}
	}
	report, _ := os.ReadFile(res.ReportPath)
	for _, want := range []string{"| output | partition | rows old -> new |", "| views | 2025-07-01T23:00:00Z | 2 -> 2 | views | 15.00 | 18.00 | 20.00% | 0.5 |"} {
		if !strings.Contains(string(report), want) {
			t.Errorf("report lacks %q:\n%s", want, report)
		}
	}
	checkDay(t, e.hourlyStats(backfill.TagName(res.ID)), "2025-07-01", 15)

	// Rollback: the day's hours as before, the other day untouched.
	if err := e.rollback(res.ID, now); err != nil {
		t.Fatal(err)
	}
	main = e.hourlyStats("main")
	if len(main) != 48 {
		t.Fatalf("%d partitions on main after the rollback, want 48", len(main))
	}
	checkDay(t, main, "2025-07-01", 15)
	checkDay(t, main, "2025-07-02", 15)
}

// A daily output's window values are its dates' ds, as before.
func TestWindowValuesOfADailyOutput(t *testing.T) {
	e := newEnv(t, revenueHCL)
	got, err := backfill.WindowValues(e.ws.Pipeline("revenue").Output("revenue"), []backfill.PlanDate{{LogicalDate: "2025-07-01T00:00:00+02:00", DS: "2025-07-01"}, {LogicalDate: "2025-07-02T00:00:00+02:00", DS: "2025-07-02"}})
	if err != nil || strings.Join(got, " ") != "2025-07-01 2025-07-02" {
		t.Fatalf("WindowValues: %v %v", got, err)
	}
}
