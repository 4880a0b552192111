//go:build unix

package store_test

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/rewind-dev/rewind/store"
)

// hourly returns the run specs of n hourly intervals from 2016-01-01 UTC:
// 87,600 of them are ten years of an @hourly pipeline.
func hourly(n int) []store.RunSpec {
	start := time.Date(2016, 1, 1, 0, 0, 0, 0, time.UTC)
	specs := make([]store.RunSpec, n)
	for i := range specs {
		d := start.Add(time.Duration(i) * time.Hour)
		specs[i] = store.RunSpec{LogicalDate: d, DS: d.Format("2006-01-02"), DataIntervalStart: d, DataIntervalEnd: d.Add(time.Hour)}
	}
	return specs
}

func materializeParams(specs []store.RunSpec) store.MaterializeRunsParams {
	return store.MaterializeRunsParams{
		Pipeline: "hourly_events", Kind: store.KindScheduled, Runs: specs,
		Tasks: []store.TaskSpec{{Name: "extract", Pool: "default"}, {Name: "load", Pool: "default"}},
		Now:   time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC),
	}
}

// cpuTime is the CPU time (user and system) this process has used: on a
// shared machine it varies less than wall time.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkMaterialize87600HourlyRuns creates ten years of hourly runs with
// two tasks each (87,600 runs, 175,200 task instances) in a new state file.
func BenchmarkMaterialize87600HourlyRuns(b *testing.B) {
	ctx := context.Background()
	p := materializeParams(hourly(87600))
	var cpu time.Duration
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		st := openSQLite(b, filepath.Join(b.TempDir(), "state.db"))
		b.StartTimer()
		c0 := cpuTime(b)
		n, err := st.MaterializeRuns(ctx, p)
		cpu += cpuTime(b) - c0
		b.StopTimer()
		if err != nil || n != len(p.Runs) {
			b.Fatalf("MaterializeRuns = %d, %v", n, err)
		}
		if err := st.Close(); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	b.ReportMetric(float64(len(p.Runs))*float64(b.N)/b.Elapsed().Seconds(), "runs/s")
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
}

// BenchmarkMaterialize87600HourlyRunsAgain is the baseline of the same call
// on a state that already holds every run: what a cron-driven `rewind run`
// pays each time it finds nothing new.
func BenchmarkMaterialize87600HourlyRunsAgain(b *testing.B) {
	ctx := context.Background()
	p := materializeParams(hourly(87600))
	st := openSQLite(b, filepath.Join(b.TempDir(), "state.db"))
	defer st.Close()
	if _, err := st.MaterializeRuns(ctx, p); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		n, err := st.MaterializeRuns(ctx, p)
		if err != nil || n != 0 {
			b.Fatalf("MaterializeRuns = %d, %v; want 0", n, err)
		}
	}
}

// BenchmarkClaimTask measures one claim (guarded update and attempt insert
// in one transaction): the per-attempt cost of the state.
func BenchmarkClaimTask(b *testing.B) {
	ctx := context.Background()
	st := openSQLite(b, filepath.Join(b.TempDir(), "state.db"))
	defer st.Close()
	p := materializeParams(hourly(max(b.N, 1)))
	p.Tasks = p.Tasks[:1]
	if _, err := st.MaterializeRuns(ctx, p); err != nil {
		b.Fatal(err)
	}
	runs, err := st.ListRuns(ctx, store.ListRunsParams{WithTasks: true})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := st.ClaimTask(ctx, store.ClaimTaskParams{TaskInstanceID: runs[i].Tasks[0].ID, Host: "h", Now: p.Now}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkMaterialize87600HourlyRunsRowByRow is the baseline for
// BenchmarkMaterialize87600HourlyRuns: the same runs and task instances in
// the same schema, inserted the obvious way (one prepared INSERT ... ON
// CONFLICT DO NOTHING per run, then one per task instance of a new run, in
// one transaction).
func BenchmarkMaterialize87600HourlyRunsRowByRow(b *testing.B) {
	ctx := context.Background()
	p := materializeParams(hourly(87600))
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		path := filepath.Join(b.TempDir(), "state.db")
		if err := openSQLite(b, path).Close(); err != nil { // creates the schema
			b.Fatal(err)
		}
		db, err := sql.Open("sqlite3", "file:"+path+"?_busy_timeout=10000&_journal_mode=WAL&_synchronous=NORMAL&_foreign_keys=on")
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			b.Fatal(err)
		}
		insRun, err := tx.PrepareContext(ctx, `INSERT INTO runs (pipeline, kind, backfill_id, created_at, logical_date,
			logical_unix, ds, data_interval_start, data_interval_end) VALUES (?, ?, '', ?, ?, ?, ?, ?, ?)
			ON CONFLICT (pipeline, logical_unix) DO NOTHING RETURNING id`)
		if err != nil {
			b.Fatal(err)
		}
		insTask, err := tx.PrepareContext(ctx, `INSERT INTO task_instances (run_id, task, state, pool, updated_at)
			VALUES (?, ?, 'scheduled', ?, ?) ON CONFLICT (run_id, task) DO NOTHING`)
		if err != nil {
			b.Fatal(err)
		}
		created := 0
		for _, r := range p.Runs {
			var id int64
			err := insRun.QueryRowContext(ctx, p.Pipeline, string(p.Kind), p.Now.UnixNano(), r.LogicalDate.Format(time.RFC3339),
				r.LogicalDate.UnixNano(), r.DS, r.DataIntervalStart.Format(time.RFC3339), r.DataIntervalEnd.Format(time.RFC3339)).Scan(&id)
			if err == sql.ErrNoRows {
				continue
			}
			if err != nil {
				b.Fatal(err)
			}
			created++
			for _, t := range p.Tasks {
				if _, err := insTask.ExecContext(ctx, id, t.Name, t.Pool, p.Now.UnixNano()); err != nil {
					b.Fatal(err)
				}
			}
		}
		if err := tx.Commit(); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		if created != len(p.Runs) {
			b.Fatalf("created %d runs", created)
		}
		db.Close()
		b.StartTimer()
	}
}

// BenchmarkTaskDurationsOf10000Pipelines is one pipeline's TaskDurations in
// a state of 10,000 pipelines (3 runs of 2 tasks each): what `rewind run`
// pays per pipeline to find slow dates. It must not grow with the state.
func BenchmarkTaskDurationsOf10000Pipelines(b *testing.B) {
	ctx := context.Background()
	path := filepath.Join(b.TempDir(), "state.db")
	seedPipelines(b, path, 10000)
	st := openSQLite(b, path)
	defer st.Close()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := st.TaskDurations(ctx, store.TaskDurationsParams{Pipeline: fmt.Sprintf("p%05d", i%10000), Limit: 20}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkEpoch is the engine's poll of the state: one primary-key read.
func BenchmarkEpoch(b *testing.B) {
	ctx := context.Background()
	st := openSQLite(b, filepath.Join(b.TempDir(), "state.db"))
	defer st.Close()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := st.Epoch(ctx); err != nil {
			b.Fatal(err)
		}
	}
}
