package storetest

import (
	"fmt"
	"testing"
	"time"

	"github.com/rewind-dev/rewind/store"
)

// The operator's actions beside clear: a clear of several tasks, mark
// success and failed, retry now, and the audit trail.

func testClearTasksList(t *testing.T, st store.Store) {
	clearFixture(t, st)
	clearAndCheck(t, st, store.ClearTasksParams{From: date(2025, 7, 4), To: date(2025, 7, 5), Task: "extract", Tasks: []string{"load"}}, 4, []string{
		"07-01:success:success,success",
		"07-02:failed:failed,upstream_failed",
		"07-03:running:running,scheduled",
		"07-04:queued:scheduled,scheduled",
		"07-05:queued:scheduled,scheduled",
	})
}

func mark(t *testing.T, st store.Store, p store.MarkTasksParams) store.MarkResult {
	t.Helper()
	p.Pipeline, p.Now = "p", now
	res, err := st.MarkTasks(ctx, p)
	if err != nil {
		t.Fatalf("MarkTasks(%+v): %v", p, err)
	}
	return res
}

func checkStates(t *testing.T, st store.Store, what string, want []string) {
	t.Helper()
	got := states(listRuns(t, st, store.ListRunsParams{WithTasks: true}))
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("%s:\n got %v\nwant %v", what, got, want)
	}
}

// A selection with a running task instance is refused whole: nothing
// changes, the epoch stays.
func testMarkRefusesRunning(t *testing.T, st store.Store) {
	clearFixture(t, st)
	before := digest(t, st)
	ep := epoch(t, st)
	_, err := st.MarkTasks(ctx, store.MarkTasksParams{Pipeline: "p", From: date(2025, 7, 1), To: date(2025, 7, 5), State: store.TaskSuccess, Now: now})
	wantErr(t, "mark over a running task instance", err, store.ErrConflict)
	if digest(t, st) != before || epoch(t, st) != ep {
		t.Error("a refused mark changed the state")
	}
	if _, err := st.MarkTasks(ctx, store.MarkTasksParams{Pipeline: "p", State: store.TaskScheduled, Now: now}); err == nil {
		t.Error("a mark as scheduled was accepted")
	}
}

// Marked task instances take the state; their runs follow them under
// FinishRun's guard; a run whose task instances can still run is left.
func testMarkTasks(t *testing.T, st store.Store) {
	clearFixture(t, st)
	ep := epoch(t, st)
	if res := mark(t, st, store.MarkTasksParams{From: date(2025, 7, 2), To: date(2025, 7, 2), State: store.TaskSuccess}); res != (store.MarkResult{Tasks: 2, Runs: 1}) {
		t.Errorf("mark success of 07-02 = %+v; want 2 tasks, 1 run", res)
	}
	if epoch(t, st) == ep {
		t.Error("MarkTasks did not bump the epoch")
	}
	// A task of a success run marked failed fails it.
	if res := mark(t, st, store.MarkTasksParams{From: date(2025, 7, 1), To: date(2025, 7, 1), Tasks: []string{"load"}, State: store.TaskFailed}); res != (store.MarkResult{Tasks: 1, Runs: 1}) {
		t.Errorf("mark failed of 07-01 load = %+v", res)
	}
	// The scheduled load of the running 07-03, beside its running extract:
	// the run is left to the engine.
	if res := mark(t, st, store.MarkTasksParams{From: date(2025, 7, 3), To: date(2025, 7, 3), Tasks: []string{"load"}, State: store.TaskSuccess}); res != (store.MarkResult{Tasks: 1}) {
		t.Errorf("mark success of 07-03 load = %+v", res)
	}
	// extract of 07-05 success, its load still upstream_failed: failed.
	if res := mark(t, st, store.MarkTasksParams{From: date(2025, 7, 5), To: date(2025, 7, 5), Tasks: []string{"extract"}, State: store.TaskSuccess}); res != (store.MarkResult{Tasks: 1}) {
		t.Errorf("mark success of 07-05 extract = %+v", res)
	}
	// Marking what is already so changes nothing.
	if res := mark(t, st, store.MarkTasksParams{From: date(2025, 7, 2), To: date(2025, 7, 2), State: store.TaskSuccess}); res != (store.MarkResult{}) {
		t.Errorf("second mark = %+v", res)
	}
	checkStates(t, st, "after marks", []string{
		"07-01:failed:success,failed",
		"07-02:success:success,success",
		"07-03:running:running,success",
		"07-04:failed:success,failed",
		"07-05:failed:success,upstream_failed",
	})
	for _, r := range listRuns(t, st, store.ListRunsParams{}) {
		if (r.State == store.RunSuccess || r.State == store.RunFailed) && r.EndedAt.IsZero() {
			t.Errorf("run %s is %s without an end", r.DS, r.State)
		}
	}
}

