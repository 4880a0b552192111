package storetest

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/rewind-dev/rewind/store"
)

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
	if got, _ := st.GetBackfill(ctx, "bf1"); got.State != store.BackfillSuccess || got.Phase != "verify" || got.OnHold || got.RolledBack {
		t.Errorf("after update: %s at %s, on hold %v, rolled back %v; want success, phase kept", got.State, got.Phase, got.OnHold, got.RolledBack)
	}
	yes, no := true, false
	if err := st.UpdateBackfill(ctx, store.UpdateBackfillParams{ID: "bf1", OnHold: &yes, RolledBack: &yes, Now: now}); err != nil {
		t.Fatal(err)
	}
	if got, _ := st.GetBackfill(ctx, "bf1"); !got.OnHold || !got.RolledBack || got.State != store.BackfillSuccess {
		t.Errorf("after hold and rollback: %+v", got)
	}
	if err := st.UpdateBackfill(ctx, store.UpdateBackfillParams{ID: "bf1", OnHold: &no, Now: now}); err != nil {
		t.Fatal(err)
	}
	if got, _ := st.GetBackfill(ctx, "bf1"); got.OnHold || !got.RolledBack {
		t.Errorf("after unhold: %+v", got)
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

// A backfill's transition is guarded on the state and phase it leaves:
// of two writers that read the same row, the second gets ErrConflict and
// changes nothing (an apply's success never overwrites a cancel).
func testBackfillGuard(t *testing.T, st store.Store) {
	if err := st.CreateBackfill(ctx, store.Backfill{ID: "bf1", Pipeline: "p", From: date(2025, 7, 1), To: date(2025, 7, 2),
		Reprocess: "none", Phase: "validate", CreatedAt: now}); err != nil {
		t.Fatal(err)
	}
	// A cancel, guarded on running at validate, lands.
	if err := st.UpdateBackfill(ctx, store.UpdateBackfillParams{ID: "bf1", FromState: store.BackfillRunning, FromPhase: "validate",
		State: store.BackfillCancelled, Now: now}); err != nil {
		t.Fatalf("guarded cancel: %v", err)
	}
	// The apply, which read running at validate, moves to its cutover:
	// refused, and nothing of it is written.
	detail := "apply"
	err := st.UpdateBackfill(ctx, store.UpdateBackfillParams{ID: "bf1", FromState: store.BackfillRunning, FromPhase: "validate",
		Phase: "cutover", Detail: &detail, Now: now})
	wantErr(t, "a transition from a state the backfill left", err, store.ErrConflict)
	if got, _ := st.GetBackfill(ctx, "bf1"); got.State != store.BackfillCancelled || got.Phase != "validate" || got.Detail != "" {
		t.Errorf("after the refused transition: %s at %s, detail %q; want cancelled at validate, no detail", got.State, got.Phase, got.Detail)
	}
	// A guard on the state alone, or on the phase alone.
	err = st.UpdateBackfill(ctx, store.UpdateBackfillParams{ID: "bf1", FromState: store.BackfillRunning, State: store.BackfillSuccess, Now: now})
	wantErr(t, "a transition from running of a cancelled backfill", err, store.ErrConflict)
	err = st.UpdateBackfill(ctx, store.UpdateBackfillParams{ID: "bf1", FromPhase: "cutover", Phase: "done", Now: now})
	wantErr(t, "a transition from cutover of a backfill at validate", err, store.ErrConflict)
	if err := st.UpdateBackfill(ctx, store.UpdateBackfillParams{ID: "bf1", FromState: store.BackfillCancelled, FromPhase: "validate",
		Detail: &detail, Now: now}); err != nil {
		t.Fatalf("a guard that holds: %v", err)
	}
	if got, _ := st.GetBackfill(ctx, "bf1"); got.Detail != detail {
		t.Errorf("detail %q after a guarded update that holds; want %q", got.Detail, detail)
	}
	// An unknown backfill is still ErrNotFound, guarded or not.
	err = st.UpdateBackfill(ctx, store.UpdateBackfillParams{ID: "nope", FromState: store.BackfillRunning, Now: now})
	wantErr(t, "a guarded update of an unknown backfill", err, store.ErrNotFound)
	// Two writers race from the same state: exactly one wins.
	if err := st.CreateBackfill(ctx, store.Backfill{ID: "bf2", Pipeline: "p", From: date(2025, 7, 1), To: date(2025, 7, 2),
		Reprocess: "none", Phase: "report", CreatedAt: now}); err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 2)
	for _, to := range []store.BackfillState{store.BackfillSuccess, store.BackfillFailed} {
		go func() {
			errs <- st.UpdateBackfill(ctx, store.UpdateBackfillParams{ID: "bf2", FromState: store.BackfillRunning, FromPhase: "report",
				State: to, Phase: "done", Now: now})
		}()
	}
	won, lost := 0, 0
	for range 2 {
		switch err := <-errs; {
		case err == nil:
			won++
		case errors.Is(err, store.ErrConflict):
			lost++
		default:
			t.Fatalf("racing transitions: %v", err)
		}
	}
	if won != 1 || lost != 1 {
		t.Errorf("two transitions from running at report: %d won, %d refused; want 1 and 1", won, lost)
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

func testClearQueued(t *testing.T, st store.Store) {
	runs := materialize(t, st, "p", store.KindScheduled, daily(time.UTC, date(2025, 7, 1), 1), "a", "b", "c", "d")
	r := runs[0]
	if err := st.AdmitRun(ctx, store.AdmitRunParams{RunID: r.ID, Now: now}); err != nil {
		t.Fatal(err)
	}
	runTask(t, st, task(t, r, "c").ID, store.AttemptFailed, store.TaskFailed)
	runTask(t, st, task(t, r, "d").ID, store.AttemptSuccess, store.TaskSuccess)
	enqueue(t, st, now, store.EnqueueItem{TaskInstanceID: task(t, r, "a").ID, Pool: "large", Reason: "hot", Priority: 4, LogPath: "/l"},
		store.EnqueueItem{TaskInstanceID: task(t, r, "b").ID, Pool: "default"})
	got := claimReady(t, st, store.ClaimReadyParams{Pools: []store.PoolCapacity{{Name: "default", Slots: 1}}, Limit: 1})
	if len(got) != 1 || got[0].Task != "b" {
		t.Fatalf("claim = %v", claimedNames(got))
	}
	// Only failed: the queued one stays.
	clearAndCheck(t, st, store.ClearTasksParams{From: date(2025, 7, 1), To: date(2025, 7, 1), OnlyFailed: true}, 1,
		[]string{"07-01:running:queued,running,scheduled,success"})
	clearAndCheck(t, st, store.ClearTasksParams{From: date(2025, 7, 1), To: date(2025, 7, 1)}, 2,
		[]string{"07-01:running:scheduled,running,scheduled,scheduled"})
	if a := reload(t, st, task(t, r, "a").ID); len(a.Attempts) != 0 || a.TryNumber != 0 {
		t.Errorf("cleared queued task: try %d, %d attempts", a.TryNumber, len(a.Attempts))
	}
	if b := reload(t, st, task(t, r, "b").ID); b.Attempts[0].State != store.AttemptRunning {
		t.Errorf("clear touched the running attempt: %s", b.Attempts[0].State)
	}
}

func testReprocessQueued(t *testing.T, st store.Store) {
	runs := materialize(t, st, "p", store.KindScheduled, daily(time.UTC, date(2025, 7, 1), 1), "a", "b", "c")
	r := runs[0]
	runTask(t, st, task(t, r, "a").ID, store.AttemptFailed, store.TaskFailed)
	enqueue(t, st, now, store.EnqueueItem{TaskInstanceID: task(t, r, "b").ID, Pool: "default"},
		store.EnqueueItem{TaskInstanceID: task(t, r, "c").ID, Pool: "default"})
	if got := claimReady(t, st, store.ClaimReadyParams{Pools: []store.PoolCapacity{{Name: "default", Slots: 1}}, Limit: 1}); len(got) != 1 {
		t.Fatalf("claimed %d", len(got))
	}
	n, err := st.ReprocessRuns(ctx, store.ReprocessRunsParams{Pipeline: "p", BackfillID: "bf1", From: date(2025, 7, 1), To: date(2025, 7, 1),
		States: []store.RunState{store.RunQueued}, Now: now})
	if err != nil || n != 1 {
		t.Fatalf("ReprocessRuns = %d, %v", n, err)
	}
	got := listRuns(t, st, store.ListRunsParams{Pipelines: []string{"p"}, WithTasks: true})
	if s := states(got); fmt.Sprint(s) != "[07-01:queued:scheduled,running,scheduled]" {
		t.Errorf("after reprocess: %v; want the queued and failed ones scheduled, the running one kept", s)
	}
}

// A backfill never takes its own runs again (its resume does not re-run what
// it finished), while another backfill takes them.
func testReprocessOwn(t *testing.T, st store.Store) {
	runs := materialize(t, st, "p", store.KindScheduled, daily(time.UTC, date(2025, 7, 1), 2), "t")
	all := []store.RunState{store.RunFailed, store.RunSuccess}
	for _, r := range runs {
		runTask(t, st, r.Tasks[0].ID, store.AttemptSuccess, store.TaskSuccess)
		finishRun(t, st, r.ID, store.RunSuccess)
	}
	reprocess := func(id string) int {
		n, err := st.ReprocessRuns(ctx, store.ReprocessRunsParams{Pipeline: "p", BackfillID: id, From: date(2025, 7, 1), To: date(2025, 7, 2), States: all, Now: now})
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := reprocess("bf1"); n != 2 {
		t.Fatalf("bf1 took %d runs, want 2", n)
	}
	got := listRuns(t, st, store.ListRunsParams{Pipelines: []string{"p"}, WithTasks: true})
	runTask(t, st, got[0].Tasks[0].ID, store.AttemptSuccess, store.TaskSuccess)
	finishRun(t, st, got[0].ID, store.RunSuccess)
	// bf1 resumed: its finished 07-01 stays finished, its queued 07-02 too.
	if n := reprocess("bf1"); n != 0 {
		t.Fatalf("bf1 took %d of its own runs again", n)
	}
	got = listRuns(t, st, store.ListRunsParams{Pipelines: []string{"p"}, WithTasks: true})
	if s := states(got); fmt.Sprint(s) != "[07-01:success:success 07-02:queued:scheduled]" {
		t.Fatalf("after bf1's resume: %v", s)
	}
	// A later backfill takes the finished one.
	if n := reprocess("bf2"); n != 1 {
		t.Fatalf("bf2 took %d runs, want 1", n)
	}
	// With Dates, only the runs of those dates of the window.
	runTask(t, st, task(t, listRuns(t, st, store.ListRunsParams{Pipelines: []string{"p"}, WithTasks: true})[0], "t").ID, store.AttemptSuccess, store.TaskSuccess)
	got = listRuns(t, st, store.ListRunsParams{Pipelines: []string{"p"}, WithTasks: true})
	finishRun(t, st, got[0].ID, store.RunSuccess)
	runTask(t, st, got[1].Tasks[0].ID, store.AttemptSuccess, store.TaskSuccess)
	finishRun(t, st, got[1].ID, store.RunSuccess)
	n, err := st.ReprocessRuns(ctx, store.ReprocessRunsParams{Pipeline: "p", BackfillID: "bf3", From: date(2025, 7, 1), To: date(2025, 7, 2),
		Dates: []time.Time{date(2025, 7, 2)}, States: all, Now: now})
	if err != nil || n != 1 {
		t.Fatalf("ReprocessRuns of one date = %d, %v", n, err)
	}
	got = listRuns(t, st, store.ListRunsParams{Pipelines: []string{"p"}, WithTasks: true})
	if got[0].BackfillID == "bf3" || got[1].BackfillID != "bf3" {
		t.Errorf("with Dates 07-02: 07-01 is %q's, 07-02 %q's", got[0].BackfillID, got[1].BackfillID)
	}
}

// With Tasks, only those task instances run again; the others keep their
// success.
func testReprocessTasks(t *testing.T, st store.Store) {
	runs := materialize(t, st, "p", store.KindScheduled, daily(time.UTC, date(2025, 7, 1), 1), "a", "b", "c")
	r := runs[0]
	for _, name := range []string{"a", "b", "c"} {
		runTask(t, st, task(t, r, name).ID, store.AttemptSuccess, store.TaskSuccess)
	}
	finishRun(t, st, r.ID, store.RunSuccess)
	n, err := st.ReprocessRuns(ctx, store.ReprocessRunsParams{Pipeline: "p", BackfillID: "bf1", From: date(2025, 7, 1), To: date(2025, 7, 1),
		States: []store.RunState{store.RunSuccess}, Tasks: []string{"b", "c"},
		Add: []store.TaskSpec{{Name: "a", Pool: "default"}, {Name: "d", Pool: "large"}}, Now: now})
	if err != nil || n != 1 {
		t.Fatalf("ReprocessRuns = %d, %v", n, err)
	}
	got := listRuns(t, st, store.ListRunsParams{Pipelines: []string{"p"}, WithTasks: true})
	if s := states(got); fmt.Sprint(s) != "[07-01:queued:success,scheduled,scheduled,scheduled]" {
		t.Errorf("after reprocess of b and c, with d added to the pipeline: %v", s)
	}
	if d := task(t, got[0], "d"); d.Pool != "large" {
		t.Errorf("the added task instance: %+v", d)
	}
}

// Clearing the runs of a backfill that no longer runs hands them back to
// their pipeline, queued ones included; a run with a live attempt, or of a
// running backfill, stays the backfill's.
func testClearDetaches(t *testing.T, st store.Store) {
	for id, state := range map[string]store.BackfillState{"bf1": store.BackfillFailed, "bf2": store.BackfillRunning} {
		if err := st.CreateBackfill(ctx, store.Backfill{ID: id, Pipeline: "p", From: date(2025, 7, 1), To: date(2025, 7, 4), Reprocess: "none", State: state, CreatedAt: now}); err != nil {
			t.Fatal(err)
		}
	}
	days := daily(time.UTC, date(2025, 7, 1), 4)
	for i, id := range []string{"bf1", "bf1", "bf1", "bf2"} {
		if _, err := st.MaterializeRuns(ctx, store.MaterializeRunsParams{Pipeline: "p", Kind: store.KindBackfill, BackfillID: id,
			Runs: days[i : i+1], Tasks: tasks("t"), Now: now}); err != nil {
			t.Fatal(err)
		}
	}
	runs := listRuns(t, st, store.ListRunsParams{Pipelines: []string{"p"}, WithTasks: true})
	runTask(t, st, runs[0].Tasks[0].ID, store.AttemptSuccess, store.TaskSuccess) // 07-01 finished
	finishRun(t, st, runs[0].ID, store.RunSuccess)
	start(t, st, claim(t, st, runs[2].Tasks[0].ID)) // 07-03 has a live attempt; 07-02 and 07-04 wait
	n, err := st.ClearTasks(ctx, store.ClearTasksParams{Pipeline: "p", From: date(2025, 7, 1), To: date(2025, 7, 4), Now: now})
	if err != nil {
		t.Fatal(err)
	}
	if n != 2 {
		t.Errorf("ClearTasks = %d; want 2 (07-01's finished task, 07-02's waiting one)", n)
	}
	got := listRuns(t, st, store.ListRunsParams{Pipelines: []string{"p"}, WithTasks: true})
	want := []struct {
		kind     store.RunKind
		backfill string
	}{{store.KindScheduled, ""}, {store.KindScheduled, ""}, {store.KindBackfill, "bf1"}, {store.KindBackfill, "bf2"}}
	for i, r := range got {
		if r.Kind != want[i].kind || r.BackfillID != want[i].backfill {
			t.Errorf("%s: kind %s backfill %q; want %s %q", r.DS, r.Kind, r.BackfillID, want[i].kind, want[i].backfill)
		}
	}
	if s := states(got); fmt.Sprint(s) != "[07-01:queued:scheduled 07-02:queued:scheduled 07-03:queued:running 07-04:queued:scheduled]" {
		t.Errorf("after clear: %v", s)
	}
}
