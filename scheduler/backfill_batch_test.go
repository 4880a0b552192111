package scheduler_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/iceberg-go"
	sqlcat "github.com/apache/iceberg-go/catalog/sql"
	"github.com/apache/iceberg-go/table"

	"github.com/rewind-dev/rewind/backfill"
	"github.com/rewind-dev/rewind/dsl"
	"github.com/rewind-dev/rewind/scheduler"
	"github.com/rewind-dev/rewind/store"
)

// batchHCL is an hourly pipeline whose task writes a row per hour of its
// data interval (one hour for a run of its own, every hour of its batch
// for a batch's run): the page /home holds the factor, the page batch the
// hour at which the run's data interval starts (hours since the epoch).
const batchHCL = `
pipeline "views" {
  schedule        = "@hourly"
  start_date      = "2025-07-01"
  max_active_runs = 4
  task "count" {
    command = "sh ./hours.sh"
  }
  output "views" {
    table     = "analytics.page_views"
    from      = "${run.dir}/views.csv"
    columns   = { hour = "timestamp", page = "string", views = "long" }
    partition = "hour"
  }
}
`

const hoursScript = `s=$(date -u -d "$REWIND_DATA_INTERVAL_START" +%s)
e=$(date -u -d "$REWIND_DATA_INTERVAL_END" +%s)
f=$(cat factor)
b=$((s / 3600))
out="$REWIND_RUN_DIR/views.csv"
echo hour,page,views > "$out"
while [ "$s" -lt "$e" ]; do
  h=$(date -u -d "@$s" +%Y-%m-%dT%H:%M:%SZ)
  echo "$h,/home,$f" >> "$out"
  echo "$h,batch,$b" >> "$out"
  s=$((s + 3600))
done
`

func newBatchEnv(t *testing.T) *env {
	t.Helper()
	e := newEnv(t, batchHCL)
	if err := os.WriteFile(filepath.Join(e.dir, "hours.sh"), []byte(hoursScript), 0o644); err != nil {
		t.Fatal(err)
	}
	e.setFactor("1")
	return e
}