// With outputs, a run whose every task succeeded goes back to queued: the
// engine commits its outputs and finishes it.
func testMarkWithOutputs(t *testing.T, st store.Store) {
	clearFixture(t, st)
	mark(t, st, store.MarkTasksParams{From: date(2025, 7, 4), To: date(2025, 7, 4), Tasks: []string{"load"}, State: store.TaskSuccess, Outputs: true})
	mark(t, st, store.MarkTasksParams{From: date(2025, 7, 2), To: date(2025, 7, 2), State: store.TaskFailed, Outputs: true})
	checkStates(t, st, "after marks with outputs", []string{
		"07-01:success:success,success",
		"07-02:failed:failed,failed",
		"07-03:running:running,scheduled",
		"07-04:queued:success,success",
		"07-05:failed:failed,upstream_failed",
	})
}

func testRetryNow(t *testing.T, st store.Store) {
	runs := materialize(t, st, "p", store.KindScheduled, daily(time.UTC, date(2025, 7, 1), 2), "extract", "load")
	later := now.Add(time.Hour)
	for _, r := range runs {
		a := claim(t, st, task(t, r, "extract").ID)
		start(t, st, a)
		if err := st.FinishAttempt(ctx, store.FinishAttemptParams{AttemptID: a.ID, State: store.AttemptFailed, TaskState: store.TaskUpForRetry,
			ExitCode: intp(1), CountFailure: true, NextTryAt: later, Now: now}); err != nil {
			t.Fatal(err)
		}
	}
	ep := epoch(t, st)
	n, err := st.RetryNow(ctx, store.RetryNowParams{Pipeline: "p", From: date(2025, 7, 2), To: date(2025, 7, 2), Tasks: []string{"extract"}, Now: now})
	if err != nil || n != 1 {
		t.Fatalf("RetryNow = %d, %v; want 1", n, err)
	}
	if epoch(t, st) == ep {
		t.Error("RetryNow did not bump the epoch")
	}
	if got := reload(t, st, task(t, runs[1], "extract").ID); got.State != store.TaskUpForRetry || !got.NextTryAt.Equal(now) {
		t.Errorf("retried now: %s next %v; want up_for_retry at %v", got.State, got.NextTryAt, now)
	}
	if got := reload(t, st, task(t, runs[0], "extract").ID); !got.NextTryAt.Equal(later) {
		t.Errorf("outside the window: next %v; want %v", got.NextTryAt, later)
	}
	// Nothing up_for_retry: nothing moves, not even the epoch.
	ep = epoch(t, st)
	if n, err := st.RetryNow(ctx, store.RetryNowParams{Pipeline: "p", Tasks: []string{"load"}, Now: now}); err != nil || n != 0 {
		t.Errorf("RetryNow of scheduled tasks = %d, %v; want 0", n, err)
	}
	if epoch(t, st) != ep {
		t.Error("a RetryNow that moved nothing bumped the epoch")
	}
}

func testAudit(t *testing.T, st store.Store) {
	if list, err := st.ListAudit(ctx, store.ListAuditParams{}); err != nil || len(list) != 0 {
		t.Fatalf("empty audit = %v, %v", list, err)
	}
	entries := []store.AuditEntry{
		{At: now, Who: "cli", From: "ann@host", Action: "clear", Target: "p", Pipeline: "p", Args: `{"start":"2025-07-01"}`, Result: "ok"},
		{At: now.Add(time.Second), Who: "token", From: "127.0.0.1:5000", Action: "backfill.pause", Target: "bf1", Pipeline: "p", Result: "backfill state does not allow it"},
		{At: now.Add(2 * time.Second), Who: "ann", From: "127.0.0.1:5001", Action: "pause", Target: "q", Pipeline: "q", Args: `{}`, Result: "ok"},
	}
	for _, e := range entries {
		if err := st.RecordAudit(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	all, err := st.ListAudit(ctx, store.ListAuditParams{})
	if err != nil || len(all) != 3 {
		t.Fatalf("ListAudit = %v, %v", all, err)
	}
	got := all[1]
	got.ID = 0
	want := entries[1]
	want.Args = "{}"
	if !got.At.Equal(want.At) || got.Who != want.Who || got.From != want.From || got.Action != want.Action || got.Target != want.Target ||
		got.Pipeline != want.Pipeline || got.Args != want.Args || got.Result != want.Result {
		t.Errorf("entry read back %+v; want %+v", got, want)
	}
	if all[0].Target != "q" || all[2].Target != "p" || all[0].ID <= all[1].ID {
		t.Errorf("not newest first: %v", all)
	}
	for _, c := range []struct {
		p    store.ListAuditParams
		want string
	}{
		{store.ListAuditParams{Pipeline: "p"}, "backfill.pause clear"},
		{store.ListAuditParams{Target: "bf1"}, "backfill.pause"},
		{store.ListAuditParams{Limit: 1}, "pause"},
		{store.ListAuditParams{Pipeline: "none"}, ""},
	} {
		list, err := st.ListAudit(ctx, c.p)
		if err != nil {
			t.Fatal(err)
		}
		got := ""
		for i, e := range list {
			if i > 0 {
				got += " "
			}
			got += e.Action
		}
		if got != c.want {
			t.Errorf("ListAudit(%+v) = %q; want %q", c.p, got, c.want)
		}
	}
}
