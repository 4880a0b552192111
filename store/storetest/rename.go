package storetest

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rewind-dev/rewind/store"
)

// renameFixture is a pipeline "old" with a history in every table keyed by
// a pipeline's name, beside a pipeline "other" that must not move: runs
// (one whose tasks succeeded, with its outbox row, a failed one, a queued
// one with a routed task instance), its watermark, probe results, pause
// flag and catchup cursor, a notification and its deadline check, a
// backfill of it and a backfill of "other" that paused it as a consumer.
func renameFixture(t *testing.T, st store.Store) {
	t.Helper()
	upsert(t, st, "old", "h-old")
	if _, err := st.MaterializeRuns(ctx, store.MaterializeRunsParams{Pipeline: "old", Kind: store.KindScheduled,
		Runs: daily(time.UTC, date(2025, 7, 1), 3), Tasks: tasks("extract", "load"), Through: date(2025, 7, 3), Now: now}); err != nil {
		t.Fatal(err)
	}
	runs := listRuns(t, st, store.ListRunsParams{Pipelines: []string{"old"}, WithTasks: true})
	logOf := func(r store.Run, task string) string {
		return "/ws/.rewind/logs/old/" + task + "/" + r.DS + ".{try}.log"
	}
	for _, task := range []string{"extract", "load"} {
		enqueue(t, st, now, store.EnqueueItem{TaskInstanceID: task0(t, runs[0], task), Pool: "default", LogPath: logOf(runs[0], task)})
	}
	for _, c := range claimReady(t, st, store.ClaimReadyParams{Pools: []store.PoolCapacity{{Name: "default", Slots: 9}}, Limit: 9}) {
		succeed(t, st, c.Attempt)
	}
	if _, err := st.RequestCommit(ctx, store.RequestCommitParams{RunID: runs[0].ID, Now: now}); err != nil {
		t.Fatal(err)
	}
	enqueue(t, st, now, store.EnqueueItem{TaskInstanceID: task0(t, runs[1], "extract"), Pool: "default", LogPath: logOf(runs[1], "extract")})
	for _, c := range claimReady(t, st, store.ClaimReadyParams{Pools: []store.PoolCapacity{{Name: "default", Slots: 9}}, Limit: 9}) {
		finish(t, st, c.Attempt, store.AttemptFailed, store.TaskFailed)
	}
	enqueue(t, st, now, store.EnqueueItem{TaskInstanceID: task0(t, runs[2], "extract"), Pool: "default", LogPath: logOf(runs[2], "extract")})
	if err := st.SetWatermark(ctx, store.SetWatermarkParams{Pipeline: "old", LogicalDate: date(2025, 7, 1), Now: now}); err != nil {
		t.Fatal(err)
	}
	if err := st.SetPaused(ctx, store.SetPausedParams{Name: "old", Paused: true, Now: now}); err != nil {
		t.Fatal(err)
	}
	if err := st.RecordProbes(ctx, []store.ProbeResult{
		{Pipeline: "old", LogicalDate: date(2025, 7, 1), Value: 1, Median: 1, Pool: "default", MeasuredAt: now},
		{Pipeline: "old", LogicalDate: date(2025, 7, 2), Value: 9, Median: 1, Pool: "large", Reason: "probe", MeasuredAt: now},
		{Pipeline: "other", LogicalDate: date(2025, 7, 1), Value: 5, Median: 5, Pool: "default", MeasuredAt: now},
	}); err != nil {
		t.Fatal(err)
	}
	for _, b := range []store.Backfill{
		{ID: "old_1", Pipeline: "old", From: date(2025, 7, 1), To: date(2025, 7, 2), Reprocess: "failed", State: store.BackfillSuccess, Plan: `{"pipeline":"old"}`, CreatedAt: now},
		{ID: "other_1", Pipeline: "other", From: date(2025, 7, 1), To: date(2025, 7, 2), Reprocess: "none", State: store.BackfillFailed, Paused: []string{"x", "old"}, CreatedAt: now},
	} {
		if err := st.CreateBackfill(ctx, b); err != nil {
			t.Fatal(err)
		}
	}
	materialize(t, st, "other", store.KindScheduled, daily(time.UTC, date(2025, 7, 1), 1), "extract")
	if _, err := st.EnqueueNotifications(ctx, []store.Notification{
		{Key: "run_failed:old:1", Event: "run_failed", Notify: "oncall", Channel: "webhook", Pipeline: "old", Payload: []byte(`{"pipeline":"old"}`)},
		{Key: "run_failed:other:1", Event: "run_failed", Notify: "oncall", Channel: "webhook", Pipeline: "other", Payload: []byte(`{}`)},
	}); err != nil {
		t.Fatal(err)
	}
	if err := st.SetDeadlineChecked(ctx, "old", now.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
}

func task0(t *testing.T, r store.Run, name string) int64 {
	t.Helper()
	return task(t, r, name).ID
}

// testRenamePipeline: a rename moves the pipeline's whole history, every
// table keyed by its name, to the new name: what the state says of the new
// name afterwards is what it said of the old one (ids, run ids and the
// other pipeline's rows unchanged), with the log paths rewritten.
func testRenamePipeline(t *testing.T, st store.Store) {
	renameFixture(t, st)
	before := listRuns(t, st, store.ListRunsParams{Pipelines: []string{"old"}, WithAttempts: true})
	otherBefore := listRuns(t, st, store.ListRunsParams{Pipelines: []string{"other"}, WithAttempts: true})
	oldRow := getPipeline(t, st, "old")
	// The new name is known to the state without runs (a scheduler saw it
	// and paused it): the old row replaces it.
	upsert(t, st, "new", "h-new")
	if err := st.SetWatermark(ctx, store.SetWatermarkParams{Pipeline: "new", LogicalDate: date(2024, 1, 1), Now: now}); err != nil {
		t.Fatal(err)
	}
	if err := st.RecordProbes(ctx, []store.ProbeResult{{Pipeline: "new", LogicalDate: date(2025, 7, 2), Value: 2, Median: 1, Pool: "default", MeasuredAt: now.Add(time.Hour)}}); err != nil {
		t.Fatal(err)
	}
	if err := st.SetDeadlineChecked(ctx, "new", now); err != nil {
		t.Fatal(err)
	}
	e0 := epoch(t, st)

	res, err := st.RenamePipeline(ctx, store.RenamePipelineParams{From: "old", To: "new",
		LogsFrom: "/ws/.rewind/logs/old/", LogsTo: "/ws/.rewind/logs/new/",
		Plans: []store.PlanRewrite{{ID: "old_1", Old: `{"pipeline":"old"}`, New: `{"pipeline":"new"}`}}, Now: now})
	if err != nil {
		t.Fatalf("RenamePipeline: %v", err)
	}
	want := store.RenameResult{Runs: 3, TaskInstances: 6, Attempts: 3, Probes: 1, Backfills: 1, Consumers: 1, Plans: 1, Watermark: true, LogPaths: 7, Notifications: 1}
	if res != want {
		t.Errorf("RenamePipeline = %+v, want %+v", res, want)
	}
	if e := epoch(t, st); e <= e0 {
		t.Errorf("epoch %d after a rename, was %d: a running engine would not re-read", e, e0)
	}

	if got := listRuns(t, st, store.ListRunsParams{Pipelines: []string{"old"}}); len(got) != 0 {
		t.Errorf("%d runs left under the old name", len(got))
	}
	after := listRuns(t, st, store.ListRunsParams{Pipelines: []string{"new"}, WithAttempts: true})
	renamed := strings.ReplaceAll(printRuns(before), "Pipeline:old", "Pipeline:new")
	renamed = strings.ReplaceAll(renamed, "/logs/old/", "/logs/new/")
	if got := printRuns(after); got != renamed {
		t.Errorf("the runs under the new name:\n%s\nwant the old ones renamed:\n%s", got, renamed)
	}
	if got := printRuns(listRuns(t, st, store.ListRunsParams{Pipelines: []string{"other"}, WithAttempts: true})); got != printRuns(otherBefore) {
		t.Errorf("the other pipeline's runs changed:\n%s\nwas\n%s", got, printRuns(otherBefore))
	}
	if a, err := st.FindAttempt(ctx, store.FindAttemptParams{Pipeline: "new", DS: "2025-07-01", Task: "load"}); err != nil ||
		a.LogPath != "/ws/.rewind/logs/new/load/2025-07-01.1.log" {
		t.Errorf("FindAttempt(new) = %+v, %v", a, err)
	}

	if _, err := st.GetPipeline(ctx, "old"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("GetPipeline(old) after the rename: %v, want ErrNotFound", err)
	}
	if p := getPipeline(t, st, "new"); p.Hash != oldRow.Hash || !p.Paused || !p.CatchupThrough.Equal(oldRow.CatchupThrough) {
		t.Errorf("the new name's row = %+v, want the old one's %+v", p, oldRow)
	}
	if wm, err := st.GetWatermark(ctx, "new"); err != nil || !wm.LogicalDate.Equal(date(2025, 7, 1)) {
		t.Errorf("watermark of new = %v, %v; want the old one's, 2025-07-01", wm.LogicalDate, err)
	}
	if _, err := st.GetWatermark(ctx, "old"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("watermark of old after the rename: %v", err)
	}
	probes, err := st.ListProbes(ctx, store.ListProbesParams{Pipeline: "new"})
	if err != nil || len(probes) != 2 || probes[0].Value != 1 || probes[1].Value != 2 {
		t.Errorf("probes of new = %+v, %v; want the old 07-01 and new's own later 07-02", probes, err)
	}
	if left, _ := st.ListProbes(ctx, store.ListProbesParams{Pipeline: "old"}); len(left) != 0 {
		t.Errorf("probes left under old: %+v", left)
	}
	if other, _ := st.ListProbes(ctx, store.ListProbesParams{Pipeline: "other"}); len(other) != 1 {
		t.Errorf("probes of other = %+v", other)
	}
	if b, err := st.GetBackfill(ctx, "old_1"); err != nil || b.Pipeline != "new" || b.Plan != `{"pipeline":"new"}` {
		t.Errorf("backfill old_1 = %+v, %v; want it under new (its id kept), its plan rewritten", b, err)
	}
	if b, err := st.GetBackfill(ctx, "other_1"); err != nil || b.Pipeline != "other" || !slices.Equal(b.Paused, []string{"x", "new"}) {
		t.Errorf("backfill other_1 = %+v, %v; want its consumers x, new", b, err)
	}
	if ns, err := st.ListNotifications(ctx, store.ListNotificationsParams{Pipeline: "new"}); err != nil || len(ns) != 1 ||
		ns[0].Key != "run_failed:old:1" || string(ns[0].Payload) != `{"pipeline":"old"}` {
		t.Errorf("notifications of new = %+v, %v; want old's, its key and payload as they were", ns, err)
	}
	if ns, _ := st.ListNotifications(ctx, store.ListNotificationsParams{Pipeline: "other"}); len(ns) != 1 {
		t.Errorf("notifications of other = %+v", ns)
	}
	if until, ok, err := st.DeadlineChecked(ctx, "new"); err != nil || !ok || !until.Equal(now.Add(time.Hour)) {
		t.Errorf("deadline checked of new = %v, %v, %v; want old's, the later one", until, ok, err)
	}
	if _, ok, err := st.DeadlineChecked(ctx, "old"); err != nil || ok {
		t.Errorf("deadline checked of old after the rename: %v, %v", ok, err)
	}
	out, err := st.ListOutbox(ctx, []string{"new"})
	if err != nil || len(out) != 1 || out[0].RunID != before[0].ID {
		t.Errorf("outbox of new = %+v, %v", out, err)
	}
	if tasks, err := st.LatestTasks(ctx, "new"); err != nil || !slices.Equal(tasks, []string{"extract", "load"}) {
		t.Errorf("LatestTasks(new) = %v, %v", tasks, err)
	}

	// Back again: nothing of either name is lost on the way.
	if _, err := st.RenamePipeline(ctx, store.RenamePipelineParams{From: "new", To: "old", Now: now}); err != nil {
		t.Fatalf("rename back: %v", err)
	}
	if got := printRuns(listRuns(t, st, store.ListRunsParams{Pipelines: []string{"old"}, WithAttempts: true})); got != strings.ReplaceAll(renamed, "Pipeline:new", "Pipeline:old") {
		t.Errorf("after renaming back:\n%s", got)
	}
}

// testRenameRefused: a rename that the state does not allow changes
// nothing and says why: the new name has runs, the old one has none, an
// attempt of it is running, a running backfill involves it, a plan changed
// since it was read.
func testRenameRefused(t *testing.T, st store.Store) {
	renameFixture(t, st)
	before := digest(t, st)
	rename := func(what string, p store.RenamePipelineParams, target error, reason string) {
		t.Helper()
		if p.Now.IsZero() {
			p.Now = now
		}
		_, err := st.RenamePipeline(ctx, p)
		wantErr(t, what, err, target)
		if err != nil && !strings.Contains(err.Error(), reason) {
			t.Errorf("%s: %v, want it to say %q", what, err, reason)
		}
		if after := digest(t, st); after != before {
			t.Errorf("%s changed the state:\n before %s\n after  %s", what, before, after)
		}
	}
	rename("onto a pipeline with runs", store.RenamePipelineParams{From: "old", To: "other"}, store.ErrConflict, "other has runs already (1)")
	rename("a pipeline without runs", store.RenamePipelineParams{From: "nope", To: "new"}, store.ErrNotFound, "nope has no run")
	rename("with a stale plan", store.RenamePipelineParams{From: "old", To: "new",
		Plans: []store.PlanRewrite{{ID: "old_1", Old: `{"pipeline":"older"}`, New: `{}`}}}, store.ErrConflict, "plan of backfill old_1 changed")
	for _, bad := range []store.RenamePipelineParams{
		{From: "old", To: "old"}, {From: "", To: "new"}, {From: "old", To: "a,b"}, {From: "old", To: "new", LogsFrom: "/x/"},
	} {
		if _, err := st.RenamePipeline(ctx, bad); err == nil {
			t.Errorf("RenamePipeline(%+v) = nil, want an error", bad)
		}
	}

	// A running attempt of the old name.
	runs := listRuns(t, st, store.ListRunsParams{Pipelines: []string{"old"}, WithTasks: true})
	a := claim(t, st, task0(t, runs[2], "load"))
	before = digest(t, st)
	rename("with an attempt running", store.RenamePipelineParams{From: "old", To: "new"}, store.ErrConflict, "old has attempts running (1)")
	succeed(t, st, a)

	// A running backfill of it, or one that paused it.
	for _, b := range []store.Backfill{
		{ID: "old_2", Pipeline: "old", From: date(2025, 7, 1), To: date(2025, 7, 1), Reprocess: "none", CreatedAt: now},
		{ID: "other_2", Pipeline: "other", From: date(2025, 7, 1), To: date(2025, 7, 1), Reprocess: "none", Paused: []string{"old"}, CreatedAt: now},
	} {
		if err := st.CreateBackfill(ctx, b); err != nil {
			t.Fatal(err)
		}
		before = digest(t, st)
		rename("with backfill "+b.ID+" running", store.RenamePipelineParams{From: "old", To: "new"}, store.ErrConflict, "backfill "+b.ID+" is running")
		if err := st.UpdateBackfill(ctx, store.UpdateBackfillParams{ID: b.ID, State: store.BackfillCancelled, Now: now}); err != nil {
			t.Fatal(err)
		}
	}
	// Once they have ended, it goes through.
	if _, err := st.RenamePipeline(ctx, store.RenamePipelineParams{From: "old", To: "new", Now: now}); err != nil {
		t.Fatalf("RenamePipeline once nothing holds it: %v", err)
	}
}

// testLatestTasks: the tasks of a pipeline's latest run by logical date,
// none without a run.
func testLatestTasks(t *testing.T, st store.Store) {
	if got, err := st.LatestTasks(ctx, "p"); err != nil || len(got) != 0 {
		t.Errorf("LatestTasks of an empty state = %v, %v", got, err)
	}
	materialize(t, st, "p", store.KindScheduled, daily(time.UTC, date(2025, 7, 2), 1), "b", "a")
	materialize(t, st, "p", store.KindScheduled, daily(time.UTC, date(2025, 7, 1), 1), "old")
	materialize(t, st, "q", store.KindScheduled, daily(time.UTC, date(2025, 7, 9), 1), "z")
	if got, err := st.LatestTasks(ctx, "p"); err != nil || !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("LatestTasks(p) = %v, %v; want [a b]", got, err)
	}
}
