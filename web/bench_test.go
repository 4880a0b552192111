package web_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rewind-dev/rewind/dsl"
	"github.com/rewind-dev/rewind/store"
	"github.com/rewind-dev/rewind/web"
)

// benchState is a SQLite state with a year of a daily pipeline of 20
// tasks (365 runs, 7,300 task instances, one attempt each: most
// succeeded, a failed date, Black Fridays in pool large), written through
// the store as the engine writes it.
func benchState(b *testing.B) (*web.Server, func()) {
	b.Helper()
	ctx := context.Background()
	dir := b.TempDir()
	var hcl strings.Builder
	hcl.WriteString("pool \"large\" { slots = 2 }\npipeline \"year\" {\n  schedule = \"@daily\"\n  start_date = \"2025-01-01\"\n")
	var tasks []store.TaskSpec
	for i := range 20 {
		name := fmt.Sprintf("task_%02d", i)
		fmt.Fprintf(&hcl, "  task %q { command = \"true\" }\n", name)
		tasks = append(tasks, store.TaskSpec{Name: name, Pool: "default"})
	}
	hcl.WriteString("}\n")
	if err := os.WriteFile(filepath.Join(dir, "main.hcl"), []byte(hcl.String()), 0o644); err != nil {
		b.Fatal(err)
	}
	ws, diags := dsl.Load(dir, dsl.LoadOptions{})
	if diags.HasErrors() {
		b.Fatal(diags.Error())
	}
	st, err := store.Open(ctx, "sqlite:"+filepath.Join(dir, ".rewind", "state.db"))
	if err != nil {
		b.Fatal(err)
	}
	start := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	now := start.AddDate(1, 0, 1)
	var specs []store.RunSpec
	for d := range 365 {
		at := start.AddDate(0, 0, d)
		specs = append(specs, store.RunSpec{LogicalDate: at, DS: at.Format(time.DateOnly), DataIntervalStart: at, DataIntervalEnd: at.AddDate(0, 0, 1)})
	}
	if _, err := st.UpsertPipeline(ctx, store.UpsertPipelineParams{Name: "year", Hash: "h", Now: now}); err != nil {
		b.Fatal(err)
	}
	if _, err := st.MaterializeRuns(ctx, store.MaterializeRunsParams{Pipeline: "year", Kind: store.KindScheduled, Runs: specs, Tasks: tasks, Now: now}); err != nil {
		b.Fatal(err)
	}
	runs, err := st.ListRuns(ctx, store.ListRunsParams{Pipelines: []string{"year"}, WithTasks: true})
	if err != nil {
		b.Fatal(err)
	}
	err = st.InTx(ctx, func(tx store.Store) error {
		for _, r := range runs {
			failed := r.DS == "2025-06-15"
			hot := r.LogicalDate.Month() == 11 && r.LogicalDate.Weekday() == time.Friday && r.LogicalDate.Day() >= 23
			if err := tx.AdmitRun(ctx, store.AdmitRunParams{RunID: r.ID, Now: now}); err != nil {
				return err
			}
			for _, ti := range r.Tasks {
				pool, reason := "default", ""
				if hot {
					pool, reason = "large", "hot_when: run.month == 11 && run.weekday == \"Friday\""
				}
				a, err := tx.ClaimTask(ctx, store.ClaimTaskParams{TaskInstanceID: ti.ID, Pool: pool, Reason: reason, Host: "bench",
					LogPath: filepath.Join(dir, ".rewind", "logs", "year", ti.Task, r.DS+".{try}.log"), Now: now})
				if err != nil {
					return err
				}
				code, state, ts := 0, store.AttemptSuccess, store.TaskSuccess
				if failed {
					code, state, ts = 1, store.AttemptFailed, store.TaskFailed
				}
				if err := tx.FinishAttempt(ctx, store.FinishAttemptParams{AttemptID: a.ID, State: state, ExitCode: &code, PeakRSS: 1 << 20,
					TaskState: ts, CountFailure: failed, Now: now.Add(time.Second)}); err != nil {
					return err
				}
			}
			rs := store.RunSuccess
			if failed {
				rs = store.RunFailed
			}
			if err := tx.FinishRun(ctx, store.FinishRunParams{RunID: r.ID, State: rs, Now: now.Add(time.Second)}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	s, err := web.New(web.Options{State: st, Workspace: ws, Home: filepath.Join(dir, ".rewind")})
	if err != nil {
		b.Fatal(err)
	}
	return s, func() { s.Close(); st.Close() }
}

// benchHourly is a SQLite state with ten years of an hourly pipeline of
// two tasks (87,600 runs, 175,200 task instances), materialized through
// the store and never run: the history a page of the grid must not read.
func benchHourly(b *testing.B) (*web.Server, func()) {
	b.Helper()
	ctx := context.Background()
	dir := b.TempDir()
	hcl := "pipeline \"hourly\" {\n  schedule = \"@hourly\"\n  start_date = \"2015-01-01\"\n  task \"a\" { command = \"true\" }\n  task \"b\" { command = \"true\" }\n}\n"
	if err := os.WriteFile(filepath.Join(dir, "main.hcl"), []byte(hcl), 0o644); err != nil {
		b.Fatal(err)
	}
	ws, diags := dsl.Load(dir, dsl.LoadOptions{})
	if diags.HasErrors() {
		b.Fatal(diags.Error())
	}
	st, err := store.Open(ctx, "sqlite:"+filepath.Join(dir, ".rewind", "state.db"))
	if err != nil {
		b.Fatal(err)
	}
	start := time.Date(2015, 1, 1, 0, 0, 0, 0, time.UTC)
	specs := make([]store.RunSpec, 0, 87600)
	for h := range 87600 {
		at := start.Add(time.Duration(h) * time.Hour)
		specs = append(specs, store.RunSpec{LogicalDate: at, DS: at.Format(time.DateOnly), DataIntervalStart: at, DataIntervalEnd: at.Add(time.Hour)})
	}
	now := start.Add(87600 * time.Hour)
	if _, err := st.UpsertPipeline(ctx, store.UpsertPipelineParams{Name: "hourly", Hash: "h", Now: now}); err != nil {
		b.Fatal(err)
	}
	tasks := []store.TaskSpec{{Name: "a", Pool: "default"}, {Name: "b", Pool: "default"}}
	if _, err := st.MaterializeRuns(ctx, store.MaterializeRunsParams{Pipeline: "hourly", Kind: store.KindScheduled, Runs: specs, Tasks: tasks, Now: now}); err != nil {
		b.Fatal(err)
	}
	s, err := web.New(web.Options{State: st, Workspace: ws, Home: filepath.Join(dir, ".rewind")})
	if err != nil {
		b.Fatal(err)
	}
	return s, func() { s.Close(); st.Close() }
}

// benchGET serves path b.N times, as a browser asks for it (gzip).
func benchGET(b *testing.B, path string, gzip bool) {
	s, done := benchState(b)
	defer done()
	benchServe(b, s, path, gzip)
}

func benchServe(b *testing.B, s *web.Server, path string, gzip bool) {
	var size int
	b.ReportAllocs()
	b.ResetTimer()
	c0 := cpuTime(b)
	for range b.N {
		req := httptest.NewRequest(http.MethodGet, "http://127.0.0.1:8080"+path, nil)
		if gzip {
			req.Header.Set("Accept-Encoding", "gzip")
		}
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, req)
		if rec.Code != 200 {
			b.Fatalf("%s: %d %s", path, rec.Code, rec.Body.String())
		}
		size = rec.Body.Len()
	}
	b.ReportMetric(float64((cpuTime(b)-c0).Nanoseconds())/float64(b.N), "cpu-ns/op")
	b.ReportMetric(float64(size), "bytes/response")
}

// cpuTime is the CPU time (user and system) of this process: on a shared
// machine it varies less than wall time.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// The grid of 365 runs x 20 tasks from SQLite, the whole year on one
// page: the JSON a live page polls, and the HTML page.
func BenchmarkGrid365x20JSON(b *testing.B) { benchGET(b, "/api/grid?pipeline=year&limit=365", false) }
func BenchmarkGrid365x20JSONGzip(b *testing.B) {
	benchGET(b, "/api/grid?pipeline=year&limit=365", true)
}
func BenchmarkGrid365x20HTML(b *testing.B)     { benchGET(b, "/pipelines/year?limit=365", false) }
func BenchmarkGrid365x20HTMLGzip(b *testing.B) { benchGET(b, "/pipelines/year?limit=365", true) }

// The default page of the grid (its latest 100 runs) of ten years of an
// hourly pipeline: what it costs does not grow with the history.
func BenchmarkGridPage87600HourlyJSON(b *testing.B) {
	s, done := benchHourly(b)
	defer done()
	benchServe(b, s, "/api/grid?pipeline=hourly", false)
}

func BenchmarkGridPage87600HourlyHTML(b *testing.B) {
	s, done := benchHourly(b)
	defer done()
	benchServe(b, s, "/pipelines/hourly", false)
}

// An older page of the same history: 100 runs before a date in the middle.
func BenchmarkGridPage87600HourlyOlderJSON(b *testing.B) {
	s, done := benchHourly(b)
	defer done()
	benchServe(b, s, "/api/grid?pipeline=hourly&before=2020-01-01T00:00:00Z", false)
}

// The same runs as `rewind runs --pipeline year --json` (every attempt).
func BenchmarkRuns365x20JSON(b *testing.B) { benchGET(b, "/api/runs?pipeline=year", false) }

// A cell of the last run of that history (what a click on the grid
// asks), read by the run's id.
func BenchmarkCell87600HourlyJSON(b *testing.B) {
	s, done := benchHourly(b)
	defer done()
	benchServe(b, s, "/api/cell?pipeline=hourly&run=87600&task=b", false)
}