// A batched backfill of 30 days of an hourly pipeline with a batch of 1d:
// 30 runs, one attempt each, whose data interval is their day; each of the
// 720 hours has its run, covered by its day's, success; each hour's
// partition on main holds its batch's rows exactly once (one commit per
// batch on the branch); and a reader of the table that is not rewind's
// (iceberg-go's own scan of main) sees the rows that lake's partition
// statistics (rewind lake show) count.
func TestBatchedBackfillOfThirtyDays(t *testing.T) {
	e := newBatchEnv(t)
	// The nightly ran the first two days: 48 runs of their own.
	if sum := e.run(scheduler.Options{Now: utc("2025-07-03T00:00:00Z")}); sum.Failed() || len(sum.Finished) != 48 {
		t.Fatalf("catchup: %d finished, failed %v", len(sum.Finished), sum.Failed())
	}
	e.setFactor("2")
	now := utc("2025-08-01T00:00:00Z")
	batch, err := dsl.ParseBatch("1d")
	if err != nil {
		t.Fatal(err)
	}
	plan := e.plan(backfill.PlanParams{Pipeline: "views", Start: utc("2025-07-01T00:00:00Z"), End: utc("2025-07-30T23:00:00Z"),
		Reprocess: "completed", Now: now, Batch: batch})
	if plan.Selected != 720 || len(plan.Batches) != 30 || plan.Batch != "1d" {
		t.Fatalf("plan: %d dates in %d batches of %q; want 720 in 30 of 1d", plan.Selected, len(plan.Batches), plan.Batch)
	}
	for i, b := range plan.Batches {
		day := utc("2025-07-01T00:00:00Z").AddDate(0, 0, i)
		if b.Start != day.Format(time.RFC3339) || b.End != day.AddDate(0, 0, 1).Format(time.RFC3339) || b.Intervals != 24 || b.Split != "" {
			t.Fatalf("batch %d: %+v; want the day %s, 24 intervals", i, b, day.Format(time.DateOnly))
		}
	}
	began := time.Now()
	res, err := e.apply(backfill.ApplyOptions{Plan: plan, Now: now})
	if err != nil || res.State != store.BackfillSuccess {
		t.Fatalf("apply: %v (%s)", err, res.State)
	}
	// (The apply's execution also ran the nightly's due runs after the
	// window, July 31st.)
	runs, err := e.st.ListRuns(context.Background(), store.ListRunsParams{Pipelines: []string{"views"}, From: utc("2025-07-01T00:00:00Z"), To: utc("2025-07-30T23:00:00Z"), WithTasks: true, WithAttempts: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(runs) != 720 {
		t.Fatalf("%d runs, want 720", len(runs))
	}
	leaders := 0
	byID := map[int64]store.Run{}
	for _, r := range runs {
		byID[r.ID] = r
	}
	attempts := 0
	for _, r := range runs {
		if r.State != store.RunSuccess || r.BackfillID != res.ID {
			t.Errorf("run %s: %s of %q; want success of the backfill", r.LogicalDate.Format(time.RFC3339), r.State, r.BackfillID)
		}
		for _, ti := range r.Tasks {
			for _, a := range ti.Attempts {
				if !a.StartedAt.Before(began) {
					attempts++
				}
			}
		}
		if r.BatchOf == 0 {
			leaders++
			if r.LogicalDate.Hour() != 0 || r.DataIntervalEnd.Sub(r.DataIntervalStart) != 24*time.Hour {
				t.Errorf("run %s of its own: interval [%s, %s); want a day's batch", r.LogicalDate, r.DataIntervalStart, r.DataIntervalEnd)
			}
			continue
		}
		l := byID[r.BatchOf]
		if l.LogicalDate.Format(time.DateOnly) != r.LogicalDate.Format(time.DateOnly) || !r.BatchStart.Equal(l.LogicalDate) ||
			r.DataIntervalEnd.Sub(r.DataIntervalStart) != time.Hour || r.Tasks[0].State != store.TaskSuccess {
			t.Errorf("run %s: covered by %s (%s), interval [%s, %s), task %s", r.LogicalDate, l.LogicalDate, r.BatchStart, r.DataIntervalStart, r.DataIntervalEnd, r.Tasks[0].State)
		}
	}
	if leaders != 30 || attempts != 30 {
		t.Errorf("%d batch runs and %d attempts of the backfill; want 30 and 30", leaders, attempts)
	}
	n := 0
	for _, f := range res.Summary.Finished {
		if f.LogicalDate.Before(utc("2025-07-31T00:00:00Z")) {
			n++
		}
	}
	if n != 30 {
		t.Errorf("the backfill ran %d runs of its window, want 30", n)
	}
	// One commit per batch on the branch.
	lakes := scheduler.NewLakes(e.ws)
	defer lakes.Close()
	lk, err := lakes.Get(context.Background(), "local")
	if err != nil {
		t.Fatal(err)
	}
	snaps, err := lk.Snapshots(context.Background(), "analytics.page_views")
	if err != nil {
		t.Fatal(err)
	}
	commits := map[string]int{}
	for _, s := range snaps {
		if s.Summary["rewind.kind"] == string(store.KindBackfill) {
			commits[s.Summary["rewind.run-id"]]++
		}
	}
	if len(commits) != 30 {
		t.Errorf("%d backfill runs committed, want 30: %v", len(commits), commits)
	}
	for id, n := range commits {
		if n != 1 {
			t.Errorf("run %s committed %d times", id, n)
		}
	}
	// main: each hour's rows once, from its day's batch, with the new factor.
	stats, err := lk.PartitionStats(context.Background(), "analytics.page_views", "main", []string{"views"})
	if err != nil {
		t.Fatal(err)
	}
	rows := readTable(t, e, "analytics.page_views")
	for h := range stats {
		if strings.HasPrefix(h, "2025-07-31") {
			delete(stats, h)
			delete(rows, h)
		}
	}
	if len(stats) != 720 || len(rows) != 720 {
		t.Fatalf("%d partitions by lake's statistics, %d hours read by iceberg-go; want 720 each", len(stats), len(rows))
	}
	for hour, got := range rows {
		at, _ := time.Parse(time.RFC3339, hour)
		day := time.Date(at.Year(), at.Month(), at.Day(), 0, 0, 0, 0, time.UTC)
		want := fmt.Sprintf("/home=2 batch=%d", day.Unix()/3600)
		if got != want {
			t.Errorf("hour %s: %q; want %q", hour, got, want)
		}
		if s := stats[hour]; s.Rows != 2 || s.Sums["views"] != float64(2+day.Unix()/3600) {
			t.Errorf("hour %s by lake's statistics: %d rows, %g views", hour, s.Rows, s.Sums["views"])
		}
	}
}

// readTable reads main of an output table with iceberg-go's scan, not
// through package lake: hour -> its rows, "page=views" sorted.
func readTable(t *testing.T, e *env, name string) map[string]string {
	t.Helper()
	c := e.ws.Catalogs[dsl.DefaultCatalogName]
	db, err := sql.Open("sqlite3", c.URI)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	wh, _ := filepath.Abs(c.Warehouse)
	cat, err := sqlcat.NewCatalog(c.Name, db, sqlcat.SQLite, iceberg.Properties{"warehouse": "file://" + wh})
	if err != nil {
		t.Fatal(err)
	}
	tbl, err := cat.LoadTable(context.Background(), strings.Split(name, "."))
	if err != nil {
		t.Fatal(err)
	}
	at, err := tbl.Scan(table.WithSelectedFields("hour", "page", "views")).ToArrowTable(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer at.Release()
	byHour := map[string][]string{}
	tr := array.NewTableReader(at, 1024)
	defer tr.Release()
	for tr.Next() {
		rec := tr.RecordBatch()
		hours, pages, views := rec.Column(0).(*array.Timestamp), rec.Column(1).(*array.String), rec.Column(2).(*array.Int64)
		unit := hours.DataType().(*arrow.TimestampType).Unit
		for i := 0; i < int(rec.NumRows()); i++ {
			key := hours.Value(i).ToTime(unit).UTC().Format(time.RFC3339)
			byHour[key] = append(byHour[key], fmt.Sprintf("%s=%d", pages.Value(i), views.Value(i)))
		}
	}
	out := map[string]string{}
	for h, rs := range byHour {
		sort.Strings(rs)
		out[h] = strings.Join(rs, " ")
	}
	return out
}
