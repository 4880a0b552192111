package store

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/rewind-dev/rewind/store/pgtest"
)

var ckNow = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// ckRun makes one run of pipeline p (kind, backfill) with tasks t1, t2,
// admitted, and returns it with its task instances.
func ckRun(t *testing.T, st Store, kind RunKind, bf string) Run {
	ctx := context.Background()
	if _, err := st.UpsertPipeline(ctx, UpsertPipelineParams{Name: "p", Now: ckNow}); err != nil {
		t.Fatal(err)
	}
	d := time.Date(2025, 7, 1, 0, 0, 0, 0, time.UTC)
	if _, err := st.MaterializeRuns(ctx, MaterializeRunsParams{Pipeline: "p", Kind: kind, BackfillID: bf,
		Runs:  []RunSpec{{LogicalDate: d, DS: "2025-07-01", DataIntervalStart: d, DataIntervalEnd: d.AddDate(0, 0, 1)}},
		Tasks: []TaskSpec{{Name: "t1", Pool: "default"}, {Name: "t2", Pool: "default"}}, Now: ckNow}); err != nil {
		t.Fatal(err)
	}
	runs, err := st.ListRuns(ctx, ListRunsParams{Pipelines: []string{"p"}, WithTasks: true})
	if err != nil || len(runs) != 1 {
		t.Fatalf("%d runs, %v", len(runs), err)
	}
	if err := st.AdmitRun(ctx, AdmitRunParams{RunID: runs[0].ID, Now: ckNow}); err != nil {
		t.Fatal(err)
	}
	return runs[0]
}

func ckTI(r Run, name string) int64 {
	for _, ti := range r.Tasks {
		if ti.Task == name {
			return ti.ID
		}
	}
	return 0
}

// ckClaim claims what a claim of backfill bf ("" for none) takes from
// pool default.
func ckClaim(t *testing.T, st Store, bf string) []ClaimedAttempt {
	got, err := st.ClaimReady(context.Background(), ClaimReadyParams{Pools: []PoolCapacity{{Name: "default", Slots: 8, BackfillSlots: 8}},
		BackfillID: bf, Limit: 8, Owner: "o", Host: "h", Now: ckNow})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// ReprocessRuns with Tasks hands a running scheduled run to a backfill and
// leaves its other tasks' queued task instances queued: a claim of the
// backfill still takes them (their claim key follows the run's kind).
func claimKeyAfterReprocessOfSomeTasks(t *testing.T, st Store) {
	ctx := context.Background()
	r := ckRun(t, st, KindScheduled, "")
	if n, err := st.EnqueueTasks(ctx, EnqueueTasksParams{Items: []EnqueueItem{{TaskInstanceID: ckTI(r, "t1"), Pool: "default", LogPath: "/dev/null"}}, Now: ckNow}); err != nil || n != 1 {
		t.Fatalf("enqueue %d %v", n, err)
	}
	n, err := st.ReprocessRuns(ctx, ReprocessRunsParams{Pipeline: "p", BackfillID: "bf1", From: r.LogicalDate, To: r.LogicalDate,
		States: []RunState{RunRunning}, Tasks: []string{"t2"}, Now: ckNow})
	if err != nil || n != 1 {
		t.Fatalf("reprocess %d %v", n, err)
	}
	runs, _ := st.ListRuns(ctx, ListRunsParams{Pipelines: []string{"p"}, WithTasks: true})
	for _, ti := range runs[0].Tasks {
		t.Logf("after reprocess: run kind %s/%s, %s %s", runs[0].Kind, runs[0].BackfillID, ti.Task, ti.State)
	}
	if got := ckClaim(t, st, "bf1"); len(got) != 1 {
		t.Errorf("t1 is queued in a run of backfill bf1; a claim of bf1 took %d task instances, want 1", len(got))
	}
}

func TestClaimKeyAfterReprocessOfSomeTasksSQLite(t *testing.T) {
	st, err := Open(context.Background(), filepath.Join(t.TempDir(), "s.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	claimKeyAfterReprocessOfSomeTasks(t, st)
}

func TestClaimKeyAfterReprocessOfSomeTasksPostgres(t *testing.T) {
	st, err := Open(context.Background(), pgtest.DSN(t))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	claimKeyAfterReprocessOfSomeTasks(t, st)
}

// ckEnqueueDuring runs change in a transaction and, before it commits,
// enqueues t2 of r from another connection (another process: the
// scheduler), which waits for the transaction where it holds t2's row (it
// may also come after the commit); then it logs what the run became.
func ckEnqueueDuring(t *testing.T, st Store, r Run, change func(tx Store) error) {
	ctx := context.Background()
	done := make(chan struct{})
	err := st.InTx(ctx, func(tx Store) error {
		if err := change(tx); err != nil {
			return err
		}
		go func() {
			defer close(done)
			n, err := st.EnqueueTasks(ctx, EnqueueTasksParams{Items: []EnqueueItem{{TaskInstanceID: ckTI(r, "t2"), Pool: "default", LogPath: "/dev/null"}}, Now: ckNow})
			t.Logf("concurrent EnqueueTasks: moved %d, %v", n, err)
		}()
		time.Sleep(500 * time.Millisecond) // lets the enqueue reach t2's row lock
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	<-done
	runs, _ := st.ListRuns(ctx, ListRunsParams{Pipelines: []string{"p"}, WithTasks: true})
	for _, ti := range runs[0].Tasks {
		t.Logf("after: run kind %q backfill %q state %s; %s %s", runs[0].Kind, runs[0].BackfillID, runs[0].State, ti.Task, ti.State)
	}
}

// PostgreSQL, READ COMMITTED: an EnqueueTasks of a task instance while a
// ClearTasks takes its run back from a backfill that no longer runs (after
// its statements, before its commit) leaves a task instance that a claim
// takes: the claim key is the run's new kind, never a copy read from a
// snapshot of the run (the enqueue writes no claim key).
func TestPostgresClaimKeyEnqueueDuringDetach(t *testing.T) {
	ctx := context.Background()
	st, err := Open(ctx, pgtest.DSN(t))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	r := ckRun(t, st, KindBackfill, "bf") // no backfills row: bf is not running
	ckEnqueueDuring(t, st, r, func(tx Store) error {
		_, err := tx.ClearTasks(ctx, ClearTasksParams{Pipeline: "p", Now: ckNow})
		return err
	})
	if got := ckClaim(t, st, ""); len(got) != 1 {
		t.Errorf("t2 is queued in a scheduled run; a claim of scheduled runs took %d task instances, want 1", len(got))
	}
}

// PostgreSQL: an EnqueueTasks that waits on the row lock of a ReprocessRuns
// (which resets the task instance and hands its run to a backfill) leaves
// a task instance that a claim of the backfill takes.
func TestPostgresClaimKeyEnqueueDuringReprocess(t *testing.T) {
	ctx := context.Background()
	st, err := Open(ctx, pgtest.DSN(t))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	r := ckRun(t, st, KindScheduled, "")
	ckEnqueueDuring(t, st, r, func(tx Store) error {
		_, err := tx.ReprocessRuns(ctx, ReprocessRunsParams{Pipeline: "p", BackfillID: "bf1", From: r.LogicalDate, To: r.LogicalDate,
			States: []RunState{RunRunning}, Now: ckNow})
		return err
	})
	if got := ckClaim(t, st, "bf1"); len(got) != 1 {
		t.Errorf("t2 is queued in a run of bf1; a claim of bf1 took %d task instances, want 1", len(got))
	}
}
