// Package storetest is the conformance suite every store backend passes:
// each operation of store.Store, its guards, and claims raced by concurrent
// schedulers.
package storetest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
	_ "time/tzdata" // Europe/Rome on machines without a zoneinfo database

	"github.com/rewind-dev/rewind/store"
)

// now is the suite's fixed clock.
var now = time.Date(2026, 1, 15, 12, 0, 0, 0, time.UTC)

var ctx = context.Background()

// Run runs the conformance suite. open must return a new, empty store for
// each call; the suite closes it.
func Run(t *testing.T, open func(t *testing.T) store.Store) {
	fresh := func(t *testing.T) store.Store {
		t.Helper()
		st := open(t)
		t.Cleanup(func() {
			if err := st.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
		})
		return st
	}
	tests := []struct {
		name string
		fn   func(t *testing.T, st store.Store)
	}{
		{"Pipelines", testPipelines},
		{"PausedFlag", testPaused},
		{"MaterializeIdempotent", testMaterializeIdempotent},
		{"MaterializeLeavesOtherKindAlone", testMaterializeOtherKind},
		{"MaterializeTasksOnlyForNewRuns", testMaterializeTasksOnlyForNewRuns},
		{"MaterializeRejectsBadInput", testMaterializeRejects},
		{"ListRunsOrderAndFilters", testListRunsOrderAndFilters},
		{"ListRunsWithTasksAndAttempts", testWithTasksAndAttempts},
		{"OffsetsPreserved", testOffsetsPreserved},
		{"RunAdmitAndFinish", testRunAdmitFinish},
		{"HappyPath", testHappyPath},
		{"ClaimConflict", testClaimConflict},
		{"UniqueAttemptPerTry", testUniqueAttemptPerTry},
		{"RetryPathCountsFailures", testRetryPath},
		{"InterruptedAndLostDoNotCount", testInterruptedLost},
		{"AttemptGuards", testAttemptGuards},
		{"SetTaskStatesGuard", testSetTaskStates},
		{"ClearTasksOnlyFailed", testClearOnlyFailed},
		{"ClearTasksAll", testClearAll},
		{"ClearTasksTaskFilter", testClearTaskFilter},
		{"ClearTasksDateWindow", testClearWindow},
		{"RunningAttempts", testRunningAttempts},
		{"FindAttempt", testFindAttempt},
		{"WatermarkWithGap", testWatermarkGap},
		{"WatermarkNotFound", testWatermarkNotFound},
		{"WatermarkAfterClear", testWatermarkAfterClear},
		{"Leases", testLeases},
		{"LeaseStaleTakeover", testLeaseStale},
		{"InTxCommitsTogether", testInTxCommit},
		{"TaskDurations", testTaskDurations},
		{"Backfills", testBackfills},
		{"ReprocessRuns", testReprocessRuns},
		{"SetWatermark", testSetWatermark},
		{"InTxRollsBack", testInTxRollback},
		{"ConcurrentClaims", func(t *testing.T, st store.Store) { ClaimRace(t, []store.Store{st}, 8) }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, fresh(t)) })
	}
}

// ClaimRace materializes runs through stores[0], then has goroutines per
// store race ClaimTask over every task instance, each goroutine trying all
// of them in its own order. Every task instance must be claimed exactly once
// and every losing claim must fail with store.ErrConflict. Passing several
// stores opened on the same state stands for several processes.
func ClaimRace(t *testing.T, stores []store.Store, goroutinesPerStore int) {
	t.Helper()
	const days = 30
	runs := materialize(t, stores[0], "race", store.KindScheduled, daily(time.UTC, date(2025, 7, 1), days), "extract", "load")
	var ids []int64
	for _, r := range runs {
		for _, ti := range r.Tasks {
			ids = append(ids, ti.ID)
		}
	}
	if len(ids) != 2*days {
		t.Fatalf("materialized %d task instances, want %d", len(ids), 2*days)
	}
	var (
		mu     sync.Mutex
		wins   = map[int64]int{}
		errs   []error
		wg     sync.WaitGroup
		worker = 0
	)
	for _, st := range stores {
		for g := 0; g < goroutinesPerStore; g++ {
			worker++
			wg.Add(1)
			go func(st store.Store, w int) {
				defer wg.Done()
				for k := range ids {
					id := ids[(k*7+w*13)%len(ids)]
					a, err := st.ClaimTask(ctx, store.ClaimTaskParams{
						TaskInstanceID: id, Pool: "default", Host: fmt.Sprintf("worker-%d", w), Now: now,
					})
					mu.Lock()
					switch {
					case err == nil:
						wins[id]++
						if a.TryNumber != 1 {
							errs = append(errs, fmt.Errorf("task instance %d claimed with try %d, want 1", id, a.TryNumber))
						}
					case !errors.Is(err, store.ErrConflict):
						errs = append(errs, fmt.Errorf("claim %d: %w", id, err))
					}
					mu.Unlock()
				}
			}(st, worker)
		}
	}
	wg.Wait()
	for _, err := range errs {
		t.Error(err)
	}
	for _, id := range ids {
		if wins[id] != 1 {
			t.Errorf("task instance %d claimed %d times, want exactly 1", id, wins[id])
		}
	}
	got := listRuns(t, stores[0], store.ListRunsParams{Pipelines: []string{"race"}, WithAttempts: true})
	for _, r := range got {
		for _, ti := range r.Tasks {
			if ti.State != store.TaskQueued || ti.TryNumber != 1 || len(ti.Attempts) != 1 {
				t.Errorf("%s %s: state %s try %d with %d attempts, want queued, try 1, 1 attempt",
					r.DS, ti.Task, ti.State, ti.TryNumber, len(ti.Attempts))
			}
		}
	}
}

// Helpers.

func date(y int, m time.Month, d int) time.Time { return time.Date(y, m, d, 0, 0, 0, 0, time.UTC) }

// daily returns n consecutive daily run specs from start, midnight in loc.
func daily(loc *time.Location, start time.Time, n int) []store.RunSpec {
	specs := make([]store.RunSpec, n)
	for i := range specs {
		d := time.Date(start.Year(), start.Month(), start.Day()+i, 0, 0, 0, 0, loc)
		e := time.Date(start.Year(), start.Month(), start.Day()+i+1, 0, 0, 0, 0, loc)
		specs[i] = store.RunSpec{LogicalDate: d, DS: d.Format("2006-01-02"), DataIntervalStart: d, DataIntervalEnd: e}
	}
	return specs
}

func tasks(names ...string) []store.TaskSpec {
	ts := make([]store.TaskSpec, len(names))
	for i, n := range names {
		ts[i] = store.TaskSpec{Name: n, Pool: "default"}
	}
	return ts
}

// materialize creates the runs and returns the pipeline's runs with tasks.
func materialize(t *testing.T, st store.Store, pipeline string, kind store.RunKind, specs []store.RunSpec, taskNames ...string) []store.Run {
	t.Helper()
	if _, err := st.MaterializeRuns(ctx, store.MaterializeRunsParams{
		Pipeline: pipeline, Kind: kind, Runs: specs, Tasks: tasks(taskNames...), Now: now,
	}); err != nil {
		t.Fatalf("MaterializeRuns: %v", err)
	}
	return listRuns(t, st, store.ListRunsParams{Pipelines: []string{pipeline}, WithTasks: true})
}

func listRuns(t *testing.T, st store.Store, p store.ListRunsParams) []store.Run {
	t.Helper()
	runs, err := st.ListRuns(ctx, p)
	if err != nil {
		t.Fatalf("ListRuns: %v", err)
	}
	return runs
}

// task returns the task instance of a run by name.
func task(t *testing.T, r store.Run, name string) store.TaskInstance {
	t.Helper()
	for _, ti := range r.Tasks {
		if ti.Task == name {
			return ti
		}
	}
	t.Fatalf("run %s has no task %s (tasks loaded: %d)", r.DS, name, len(r.Tasks))
	return store.TaskInstance{}
}

// reload returns the current state of one task instance with its attempts.
func reload(t *testing.T, st store.Store, id int64) store.TaskInstance {
	t.Helper()
	for _, r := range listRuns(t, st, store.ListRunsParams{WithAttempts: true}) {
		for _, ti := range r.Tasks {
			if ti.ID == id {
				return ti
			}
		}
	}
	t.Fatalf("task instance %d not found", id)
	return store.TaskInstance{}
}

func claim(t *testing.T, st store.Store, id int64) store.Attempt {
	t.Helper()
	a, err := st.ClaimTask(ctx, store.ClaimTaskParams{TaskInstanceID: id, Pool: "default", Host: "host-a", Now: now})
	if err != nil {
		t.Fatalf("ClaimTask(%d): %v", id, err)
	}
	return a
}

func start(t *testing.T, st store.Store, a store.Attempt) {
	t.Helper()
	if err := st.StartAttempt(ctx, store.StartAttemptParams{AttemptID: a.ID, PID: 4242, PIDStart: 99, Now: now}); err != nil {
		t.Fatalf("StartAttempt(%d): %v", a.ID, err)
	}
}

func intp(i int) *int { return &i }

