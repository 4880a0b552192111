package storetest

import (
	"fmt"
	"testing"
	"time"

	"github.com/rewind-dev/rewind/store"
)

func testOutbox(t *testing.T, st store.Store) {
	runs := materialize(t, st, "p", store.KindScheduled, daily(time.UTC, date(2025, 7, 1), 3), "a", "b")
	q := materialize(t, st, "q", store.KindScheduled, daily(time.UTC, date(2025, 6, 1), 1), "a")
	_, err := st.RequestCommit(ctx, store.RequestCommitParams{RunID: runs[0].ID, Now: now})
	wantErr(t, "RequestCommit with scheduled task instances", err, store.ErrConflict)
	_, err = st.RequestCommit(ctx, store.RequestCommitParams{RunID: 987654, Now: now})
	wantErr(t, "RequestCommit(unknown)", err, store.ErrNotFound)
	runTask(t, st, task(t, runs[0], "a").ID, store.AttemptSuccess, store.TaskSuccess)
	_, err = st.RequestCommit(ctx, store.RequestCommitParams{RunID: runs[0].ID, Now: now})
	wantErr(t, "RequestCommit with one task instance left", err, store.ErrConflict)
	if ob, err := st.ListOutbox(ctx, nil); err != nil || len(ob) != 0 {
		t.Errorf("refused requests left %v, %v", ob, err)
	}
	runTask(t, st, task(t, runs[0], "b").ID, store.AttemptSkipped, store.TaskSkipped)
	first, err := st.RequestCommit(ctx, store.RequestCommitParams{RunID: runs[0].ID, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	if first.ID == 0 || first.RunID != runs[0].ID || first.Pipeline != "p" || !first.LogicalDate.Equal(runs[0].LogicalDate) || !first.CreatedAt.Equal(now) {
		t.Errorf("outbox item = %+v", first)
	}
	if again, err := st.RequestCommit(ctx, store.RequestCommitParams{RunID: runs[0].ID, Now: now.Add(time.Minute)}); err != nil ||
		again.ID != first.ID || !again.CreatedAt.Equal(first.CreatedAt) {
		t.Errorf("second RequestCommit = %+v, %v; want the existing %+v", again, err, first)
	}
	// A failed task instance: nothing to commit.
	runTask(t, st, task(t, runs[1], "a").ID, store.AttemptFailed, store.TaskFailed)
	runTask(t, st, task(t, runs[1], "b").ID, store.AttemptSuccess, store.TaskSuccess)
	_, err = st.RequestCommit(ctx, store.RequestCommitParams{RunID: runs[1].ID, Now: now})
	wantErr(t, "RequestCommit with a failed task instance", err, store.ErrConflict)
	// 07-03 (admitted) and q's run.
	finishTasks := func(r store.Run) {
		for _, ti := range r.Tasks {
			runTask(t, st, ti.ID, store.AttemptSuccess, store.TaskSuccess)
		}
	}
	finishTasks(runs[2])
	if err := st.AdmitRun(ctx, store.AdmitRunParams{RunID: runs[2].ID, Now: now}); err != nil {
		t.Fatal(err)
	}
	third, err := st.RequestCommit(ctx, store.RequestCommitParams{RunID: runs[2].ID, Now: now.Add(2 * time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	finishTasks(q[0])
	qItem, err := st.RequestCommit(ctx, store.RequestCommitParams{RunID: q[0].ID, Now: now.Add(time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	list := func(pipelines ...string) []int64 {
		t.Helper()
		items, err := st.ListOutbox(ctx, pipelines)
		if err != nil {
			t.Fatal(err)
		}
		var ids []int64
		for _, it := range items {
			ids = append(ids, it.ID)
		}
		return ids
	}
	if got, want := list(), []int64{first.ID, qItem.ID, third.ID}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("ListOutbox = %v, want %v (oldest first)", got, want)
	}
	if got := list("q"); fmt.Sprint(got) != fmt.Sprint([]int64{qItem.ID}) {
		t.Errorf("ListOutbox(q) = %v", got)
	}
	if got := list("nope"); len(got) != 0 {
		t.Errorf("ListOutbox(nope) = %v", got)
	}

	// Completing: the run finishes, the row goes.
	if err := st.CompleteCommit(ctx, store.CompleteCommitParams{OutboxID: first.ID, State: store.RunRunning, Now: now}); err == nil {
		t.Errorf("CompleteCommit as running succeeded")
	}
	done := now.Add(5 * time.Minute)
	if err := st.CompleteCommit(ctx, store.CompleteCommitParams{OutboxID: first.ID, State: store.RunSuccess, Now: done}); err != nil {
		t.Fatal(err)
	}
	wantErr(t, "CompleteCommit twice", st.CompleteCommit(ctx, store.CompleteCommitParams{OutboxID: first.ID, State: store.RunSuccess, Now: done}), store.ErrNotFound)
	_, err = st.RequestCommit(ctx, store.RequestCommitParams{RunID: runs[0].ID, Now: done})
	wantErr(t, "RequestCommit of a finished run", err, store.ErrConflict)
	if err := st.CompleteCommit(ctx, store.CompleteCommitParams{OutboxID: qItem.ID, State: store.RunFailed, Now: done}); err != nil {
		t.Fatal(err)
	}
	got := listRuns(t, st, store.ListRunsParams{})
	if got[0].State != store.RunSuccess || !got[0].EndedAt.Equal(done) || got[3].State != store.RunFailed || got[2].State != store.RunRunning {
		t.Errorf("runs after commits: %s (ended %v), %s, %s", got[0].State, got[0].EndedAt, got[2].State, got[3].State)
	}
	if ids := list(); fmt.Sprint(ids) != fmt.Sprint([]int64{third.ID}) {
		t.Errorf("outbox after commits = %v", ids)
	}
}

// A run cleared while its commit was in flight: the commit's completion
// deletes its row and leaves the run to the re-run.
func testCompleteCommitCleared(t *testing.T, st store.Store) {
	runs := materialize(t, st, "p", store.KindScheduled, daily(time.UTC, date(2025, 7, 1), 1), "a", "b")
	if err := st.AdmitRun(ctx, store.AdmitRunParams{RunID: runs[0].ID, Now: now}); err != nil {
		t.Fatal(err)
	}
	for _, ti := range runs[0].Tasks {
		runTask(t, st, ti.ID, store.AttemptSuccess, store.TaskSuccess)
	}
	item, err := st.RequestCommit(ctx, store.RequestCommitParams{RunID: runs[0].ID, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	if n, err := st.ClearTasks(ctx, store.ClearTasksParams{Pipeline: "p", Task: "b", Now: now}); err != nil || n != 1 {
		t.Fatalf("ClearTasks = %d, %v", n, err)
	}
	before := printRuns(listRuns(t, st, store.ListRunsParams{WithAttempts: true}))
	for _, state := range []store.RunState{store.RunSuccess, store.RunFailed} {
		// The first call consumes the row; the second finds none.
		err := st.CompleteCommit(ctx, store.CompleteCommitParams{OutboxID: item.ID, State: state, Now: now.Add(time.Minute)})
		if state == store.RunSuccess {
			wantErr(t, "CompleteCommit of a cleared run", err, store.ErrConflict)
		} else {
			wantErr(t, "CompleteCommit after the row went", err, store.ErrNotFound)
		}
	}
	if after := printRuns(listRuns(t, st, store.ListRunsParams{WithAttempts: true})); after != before {
		t.Errorf("CompleteCommit of a cleared run changed it:\n before %+v\n after  %+v", before, after)
	}
	if ob, err := st.ListOutbox(ctx, nil); err != nil || len(ob) != 0 {
		t.Errorf("outbox = %v, %v; want the row deleted", ob, err)
	}
	if r := listRuns(t, st, store.ListRunsParams{WithTasks: true})[0]; r.State != store.RunRunning || task(t, r, "b").State != store.TaskScheduled {
		t.Errorf("run %s, b %s; want running, scheduled", r.State, task(t, r, "b").State)
	}
}
