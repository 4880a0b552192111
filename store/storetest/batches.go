package storetest

import (
	"testing"
	"time"

	"github.com/rewind-dev/rewind/store"
)

// batchFixture makes four daily backfill runs of b1 (extract -> load) and
// puts them in one batch led by the first: [07-01, 07-05).
func batchFixture(t *testing.T, st store.Store) []store.Run {
	t.Helper()
	specs := daily(time.UTC, date(2025, 7, 1), 4)
	if _, err := st.MaterializeRuns(ctx, store.MaterializeRunsParams{Pipeline: "p", Kind: store.KindBackfill, BackfillID: "b1",
		Runs: specs, Tasks: tasks("extract", "load"), Now: now}); err != nil {
		t.Fatal(err)
	}
	batch := store.RunBatch{Start: specs[0].LogicalDate, End: specs[3].DataIntervalEnd}
	for _, s := range specs[1:] {
		batch.Covered = append(batch.Covered, s.LogicalDate)
	}
	if err := st.SetBatches(ctx, store.SetBatchesParams{Pipeline: "p", BackfillID: "b1", Batches: []store.RunBatch{batch}, Now: now}); err != nil {
		t.Fatalf("SetBatches: %v", err)
	}
	return listRuns(t, st, store.ListRunsParams{Pipelines: []string{"p"}, WithTasks: true})
}

// testBatches: a batch's leader holds the batch's data interval, the other
// runs are covered by it and end with it, as it ended, task by task;
// SetBatches with one-interval batches undoes a batch.
func testBatches(t *testing.T, st store.Store) {
	runs := batchFixture(t, st)
	leader := runs[0]
	if !leader.DataIntervalEnd.Equal(date(2025, 7, 5)) || leader.BatchOf != 0 {
		t.Fatalf("leader: interval end %s, batch_of %d; want 2025-07-05, 0", leader.DataIntervalEnd, leader.BatchOf)
	}
	for _, r := range runs[1:] {
		if r.BatchOf != leader.ID || !r.DataIntervalEnd.Equal(r.LogicalDate.AddDate(0, 0, 1)) {
			t.Fatalf("run %s: batch_of %d, interval end %s; want %d and its own end", r.DS, r.BatchOf, r.DataIntervalEnd, leader.ID)
		}
	}
	if err := st.AdmitRun(ctx, store.AdmitRunParams{RunID: leader.ID, Now: now}); err != nil {
		t.Fatal(err)
	}
	runTask(t, st, task(t, leader, "extract").ID, store.AttemptSuccess, store.TaskSuccess)
	runTask(t, st, task(t, leader, "load").ID, store.AttemptSuccess, store.TaskSuccess)
	if err := st.FinishRun(ctx, store.FinishRunParams{RunID: leader.ID, State: store.RunSuccess, Now: now.Add(time.Minute)}); err != nil {
		t.Fatal(err)
	}
	for _, r := range listRuns(t, st, store.ListRunsParams{Pipelines: []string{"p"}, WithTasks: true}) {
		if r.State != store.RunSuccess || !r.EndedAt.Equal(now.Add(time.Minute)) {
			t.Errorf("run %s: %s ended %s; want success with its leader", r.DS, r.State, r.EndedAt)
		}
		for _, ti := range r.Tasks {
			if ti.State != store.TaskSuccess {
				t.Errorf("run %s task %s: %s; want success", r.DS, ti.Task, ti.State)
			}
		}
	}
	// One-interval batches undo the batch: the leader's own interval again.
	if err := st.SetBatches(ctx, store.SetBatchesParams{Pipeline: "p", BackfillID: "b1",
		Batches: []store.RunBatch{{Start: date(2025, 7, 1), End: date(2025, 7, 2)}}, Now: now}); err != nil {
		t.Fatal(err)
	}
	for _, r := range listRuns(t, st, store.ListRunsParams{Pipelines: []string{"p"}}) {
		if r.BatchOf != 0 || !r.DataIntervalEnd.Equal(r.LogicalDate.AddDate(0, 0, 1)) {
			t.Errorf("after undoing the batch, run %s: batch_of %d, interval end %s", r.DS, r.BatchOf, r.DataIntervalEnd)
		}
	}
	before := epoch(t, st)
	if err := st.SetBatches(ctx, store.SetBatchesParams{Pipeline: "p", BackfillID: "b1", Batches: []store.RunBatch{{Start: date(2025, 7, 1), End: date(2025, 7, 5)}}, Now: now}); err != nil {
		t.Fatal(err)
	}
	if epoch(t, st) == before {
		t.Errorf("SetBatches did not bump the epoch")
	}
	// Another backfill's batch leaves the runs alone.
	if err := st.SetBatches(ctx, store.SetBatchesParams{Pipeline: "p", BackfillID: "other", Batches: []store.RunBatch{{Start: date(2025, 7, 1), End: date(2025, 7, 2)}}, Now: now}); err != nil {
		t.Fatal(err)
	}
	if r := listRuns(t, st, store.ListRunsParams{Pipelines: []string{"p"}})[0]; !r.DataIntervalEnd.Equal(date(2025, 7, 5)) {
		t.Errorf("SetBatches of another backfill changed run %s: interval end %s", r.DS, r.DataIntervalEnd)
	}
}

