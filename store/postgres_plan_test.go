package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/rewind-dev/rewind/store/pgtest"
)

// planNode is a node of EXPLAIN (ANALYZE, FORMAT JSON).
type planNode struct {
	NodeType       string     `json:"Node Type"`
	Relation       string     `json:"Relation Name"`
	Index          string     `json:"Index Name"`
	ActualRows     float64    `json:"Actual Rows"`
	ActualLoops    float64    `json:"Actual Loops"`
	RemovedFilter  float64    `json:"Rows Removed by Filter"`
	RemovedRecheck float64    `json:"Rows Removed by Index Recheck"`
	Plans          []planNode `json:"Plans"`
}

// runsTouched is the number of rows of runs the plan's scans of runs
// returned or read and dropped, over all their loops.
func (n planNode) runsTouched() float64 { return n.rowsTouched("runs") }

// rowsTouched is the number of rows of table the plan's scans of it
// returned or read and dropped, over all their loops.
func (n planNode) rowsTouched(table string) float64 {
	var t float64
	if n.Relation == table {
		t = (n.ActualRows + n.RemovedFilter + n.RemovedRecheck) * n.ActualLoops
	}
	for _, c := range n.Plans {
		t += c.rowsTouched(table)
	}
	return t
}

func (n planNode) String() string {
	var b strings.Builder
	var walk func(n planNode, depth int)
	walk = func(n planNode, depth int) {
		fmt.Fprintf(&b, "%s%s %s %s rows=%g loops=%g removed=%g\n", strings.Repeat("  ", depth),
			n.NodeType, n.Relation, n.Index, n.ActualRows, n.ActualLoops, n.RemovedFilter+n.RemovedRecheck)
		for _, c := range n.Plans {
			walk(c, depth+1)
		}
	}
	walk(n, 0)
	return b.String()
}