// finish records an outcome the way the scheduler does.
func finish(t *testing.T, st store.Store, a store.Attempt, outcome store.AttemptState, taskState store.TaskState) {
	t.Helper()
	p := store.FinishAttemptParams{AttemptID: a.ID, State: outcome, TaskState: taskState, Now: now.Add(time.Minute)}
	switch outcome {
	case store.AttemptSuccess:
		p.ExitCode = intp(0)
	case store.AttemptSkipped:
		p.ExitCode = intp(99)
	case store.AttemptFailed:
		p.ExitCode = intp(1)
		p.CountFailure = true
	}
	if err := st.FinishAttempt(ctx, p); err != nil {
		t.Fatalf("FinishAttempt(%d, %s): %v", a.ID, outcome, err)
	}
}

// runTask claims, starts and finishes one attempt of a task instance.
func runTask(t *testing.T, st store.Store, id int64, outcome store.AttemptState, taskState store.TaskState) store.Attempt {
	t.Helper()
	a := claim(t, st, id)
	start(t, st, a)
	finish(t, st, a, outcome, taskState)
	return a
}

func wantErr(t *testing.T, what string, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Errorf("%s: got error %v, want %v", what, err, target)
	}
}

// Pipelines.

func testPipelines(t *testing.T, st store.Store) {
	p, err := st.UpsertPipeline(ctx, store.UpsertPipelineParams{Name: "daily_revenue", Hash: "h1", Now: now})
	if err != nil {
		t.Fatal(err)
	}
	if p.Name != "daily_revenue" || p.Hash != "h1" || p.Paused || !p.UpdatedAt.Equal(now) {
		t.Errorf("created pipeline = %+v", p)
	}
	p, err = st.UpsertPipeline(ctx, store.UpsertPipelineParams{Name: "daily_revenue", Hash: "h1", Now: now.Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	if !p.UpdatedAt.Equal(now) {
		t.Errorf("same hash moved UpdatedAt to %v", p.UpdatedAt)
	}
	p, err = st.UpsertPipeline(ctx, store.UpsertPipelineParams{Name: "daily_revenue", Hash: "h2", Now: now.Add(2 * time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	if p.Hash != "h2" || !p.UpdatedAt.Equal(now.Add(2*time.Hour)) {
		t.Errorf("changed hash: got %+v", p)
	}
	if _, err := st.UpsertPipeline(ctx, store.UpsertPipelineParams{Name: "a_first", Hash: "x", Now: now}); err != nil {
		t.Fatal(err)
	}
	got, err := st.GetPipeline(ctx, "daily_revenue")
	if err != nil || got.Hash != "h2" {
		t.Errorf("GetPipeline = %+v, %v", got, err)
	}
	list, err := st.ListPipelines(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 || list[0].Name != "a_first" || list[1].Name != "daily_revenue" {
		t.Errorf("ListPipelines = %+v, want a_first, daily_revenue", list)
	}
	_, err = st.GetPipeline(ctx, "nope")
	wantErr(t, "GetPipeline(unknown)", err, store.ErrNotFound)
}

func testPaused(t *testing.T, st store.Store) {
	if _, err := st.UpsertPipeline(ctx, store.UpsertPipelineParams{Name: "p", Hash: "h", Now: now}); err != nil {
		t.Fatal(err)
	}
	if err := st.SetPaused(ctx, store.SetPausedParams{Name: "p", Paused: true, Now: now}); err != nil {
		t.Fatal(err)
	}
	if p, err := st.GetPipeline(ctx, "p"); err != nil || !p.Paused {
		t.Errorf("after pause: %+v, %v", p, err)
	}
	if p, err := st.UpsertPipeline(ctx, store.UpsertPipelineParams{Name: "p", Hash: "h2", Now: now}); err != nil || !p.Paused {
		t.Errorf("upsert unpaused the pipeline: %+v, %v", p, err)
	}
	if err := st.SetPaused(ctx, store.SetPausedParams{Name: "p", Paused: false, Now: now}); err != nil {
		t.Fatal(err)
	}
	if p, err := st.GetPipeline(ctx, "p"); err != nil || p.Paused {
		t.Errorf("after unpause: %+v, %v", p, err)
	}
	wantErr(t, "SetPaused(unknown)", st.SetPaused(ctx, store.SetPausedParams{Name: "nope", Paused: true, Now: now}), store.ErrNotFound)
}

// Materialization.

func testMaterializeIdempotent(t *testing.T, st store.Store) {
	p := store.MaterializeRunsParams{
		Pipeline: "daily_revenue", Kind: store.KindScheduled,
		Runs: daily(time.UTC, date(2025, 7, 1), 10), Tasks: tasks("extract", "convert"), Now: now,
	}
	n, err := st.MaterializeRuns(ctx, p)
	if err != nil || n != 10 {
		t.Fatalf("first materialize = %d, %v; want 10", n, err)
	}
	n, err = st.MaterializeRuns(ctx, p)
	if err != nil || n != 0 {
		t.Fatalf("second materialize = %d, %v; want 0", n, err)
	}
	p.Runs = daily(time.UTC, date(2025, 7, 6), 10) // 5 existing, 5 new
	n, err = st.MaterializeRuns(ctx, p)
	if err != nil || n != 5 {
		t.Fatalf("overlapping materialize = %d, %v; want 5", n, err)
	}
	runs := listRuns(t, st, store.ListRunsParams{WithTasks: true})
	if len(runs) != 15 {
		t.Fatalf("%d runs, want 15", len(runs))
	}
	for _, r := range runs {
		if r.State != store.RunQueued || r.Kind != store.KindScheduled || !r.CreatedAt.Equal(now) ||
			!r.StartedAt.IsZero() || !r.EndedAt.IsZero() {
			t.Errorf("new run %s = %+v", r.DS, r)
		}
		if len(r.Tasks) != 2 {
			t.Errorf("run %s has %d task instances, want 2", r.DS, len(r.Tasks))
			continue
		}
		for _, ti := range r.Tasks {
			if ti.State != store.TaskScheduled || ti.TryNumber != 0 || ti.Failures != 0 || ti.Pool != "default" || ti.RunID != r.ID {
				t.Errorf("new task instance %s %s = %+v", r.DS, ti.Task, ti)
			}
		}
	}
}

func testMaterializeOtherKind(t *testing.T, st store.Store) {
	materialize(t, st, "p", store.KindScheduled, daily(time.UTC, date(2025, 11, 28), 1), "t")
	n, err := st.MaterializeRuns(ctx, store.MaterializeRunsParams{
		Pipeline: "p", Kind: store.KindBackfill, BackfillID: "bf1",
		Runs: daily(time.UTC, date(2025, 11, 28), 2), Tasks: tasks("t"), Now: now,
	})
	if err != nil || n != 1 {
		t.Fatalf("backfill materialize = %d, %v; want 1", n, err)
	}
	runs := listRuns(t, st, store.ListRunsParams{})
	if len(runs) != 2 {
		t.Fatalf("%d runs, want 2", len(runs))
	}
	if runs[0].Kind != store.KindScheduled || runs[0].BackfillID != "" {
		t.Errorf("existing run changed: kind %s backfill %q", runs[0].Kind, runs[0].BackfillID)
	}
	if runs[1].Kind != store.KindBackfill || runs[1].BackfillID != "bf1" {
		t.Errorf("new run: kind %s backfill %q, want backfill bf1", runs[1].Kind, runs[1].BackfillID)
	}
	// The same instant is the same run, whatever offset it is written with.
	rome, err := time.LoadLocation("Europe/Rome")
	if err != nil {
		t.Fatal(err)
	}
	same := date(2025, 11, 28).In(rome)
	n, err = st.MaterializeRuns(ctx, store.MaterializeRunsParams{
		Pipeline: "p", Kind: store.KindManual,
		Runs: []store.RunSpec{{LogicalDate: same, DS: "2025-11-28", DataIntervalStart: same, DataIntervalEnd: same.Add(24 * time.Hour)}},
		Now:  now,
	})
	if err != nil || n != 0 {
		t.Errorf("materialize of the same instant in another zone = %d, %v; want 0", n, err)
	}
}

func testMaterializeTasksOnlyForNewRuns(t *testing.T, st store.Store) {
	materialize(t, st, "p", store.KindScheduled, daily(time.UTC, date(2025, 7, 1), 1), "extract")
	runs := materialize(t, st, "p", store.KindScheduled, daily(time.UTC, date(2025, 7, 1), 2), "extract", "load")
	if len(runs) != 2 {
		t.Fatalf("%d runs, want 2", len(runs))
	}
	if len(runs[0].Tasks) != 1 || runs[0].Tasks[0].Task != "extract" {
		t.Errorf("existing run got tasks %+v, want only extract", runs[0].Tasks)
	}
	if len(runs[1].Tasks) != 2 {
		t.Errorf("new run has %d tasks, want 2", len(runs[1].Tasks))
	}
}

func testMaterializeRejects(t *testing.T, st store.Store) {
	cases := []store.MaterializeRunsParams{
		{Pipeline: "", Kind: store.KindScheduled, Runs: daily(time.UTC, date(2025, 7, 1), 1)},
		{Pipeline: "p", Kind: "nightly", Runs: daily(time.UTC, date(2025, 7, 1), 1)},
		{Pipeline: "p", Kind: store.KindScheduled, Runs: []store.RunSpec{{DS: "2025-07-01"}}},
	}
	for _, p := range cases {
		p.Now = now
		if n, err := st.MaterializeRuns(ctx, p); err == nil {
			t.Errorf("MaterializeRuns(%+v) = %d, nil; want an error", p, n)
		}
	}
	if runs := listRuns(t, st, store.ListRunsParams{}); len(runs) != 0 {
		t.Errorf("rejected input left %d runs", len(runs))
	}
}

// Runs.

func testListRunsOrderAndFilters(t *testing.T, st store.Store) {
	materialize(t, st, "zeta", store.KindScheduled, daily(time.UTC, date(2025, 7, 3), 2), "t")
	specs := daily(time.UTC, date(2025, 7, 1), 4)
	specs[0], specs[3] = specs[3], specs[0] // insertion order is not the listing order
	materialize(t, st, "alpha", store.KindScheduled, specs, "t")

	runs := listRuns(t, st, store.ListRunsParams{})
	var got []string
	for _, r := range runs {
		got = append(got, r.Pipeline+"/"+r.DS)
	}
	want := []string{"alpha/2025-07-01", "alpha/2025-07-02", "alpha/2025-07-03", "alpha/2025-07-04", "zeta/2025-07-03", "zeta/2025-07-04"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("order = %v, want %v", got, want)
	}
	if runs[0].Tasks != nil {
		t.Errorf("tasks filled without WithTasks")
	}

	if err := st.AdmitRun(ctx, store.AdmitRunParams{RunID: runs[1].ID, Now: now}); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		p    store.ListRunsParams
		want int
	}{
		{"pipeline", store.ListRunsParams{Pipelines: []string{"zeta"}}, 2},
		{"two pipelines", store.ListRunsParams{Pipelines: []string{"zeta", "alpha"}}, 6},
		{"unknown pipeline", store.ListRunsParams{Pipelines: []string{"nope"}}, 0},
		{"running", store.ListRunsParams{States: []store.RunState{store.RunRunning}}, 1},
		{"queued", store.ListRunsParams{States: []store.RunState{store.RunQueued}}, 5},
		{"queued or running", store.ListRunsParams{States: []store.RunState{store.RunQueued, store.RunRunning}}, 6},
		{"from inclusive", store.ListRunsParams{From: date(2025, 7, 3)}, 4},
		{"to inclusive", store.ListRunsParams{To: date(2025, 7, 2)}, 2},
		{"window", store.ListRunsParams{Pipelines: []string{"alpha"}, From: date(2025, 7, 2), To: date(2025, 7, 3)}, 2},
		{"empty window", store.ListRunsParams{From: date(2025, 7, 2).Add(time.Hour), To: date(2025, 7, 2).Add(2 * time.Hour)}, 0},
	}
	for _, c := range cases {
		if got := listRuns(t, st, c.p); len(got) != c.want {
			t.Errorf("%s: %d runs, want %d", c.name, len(got), c.want)
		}
	}
}

func testWithTasksAndAttempts(t *testing.T, st store.Store) {
	runs := materialize(t, st, "p", store.KindScheduled, daily(time.UTC, date(2025, 7, 1), 2), "zulu", "alpha", "mike")
	var names []string
	for _, ti := range runs[0].Tasks {
		names = append(names, ti.Task)
	}
	if fmt.Sprint(names) != "[alpha mike zulu]" {
		t.Errorf("tasks ordered %v, want by name", names)
	}
	id := task(t, runs[0], "mike").ID
	runTask(t, st, id, store.AttemptFailed, store.TaskUpForRetry)
	runTask(t, st, id, store.AttemptSuccess, store.TaskSuccess)

	withTasks := listRuns(t, st, store.ListRunsParams{WithTasks: true})
	if ti := task(t, withTasks[0], "mike"); ti.Attempts != nil {
		t.Errorf("attempts filled without WithAttempts: %+v", ti.Attempts)
	}
	all := listRuns(t, st, store.ListRunsParams{WithAttempts: true})
	ti := task(t, all[0], "mike")
	if len(ti.Attempts) != 2 || ti.Attempts[0].TryNumber != 1 || ti.Attempts[1].TryNumber != 2 {
		t.Fatalf("attempts = %+v, want tries 1 and 2", ti.Attempts)
	}
	if ti.Attempts[0].State != store.AttemptFailed || ti.Attempts[1].State != store.AttemptSuccess {
		t.Errorf("attempt states %s, %s", ti.Attempts[0].State, ti.Attempts[1].State)
	}
	if a := task(t, all[1], "mike").Attempts; a == nil || len(a) != 0 {
		t.Errorf("second run's task has attempts %#v, want an empty list", a)
	}
	empty := materialize(t, st, "no_tasks", store.KindManual, daily(time.UTC, date(2025, 7, 1), 1))
	if len(empty) != 1 || empty[0].Tasks == nil || len(empty[0].Tasks) != 0 {
		t.Errorf("run without tasks listed WithTasks = %#v, want an empty task list", empty)
	}
	// A filter applies to tasks and attempts as to runs.
	second := listRuns(t, st, store.ListRunsParams{From: date(2025, 7, 2), WithAttempts: true})
	if len(second) != 1 || len(second[0].Tasks) != 3 || len(task(t, second[0], "mike").Attempts) != 0 {
		t.Errorf("filtered listing = %+v", second)
	}
}

func testOffsetsPreserved(t *testing.T, st store.Store) {
	rome, err := time.LoadLocation("Europe/Rome")
	if err != nil {
		t.Fatal(err)
	}
	winter := time.Date(2025, 1, 15, 0, 0, 0, 0, rome)
	summer := time.Date(2025, 7, 15, 0, 0, 0, 0, rome)
	dstDay := time.Date(2025, 3, 30, 0, 0, 0, 0, rome) // a 23-hour day: +01:00 to +02:00
	specs := []store.RunSpec{
		{LogicalDate: winter, DS: "2025-01-15", DataIntervalStart: winter, DataIntervalEnd: winter.AddDate(0, 0, 1)},
		{LogicalDate: dstDay, DS: "2025-03-30", DataIntervalStart: dstDay, DataIntervalEnd: dstDay.AddDate(0, 0, 1)},
		{LogicalDate: summer, DS: "2025-07-15", DataIntervalStart: summer, DataIntervalEnd: summer.AddDate(0, 0, 1)},
	}
	materialize(t, st, "rome", store.KindScheduled, specs, "t")
	utc := daily(time.UTC, date(2025, 7, 15), 1)
	materialize(t, st, "utc", store.KindScheduled, utc, "t")

	offset := func(tm time.Time) int { _, off := tm.Zone(); return off }
	check := func(what string, got, want time.Time) {
		t.Helper()
		if !got.Equal(want) || offset(got) != offset(want) {
			t.Errorf("%s = %s, want %s", what, got.Format(time.RFC3339Nano), want.Format(time.RFC3339Nano))
		}
	}
	runs := listRuns(t, st, store.ListRunsParams{Pipelines: []string{"rome"}})
	if len(runs) != 3 {
		t.Fatalf("%d runs, want 3", len(runs))
	}
	for i, r := range runs {
		check(r.DS+" logical date", r.LogicalDate, specs[i].LogicalDate)
		check(r.DS+" interval start", r.DataIntervalStart, specs[i].DataIntervalStart)
		check(r.DS+" interval end", r.DataIntervalEnd, specs[i].DataIntervalEnd)
	}
	if got := runs[0].LogicalDate.Format(time.RFC3339); got != "2025-01-15T00:00:00+01:00" {
		t.Errorf("winter date prints %s", got)
	}
	if got := runs[2].LogicalDate.Format(time.RFC3339); got != "2025-07-15T00:00:00+02:00" {
		t.Errorf("summer date prints %s", got)
	}
	if got := runs[1].DataIntervalEnd.Sub(runs[1].DataIntervalStart); got != 23*time.Hour {
		t.Errorf("DST day interval is %v, want 23h", got)
	}
	u := listRuns(t, st, store.ListRunsParams{Pipelines: []string{"utc"}})
	if len(u) != 1 || u[0].LogicalDate.Format(time.RFC3339) != "2025-07-15T00:00:00Z" {
		t.Errorf("UTC run = %+v", u)
	}
	// Range filters compare instants: summer midnight in Rome is 22:00 UTC the day before.
	if got := listRuns(t, st, store.ListRunsParams{Pipelines: []string{"rome"}, From: date(2025, 7, 14).Add(22 * time.Hour), To: date(2025, 7, 14).Add(22 * time.Hour)}); len(got) != 1 {
		t.Errorf("instant filter found %d runs, want 1", len(got))
	}

	for _, r := range runs {
		if err := st.AdmitRun(ctx, store.AdmitRunParams{RunID: r.ID, Now: now}); err != nil {
			t.Fatal(err)
		}
		if err := st.FinishRun(ctx, store.FinishRunParams{RunID: r.ID, State: store.RunSuccess, Now: now}); err != nil {
			t.Fatal(err)
		}
	}
	wm, err := st.AdvanceWatermark(ctx, store.AdvanceWatermarkParams{Pipeline: "rome", Now: now})
	if err != nil {
		t.Fatal(err)
	}
	check("watermark", wm.LogicalDate, summer)
	got, err := st.GetWatermark(ctx, "rome")
	if err != nil {
		t.Fatal(err)
	}
	check("stored watermark", got.LogicalDate, summer)
}

func testRunAdmitFinish(t *testing.T, st store.Store) {
	runs := materialize(t, st, "p", store.KindScheduled, daily(time.UTC, date(2025, 7, 1), 3), "t")
	admitted := now.Add(time.Minute)
	if err := st.AdmitRun(ctx, store.AdmitRunParams{RunID: runs[0].ID, Now: admitted}); err != nil {
		t.Fatal(err)
	}
	wantErr(t, "AdmitRun twice", st.AdmitRun(ctx, store.AdmitRunParams{RunID: runs[0].ID, Now: now}), store.ErrConflict)
	wantErr(t, "AdmitRun(unknown)", st.AdmitRun(ctx, store.AdmitRunParams{RunID: 987654, Now: now}), store.ErrNotFound)

	ended := now.Add(time.Hour)
	if err := st.FinishRun(ctx, store.FinishRunParams{RunID: runs[0].ID, State: store.RunSuccess, Now: ended}); err != nil {
		t.Fatal(err)
	}
	// A run whose tasks can never run fails without being admitted.
	if err := st.FinishRun(ctx, store.FinishRunParams{RunID: runs[1].ID, State: store.RunFailed, Now: ended}); err != nil {
		t.Fatal(err)
	}
	wantErr(t, "FinishRun twice", st.FinishRun(ctx, store.FinishRunParams{RunID: runs[0].ID, State: store.RunFailed, Now: ended}), store.ErrConflict)
	wantErr(t, "AdmitRun of a finished run", st.AdmitRun(ctx, store.AdmitRunParams{RunID: runs[0].ID, Now: now}), store.ErrConflict)
	wantErr(t, "FinishRun(unknown)", st.FinishRun(ctx, store.FinishRunParams{RunID: 987654, State: store.RunSuccess, Now: now}), store.ErrNotFound)
	if err := st.FinishRun(ctx, store.FinishRunParams{RunID: runs[2].ID, State: store.RunRunning, Now: now}); err == nil {
		t.Errorf("FinishRun to running succeeded")
	}

	got := listRuns(t, st, store.ListRunsParams{})
	if got[0].State != store.RunSuccess || !got[0].StartedAt.Equal(admitted) || !got[0].EndedAt.Equal(ended) {
		t.Errorf("finished run = %s started %v ended %v", got[0].State, got[0].StartedAt, got[0].EndedAt)
	}
	if got[1].State != store.RunFailed || !got[1].StartedAt.IsZero() || !got[1].EndedAt.Equal(ended) {
		t.Errorf("failed run = %s started %v ended %v", got[1].State, got[1].StartedAt, got[1].EndedAt)
	}
	if got[2].State != store.RunQueued {
		t.Errorf("untouched run is %s", got[2].State)
	}
}

// Task instances and attempts.

func testHappyPath(t *testing.T, st store.Store) {
	runs := materialize(t, st, "p", store.KindScheduled, daily(time.UTC, date(2025, 7, 1), 1), "extract")
	ti := runs[0].Tasks[0]
	if err := st.AdmitRun(ctx, store.AdmitRunParams{RunID: runs[0].ID, Now: now}); err != nil {
		t.Fatal(err)
	}

	a, err := st.ClaimTask(ctx, store.ClaimTaskParams{
		TaskInstanceID: ti.ID, Pool: "large", Host: "host-a", Now: now,
		LogPath: "/logs/p/2025-07-01/extract.{try}.log", Reason: "hot_dates",
	})
	if err != nil {
		t.Fatal(err)
	}
	if a.ID == 0 || a.TaskInstanceID != ti.ID || a.TryNumber != 1 || a.State != store.AttemptRunning ||
		a.Pool != "large" || a.Host != "host-a" || a.PID != 0 || a.ExitCode != nil || !a.EndedAt.IsZero() {
		t.Errorf("claimed attempt = %+v", a)
	}
	if a.LogPath != "/logs/p/2025-07-01/extract.1.log" || a.Reason != "hot_dates" {
		t.Errorf("log path %q, reason %q; want {try} replaced by 1 and the reason kept", a.LogPath, a.Reason)
	}
	got := reload(t, st, ti.ID)
	if got.State != store.TaskQueued || got.TryNumber != 1 || got.Pool != "large" {
		t.Errorf("after claim: %s try %d pool %s, want queued try 1 pool large", got.State, got.TryNumber, got.Pool)
	}

	started := now.Add(time.Second)
	if err := st.StartAttempt(ctx, store.StartAttemptParams{AttemptID: a.ID, PID: 31337, PIDStart: 1 << 40, Now: started}); err != nil {
		t.Fatal(err)
	}
	got = reload(t, st, ti.ID)
	if got.State != store.TaskRunning {
		t.Errorf("after start: %s, want running", got.State)
	}
	if at := got.Attempts[0]; at.PID != 31337 || at.PIDStart != 1<<40 || !at.StartedAt.Equal(started) || at.State != store.AttemptRunning {
		t.Errorf("started attempt = %+v", at)
	}

	ended := now.Add(time.Minute)
	if err := st.FinishAttempt(ctx, store.FinishAttemptParams{
		AttemptID: a.ID, State: store.AttemptSuccess, ExitCode: intp(0), PeakRSS: 64 << 20,
		TaskState: store.TaskSuccess, Now: ended,
	}); err != nil {
		t.Fatal(err)
	}
	got = reload(t, st, ti.ID)
	if got.State != store.TaskSuccess || got.Failures != 0 || got.TryNumber != 1 || !got.UpdatedAt.Equal(ended) {
		t.Errorf("after success: %+v", got)
	}
	at := got.Attempts[0]
	if at.State != store.AttemptSuccess || at.ExitCode == nil || *at.ExitCode != 0 || at.PeakRSS != 64<<20 ||
		!at.EndedAt.Equal(ended) || at.Signal != "" || at.LogPath != a.LogPath {
		t.Errorf("finished attempt = %+v", at)
	}
	if err := st.FinishRun(ctx, store.FinishRunParams{RunID: runs[0].ID, State: store.RunSuccess, Now: ended}); err != nil {
		t.Fatal(err)
	}
	if ra, err := st.RunningAttempts(ctx); err != nil || len(ra) != 0 {
		t.Errorf("RunningAttempts = %+v, %v; want none", ra, err)
	}
}

func testClaimConflict(t *testing.T, st store.Store) {
	runs := materialize(t, st, "p", store.KindScheduled, daily(time.UTC, date(2025, 7, 1), 1), "t")
	id := runs[0].Tasks[0].ID
	a := claim(t, st, id)
	_, err := st.ClaimTask(ctx, store.ClaimTaskParams{TaskInstanceID: id, Now: now})
	wantErr(t, "claim of a queued task", err, store.ErrConflict)
	start(t, st, a)
	_, err = st.ClaimTask(ctx, store.ClaimTaskParams{TaskInstanceID: id, Now: now})
	wantErr(t, "claim of a running task", err, store.ErrConflict)
	finish(t, st, a, store.AttemptSuccess, store.TaskSuccess)
	_, err = st.ClaimTask(ctx, store.ClaimTaskParams{TaskInstanceID: id, Now: now})
	wantErr(t, "claim of a successful task", err, store.ErrConflict)
	_, err = st.ClaimTask(ctx, store.ClaimTaskParams{TaskInstanceID: 987654, Now: now})
	wantErr(t, "claim of an unknown task", err, store.ErrNotFound)
	if got := reload(t, st, id); got.TryNumber != 1 || len(got.Attempts) != 1 {
		t.Errorf("refused claims changed the task: try %d, %d attempts", got.TryNumber, len(got.Attempts))
	}
	// An empty pool keeps the task instance's pool.
	other := materialize(t, st, "q", store.KindScheduled, daily(time.UTC, date(2025, 7, 1), 1), "t")
	b, err := st.ClaimTask(ctx, store.ClaimTaskParams{TaskInstanceID: other[0].Tasks[0].ID, Now: now})
	if err != nil || b.Pool != "default" {
		t.Errorf("claim without pool = %+v, %v; want pool default", b, err)
	}
}

func testUniqueAttemptPerTry(t *testing.T, st store.Store) {
	runs := materialize(t, st, "p", store.KindScheduled, daily(time.UTC, date(2025, 7, 1), 1), "t")
	id := runs[0].Tasks[0].ID
	seen := map[int64]bool{}
	for try := 1; try <= 3; try++ {
		a := claim(t, st, id)
		if a.TryNumber != try {
			t.Errorf("claim %d got try %d", try, a.TryNumber)
		}
		if seen[a.ID] {
			t.Errorf("attempt id %d reused", a.ID)
		}
		seen[a.ID] = true
		start(t, st, a)
		finish(t, st, a, store.AttemptFailed, store.TaskUpForRetry)
	}
	got := reload(t, st, id)
	if len(got.Attempts) != 3 {
		t.Fatalf("%d attempts, want 3", len(got.Attempts))
	}
	for i, a := range got.Attempts {
		if a.TryNumber != i+1 {
			t.Errorf("attempt %d has try %d", i, a.TryNumber)
		}
	}
	// A clear keeps counting tries: the next attempt is try 4, not a second try 1.
	if _, err := st.ClearTasks(ctx, store.ClearTasksParams{Pipeline: "p", From: date(2025, 7, 1), To: date(2025, 7, 1), Now: now}); err != nil {
		t.Fatal(err)
	}
	if a := claim(t, st, id); a.TryNumber != 4 {
		t.Errorf("claim after clear got try %d, want 4", a.TryNumber)
	}
}

func testRetryPath(t *testing.T, st store.Store) {
	runs := materialize(t, st, "p", store.KindScheduled, daily(time.UTC, date(2025, 7, 1), 1), "t")
	id := runs[0].Tasks[0].ID
	retryAt := now.Add(30 * time.Second)
	for try := 1; try <= 2; try++ {
		a := claim(t, st, id)
		start(t, st, a)
		if err := st.FinishAttempt(ctx, store.FinishAttemptParams{
			AttemptID: a.ID, State: store.AttemptFailed, ExitCode: intp(2), TaskState: store.TaskUpForRetry,
			CountFailure: true, NextTryAt: retryAt, Now: now,
		}); err != nil {
			t.Fatal(err)
		}
		got := reload(t, st, id)
		if got.State != store.TaskUpForRetry || got.Failures != try || !got.NextTryAt.Equal(retryAt) {
			t.Errorf("after failure %d: %s failures %d next %v", try, got.State, got.Failures, got.NextTryAt)
		}
	}
	a := claim(t, st, id)
	if got := reload(t, st, id); !got.NextTryAt.IsZero() {
		t.Errorf("claim kept NextTryAt %v", got.NextTryAt)
	}
	start(t, st, a)
	if err := st.FinishAttempt(ctx, store.FinishAttemptParams{
		AttemptID: a.ID, State: store.AttemptFailed, Signal: "killed", TaskState: store.TaskFailed, CountFailure: true, Now: now,
	}); err != nil {
		t.Fatal(err)
	}
	got := reload(t, st, id)
	if got.State != store.TaskFailed || got.Failures != 3 || got.TryNumber != 3 || len(got.Attempts) != 3 {
		t.Errorf("after last failure: %s failures %d try %d attempts %d", got.State, got.Failures, got.TryNumber, len(got.Attempts))
	}
	last := got.Attempts[2]
	if last.ExitCode != nil || last.Signal != "killed" || last.State != store.AttemptFailed {
		t.Errorf("killed attempt = exit %v signal %q state %s", last.ExitCode, last.Signal, last.State)
	}
	if c := got.Attempts[0].ExitCode; c == nil || *c != 2 {
		t.Errorf("first attempt exit code = %v, want 2", c)
	}
}

func testInterruptedLost(t *testing.T, st store.Store) {
	runs := materialize(t, st, "p", store.KindScheduled, daily(time.UTC, date(2025, 7, 1), 1), "t")
	id := runs[0].Tasks[0].ID
	runTask(t, st, id, store.AttemptInterrupted, store.TaskScheduled)
	if got := reload(t, st, id); got.State != store.TaskScheduled || got.Failures != 0 || got.TryNumber != 1 {
		t.Errorf("after interrupted: %s failures %d try %d", got.State, got.Failures, got.TryNumber)
	}
	a := claim(t, st, id) // lost before it even started
	finish(t, st, a, store.AttemptLost, store.TaskScheduled)
	got := reload(t, st, id)
	if got.State != store.TaskScheduled || got.Failures != 0 || got.TryNumber != 2 {
		t.Errorf("after lost: %s failures %d try %d", got.State, got.Failures, got.TryNumber)
	}
	if got.Attempts[0].State != store.AttemptInterrupted || got.Attempts[1].State != store.AttemptLost {
		t.Errorf("attempt states %s, %s", got.Attempts[0].State, got.Attempts[1].State)
	}
	if a := claim(t, st, id); a.TryNumber != 3 {
		t.Errorf("claim after lost got try %d, want 3", a.TryNumber)
	}
}

func testAttemptGuards(t *testing.T, st store.Store) {
	runs := materialize(t, st, "p", store.KindScheduled, daily(time.UTC, date(2025, 7, 1), 1), "t")
	id := runs[0].Tasks[0].ID
	a := claim(t, st, id)
	start(t, st, a)
	wantErr(t, "StartAttempt twice", st.StartAttempt(ctx, store.StartAttemptParams{AttemptID: a.ID, PID: 1, Now: now}), store.ErrConflict)
	finish(t, st, a, store.AttemptSuccess, store.TaskSuccess)
	wantErr(t, "FinishAttempt twice", st.FinishAttempt(ctx, store.FinishAttemptParams{
		AttemptID: a.ID, State: store.AttemptFailed, TaskState: store.TaskFailed, CountFailure: true, Now: now,
	}), store.ErrConflict)
	wantErr(t, "StartAttempt after finish", st.StartAttempt(ctx, store.StartAttemptParams{AttemptID: a.ID, PID: 1, Now: now}), store.ErrConflict)
	wantErr(t, "StartAttempt(unknown)", st.StartAttempt(ctx, store.StartAttemptParams{AttemptID: 987654, Now: now}), store.ErrNotFound)
	wantErr(t, "FinishAttempt(unknown)", st.FinishAttempt(ctx, store.FinishAttemptParams{
		AttemptID: 987654, State: store.AttemptSuccess, TaskState: store.TaskSuccess, Now: now,
	}), store.ErrNotFound)
	if got := reload(t, st, id); got.State != store.TaskSuccess || got.Failures != 0 || got.Attempts[0].State != store.AttemptSuccess {
		t.Errorf("refused transitions changed the task: %+v", got)
	}
	if err := st.FinishAttempt(ctx, store.FinishAttemptParams{AttemptID: a.ID, State: store.AttemptRunning, TaskState: store.TaskSuccess, Now: now}); err == nil {
		t.Errorf("FinishAttempt with outcome running succeeded")
	}
}

func testSetTaskStates(t *testing.T, st store.Store) {
	runs := materialize(t, st, "p", store.KindScheduled, daily(time.UTC, date(2025, 7, 1), 1), "a", "b", "c")
	r := runs[0]
	runTask(t, st, task(t, r, "a").ID, store.AttemptFailed, store.TaskFailed)
	runTask(t, st, task(t, r, "b").ID, store.AttemptSuccess, store.TaskSuccess)
	ids := []int64{task(t, r, "a").ID, task(t, r, "b").ID, task(t, r, "c").ID, 987654}
	n, err := st.SetTaskStates(ctx, store.SetTaskStatesParams{
		IDs: ids, From: []store.TaskState{store.TaskScheduled, store.TaskUpForRetry}, To: store.TaskUpstreamFailed, Now: now,
	})
	if err != nil || n != 1 {
		t.Fatalf("SetTaskStates = %d, %v; want 1", n, err)
	}
	want := map[string]store.TaskState{"a": store.TaskFailed, "b": store.TaskSuccess, "c": store.TaskUpstreamFailed}
	for _, ti := range listRuns(t, st, store.ListRunsParams{WithTasks: true})[0].Tasks {
		if ti.State != want[ti.Task] {
			t.Errorf("task %s is %s, want %s", ti.Task, ti.State, want[ti.Task])
		}
	}
	if n, err := st.SetTaskStates(ctx, store.SetTaskStatesParams{IDs: nil, From: []store.TaskState{store.TaskScheduled}, To: store.TaskSkipped, Now: now}); err != nil || n != 0 {
		t.Errorf("SetTaskStates(no ids) = %d, %v", n, err)
	}
	if _, err := st.SetTaskStates(ctx, store.SetTaskStatesParams{IDs: ids, From: []store.TaskState{store.TaskFailed}, To: "bogus", Now: now}); err == nil {
		t.Errorf("SetTaskStates to an unknown state succeeded")
	}
}

// clearFixture builds five daily runs of extract -> load:
//
//	07-01 extract success, load success            run success
//	07-02 extract failed,  load upstream_failed    run failed
//	07-03 extract running, load scheduled          run running
//	07-04 extract success, load failed (2 tries)   run failed
//	07-05 extract failed,  load upstream_failed    run failed
func clearFixture(t *testing.T, st store.Store) []store.Run {
	t.Helper()
	runs := materialize(t, st, "p", store.KindScheduled, daily(time.UTC, date(2025, 7, 1), 5), "extract", "load")
	for _, r := range runs {
		if err := st.AdmitRun(ctx, store.AdmitRunParams{RunID: r.ID, Now: now}); err != nil {
			t.Fatal(err)
		}
	}
	upstreamFailed := func(r store.Run) {
		if _, err := st.SetTaskStates(ctx, store.SetTaskStatesParams{
			IDs: []int64{task(t, r, "load").ID}, From: []store.TaskState{store.TaskScheduled}, To: store.TaskUpstreamFailed, Now: now,
		}); err != nil {
			t.Fatal(err)
		}
	}
	runTask(t, st, task(t, runs[0], "extract").ID, store.AttemptSuccess, store.TaskSuccess)
	runTask(t, st, task(t, runs[0], "load").ID, store.AttemptSuccess, store.TaskSuccess)
	runTask(t, st, task(t, runs[1], "extract").ID, store.AttemptFailed, store.TaskFailed)
	upstreamFailed(runs[1])
	start(t, st, claim(t, st, task(t, runs[2], "extract").ID))
	runTask(t, st, task(t, runs[3], "extract").ID, store.AttemptSuccess, store.TaskSuccess)
	runTask(t, st, task(t, runs[3], "load").ID, store.AttemptFailed, store.TaskUpForRetry)
	runTask(t, st, task(t, runs[3], "load").ID, store.AttemptFailed, store.TaskFailed)
	runTask(t, st, task(t, runs[4], "extract").ID, store.AttemptFailed, store.TaskFailed)
	upstreamFailed(runs[4])
	for _, i := range []int{0, 1, 3, 4} {
		state := store.RunFailed
		if i == 0 {
			state = store.RunSuccess
		}
		if err := st.FinishRun(ctx, store.FinishRunParams{RunID: runs[i].ID, State: state, Now: now}); err != nil {
			t.Fatal(err)
		}
	}
	return listRuns(t, st, store.ListRunsParams{WithTasks: true})
}

// states summarizes runs as "ds:runstate:extract,load" lines.
func states(runs []store.Run) []string {
	var out []string
	for _, r := range runs {
		s := r.DS[5:] + ":" + string(r.State) + ":"
		for i, ti := range r.Tasks {
			if i > 0 {
				s += ","
			}
			s += string(ti.State)
		}
		out = append(out, s)
	}
	return out
}

func clearAndCheck(t *testing.T, st store.Store, p store.ClearTasksParams, wantN int, want []string) {
	t.Helper()
	p.Pipeline, p.Now = "p", now
	n, err := st.ClearTasks(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	if n != wantN {
		t.Errorf("ClearTasks cleared %d, want %d", n, wantN)
	}
	runs := listRuns(t, st, store.ListRunsParams{WithTasks: true})
	got := states(runs)
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("after clear:\n got %v\nwant %v", got, want)
	}
	for _, r := range runs {
		if r.State == store.RunQueued && (!r.EndedAt.IsZero() || !r.StartedAt.IsZero()) {
			t.Errorf("re-queued run %s kept started %v / ended %v", r.DS, r.StartedAt, r.EndedAt)
		}
		for _, ti := range r.Tasks {
			if ti.State == store.TaskScheduled && (ti.Failures != 0 || !ti.NextTryAt.IsZero()) {
				t.Errorf("cleared %s %s kept failures %d / next try %v", r.DS, ti.Task, ti.Failures, ti.NextTryAt)
			}
		}
	}
}

func testClearOnlyFailed(t *testing.T, st store.Store) {
	runs := clearFixture(t, st)
	clearAndCheck(t, st, store.ClearTasksParams{From: date(2025, 7, 1), To: date(2025, 7, 5), OnlyFailed: true}, 5, []string{
		"07-01:success:success,success",
		"07-02:queued:scheduled,scheduled",
		"07-03:running:running,scheduled",
		"07-04:queued:success,scheduled",
		"07-05:queued:scheduled,scheduled",
	})
	// Try numbers keep counting after a clear; the retry budget starts over.
	load := reload(t, st, task(t, runs[3], "load").ID)
	if load.TryNumber != 2 || load.Failures != 0 || len(load.Attempts) != 2 {
		t.Errorf("cleared load: try %d failures %d attempts %d, want 2, 0, 2", load.TryNumber, load.Failures, len(load.Attempts))
	}
}

func testClearAll(t *testing.T, st store.Store) {
	clearFixture(t, st)
	clearAndCheck(t, st, store.ClearTasksParams{From: date(2025, 7, 1), To: date(2025, 7, 5)}, 8, []string{
		"07-01:queued:scheduled,scheduled",
		"07-02:queued:scheduled,scheduled",
		"07-03:running:running,scheduled",
		"07-04:queued:scheduled,scheduled",
		"07-05:queued:scheduled,scheduled",
	})
}

func testClearTaskFilter(t *testing.T, st store.Store) {
	clearFixture(t, st)
	clearAndCheck(t, st, store.ClearTasksParams{From: date(2025, 7, 1), To: date(2025, 7, 5), Task: "load", OnlyFailed: true}, 3, []string{
		"07-01:success:success,success",
		"07-02:queued:failed,scheduled",
		"07-03:running:running,scheduled",
		"07-04:queued:success,scheduled",
		"07-05:queued:failed,scheduled",
	})
	clearAndCheck(t, st, store.ClearTasksParams{From: date(2025, 7, 1), To: date(2025, 7, 5), Task: "nope"}, 0, []string{
		"07-01:success:success,success",
		"07-02:queued:failed,scheduled",
		"07-03:running:running,scheduled",
		"07-04:queued:success,scheduled",
		"07-05:queued:failed,scheduled",
	})
}

func testClearWindow(t *testing.T, st store.Store) {
	clearFixture(t, st)
	clearAndCheck(t, st, store.ClearTasksParams{From: date(2025, 7, 2), To: date(2025, 7, 4)}, 4, []string{
		"07-01:success:success,success",
		"07-02:queued:scheduled,scheduled",
		"07-03:running:running,scheduled",
		"07-04:queued:scheduled,scheduled",
		"07-05:failed:failed,upstream_failed",
	})
	n, err := st.ClearTasks(ctx, store.ClearTasksParams{Pipeline: "other", From: date(2025, 7, 1), To: date(2025, 7, 5), Now: now})
	if err != nil || n != 0 {
		t.Errorf("clear of another pipeline = %d, %v", n, err)
	}
}

func testRunningAttempts(t *testing.T, st store.Store) {
	runs := materialize(t, st, "p", store.KindScheduled, daily(time.UTC, date(2025, 7, 1), 2), "extract", "load")
	a := claim(t, st, task(t, runs[0], "extract").ID)
	start(t, st, a)
	b := claim(t, st, task(t, runs[1], "load").ID) // claimed, process not started yet
	runTask(t, st, task(t, runs[1], "extract").ID, store.AttemptSuccess, store.TaskSuccess)

	ra, err := st.RunningAttempts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(ra) != 2 {
		t.Fatalf("RunningAttempts = %d, want 2", len(ra))
	}
	if ra[0].ID != a.ID || ra[0].Pipeline != "p" || ra[0].RunID != runs[0].ID || ra[0].Task != "extract" ||
		ra[0].PID != 4242 || ra[0].PIDStart != 99 || ra[0].Host != "host-a" {
		t.Errorf("first running attempt = %+v", ra[0])
	}
	if ra[1].ID != b.ID || ra[1].RunID != runs[1].ID || ra[1].Task != "load" || ra[1].PID != 0 {
		t.Errorf("second running attempt = %+v", ra[1])
	}
	finish(t, st, a, store.AttemptLost, store.TaskScheduled)
	if ra, err := st.RunningAttempts(ctx); err != nil || len(ra) != 1 {
		t.Errorf("after lost: %d running, %v; want 1", len(ra), err)
	}
}

func testFindAttempt(t *testing.T, st store.Store) {
	runs := materialize(t, st, "p", store.KindScheduled, daily(time.UTC, date(2025, 7, 1), 2), "t")
	id := runs[1].Tasks[0].ID
	first := runTask(t, st, id, store.AttemptFailed, store.TaskUpForRetry)
	second := runTask(t, st, id, store.AttemptSuccess, store.TaskSuccess)
	find := func(try int) (store.Attempt, error) {
		return st.FindAttempt(ctx, store.FindAttemptParams{Pipeline: "p", DS: "2025-07-02", Task: "t", TryNumber: try})
	}
	if a, err := find(0); err != nil || a.ID != second.ID {
		t.Errorf("latest = %+v, %v; want attempt %d", a, err, second.ID)
	}
	if a, err := find(1); err != nil || a.ID != first.ID || a.State != store.AttemptFailed {
		t.Errorf("try 1 = %+v, %v; want attempt %d", a, err, first.ID)
	}
	_, err := find(3)
	wantErr(t, "try 3", err, store.ErrNotFound)
	for _, p := range []store.FindAttemptParams{
		{Pipeline: "p", DS: "2025-07-01", Task: "t"}, // task never ran
		{Pipeline: "p", DS: "2025-07-03", Task: "t"},
		{Pipeline: "p", DS: "2025-07-02", Task: "other"},
		{Pipeline: "other", DS: "2025-07-02", Task: "t"},
	} {
		_, err := st.FindAttempt(ctx, p)
		wantErr(t, fmt.Sprintf("FindAttempt(%+v)", p), err, store.ErrNotFound)
	}
}

// Watermarks.

func finishRuns(t *testing.T, st store.Store, runs []store.Run, states ...store.RunState) {
	t.Helper()
	for i, s := range states {
		if s == store.RunQueued {
			continue
		}
		if err := st.AdmitRun(ctx, store.AdmitRunParams{RunID: runs[i].ID, Now: now}); err != nil {
			t.Fatal(err)
		}
		if s == store.RunRunning {
			continue
		}
		if err := st.FinishRun(ctx, store.FinishRunParams{RunID: runs[i].ID, State: s, Now: now}); err != nil {
			t.Fatal(err)
		}
	}
}

func advance(t *testing.T, st store.Store, pipeline string) (store.Watermark, error) {
	t.Helper()
	return st.AdvanceWatermark(ctx, store.AdvanceWatermarkParams{Pipeline: pipeline, Now: now})
}

func testWatermarkGap(t *testing.T, st store.Store) {
	runs := materialize(t, st, "p", store.KindScheduled, daily(time.UTC, date(2025, 7, 1), 5), "t")
	runTask(t, st, runs[1].Tasks[0].ID, store.AttemptFailed, store.TaskFailed)
	finishRuns(t, st, runs, store.RunSuccess, store.RunFailed, store.RunSuccess, store.RunRunning, store.RunQueued)
	wm, err := advance(t, st, "p")
	if err != nil {
		t.Fatal(err)
	}
	if wm.Pipeline != "p" || !wm.LogicalDate.Equal(date(2025, 7, 1)) || !wm.UpdatedAt.Equal(now) {
		t.Errorf("watermark = %+v, want 2025-07-01", wm)
	}
	got, err := st.GetWatermark(ctx, "p")
	if err != nil || !got.LogicalDate.Equal(wm.LogicalDate) {
		t.Errorf("GetWatermark = %+v, %v", got, err)
	}

	// Re-running the failed day and finishing the rest moves it to the end.
	if _, err := st.ClearTasks(ctx, store.ClearTasksParams{Pipeline: "p", From: date(2025, 7, 2), To: date(2025, 7, 2), Now: now}); err != nil {
		t.Fatal(err)
	}
	finishRuns(t, st, runs, store.RunQueued, store.RunSuccess)
	if err := st.FinishRun(ctx, store.FinishRunParams{RunID: runs[3].ID, State: store.RunSuccess, Now: now}); err != nil {
		t.Fatal(err)
	}
	if wm, err := advance(t, st, "p"); err != nil || !wm.LogicalDate.Equal(date(2025, 7, 4)) {
		t.Errorf("watermark = %+v, %v; want 2025-07-04 (07-05 still queued)", wm, err)
	}
	finishRuns(t, st, runs, store.RunQueued, store.RunQueued, store.RunQueued, store.RunQueued, store.RunSuccess)
	if wm, err := advance(t, st, "p"); err != nil || !wm.LogicalDate.Equal(date(2025, 7, 5)) {
		t.Errorf("watermark = %+v, %v; want 2025-07-05", wm, err)
	}
}

func testWatermarkNotFound(t *testing.T, st store.Store) {
	_, err := advance(t, st, "p")
	wantErr(t, "AdvanceWatermark with no runs", err, store.ErrNotFound)
	_, err = st.GetWatermark(ctx, "p")
	wantErr(t, "GetWatermark with none", err, store.ErrNotFound)

	runs := materialize(t, st, "p", store.KindScheduled, daily(time.UTC, date(2025, 7, 1), 3), "t")
	finishRuns(t, st, runs, store.RunFailed, store.RunSuccess, store.RunSuccess)
	_, err = advance(t, st, "p")
	wantErr(t, "AdvanceWatermark with the first run failed", err, store.ErrNotFound)
	_, err = st.GetWatermark(ctx, "p")
	wantErr(t, "GetWatermark with the first run failed", err, store.ErrNotFound)
}

func testWatermarkAfterClear(t *testing.T, st store.Store) {
	runs := materialize(t, st, "p", store.KindScheduled, daily(time.UTC, date(2025, 7, 1), 3), "t")
	finishRuns(t, st, runs, store.RunSuccess, store.RunSuccess, store.RunSuccess)
	if wm, err := advance(t, st, "p"); err != nil || !wm.LogicalDate.Equal(date(2025, 7, 3)) {
		t.Fatalf("watermark = %+v, %v; want 2025-07-03", wm, err)
	}
	// Runs only succeed after their tasks did; give 07-02 a task outcome to clear.
	runTask(t, st, runs[1].Tasks[0].ID, store.AttemptSuccess, store.TaskSuccess)
	if _, err := st.ClearTasks(ctx, store.ClearTasksParams{Pipeline: "p", From: date(2025, 7, 2), To: date(2025, 7, 2), Now: now}); err != nil {
		t.Fatal(err)
	}
	if wm, err := advance(t, st, "p"); err != nil || !wm.LogicalDate.Equal(date(2025, 7, 1)) {
		t.Errorf("watermark after restating 07-02 = %+v, %v; want 2025-07-01", wm, err)
	}
	if wm, err := st.GetWatermark(ctx, "p"); err != nil || !wm.LogicalDate.Equal(date(2025, 7, 1)) {
		t.Errorf("stored watermark = %+v, %v; want 2025-07-01", wm, err)
	}
	// Another pipeline's runs do not count.
	other := materialize(t, st, "q", store.KindScheduled, daily(time.UTC, date(2025, 6, 1), 1), "t")
	finishRuns(t, st, other, store.RunFailed)
	if wm, err := advance(t, st, "p"); err != nil || !wm.LogicalDate.Equal(date(2025, 7, 1)) {
		t.Errorf("watermark with another pipeline failing = %+v, %v", wm, err)
	}
}

// Leases.

func acquire(t *testing.T, st store.Store, holder, stale string, at time.Time) (store.Lease, bool) {
	t.Helper()
	l, held, err := st.AcquireLease(ctx, store.AcquireLeaseParams{
		Name: "scheduler", Holder: holder, Host: "host-a", PID: len(holder), PIDStart: 7,
		TTL: 30 * time.Second, Now: at, Stale: stale,
	})
	if err != nil {
		t.Fatalf("AcquireLease(%s): %v", holder, err)
	}
	return l, held
}

func testLeases(t *testing.T, st store.Store) {
	l, held := acquire(t, st, "host-a:100:1", "", now)
	if !held || l.Holder != "host-a:100:1" || l.Name != "scheduler" || l.Host != "host-a" || l.PIDStart != 7 ||
		!l.ExpiresAt.Equal(now.Add(30*time.Second)) {
		t.Fatalf("first acquire = %+v, %v", l, held)
	}
	l, held = acquire(t, st, "host-b:200:1", "", now.Add(10*time.Second))
	if held || l.Holder != "host-a:100:1" {
		t.Errorf("second holder got %+v, %v; want refused, held by host-a", l, held)
	}
	// The holder re-acquiring extends its own lease.
	l, held = acquire(t, st, "host-a:100:1", "", now.Add(20*time.Second))
	if !held || !l.ExpiresAt.Equal(now.Add(50*time.Second)) {
		t.Errorf("re-acquire = %+v, %v", l, held)
	}
	if err := st.RenewLease(ctx, store.RenewLeaseParams{Name: "scheduler", Holder: "host-a:100:1", TTL: time.Minute, Now: now.Add(40 * time.Second)}); err != nil {
		t.Fatal(err)
	}
	if _, held := acquire(t, st, "host-b:200:1", "", now.Add(90*time.Second)); held {
		t.Errorf("host-b took the lease before the renewed expiry")
	}
	// Expired: another holder takes it, and the old holder can no longer renew.
	l, held = acquire(t, st, "host-b:200:1", "", now.Add(100*time.Second))
	if !held || l.Holder != "host-b:200:1" {
		t.Fatalf("after expiry = %+v, %v; want host-b", l, held)
	}
	wantErr(t, "renew after loss", st.RenewLease(ctx, store.RenewLeaseParams{Name: "scheduler", Holder: "host-a:100:1", TTL: time.Minute, Now: now.Add(100 * time.Second)}), store.ErrConflict)
	wantErr(t, "renew of an unknown lease", st.RenewLease(ctx, store.RenewLeaseParams{Name: "nope", Holder: "x", TTL: time.Minute, Now: now}), store.ErrConflict)
	// Releasing by a non-holder does nothing; by the holder frees the lease.
	if err := st.ReleaseLease(ctx, store.ReleaseLeaseParams{Name: "scheduler", Holder: "host-a:100:1"}); err != nil {
		t.Fatal(err)
	}
	if _, held := acquire(t, st, "host-c:300:1", "", now.Add(101*time.Second)); held {
		t.Errorf("release by a former holder freed the lease")
	}
	if err := st.ReleaseLease(ctx, store.ReleaseLeaseParams{Name: "scheduler", Holder: "host-b:200:1"}); err != nil {
		t.Fatal(err)
	}
	if l, held := acquire(t, st, "host-c:300:1", "", now.Add(102*time.Second)); !held || l.Holder != "host-c:300:1" {
		t.Errorf("after release = %+v, %v; want host-c", l, held)
	}
}

func testLeaseStale(t *testing.T, st store.Store) {
	acquire(t, st, "host-a:100:1", "", now)
	if _, held := acquire(t, st, "host-a:200:5", "host-a:999:9", now.Add(time.Second)); held {
		t.Errorf("a Stale naming someone else took the lease")
	}
	l, held := acquire(t, st, "host-a:200:5", "host-a:100:1", now.Add(time.Second))
	if !held || l.Holder != "host-a:200:5" || !l.ExpiresAt.Equal(now.Add(31*time.Second)) {
		t.Errorf("stale takeover = %+v, %v", l, held)
	}
	wantErr(t, "renew by the dead holder", st.RenewLease(ctx, store.RenewLeaseParams{Name: "scheduler", Holder: "host-a:100:1", TTL: time.Minute, Now: now}), store.ErrConflict)
}

// InTx batches operations: they see each other, and all are committed at once.
func testInTxCommit(t *testing.T, st store.Store) {
	runs := materialize(t, st, "p", store.KindScheduled, daily(time.UTC, date(2025, 7, 1), 2), "t")
	a, b := runs[0].Tasks[0].ID, runs[1].Tasks[0].ID
	var claimed []store.Attempt
	err := st.InTx(ctx, func(tx store.Store) error {
		for _, id := range []int64{a, b} {
			att, err := tx.ClaimTask(ctx, store.ClaimTaskParams{TaskInstanceID: id, Now: now})
			if err != nil {
				return err
			}
			claimed = append(claimed, att)
		}
		// A failing operation inside the batch leaves no partial effect and
		// does not undo the others.
		_, err := tx.ClaimTask(ctx, store.ClaimTaskParams{TaskInstanceID: a, Now: now})
		wantErr(t, "second claim in a batch", err, store.ErrConflict)
		if got := reload(t, tx, a); got.State != store.TaskQueued || got.TryNumber != 1 {
			t.Errorf("inside the batch: %s try %d; want queued try 1", got.State, got.TryNumber)
		}
		return tx.AdmitRun(ctx, store.AdmitRunParams{RunID: runs[0].ID, Now: now})
	})
	if err != nil {
		t.Fatalf("InTx: %v", err)
	}
	for _, att := range claimed {
		got := reload(t, st, att.TaskInstanceID)
		if got.State != store.TaskQueued || got.TryNumber != 1 || len(got.Attempts) != 1 {
			t.Errorf("after commit: %s try %d with %d attempts; want queued, try 1, one attempt", got.State, got.TryNumber, len(got.Attempts))
		}
	}
	r, err := st.ListRuns(ctx, store.ListRunsParams{Pipelines: []string{"p"}, States: []store.RunState{store.RunRunning}})
	if err != nil || len(r) != 1 {
		t.Errorf("admitted runs after commit: %d (%v); want 1", len(r), err)
	}
}

// An error returned by the function rolls the whole batch back.
func testInTxRollback(t *testing.T, st store.Store) {
	runs := materialize(t, st, "p", store.KindScheduled, daily(time.UTC, date(2025, 7, 1), 1), "t")
	id := runs[0].Tasks[0].ID
	boom := errors.New("boom")
	err := st.InTx(ctx, func(tx store.Store) error {
		if _, err := tx.ClaimTask(ctx, store.ClaimTaskParams{TaskInstanceID: id, Now: now}); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("InTx = %v; want the function's error", err)
	}
	if got := reload(t, st, id); got.State != store.TaskScheduled || got.TryNumber != 0 || len(got.Attempts) != 0 {
		t.Errorf("after rollback: %s try %d, %d attempts; want untouched", got.State, got.TryNumber, len(got.Attempts))
	}
	// The store still works after a rollback.
	claim(t, st, id)
}

// TaskDurations reports the latest successful attempts' durations per task.
func testTaskDurations(t *testing.T, st store.Store) {
	runs := materialize(t, st, "p", store.KindScheduled, daily(time.UTC, date(2025, 7, 1), 3), "a", "b")
	for i, r := range runs {
		for _, ti := range r.Tasks {
			att, err := st.ClaimTask(ctx, store.ClaimTaskParams{TaskInstanceID: ti.ID, Now: now})
			if err != nil {
				t.Fatal(err)
			}
			if err := st.StartAttempt(ctx, store.StartAttemptParams{AttemptID: att.ID, PID: 1, Now: now}); err != nil {
				t.Fatal(err)
			}
			state, task := store.AttemptSuccess, store.TaskSuccess
			if ti.Task == "b" && i == 2 {
				state, task = store.AttemptFailed, store.TaskFailed
			}
			if err := st.FinishAttempt(ctx, store.FinishAttemptParams{AttemptID: att.ID, State: state, TaskState: task,
				Now: now.Add(time.Duration(i+1) * time.Minute)}); err != nil {
				t.Fatal(err)
			}
		}
	}
	got, err := st.TaskDurations(ctx, store.TaskDurationsParams{Pipeline: "p", Limit: 2})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]time.Duration{"a": {3 * time.Minute, 2 * time.Minute}, "b": {2 * time.Minute, time.Minute}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("TaskDurations = %v; want %v (newest first, successes only, at most 2)", got, want)
	}
}

func testBackfills(t *testing.T, st store.Store) {
	b := store.Backfill{ID: "bf1", Pipeline: "p", From: date(2025, 7, 1), To: date(2025, 7, 31), Reprocess: "failed",
		Reverse: true, MaxActiveRuns: 30, Plan: `{"dates":31}`, CreatedAt: now}
	if err := st.CreateBackfill(ctx, b); err != nil {
		t.Fatal(err)
	}
	wantErr(t, "second backfill with the same id", st.CreateBackfill(ctx, b), store.ErrConflict)
	if err := st.CreateBackfill(ctx, store.Backfill{ID: "bad", Pipeline: "p", From: b.From, To: b.To, Reprocess: "all"}); err == nil {
		t.Error("a backfill with reprocess \"all\" was accepted")
	}
	detail := "3 dates miss sources"
	if err := st.UpdateBackfill(ctx, store.UpdateBackfillParams{ID: "bf1", Phase: "verify", Detail: &detail, Paused: []string{"c1", "c2"}, Now: now}); err != nil {
		t.Fatal(err)
	}
	got, err := st.GetBackfill(ctx, "bf1")
	if err != nil {
		t.Fatal(err)
	}
	if got.State != store.BackfillRunning || got.Phase != "verify" || got.Detail != detail || !got.Reverse || got.MaxActiveRuns != 30 ||
		strings.Join(got.Paused, ",") != "c1,c2" || !got.From.Equal(b.From) || got.Plan != b.Plan {
		t.Errorf("GetBackfill = %+v", got)
	}
	if err := st.UpdateBackfill(ctx, store.UpdateBackfillParams{ID: "bf1", State: store.BackfillSuccess, Now: now}); err != nil {
		t.Fatal(err)
	}
	if got, _ := st.GetBackfill(ctx, "bf1"); got.State != store.BackfillSuccess || got.Phase != "verify" {
		t.Errorf("after update: %s at %s; want success, phase kept", got.State, got.Phase)
	}
	_, err = st.GetBackfill(ctx, "nope")
	wantErr(t, "unknown backfill", err, store.ErrNotFound)
	wantErr(t, "update of an unknown backfill", st.UpdateBackfill(ctx, store.UpdateBackfillParams{ID: "nope", Now: now}), store.ErrNotFound)
	if err := st.CreateBackfill(ctx, store.Backfill{ID: "bf2", Pipeline: "p", From: b.From, To: b.To, Reprocess: "none", CreatedAt: now.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	list, err := st.ListBackfills(ctx)
	if err != nil || len(list) != 2 || list[0].ID != "bf2" {
		t.Errorf("ListBackfills = %v, %v; want bf2 then bf1", list, err)
	}
}

// ReprocessRuns hands the runs of a window in the given states to a backfill.
func testReprocessRuns(t *testing.T, st store.Store) {
	runs := materialize(t, st, "p", store.KindScheduled, daily(time.UTC, date(2025, 7, 1), 4), "t")
	// 07-01 success, 07-02 failed, 07-03 failed (outside the window), 07-04 queued.
	for i, state := range []store.RunState{store.RunSuccess, store.RunFailed, store.RunFailed} {
		a := claim(t, st, runs[i].Tasks[0].ID)
		start(t, st, a)
		ts, as := store.TaskSuccess, store.AttemptSuccess
		if state == store.RunFailed {
			ts, as = store.TaskFailed, store.AttemptFailed
		}
		finish(t, st, a, as, ts)
		if err := st.AdmitRun(ctx, store.AdmitRunParams{RunID: runs[i].ID, Now: now}); err != nil {
			t.Fatal(err)
		}
		if err := st.FinishRun(ctx, store.FinishRunParams{RunID: runs[i].ID, State: state, Now: now}); err != nil {
			t.Fatal(err)
		}
	}
	n, err := st.ReprocessRuns(ctx, store.ReprocessRunsParams{Pipeline: "p", BackfillID: "bf1", From: date(2025, 7, 1), To: date(2025, 7, 2),
		States: []store.RunState{store.RunFailed, store.RunSuccess}, Now: now})
	if err != nil || n != 2 {
		t.Fatalf("ReprocessRuns = %d, %v; want 2", n, err)
	}
	got := listRuns(t, st, store.ListRunsParams{Pipelines: []string{"p"}, WithTasks: true})
	for i, r := range got {
		inWindow := i < 2
		if inWindow != (r.Kind == store.KindBackfill && r.BackfillID == "bf1" && r.State == store.RunQueued && r.Tasks[0].State == store.TaskScheduled && r.Tasks[0].Failures == 0) {
			t.Errorf("%s: kind %s backfill %q state %s task %s failures %d", r.DS, r.Kind, r.BackfillID, r.State, r.Tasks[0].State, r.Tasks[0].Failures)
		}
	}
}

func testSetWatermark(t *testing.T, st store.Store) {
	if err := st.SetWatermark(ctx, store.SetWatermarkParams{Pipeline: "p", LogicalDate: date(2025, 7, 3), Now: now}); err != nil {
		t.Fatal(err)
	}
	wm, err := st.GetWatermark(ctx, "p")
	if err != nil || !wm.LogicalDate.Equal(date(2025, 7, 3)) {
		t.Errorf("GetWatermark = %v, %v", wm.LogicalDate, err)
	}
	if err := st.SetWatermark(ctx, store.SetWatermarkParams{Pipeline: "p", Now: now}); err != nil {
		t.Fatal(err)
	}
	_, err = st.GetWatermark(ctx, "p")
	wantErr(t, "a removed watermark", err, store.ErrNotFound)
}