// testBatchFailsAndClears: a failed leader fails its runs; clearing the
// leader brings them back with it; clearing a covered run alone makes it
// its own run.
func testBatchFailsAndClears(t *testing.T, st store.Store) {
	runs := batchFixture(t, st)
	leader := runs[0]
	if err := st.AdmitRun(ctx, store.AdmitRunParams{RunID: leader.ID, Now: now}); err != nil {
		t.Fatal(err)
	}
	runTask(t, st, task(t, leader, "extract").ID, store.AttemptFailed, store.TaskFailed)
	if _, err := st.SetTaskStates(ctx, store.SetTaskStatesParams{IDs: []int64{task(t, leader, "load").ID},
		From: []store.TaskState{store.TaskScheduled}, To: store.TaskUpstreamFailed, Now: now}); err != nil {
		t.Fatal(err)
	}
	if err := st.FinishRun(ctx, store.FinishRunParams{RunID: leader.ID, State: store.RunFailed, Now: now}); err != nil {
		t.Fatal(err)
	}
	for _, r := range listRuns(t, st, store.ListRunsParams{Pipelines: []string{"p"}, WithTasks: true}) {
		if r.State != store.RunFailed || task(t, r, "extract").State != store.TaskFailed || task(t, r, "load").State != store.TaskUpstreamFailed {
			t.Errorf("run %s: %s, extract %s, load %s; want failed as its leader", r.DS, r.State, task(t, r, "extract").State, task(t, r, "load").State)
		}
	}
	// Clearing the window from the leader's day: the batch runs again whole.
	if _, err := st.ClearTasks(ctx, store.ClearTasksParams{Pipeline: "p", From: date(2025, 7, 1), To: date(2025, 7, 1), OnlyFailed: true, Now: now}); err != nil {
		t.Fatal(err)
	}
	for _, r := range listRuns(t, st, store.ListRunsParams{Pipelines: []string{"p"}, WithTasks: true}) {
		if r.State != store.RunQueued || task(t, r, "extract").State != store.TaskScheduled {
			t.Errorf("after clearing the leader, run %s: %s, extract %s; want queued, scheduled", r.DS, r.State, task(t, r, "extract").State)
		}
		if r.ID != leader.ID && r.BatchOf != leader.ID {
			t.Errorf("after clearing the leader, run %s is no longer covered (batch_of %d)", r.DS, r.BatchOf)
		}
	}
	// Fail it again, then clear one covered day alone: it is its own run.
	runs = listRuns(t, st, store.ListRunsParams{Pipelines: []string{"p"}, WithTasks: true})
	if err := st.AdmitRun(ctx, store.AdmitRunParams{RunID: leader.ID, Now: now}); err != nil {
		t.Fatal(err)
	}
	runTask(t, st, task(t, runs[0], "extract").ID, store.AttemptFailed, store.TaskFailed)
	if _, err := st.SetTaskStates(ctx, store.SetTaskStatesParams{IDs: []int64{task(t, runs[0], "load").ID},
		From: []store.TaskState{store.TaskScheduled}, To: store.TaskUpstreamFailed, Now: now}); err != nil {
		t.Fatal(err)
	}
	if err := st.FinishRun(ctx, store.FinishRunParams{RunID: leader.ID, State: store.RunFailed, Now: now}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.ClearTasks(ctx, store.ClearTasksParams{Pipeline: "p", From: date(2025, 7, 3), To: date(2025, 7, 3), Now: now}); err != nil {
		t.Fatal(err)
	}
	for _, r := range listRuns(t, st, store.ListRunsParams{Pipelines: []string{"p"}}) {
		want, covered := store.RunFailed, r.ID != leader.ID
		if r.DS == "2025-07-03" {
			want, covered = store.RunQueued, false
		}
		if r.State != want || (r.BatchOf != 0) != covered {
			t.Errorf("after clearing 07-03 alone, run %s: %s, batch_of %d; want %s, covered %v", r.DS, r.State, r.BatchOf, want, covered)
		}
	}
}

// testBatchLeaderAndCoveredFinished: FinishRuns given a leader and a run
// it covers, in either order, ends the covered run with its leader, as its
// leader ended; the covered run's own item is refused (ErrConflict).
func testBatchLeaderAndCoveredFinished(t *testing.T, st store.Store) {
	runs := batchFixture(t, st)
	leader, covered, other := runs[0], runs[1], runs[2]
	if err := st.AdmitRun(ctx, store.AdmitRunParams{RunID: leader.ID, Now: now}); err != nil {
		t.Fatal(err)
	}
	runTask(t, st, task(t, leader, "extract").ID, store.AttemptSuccess, store.TaskSuccess)
	runTask(t, st, task(t, leader, "load").ID, store.AttemptSuccess, store.TaskSuccess)
	// The covered runs' tasks ended on their own (as if run before the
	// batch was set): each could be finished by itself.
	var ids []int64
	for _, r := range []store.Run{covered, other} {
		ids = append(ids, task(t, r, "extract").ID, task(t, r, "load").ID)
	}
	if _, err := st.SetTaskStates(ctx, store.SetTaskStatesParams{IDs: ids, From: []store.TaskState{store.TaskScheduled}, To: store.TaskFailed, Now: now}); err != nil {
		t.Fatal(err)
	}
	ended := now.Add(time.Minute)
	errs, err := st.FinishRuns(ctx, []store.FinishRunParams{
		{RunID: covered.ID, State: store.RunFailed, Now: ended},
		{RunID: leader.ID, State: store.RunSuccess, Now: ended},
		{RunID: other.ID, State: store.RunFailed, Now: ended},
	})
	wantErrs(t, "FinishRuns", errs, err, store.ErrConflict, nil, store.ErrConflict)
	for _, r := range listRuns(t, st, store.ListRunsParams{Pipelines: []string{"p"}, WithTasks: true}) {
		if r.State != store.RunSuccess || !r.EndedAt.Equal(ended) {
			t.Errorf("run %s: %s ended %s; want success with its leader", r.DS, r.State, r.EndedAt)
		}
	}
}
