package storetest

import (
	"fmt"
	"testing"
	"time"

	"github.com/rewind-dev/rewind/store"
)

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
		{"ids", store.ListRunsParams{IDs: []int64{runs[0].ID, runs[5].ID}, WithTasks: true}, 2},
		{"ids of another pipeline", store.ListRunsParams{Pipelines: []string{"alpha"}, IDs: []int64{runs[5].ID}}, 0},
	}
	for _, c := range cases {
		if got := listRuns(t, st, c.p); len(got) != c.want {
			t.Errorf("%s: %d runs, want %d", c.name, len(got), c.want)
		}
	}

	// A page: the first or the last runs, listed in the same order, with
	// the tasks of those runs only.
	pages := []struct {
		name string
		p    store.ListRunsParams
		want string
	}{
		{"first two", store.ListRunsParams{Pipelines: []string{"alpha"}, Limit: 2}, "[alpha/2025-07-01 alpha/2025-07-02]"},
		{"last two", store.ListRunsParams{Pipelines: []string{"alpha"}, Limit: 2, Last: true, WithTasks: true}, "[alpha/2025-07-03 alpha/2025-07-04]"},
		{"last before", store.ListRunsParams{Pipelines: []string{"alpha"}, To: date(2025, 7, 2), Limit: 3, Last: true, WithAttempts: true}, "[alpha/2025-07-01 alpha/2025-07-02]"},
		{"first after", store.ListRunsParams{Pipelines: []string{"alpha"}, From: date(2025, 7, 2), Limit: 1, WithTasks: true}, "[alpha/2025-07-02]"},
		{"over two pipelines", store.ListRunsParams{Limit: 3, Last: true}, "[alpha/2025-07-04 zeta/2025-07-03 zeta/2025-07-04]"},
		{"more than there is", store.ListRunsParams{Pipelines: []string{"zeta"}, Limit: 10, Last: true, WithTasks: true}, "[zeta/2025-07-03 zeta/2025-07-04]"},
	}
	for _, c := range pages {
		runs := listRuns(t, st, c.p)
		var got []string
		for _, r := range runs {
			got = append(got, r.Pipeline+"/"+r.DS)
			if c.p.WithTasks || c.p.WithAttempts {
				if len(r.Tasks) != 1 || r.Tasks[0].RunID != r.ID {
					t.Errorf("%s: %s has tasks %+v; want its own one", c.name, r.DS, r.Tasks)
				}
			}
		}
		if fmt.Sprint(got) != c.want {
			t.Errorf("%s: %v; want %s", c.name, got, c.want)
		}
	}

	counts, err := st.CountRuns(ctx, store.CountRunsParams{})
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(counts); got != "[{alpha queued 3} {alpha running 1} {zeta queued 2}]" {
		t.Errorf("CountRuns = %s", got)
	}
	counts, err = st.CountRuns(ctx, store.CountRunsParams{Pipelines: []string{"zeta", "nope"}})
	if err != nil || fmt.Sprint(counts) != "[{zeta queued 2}]" {
		t.Errorf("CountRuns of zeta = %v, %v", counts, err)
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

	finishRuns(t, st, listRuns(t, st, store.ListRunsParams{Pipelines: []string{"rome"}, WithTasks: true}),
		store.RunSuccess, store.RunSuccess, store.RunSuccess)
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
	runTask(t, st, runs[0].Tasks[0].ID, store.AttemptSuccess, store.TaskSuccess)
	if err := st.FinishRun(ctx, store.FinishRunParams{RunID: runs[0].ID, State: store.RunSuccess, Now: ended}); err != nil {
		t.Fatal(err)
	}
	// A run whose tasks can never run fails without being admitted.
	setTasks(t, st, runs[1], store.TaskUpstreamFailed)
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
	setTasks(t, st, runs[3], store.TaskSuccess)
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

// testWatermarkBesideOtherPipelines: the pipelines whose names sort next
// to p's, with runs in every state, before and after p's dates, never move
// p's watermark.
func testWatermarkBesideOtherPipelines(t *testing.T, st store.Store) {
	o := materialize(t, st, "o", store.KindScheduled, daily(time.UTC, date(2025, 7, 1), 3), "t")
	finishRuns(t, st, o, store.RunSuccess, store.RunSuccess, store.RunSuccess)
	p := materialize(t, st, "p", store.KindScheduled, daily(time.UTC, date(2025, 7, 1), 4), "t")
	p2 := materialize(t, st, "p2", store.KindScheduled, daily(time.UTC, date(2025, 6, 1), 3), "t")
	finishRuns(t, st, p2, store.RunFailed, store.RunRunning, store.RunQueued)

	finishRuns(t, st, p, store.RunSuccess, store.RunSuccess, store.RunRunning, store.RunQueued)
	if wm, err := advance(t, st, "p"); err != nil || !wm.LogicalDate.Equal(date(2025, 7, 2)) {
		t.Errorf("watermark = %+v, %v; want 2025-07-02 (07-03 running)", wm, err)
	}
	setTasks(t, st, p[2], store.TaskSuccess)
	if err := st.FinishRun(ctx, store.FinishRunParams{RunID: p[2].ID, State: store.RunSuccess, Now: now}); err != nil {
		t.Fatal(err)
	}
	finishRuns(t, st, p, store.RunQueued, store.RunQueued, store.RunQueued, store.RunSuccess)
	if wm, err := advance(t, st, "p"); err != nil || !wm.LogicalDate.Equal(date(2025, 7, 4)) {
		t.Errorf("watermark with every run succeeded = %+v, %v; want 2025-07-04", wm, err)
	}
	// p2's first run failed: the run before it in time order is p's.
	_, err := advance(t, st, "p2")
	wantErr(t, "AdvanceWatermark of p2, first run failed", err, store.ErrNotFound)
	_, err = advance(t, st, "q")
	wantErr(t, "AdvanceWatermark of a pipeline without runs", err, store.ErrNotFound)
	if wm, err := advance(t, st, "o"); err != nil || !wm.LogicalDate.Equal(date(2025, 7, 3)) {
		t.Errorf("watermark of o = %+v, %v; want 2025-07-03", wm, err)
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

func testCatchupThrough(t *testing.T, st store.Store) {
	if p := upsert(t, st, "p", "h1"); !p.CatchupThrough.IsZero() {
		t.Errorf("new pipeline CatchupThrough = %v, want zero", p.CatchupThrough)
	}
	through := func(runs []store.RunSpec, at time.Time) (int, error) {
		return st.MaterializeRuns(ctx, store.MaterializeRunsParams{
			Pipeline: "p", Kind: store.KindScheduled, Runs: runs, Tasks: tasks("t"), Through: at, Now: now,
		})
	}
	if n, err := through(daily(time.UTC, date(2025, 7, 1), 2), date(2025, 7, 2)); err != nil || n != 2 {
		t.Fatalf("MaterializeRuns with Through = %d, %v", n, err)
	}
	if got := getPipeline(t, st, "p").CatchupThrough; !got.Equal(date(2025, 7, 2)) {
		t.Errorf("CatchupThrough = %v, want 2025-07-02", got)
	}
	// Nothing due: no run, and the catchup still moves on.
	if n, err := through(nil, date(2025, 7, 5)); err != nil || n != 0 {
		t.Fatalf("MaterializeRuns without runs = %d, %v", n, err)
	}
	if got := getPipeline(t, st, "p").CatchupThrough; !got.Equal(date(2025, 7, 5)) {
		t.Errorf("CatchupThrough = %v, want 2025-07-05", got)
	}
	// It never moves back.
	if _, err := through(daily(time.UTC, date(2025, 7, 3), 1), date(2025, 7, 3)); err != nil {
		t.Fatal(err)
	}
	if got := getPipeline(t, st, "p").CatchupThrough; !got.Equal(date(2025, 7, 5)) {
		t.Errorf("CatchupThrough after an earlier Through = %v, want 2025-07-05", got)
	}
	if _, err := through(nil, time.Time{}); err != nil {
		t.Fatal(err)
	}
	if p := upsert(t, st, "p", "h1"); !p.CatchupThrough.Equal(date(2025, 7, 5)) {
		t.Errorf("same hash: CatchupThrough = %v, want kept", p.CatchupThrough)
	}
	if p := upsert(t, st, "p", "h2"); !p.CatchupThrough.IsZero() {
		t.Errorf("changed hash: CatchupThrough = %v, want reset to zero", p.CatchupThrough)
	}
	if got := getPipeline(t, st, "p").CatchupThrough; !got.IsZero() {
		t.Errorf("stored CatchupThrough after a hash change = %v", got)
	}
	// An instant in another zone is the same instant.
	rome, err := time.LoadLocation("Europe/Rome")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := through(nil, time.Date(2025, 7, 6, 0, 0, 0, 0, rome)); err != nil {
		t.Fatal(err)
	}
	if got := getPipeline(t, st, "p").CatchupThrough; !got.Equal(date(2025, 7, 5).Add(22 * time.Hour)) {
		t.Errorf("CatchupThrough = %v, want 2025-07-06T00:00+02:00", got)
	}
	// An unknown pipeline: nothing is created.
	_, err = st.MaterializeRuns(ctx, store.MaterializeRunsParams{Pipeline: "nope", Kind: store.KindScheduled,
		Runs: daily(time.UTC, date(2025, 7, 1), 1), Tasks: tasks("t"), Through: date(2025, 7, 1), Now: now})
	wantErr(t, "MaterializeRuns with Through for an unknown pipeline", err, store.ErrNotFound)
	if runs := listRuns(t, st, store.ListRunsParams{Pipelines: []string{"nope"}}); len(runs) != 0 {
		t.Errorf("refused MaterializeRuns created %d runs", len(runs))
	}
}

func testFinishRunGuard(t *testing.T, st store.Store) {
	runs := materialize(t, st, "p", store.KindScheduled, daily(time.UTC, date(2025, 7, 1), 3), "a", "b")
	r := runs[0]
	if err := st.AdmitRun(ctx, store.AdmitRunParams{RunID: r.ID, Now: now}); err != nil {
		t.Fatal(err)
	}
	refused := func(what string) {
		t.Helper()
		for _, state := range []store.RunState{store.RunSuccess, store.RunFailed} {
			wantErr(t, fmt.Sprintf("FinishRun(%s) with %s", state, what),
				st.FinishRun(ctx, store.FinishRunParams{RunID: r.ID, State: state, Now: now}), store.ErrConflict)
		}
		got := listRuns(t, st, store.ListRunsParams{Pipelines: []string{"p"}})[0]
		if got.State != store.RunRunning || !got.EndedAt.IsZero() {
			t.Errorf("refused FinishRun changed the run: %s ended %v", got.State, got.EndedAt)
		}
	}
	refused("scheduled task instances")
	enqueueRuns(t, st, "default", r)
	refused("queued task instances")
	got := claimReady(t, st, store.ClaimReadyParams{Pools: []store.PoolCapacity{{Name: "default", Slots: 1}}, Limit: 1})
	if len(got) != 1 || got[0].Task != "a" {
		t.Fatalf("claim = %v", claimedNames(got))
	}
	refused("a running task instance")
	if err := st.FinishAttempt(ctx, store.FinishAttemptParams{AttemptID: got[0].ID, State: store.AttemptFailed, ExitCode: intp(1),
		TaskState: store.TaskUpForRetry, CountFailure: true, NextTryAt: now.Add(time.Minute), Now: now}); err != nil {
		t.Fatal(err)
	}
	refused("a task instance up for retry")
	if _, err := st.SetTaskStates(ctx, store.SetTaskStatesParams{IDs: []int64{task(t, r, "a").ID}, From: []store.TaskState{store.TaskUpForRetry},
		To: store.TaskFailed, Now: now}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.SetTaskStates(ctx, store.SetTaskStatesParams{IDs: []int64{task(t, r, "b").ID}, From: []store.TaskState{store.TaskQueued},
		To: store.TaskUpstreamFailed, Now: now}); err != nil {
		t.Fatal(err)
	}
	wantErr(t, "FinishRun(success) with a failed task instance",
		st.FinishRun(ctx, store.FinishRunParams{RunID: r.ID, State: store.RunSuccess, Now: now}), store.ErrConflict)
	if err := st.FinishRun(ctx, store.FinishRunParams{RunID: r.ID, State: store.RunFailed, Now: now}); err != nil {
		t.Errorf("FinishRun(failed) with nothing left to run: %v", err)
	}
	// Success and skipped is success.
	runTask(t, st, task(t, runs[1], "a").ID, store.AttemptSuccess, store.TaskSuccess)
	runTask(t, st, task(t, runs[1], "b").ID, store.AttemptSkipped, store.TaskSkipped)
	if err := st.FinishRun(ctx, store.FinishRunParams{RunID: runs[1].ID, State: store.RunSuccess, Now: now}); err != nil {
		t.Errorf("FinishRun(success) with success and skipped: %v", err)
	}
	// A run without task instances has nothing to wait for.
	empty := materialize(t, st, "empty", store.KindManual, daily(time.UTC, date(2025, 7, 1), 1))
	if err := st.FinishRun(ctx, store.FinishRunParams{RunID: empty[0].ID, State: store.RunSuccess, Now: now}); err != nil {
		t.Errorf("FinishRun of a run without tasks: %v", err)
	}
	got2 := listRuns(t, st, store.ListRunsParams{Pipelines: []string{"p"}})
	if got2[0].State != store.RunFailed || got2[1].State != store.RunSuccess || got2[2].State != store.RunQueued {
		t.Errorf("runs = %s %s %s", got2[0].State, got2[1].State, got2[2].State)
	}
}
