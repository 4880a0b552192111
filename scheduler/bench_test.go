package scheduler_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/rewind-dev/rewind/dsl"
	"github.com/rewind-dev/rewind/scheduler"
	"github.com/rewind-dev/rewind/store"
)

// benchWorkspace writes hcl as dir's main.hcl and returns the loaded
// workspace and a new SQLite state in dir.
func benchWorkspace(b *testing.B, dir, hcl string) (*dsl.Workspace, store.Store) {
	b.Helper()
	if err := os.WriteFile(filepath.Join(dir, "main.hcl"), []byte(hcl), 0o644); err != nil {
		b.Fatal(err)
	}
	ws, diags := dsl.Load(dir, dsl.LoadOptions{})
	if diags.HasErrors() {
		b.Fatal(diags.Error())
	}
	st, err := store.Open(context.Background(), "sqlite:"+filepath.Join(dir, "state.db"))
	if err != nil {
		b.Fatal(err)
	}
	return ws, st
}

// BenchmarkNoopAttempts runs 2,000 attempts of `true` at concurrency 8 (an
// hourly pipeline, max_active_runs = 8): the scheduler's own overhead per
// attempt. bench/noop.sh compares the same workload with xargs -P 8.
func BenchmarkNoopAttempts(b *testing.B) {
	const runs = 2000
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC).Add(runs * time.Hour)
	for b.Loop() {
		b.StopTimer()
		dir := b.TempDir()
		hcl := `
pipeline "noop" {
  schedule        = "@hourly"
  start_date      = "2025-01-01"
  max_active_runs = 8
  task "t" { command = ["true"] }
}`
		ws, st := benchWorkspace(b, dir, hcl)
		b.StartTimer()
		sum, err := scheduler.Run(context.Background(), scheduler.Options{Store: st, Workspace: ws, Home: dir, Now: now, Catchup: true})
		b.StopTimer()
		if err != nil || len(sum.Finished) != runs || sum.Failed() {
			b.Fatalf("err %v, finished %d, failed %v", err, len(sum.Finished), sum.Failed())
		}
		st.Close()
		b.StartTimer()
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*runs), "ns/attempt")
}

// BenchmarkMaterialize87600HourlyRuns is `rewind run --catchup` creating ten
// years of an @hourly pipeline's runs (timetable and state together); the
// row-by-row baseline is store's BenchmarkMaterialize87600HourlyRunsRowByRow.
func BenchmarkMaterialize87600HourlyRuns(b *testing.B) {
	dir := b.TempDir()
	hcl := `
pipeline "hourly" {
  schedule   = "@hourly"
  start_date = "2016-01-01"
  task "extract" { command = "true" }
  task "load" {
    depends_on = [task.extract]
    command    = "true"
  }
}`
	if err := os.WriteFile(filepath.Join(dir, "main.hcl"), []byte(hcl), 0o644); err != nil {
		b.Fatal(err)
	}
	ws, diags := dsl.Load(dir, dsl.LoadOptions{})
	if diags.HasErrors() {
		b.Fatal(diags.Error())
	}
	now := time.Date(2016, 1, 1, 0, 0, 0, 0, time.UTC).Add(87600 * time.Hour)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		b.StopTimer()
		st, err := store.Open(context.Background(), "sqlite:"+filepath.Join(dir, fmt.Sprintf("state%d.db", i)))
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		n, err := scheduler.Materialize(context.Background(), st, scheduler.MaterializeParams{Pipeline: ws.Pipeline("hourly"), Catchup: true, Now: now})
		b.StopTimer()
		if err != nil || n != 87600 {
			b.Fatalf("Materialize = %d, %v", n, err)
		}
		st.Close()
		b.StartTimer()
	}
}

// BenchmarkTick is one tick of a scheduler (rewind scheduler, or the
// nightly rewind run): the execution that runs the one newly due interval
// of an hourly pipeline, after a day of finished runs (the baseline) and
// after a year of them. A tick costs what is due, not the history: the two
// are the same within noise.
func BenchmarkTick(b *testing.B) {
	start := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, history := range []int{24, 8760} {
		b.Run(fmt.Sprintf("history=%d", history), func(b *testing.B) {
			dir := b.TempDir()
			hcl := `
pipeline "hourly" {
  schedule        = "@hourly"
  start_date      = "2025-01-01"
  max_active_runs = 16
  task "t" { command = ["true"] }
}`
			ws, st := benchWorkspace(b, dir, hcl)
			defer st.Close()
			now := start.Add(time.Duration(history) * time.Hour)
			run := func() *scheduler.Summary {
				sum, err := scheduler.Run(context.Background(), scheduler.Options{Store: st, Workspace: ws, Home: dir, Now: now, Catchup: true})
				if err != nil || sum.Failed() {
					b.Fatalf("err %v, failed %v", err, sum != nil && sum.Failed())
				}
				return sum
			}
			if sum := run(); len(sum.Finished) != history {
				b.Fatalf("history: %d runs, want %d", len(sum.Finished), history)
			}
			for b.Loop() {
				now = now.Add(time.Hour)
				if sum := run(); len(sum.Finished) != 1 {
					b.Fatalf("a tick ran %d runs, want 1", len(sum.Finished))
				}
			}
		})
	}
}

// BenchmarkManyPipelines runs one due run of each of N daily pipelines
// (a no-op task each) in one execution: the cost per run should not grow
// with the number of pipelines. Reported as ms/run.
func BenchmarkManyPipelines(b *testing.B) {
	for _, n := range []int{250, 1000, 4000} {
		b.Run(fmt.Sprintf("pipelines=%d", n), func(b *testing.B) {
			var hcl []byte
			for i := range n {
				hcl = fmt.Appendf(hcl, "pipeline \"p%05d\" {\n  schedule   = \"@daily\"\n  start_date = \"2025-01-01\"\n  end_date   = \"2025-01-01\"\n  task \"t\" { command = [\"true\"] }\n}\n", i)
			}
			var perRun time.Duration
			for b.Loop() {
				b.StopTimer()
				dir := b.TempDir()
				ws, st := benchWorkspace(b, dir, string(hcl))
				b.StartTimer()
				t0 := time.Now()
				sum, err := scheduler.Run(context.Background(), scheduler.Options{Store: st, Workspace: ws, Home: filepath.Join(dir, ".rewind"),
					Now: time.Date(2025, 1, 2, 0, 0, 0, 0, time.UTC)})
				if err != nil || len(sum.Finished) != n || sum.Failed() {
					b.Fatalf("run: %v (%d finished)", err, len(sum.Finished))
				}
				perRun += time.Since(t0) / time.Duration(n)
				b.StopTimer()
				st.Close()
				b.StartTimer()
			}
			b.ReportMetric(float64(perRun.Microseconds())/1000/float64(b.N), "ms/run")
		})
	}
}