// openPlanState opens a new PostgreSQL state twice: as a Store, and as a
// database/sql handle for EXPLAIN. Both close with t.
func openPlanState(t *testing.T) (Store, *sql.DB) {
	t.Helper()
	dsn := pgtest.DSN(t)
	st, err := Open(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return st, db
}

// explainRuns runs the query under EXPLAIN ANALYZE and returns its plan.
func explainRuns(t *testing.T, db *sql.DB, query string, args ...any) planNode {
	t.Helper()
	var out string
	if err := db.QueryRow("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) "+query, args...).Scan(&out); err != nil {
		t.Fatal(err)
	}
	var plans []struct {
		Plan planNode `json:"Plan"`
	}
	if err := json.Unmarshal([]byte(out), &plans); err != nil || len(plans) != 1 {
		t.Fatalf("EXPLAIN output %s: %v", out, err)
	}
	return plans[0].Plan
}

// TestPostgresAdvanceWatermarkRowsTouched: the watermark query of a
// pipeline in the middle of a 10,000-run catchup (6,000 runs succeeded, a
// few running, the rest queued; another pipeline beside it) reads a
// handful of rows of runs, not one per success, whatever the planner's
// statistics say: stale ones (taken when the table held ten runs, with
// autovacuum off), none, or fresh ones.
func TestPostgresAdvanceWatermarkRowsTouched(t *testing.T) {
	ctx := context.Background()
	st, db := openPlanState(t)
	exec := func(q string, args ...any) {
		t.Helper()
		if _, err := db.Exec(q, args...); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	// insert adds the runs [from, to) of pipeline p, one per hour, in the
	// state their index gives.
	insert := func(p string, from, to int, state func(i int) string) {
		t.Helper()
		for i := from; i < to; {
			var vals []string
			for ; i < to && len(vals) < 1000; i++ {
				u := int64(1735689600 + 3600*i)
				ld := time.Unix(u, 0).UTC()
				vals = append(vals, fmt.Sprintf("('%s', '%s', %d, '%s', '', '', 'scheduled', '%s')", p, ld.Format(time.RFC3339), u, ld.Format(time.DateOnly), state(i)))
			}
			exec("INSERT INTO runs (pipeline, logical_date, logical_unix, ds, data_interval_start, data_interval_end, kind, state) VALUES " + strings.Join(vals, ","))
		}
	}
	for _, p := range []string{"p", "other"} {
		exec("INSERT INTO pipelines (name) VALUES ($1)", p)
	}
	exec("ALTER TABLE runs SET (autovacuum_enabled = false)")
	catchup := func(i int) string {
		switch {
		case i < 6000:
			return "success"
		case i < 6004:
			return "running"
		}
		return "queued"
	}
	check := func(stats string) {
		t.Helper()
		plan := explainRuns(t, db, advanceWatermarkSQL, "p")
		if touched := plan.runsTouched(); touched > 20 {
			t.Errorf("%s statistics: the watermark query touched %g rows of runs; want at most 20 (not one per success):\n%s", stats, touched, plan)
		} else {
			t.Logf("%s statistics: %g rows of runs touched:\n%s", stats, touched, plan)
		}
	}

	// Never analyzed.
	insert("p", 0, 10_000, catchup)
	insert("other", 0, 10_000, func(int) string { return "success" })
	check("no")

	// Analyzed when the table held ten queued runs of the pipeline.
	exec("DELETE FROM runs")
	insert("p", 0, 10, func(int) string { return "queued" })
	exec("ANALYZE runs")
	exec("DELETE FROM runs")
	insert("p", 0, 10_000, catchup)
	insert("other", 0, 10_000, func(int) string { return "success" })
	check("stale")

	exec("ANALYZE runs")
	check("fresh")

	wm, err := st.AdvanceWatermark(ctx, AdvanceWatermarkParams{Pipeline: "p"})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := wm.LogicalDate.Unix(), int64(1735689600+3600*5999); got != want {
		t.Errorf("watermark at %d; want %d, the last success before the first running run", got, want)
	}
}

// TestPostgresFinishRunsRowsTouched: a pass's FinishRuns of 8 runs of a
// 10,000-run catchup (all running, two tasks each, one of them a batch's
// leader with two covered runs) reads a handful of rows of runs: the runs
// it finishes and the ones they cover, through their indexes, never a scan
// of a table.
func TestPostgresFinishRunsRowsTouched(t *testing.T) {
	dsn := pgtest.DSN(t)
	st, err := Open(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	exec := func(q string, args ...any) {
		t.Helper()
		if _, err := db.Exec(q, args...); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	exec("INSERT INTO pipelines (name) VALUES ('p')")
	for i := 0; i < 10_000; {
		var vals []string
		for ; i < 10_000 && len(vals) < 1000; i++ {
			u := int64(1735689600 + 3600*i)
			ld := time.Unix(u, 0).UTC()
			vals = append(vals, fmt.Sprintf("('p', '%s', %d, '%s', '', '', 'scheduled', 'running')", ld.Format(time.RFC3339), u, ld.Format(time.DateOnly)))
		}
		exec("INSERT INTO runs (pipeline, logical_date, logical_unix, ds, data_interval_start, data_interval_end, kind, state) VALUES " + strings.Join(vals, ","))
	}
	var ids []int64
	rows, err := db.Query("SELECT id FROM runs ORDER BY id LIMIT 10 OFFSET 5000")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	if err := rows.Err(); err != nil || len(ids) != 10 {
		t.Fatalf("runs: %v, %v", ids, err)
	}
	exec("UPDATE runs SET batch_of = $1 WHERE id = ANY($2::bigint[])", ids[0], ids[8:])
	exec("INSERT INTO task_instances (run_id, task, state, pool) SELECT id, t, 'success', 'default' FROM runs, unnest(ARRAY['a', 'b']) AS t")
	exec("ANALYZE runs")
	exec("ANALYZE task_instances")
	now := time.Now().UnixNano()
	states, nows := make([]string, 8), make([]int64, 8)
	for i := range states {
		states[i], nows[i] = "success", now
	}
	plan := explainRuns(t, db, pgFinishRunsSQL, ids[:8], states, nows)
	var scans func(n planNode) []string
	scans = func(n planNode) (out []string) {
		if n.NodeType == "Seq Scan" {
			out = append(out, n.Relation)
		}
		for _, c := range n.Plans {
			out = append(out, scans(c)...)
		}
		return out
	}
	if touched := plan.runsTouched(); touched > 40 || len(scans(plan)) > 0 {
		t.Errorf("FinishRuns of 8 runs touched %g rows of runs, scanned %v; want at most 40 and no scan (of 10,000 runs, 20,000 task instances):\n%s", touched, scans(plan), plan)
	} else {
		t.Logf("%g rows of runs touched:\n%s", touched, plan)
	}
	var finished, covered int
	if err := db.QueryRow("SELECT COUNT(*) FILTER (WHERE batch_of = 0), COUNT(*) FILTER (WHERE batch_of <> 0) FROM runs WHERE state = 'success'").Scan(&finished, &covered); err != nil {
		t.Fatal(err)
	}
	if finished != 8 || covered != 2 {
		t.Errorf("%d runs finished and %d covered ones with them; want 8 and 2", finished, covered)
	}
}

// TestPostgresClaimRowsTouched: a claim of 8 reads a few dozen task
// instances, not the backlog, and takes the first 8 in claim order: from a
// pool with 4,000 queued task instances (2,000 of a backfill's runs, dated
// before the 2,000 of scheduled runs), a claim of scheduled runs and one of
// the backfill (which takes scheduled runs first); from a pool of 2,000
// task instances of another backfill's runs, its claim, oldest date first
// and newest first. With the planner's statistics stale (taken when the
// tables were empty, autovacuum off) and fresh.
func TestPostgresClaimRowsTouched(t *testing.T) {
	ctx := context.Background()
	st, db := openPlanState(t)
	for _, table := range []string{"runs", "task_instances", "attempts"} {
		if _, err := db.Exec("ALTER TABLE " + table + " SET (autovacuum_enabled = false)"); err != nil {
			t.Fatal(err)
		}
		if _, err := db.Exec("ANALYZE " + table); err != nil {
			t.Fatal(err)
		}
	}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	if _, err := st.UpsertPipeline(ctx, UpsertPipelineParams{Name: "p", Now: now}); err != nil {
		t.Fatal(err)
	}
	hours := func(from time.Time, n int) []RunSpec {
		specs := make([]RunSpec, n)
		for i := range specs {
			d := from.Add(time.Duration(i) * time.Hour)
			specs[i] = RunSpec{LogicalDate: d, DS: d.Format(time.DateOnly), DataIntervalStart: d, DataIntervalEnd: d.Add(time.Hour)}
		}
		return specs
	}
	const n = 2000
	tasks := []TaskSpec{{Name: "t", Pool: "default"}}
	if _, err := st.MaterializeRuns(ctx, MaterializeRunsParams{Pipeline: "p", Kind: KindBackfill, BackfillID: "bf",
		Runs: hours(time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC), n), Tasks: tasks, Now: now}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.MaterializeRuns(ctx, MaterializeRunsParams{Pipeline: "p", Kind: KindScheduled,
		Runs: hours(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC), n), Tasks: tasks, Now: now}); err != nil {
		t.Fatal(err)
	}
	// Pipeline q: a backfill's runs alone in pool bfpool, so that a claim
	// there takes backfill runs.
	if _, err := st.UpsertPipeline(ctx, UpsertPipelineParams{Name: "q", Now: now}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.MaterializeRuns(ctx, MaterializeRunsParams{Pipeline: "q", Kind: KindBackfill, BackfillID: "bq",
		Runs: hours(time.Date(2021, 1, 1, 0, 0, 0, 0, time.UTC), n), Tasks: tasks, Now: now}); err != nil {
		t.Fatal(err)
	}
	runs, err := st.ListRuns(ctx, ListRunsParams{Pipelines: []string{"p", "q"}, WithTasks: true})
	if err != nil || len(runs) != 3*n {
		t.Fatalf("%d runs, %v", len(runs), err)
	}
	admit := make([]AdmitRunParams, len(runs))
	items := make([]EnqueueItem, len(runs))
	for i, r := range runs {
		admit[i] = AdmitRunParams{RunID: r.ID, Now: now}
		pool := "default"
		if r.Pipeline == "q" {
			pool = "bfpool"
		}
		items[i] = EnqueueItem{TaskInstanceID: r.Tasks[0].ID, Pool: pool, LogPath: "/dev/null"}
	}
	if _, err := st.AdmitRuns(ctx, admit); err != nil {
		t.Fatal(err)
	}
	if moved, err := st.EnqueueTasks(ctx, EnqueueTasksParams{Items: items, Now: now}); err != nil || moved != 3*n {
		t.Fatalf("enqueued %d, %v", moved, err)
	}
	pools := []PoolCapacity{{Name: "default", Slots: 64, BackfillSlots: 4}}
	bfpool := []PoolCapacity{{Name: "bfpool", Slots: 64, BackfillSlots: 64}}
	hour := func(y, i int) time.Time {
		return time.Date(y, 1, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(i) * time.Hour)
	}
	first8 := func(y int) []time.Time {
		out := make([]time.Time, 8)
		for i := range out {
			out[i] = hour(y, i)
		}
		return out
	}
	last8 := make([]time.Time, 8)
	for i := range last8 {
		last8[i] = hour(2021, n-1-i)
	}
	for _, stats := range []string{"stale", "fresh"} {
		if stats == "fresh" {
			if _, err := db.Exec("ANALYZE"); err != nil {
				t.Fatal(err)
			}
		}
		for _, c := range []struct {
			name string
			p    ClaimReadyParams
			kind RunKind
			want []time.Time // the logical dates claimed, in order
		}{
			// Behind 2,000 older task instances of backfill runs.
			{"scheduled", ClaimReadyParams{Pools: pools, Limit: 8, Owner: "o", Host: "h", Now: now}, KindScheduled, first8(2025)},
			{"backfill, its pool's scheduled runs first", ClaimReadyParams{Pools: pools, Limit: 8, Owner: "o", Host: "h", Now: now, BackfillID: "bf"}, KindScheduled, first8(2025)},
			{"backfill", ClaimReadyParams{Pools: bfpool, Limit: 8, Owner: "o", Host: "h", Now: now, BackfillID: "bq"}, KindBackfill, first8(2021)},
			{"backfill reversed", ClaimReadyParams{Pools: bfpool, Limit: 8, Owner: "o", Host: "h", Now: now, BackfillID: "bq", ReverseBackfill: true}, KindBackfill, last8},
		} {
			q, a := pgClaimQuery(&postgresDialect, c.p)
			// What the claim takes (then undone).
			tx, err := db.Begin()
			if err != nil {
				t.Fatal(err)
			}
			rows, err := tx.Query(q, a...)
			got, err := scanAll(rows, err, func(rows *sql.Rows) (ClaimedAttempt, error) { return pgClaimed(c.p, rows.Scan) })
			_ = tx.Rollback()
			if err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
			var dates []time.Time
			for _, ca := range got {
				if ca.Kind != c.kind {
					t.Errorf("%s: claimed a task instance of a %s run, want %s", c.name, ca.Kind, c.kind)
				}
				dates = append(dates, ca.LogicalDate.UTC())
			}
			if fmt.Sprint(dates) != fmt.Sprint(c.want) {
				t.Errorf("%s: claimed the runs of %v, want %v", c.name, dates, c.want)
			}
			tx, err = db.Begin()
			if err != nil {
				t.Fatal(err)
			}
			var out string
			err = tx.QueryRow("EXPLAIN (ANALYZE, FORMAT JSON) "+q, a...).Scan(&out)
			_ = tx.Rollback()
			if err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
			var plans []struct {
				Plan planNode `json:"Plan"`
			}
			if err := json.Unmarshal([]byte(out), &plans); err != nil || len(plans) != 1 {
				t.Fatalf("EXPLAIN output %s: %v", out, err)
			}
			plan := plans[0].Plan
			if touched := plan.rowsTouched("task_instances"); touched > 40 {
				t.Errorf("%s statistics, %s: the claim touched %g rows of task_instances; want at most 40 (not the backlog of %d):\n%s", stats, c.name, touched, 2*n, plan)
			} else {
				t.Logf("%s statistics, %s: %g rows of task_instances touched", stats, c.name, touched)
			}
		}
	}
}
