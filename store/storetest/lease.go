package storetest

import (
	"errors"
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/rewind-dev/rewind/store"
)

func testLeases(t *testing.T, st store.Store) {
	_, err := st.GetLease(ctx, "scheduler")
	wantErr(t, "a lease never taken", err, store.ErrNotFound)
	l, held := acquire(t, st, "host-a:100:1", "", now)
	if got, err := st.GetLease(ctx, "scheduler"); err != nil || got != l {
		t.Errorf("GetLease = %+v, %v; want %+v", got, err, l)
	}
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
	if got, err := st.GetLease(ctx, "scheduler"); err != nil || got.Holder != "" || got.Generation != 2 {
		t.Errorf("GetLease after release = %+v, %v; want no holder, generation 2 kept", got, err)
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
		if got := reload(t, tx, a); got.State != store.TaskRunning || got.TryNumber != 1 {
			t.Errorf("inside the batch: %s try %d; want running try 1", got.State, got.TryNumber)
		}
		return tx.AdmitRun(ctx, store.AdmitRunParams{RunID: runs[0].ID, Now: now})
	})
	if err != nil {
		t.Fatalf("InTx: %v", err)
	}
	for _, att := range claimed {
		got := reload(t, st, att.TaskInstanceID)
		if got.State != store.TaskRunning || got.TryNumber != 1 || len(got.Attempts) != 1 {
			t.Errorf("after commit: %s try %d with %d attempts; want running, try 1, one attempt", got.State, got.TryNumber, len(got.Attempts))
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

func testOwners(t *testing.T, st store.Store) {
	_, err := st.GetOwner(ctx, "o1")
	wantErr(t, "GetOwner(unknown)", err, store.ErrNotFound)
	if err := st.Heartbeat(ctx, store.HeartbeatParams{ID: "o1", Host: "host-a", PID: 10, PIDStart: 1 << 40, TTL: 30 * time.Second, Now: now}); err != nil {
		t.Fatal(err)
	}
	later := now.Add(10 * time.Second)
	if err := st.Heartbeat(ctx, store.HeartbeatParams{ID: "o1", Host: "host-a", PID: 11, PIDStart: 1 << 41, TTL: 30 * time.Second, Now: later}); err != nil {
		t.Fatal(err)
	}
	o, err := st.GetOwner(ctx, "o1")
	if err != nil || o.ID != "o1" || o.Host != "host-a" || o.PID != 11 || o.PIDStart != 1<<41 ||
		!o.HeartbeatAt.Equal(later) || !o.ExpiresAt.Equal(later.Add(30*time.Second)) {
		t.Errorf("GetOwner = %+v, %v", o, err)
	}
	if err := st.Heartbeat(ctx, store.HeartbeatParams{Host: "h", TTL: time.Second, Now: now}); err == nil {
		t.Errorf("Heartbeat without an id succeeded")
	}

	runs := materialize(t, st, "p", store.KindScheduled, daily(time.UTC, date(2025, 7, 1), 2), "t")
	enqueueRuns(t, st, "default", runs...)
	pools := []store.PoolCapacity{{Name: "default", Slots: 5}}
	mine := claimReady(t, st, store.ClaimReadyParams{Pools: pools, Owner: "o1", Limit: 1})
	ghost := claimReady(t, st, store.ClaimReadyParams{Pools: pools, Owner: "ghost", Limit: 1})
	if len(mine) != 1 || len(ghost) != 1 {
		t.Fatalf("claimed %d and %d", len(mine), len(ghost))
	}
	ra := runningAttempts(t, st)
	if len(ra) != 2 {
		t.Fatalf("%d running attempts", len(ra))
	}
	if ra[0].ID != mine[0].ID || ra[0].Owner != "o1" || !ra[0].OwnerExpiresAt.Equal(later.Add(30*time.Second)) ||
		ra[0].Kind != store.KindScheduled || !ra[0].LogicalDate.Equal(date(2025, 7, 1)) || ra[0].Nonce != mine[0].Nonce {
		t.Errorf("running attempt of o1 = %+v", ra[0])
	}
	if ra[1].Owner != "ghost" || !ra[1].OwnerExpiresAt.IsZero() || !ra[1].LogicalDate.Equal(date(2025, 7, 2)) {
		t.Errorf("running attempt without an owner row = %+v", ra[1])
	}
	// An owner with running attempts stays.
	wantErr(t, "RemoveOwner with a running attempt", st.RemoveOwner(ctx, "o1"), store.ErrConflict)
	if _, err := st.GetOwner(ctx, "o1"); err != nil {
		t.Errorf("refused RemoveOwner removed the owner: %v", err)
	}
	succeed(t, st, mine[0].Attempt)
	if err := st.RemoveOwner(ctx, "o1"); err != nil {
		t.Fatal(err)
	}
	_, err = st.GetOwner(ctx, "o1")
	wantErr(t, "GetOwner after RemoveOwner", err, store.ErrNotFound)
	if err := st.RemoveOwner(ctx, "o1"); err != nil {
		t.Errorf("RemoveOwner of a removed owner: %v", err)
	}
}

// A rewind that died leaves its attempts running with an expired owner:
// recovery finds them, records them lost, and the work runs again.
func testRecoveryOfLostOwner(t *testing.T, st store.Store) {
	runs := materialize(t, st, "p", store.KindScheduled, daily(time.UTC, date(2025, 7, 1), 1), "t")
	id := runs[0].Tasks[0].ID
	if err := st.Heartbeat(ctx, store.HeartbeatParams{ID: "dead", Host: "host-a", PID: 10, TTL: 30 * time.Second, Now: now}); err != nil {
		t.Fatal(err)
	}
	enqueueRuns(t, st, "default", runs...)
	pools := []store.PoolCapacity{{Name: "default", Slots: 1}}
	got := claimReady(t, st, store.ClaimReadyParams{Pools: pools, Owner: "dead", Limit: 1})
	start(t, st, got[0].Attempt)
	// A minute later the heartbeat has expired: the pool is still full until recovery.
	later := now.Add(time.Minute)
	ra := runningAttempts(t, st)
	if len(ra) != 1 || !ra[0].OwnerExpiresAt.Before(later) || ra[0].PID != 4242 {
		t.Fatalf("running attempts = %+v", ra)
	}
	if more := claimReady(t, st, store.ClaimReadyParams{Pools: pools, Owner: "new", Limit: 1, Now: later}); len(more) != 0 {
		t.Errorf("claimed past a lost attempt's slot")
	}
	if err := st.FinishAttempt(ctx, store.FinishAttemptParams{AttemptID: ra[0].ID, State: store.AttemptLost, TaskState: store.TaskScheduled, Now: later}); err != nil {
		t.Fatal(err)
	}
	if err := st.RemoveOwner(ctx, "dead"); err != nil {
		t.Fatal(err)
	}
	enqueueRuns(t, st, "default", runs...)
	again := claimReady(t, st, store.ClaimReadyParams{Pools: pools, Owner: "new", Limit: 1, Now: later})
	if len(again) != 1 || again[0].TryNumber != 2 || again[0].Owner != "new" {
		t.Fatalf("claim after recovery = %+v", again)
	}
	if ti := reload(t, st, id); ti.Failures != 0 || ti.TryNumber != 2 || ti.Attempts[0].State != store.AttemptLost {
		t.Errorf("after recovery: failures %d try %d first attempt %s", ti.Failures, ti.TryNumber, ti.Attempts[0].State)
	}
}

func testLeaseGeneration(t *testing.T, st store.Store) {
	l, _ := acquire(t, st, "host-a:1:1", "", now)
	if l.Generation != 1 {
		t.Errorf("first holder's generation = %d, want 1", l.Generation)
	}
	if l, _ := acquire(t, st, "host-a:1:1", "", now.Add(time.Second)); l.Generation != 1 {
		t.Errorf("re-acquire by the holder: generation %d, want 1", l.Generation)
	}
	if err := st.RenewLease(ctx, store.RenewLeaseParams{Name: "scheduler", Holder: "host-a:1:1", TTL: 30 * time.Second, Now: now.Add(2 * time.Second)}); err != nil {
		t.Fatal(err)
	}
	if l, held := acquire(t, st, "host-b:2:1", "", now.Add(3*time.Second)); held || l.Generation != 1 || l.Holder != "host-a:1:1" {
		t.Errorf("refused acquire = %+v, %v", l, held)
	}
	if l, held := acquire(t, st, "host-b:2:1", "", now.Add(time.Hour)); !held || l.Generation != 2 {
		t.Errorf("takeover after expiry = %+v, %v; want generation 2", l, held)
	}
	if l, held := acquire(t, st, "host-c:3:1", "host-b:2:1", now.Add(time.Hour)); !held || l.Generation != 3 {
		t.Errorf("stale takeover = %+v, %v; want generation 3", l, held)
	}
	if err := st.ReleaseLease(ctx, store.ReleaseLeaseParams{Name: "scheduler", Holder: "host-c:3:1"}); err != nil {
		t.Fatal(err)
	}
	// Released and taken again, even by the same process: a new generation,
	// so that nothing fenced by the old one passes.
	if l, held := acquire(t, st, "host-c:3:1", "", now.Add(time.Hour)); !held || l.Generation != 4 {
		t.Errorf("acquire after release = %+v, %v; want generation 4", l, held)
	}
}

// fencedFixture builds a state with something for every write to touch:
// it returns the ids the fenced writes use.
type fencedIDs struct {
	run, queuedRun, doneRun, outbox, attempt int64
	scheduledTask, queuedTask                int64
}

func fencedFixture(t *testing.T, st store.Store) fencedIDs {
	t.Helper()
	upsert(t, st, "p", "h")
	runs := materialize(t, st, "p", store.KindScheduled, daily(time.UTC, date(2025, 7, 1), 3), "t")
	var ids fencedIDs
	ids.run, ids.queuedRun, ids.doneRun = runs[0].ID, runs[1].ID, runs[2].ID
	ids.scheduledTask = runs[0].Tasks[0].ID
	ids.queuedTask = runs[1].Tasks[0].ID
	enqueue(t, st, now, store.EnqueueItem{TaskInstanceID: ids.queuedTask, Pool: "default"})
	runTask(t, st, runs[2].Tasks[0].ID, store.AttemptSuccess, store.TaskSuccess)
	item, err := st.RequestCommit(ctx, store.RequestCommitParams{RunID: ids.doneRun, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	ids.outbox = item.ID
	other := materialize(t, st, "q", store.KindScheduled, daily(time.UTC, date(2025, 7, 1), 1), "t")
	ids.attempt = claim(t, st, other[0].Tasks[0].ID).ID
	if err := st.CreateBackfill(ctx, store.Backfill{ID: "bf1", Pipeline: "p", From: date(2025, 7, 1), To: date(2025, 7, 3), Reprocess: "none", CreatedAt: now}); err != nil {
		t.Fatal(err)
	}
	if err := st.Heartbeat(ctx, store.HeartbeatParams{ID: "o1", Host: "h", TTL: time.Minute, Now: now}); err != nil {
		t.Fatal(err)
	}
	return ids
}

// fencedWrites is every write of the Store, as a fenced writer would make it.
func fencedWrites(ids fencedIDs) map[string]func(st store.Store) error {
	later := now.Add(time.Hour)
	return map[string]func(st store.Store) error{
		"UpsertPipeline": func(st store.Store) error {
			_, err := st.UpsertPipeline(ctx, store.UpsertPipelineParams{Name: "p", Hash: "h2", Now: later})
			return err
		},
		"SetPaused": func(st store.Store) error {
			return st.SetPaused(ctx, store.SetPausedParams{Name: "p", Paused: true, Now: later})
		},
		"MaterializeRuns": func(st store.Store) error {
			_, err := st.MaterializeRuns(ctx, store.MaterializeRunsParams{Pipeline: "p", Kind: store.KindScheduled,
				Runs: daily(time.UTC, date(2025, 8, 1), 1), Tasks: tasks("t"), Through: date(2025, 8, 1), Now: later})
			return err
		},
		"AdmitRun": func(st store.Store) error { return st.AdmitRun(ctx, store.AdmitRunParams{RunID: ids.run, Now: later}) },
		"FinishRun": func(st store.Store) error {
			return st.FinishRun(ctx, store.FinishRunParams{RunID: ids.doneRun, State: store.RunSuccess, Now: later})
		},
		"ClaimTask": func(st store.Store) error {
			_, err := st.ClaimTask(ctx, store.ClaimTaskParams{TaskInstanceID: ids.scheduledTask, Now: later})
			return err
		},
		"EnqueueTasks": func(st store.Store) error {
			_, err := st.EnqueueTasks(ctx, store.EnqueueTasksParams{Items: []store.EnqueueItem{{TaskInstanceID: ids.scheduledTask}}, Now: later})
			return err
		},
		"ClaimReady": func(st store.Store) error {
			_, err := st.ClaimReady(ctx, store.ClaimReadyParams{Pools: []store.PoolCapacity{{Name: "default", Slots: 9}}, Limit: 9, Now: later})
			return err
		},
		"StartAttempt": func(st store.Store) error {
			return st.StartAttempt(ctx, store.StartAttemptParams{AttemptID: ids.attempt, PID: 5, Now: later})
		},
		"FinishAttempt": func(st store.Store) error {
			return st.FinishAttempt(ctx, store.FinishAttemptParams{AttemptID: ids.attempt, State: store.AttemptSuccess, TaskState: store.TaskSuccess, Now: later})
		},
		"SetTaskStates": func(st store.Store) error {
			_, err := st.SetTaskStates(ctx, store.SetTaskStatesParams{IDs: []int64{ids.scheduledTask}, From: []store.TaskState{store.TaskScheduled},
				To: store.TaskSkipped, Now: later})
			return err
		},
		"ClearTasks": func(st store.Store) error {
			_, err := st.ClearTasks(ctx, store.ClearTasksParams{Pipeline: "p", Now: later})
			return err
		},
		"Heartbeat": func(st store.Store) error {
			return st.Heartbeat(ctx, store.HeartbeatParams{ID: "o1", TTL: time.Hour, Now: later})
		},
		"RemoveOwner": func(st store.Store) error { return st.RemoveOwner(ctx, "o1") },
		"RequestCommit": func(st store.Store) error {
			_, err := st.RequestCommit(ctx, store.RequestCommitParams{RunID: ids.doneRun, Now: later})
			return err
		},
		"CompleteCommit": func(st store.Store) error {
			return st.CompleteCommit(ctx, store.CompleteCommitParams{OutboxID: ids.outbox, State: store.RunSuccess, Now: later})
		},
		"AdvanceWatermark": func(st store.Store) error {
			_, err := st.AdvanceWatermark(ctx, store.AdvanceWatermarkParams{Pipeline: "p", Now: later})
			return err
		},
		"SetWatermark": func(st store.Store) error {
			return st.SetWatermark(ctx, store.SetWatermarkParams{Pipeline: "p", LogicalDate: date(2025, 7, 1), Now: later})
		},
		"CreateBackfill": func(st store.Store) error {
			return st.CreateBackfill(ctx, store.Backfill{ID: "bf2", Pipeline: "p", From: date(2025, 7, 1), To: date(2025, 7, 3), Reprocess: "none", CreatedAt: later})
		},
		"UpdateBackfill": func(st store.Store) error {
			return st.UpdateBackfill(ctx, store.UpdateBackfillParams{ID: "bf1", State: store.BackfillCancelled, Now: later})
		},
		"ReprocessRuns": func(st store.Store) error {
			_, err := st.ReprocessRuns(ctx, store.ReprocessRunsParams{Pipeline: "p", BackfillID: "bf1", From: date(2025, 7, 1), To: date(2025, 7, 3),
				States: []store.RunState{store.RunQueued}, Now: later})
			return err
		},
		"RenamePipeline": func(st store.Store) error {
			_, err := st.RenamePipeline(ctx, store.RenamePipelineParams{From: "p", To: "p2", Now: later})
			return err
		},
		"AcquireLease": func(st store.Store) error {
			_, _, err := st.AcquireLease(ctx, store.AcquireLeaseParams{Name: "other", Holder: "x", TTL: time.Hour, Now: later})
			return err
		},
		"RenewLease": func(st store.Store) error {
			return st.RenewLease(ctx, store.RenewLeaseParams{Name: "scheduler", Holder: "host-a:1:1", TTL: time.Hour, Now: later})
		},
		"ReleaseLease": func(st store.Store) error {
			return st.ReleaseLease(ctx, store.ReleaseLeaseParams{Name: "scheduler", Holder: "host-a:1:1"})
		},
		"InTx": func(st store.Store) error {
			return st.InTx(ctx, func(tx store.Store) error {
				return tx.AdmitRun(ctx, store.AdmitRunParams{RunID: ids.run, Now: later})
			})
		},
	}
}

// After a takeover, every write of the old holder returns ErrFenced and
// changes nothing; reads still work; the new holder writes.
func testFenced(t *testing.T, st store.Store) {
	l, _ := acquire(t, st, "host-a:1:1", "", now)
	f := st.Fenced("scheduler", "host-a:1:1", l.Generation)
	ids := fencedFixture(t, f) // the holder's fenced writes go through
	for name, bad := range map[string]store.Store{
		"another generation": st.Fenced("scheduler", "host-a:1:1", l.Generation+1),
		"another holder":     st.Fenced("scheduler", "host-b:2:1", l.Generation),
		"another lease":      st.Fenced("nope", "host-a:1:1", l.Generation),
	} {
		before := digest(t, st)
		wantErr(t, "AdmitRun fenced by "+name, bad.AdmitRun(ctx, store.AdmitRunParams{RunID: ids.run, Now: now}), store.ErrFenced)
		if digest(t, st) != before {
			t.Errorf("a write fenced by %s changed the state", name)
		}
	}

	nl, held := acquire(t, st, "host-b:2:1", "host-a:1:1", now.Add(time.Second))
	if !held || nl.Generation != l.Generation+1 {
		t.Fatalf("takeover = %+v, %v", nl, held)
	}
	before := digest(t, st)
	writes := fencedWrites(ids)
	names := make([]string, 0, len(writes))
	for name := range writes {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		err := writes[name](f)
		wantErr(t, name+" after a takeover", err, store.ErrFenced)
		if store.IsUnavailable(err) {
			t.Errorf("%s: IsUnavailable(ErrFenced) = true", name)
		}
		if name == "InTx" {
			// The check may go out with the first statements (see Fenced):
			// an empty function, and one that reads before it writes, fail
			// all the same.
			err := f.InTx(ctx, func(store.Store) error { return nil })
			wantErr(t, "empty InTx after a takeover", err, store.ErrFenced)
			err = f.InTx(ctx, func(tx store.Store) error {
				if _, err := tx.Usage(ctx); err != nil {
					return err
				}
				if _, err := tx.ListRuns(ctx, store.ListRunsParams{WithTasks: true}); err != nil {
					return err
				}
				return tx.AdmitRun(ctx, store.AdmitRunParams{RunID: ids.run, Now: now})
			})
			wantErr(t, "InTx that reads, then writes, after a takeover", err, store.ErrFenced)
		}
		if after := digest(t, st); after != before {
			t.Errorf("%s after a takeover changed the state:\n before %s\n after  %s", name, before, after)
			before = after
		}
	}
	// Reads are not fenced.
	if runs, err := f.ListRuns(ctx, store.ListRunsParams{}); err != nil || len(runs) == 0 {
		t.Errorf("read through a fenced store = %d runs, %v", len(runs), err)
	}
	if _, err := f.Epoch(ctx); err != nil {
		t.Errorf("Epoch through a fenced store: %v", err)
	}
	// The new holder's fenced writes go through.
	g := st.Fenced("scheduler", "host-b:2:1", nl.Generation)
	for _, name := range []string{"AdmitRun", "InTx", "ClaimReady", "SetPaused"} {
		err := writes[name](g)
		if name == "InTx" {
			wantErr(t, "InTx admitting an admitted run", err, store.ErrConflict)
			continue
		}
		if err != nil {
			t.Errorf("%s by the new holder: %v", name, err)
		}
	}
}

// A Fenced store made from InTx's Store checks the lease inside that
// transaction.
func testFencedInTx(t *testing.T, st store.Store) {
	l, _ := acquire(t, st, "host-a:1:1", "", now)
	runs := materialize(t, st, "p", store.KindScheduled, daily(time.UTC, date(2025, 7, 1), 2), "t")
	err := st.InTx(ctx, func(tx store.Store) error {
		if err := tx.Fenced("scheduler", "host-a:1:1", l.Generation).AdmitRun(ctx, store.AdmitRunParams{RunID: runs[0].ID, Now: now}); err != nil {
			return err
		}
		// The lease changes inside the batch: the stale generation is refused,
		// and the refusal leaves the batch's other writes standing.
		if _, held, err := tx.AcquireLease(ctx, store.AcquireLeaseParams{Name: "scheduler", Holder: "host-b:2:1", Stale: "host-a:1:1",
			TTL: time.Minute, Now: now}); err != nil || !held {
			return fmt.Errorf("takeover in the batch: %v, %v", held, err)
		}
		err := tx.Fenced("scheduler", "host-a:1:1", l.Generation).AdmitRun(ctx, store.AdmitRunParams{RunID: runs[1].ID, Now: now})
		wantErr(t, "stale fenced write in a batch", err, store.ErrFenced)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	got := listRuns(t, st, store.ListRunsParams{Pipelines: []string{"p"}})
	if got[0].State != store.RunRunning || got[1].State != store.RunQueued {
		t.Errorf("runs = %s, %s; want running, queued", got[0].State, got[1].State)
	}
}

func testEpoch(t *testing.T, st store.Store) {
	e := epoch(t, st)
	same := func(what string) {
		t.Helper()
		if got := epoch(t, st); got != e {
			t.Errorf("%s moved the epoch from %d to %d", what, e, got)
			e = got
		}
	}
	moved := func(what string) {
		t.Helper()
		if got := epoch(t, st); got <= e {
			t.Errorf("%s left the epoch at %d", what, got)
		} else {
			e = got
		}
	}
	// The engine's own transitions.
	upsert(t, st, "p", "h")
	if _, err := st.MaterializeRuns(ctx, store.MaterializeRunsParams{Pipeline: "p", Kind: store.KindScheduled,
		Runs: daily(time.UTC, date(2025, 7, 1), 3), Tasks: tasks("t"), Through: date(2025, 7, 3), Now: now}); err != nil {
		t.Fatal(err)
	}
	runs := listRuns(t, st, store.ListRunsParams{WithTasks: true})
	acquire(t, st, "host-a:1:1", "", now)
	if err := st.RenewLease(ctx, store.RenewLeaseParams{Name: "scheduler", Holder: "host-a:1:1", TTL: time.Minute, Now: now}); err != nil {
		t.Fatal(err)
	}
	if err := st.Heartbeat(ctx, store.HeartbeatParams{ID: "o", TTL: time.Minute, Now: now}); err != nil {
		t.Fatal(err)
	}
	if err := st.AdmitRun(ctx, store.AdmitRunParams{RunID: runs[0].ID, Now: now}); err != nil {
		t.Fatal(err)
	}
	enqueueRuns(t, st, "default", runs[0])
	got := claimReady(t, st, store.ClaimReadyParams{Pools: []store.PoolCapacity{{Name: "default", Slots: 1}}, Limit: 1})
	start(t, st, got[0].Attempt)
	succeed(t, st, got[0].Attempt)
	runTask(t, st, runs[1].Tasks[0].ID, store.AttemptFailed, store.TaskFailed)
	if _, err := st.SetTaskStates(ctx, store.SetTaskStatesParams{IDs: []int64{runs[2].Tasks[0].ID}, From: []store.TaskState{store.TaskScheduled},
		To: store.TaskUpstreamFailed, Now: now}); err != nil {
		t.Fatal(err)
	}
	item, err := st.RequestCommit(ctx, store.RequestCommitParams{RunID: runs[0].ID, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.CompleteCommit(ctx, store.CompleteCommitParams{OutboxID: item.ID, State: store.RunSuccess, Now: now}); err != nil {
		t.Fatal(err)
	}
	if err := st.FinishRun(ctx, store.FinishRunParams{RunID: runs[1].ID, State: store.RunFailed, Now: now}); err != nil {
		t.Fatal(err)
	}
	if _, err := advance(t, st, "p"); err != nil {
		t.Fatal(err)
	}
	if err := st.CreateBackfill(ctx, store.Backfill{ID: "bf1", Pipeline: "p", From: date(2025, 7, 1), To: date(2025, 7, 3), Reprocess: "failed", CreatedAt: now}); err != nil {
		t.Fatal(err)
	}
	if err := st.ReleaseLease(ctx, store.ReleaseLeaseParams{Name: "scheduler", Holder: "host-a:1:1"}); err != nil {
		t.Fatal(err)
	}
	same("the engine's own transitions")

	// Operator commands.
	if err := st.SetPaused(ctx, store.SetPausedParams{Name: "p", Paused: true, Now: now}); err != nil {
		t.Fatal(err)
	}
	moved("SetPaused")
	if _, err := st.ClearTasks(ctx, store.ClearTasksParams{Pipeline: "p", From: date(2025, 7, 2), To: date(2025, 7, 2), Now: now}); err != nil {
		t.Fatal(err)
	}
	moved("ClearTasks")
	if err := st.UpdateBackfill(ctx, store.UpdateBackfillParams{ID: "bf1", Phase: "run", Now: now}); err != nil {
		t.Fatal(err)
	}
	moved("UpdateBackfill")
	if _, err := st.ReprocessRuns(ctx, store.ReprocessRunsParams{Pipeline: "p", BackfillID: "bf1", From: date(2025, 7, 1), To: date(2025, 7, 3),
		States: []store.RunState{store.RunSuccess}, Now: now}); err != nil {
		t.Fatal(err)
	}
	moved("ReprocessRuns")
	if err := st.SetWatermark(ctx, store.SetWatermarkParams{Pipeline: "p", LogicalDate: date(2025, 7, 2), Now: now}); err != nil {
		t.Fatal(err)
	}
	moved("SetWatermark")
	if err := st.SetWatermark(ctx, store.SetWatermarkParams{Pipeline: "p", Now: now}); err != nil {
		t.Fatal(err)
	}
	moved("SetWatermark (reset)")

	// A refused or rolled back command does not move it.
	wantErr(t, "SetPaused(unknown)", st.SetPaused(ctx, store.SetPausedParams{Name: "nope", Now: now}), store.ErrNotFound)
	wantErr(t, "UpdateBackfill(unknown)", st.UpdateBackfill(ctx, store.UpdateBackfillParams{ID: "nope", Now: now}), store.ErrNotFound)
	boom := errors.New("boom")
	if err := st.InTx(ctx, func(tx store.Store) error {
		if err := tx.SetPaused(ctx, store.SetPausedParams{Name: "p", Paused: false, Now: now}); err != nil {
			return err
		}
		return boom
	}); !errors.Is(err, boom) {
		t.Fatal(err)
	}
	same("refused and rolled back commands")
	if err := st.InTx(ctx, func(tx store.Store) error {
		return tx.SetPaused(ctx, store.SetPausedParams{Name: "p", Paused: false, Now: now})
	}); err != nil {
		t.Fatal(err)
	}
	moved("SetPaused in a batch")
}

// With a zero Now, AcquireLease, RenewLease and Heartbeat use the state's
// clock (Now): expiries are the state's time plus the TTL, whatever the
// caller's clock says, and a lease expired on the state's clock is taken.
func testLeasesOnStateClock(t *testing.T, st store.Store) {
	before, err := st.Now(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Since(before); d > time.Minute || d < -time.Minute {
		t.Fatalf("the state's clock is %s off this machine's in a test", d)
	}
	ttl := 30 * time.Second
	l, ok, err := st.AcquireLease(ctx, store.AcquireLeaseParams{Name: "clock", Holder: "a", Host: "h", PID: 1, TTL: ttl})
	if err != nil || !ok {
		t.Fatalf("acquire: %v %v", ok, err)
	}
	after, err := st.Now(ctx)
	if err != nil {
		t.Fatal(err)
	}
	within := func(what string, got time.Time) {
		t.Helper()
		if got.Before(before.Add(ttl)) || got.After(after.Add(ttl)) {
			t.Errorf("%s expires at %s, want the state's time plus %s (between %s and %s)", what, got, ttl, before.Add(ttl), after.Add(ttl))
		}
	}
	within("the acquired lease", l.ExpiresAt)
	// A caller whose clock is a minute fast (it passes its own Now) takes
	// a lease that expired by its clock only: that is what a zero Now
	// prevents, and why callers pass none.
	if _, ok, _ := st.AcquireLease(ctx, store.AcquireLeaseParams{Name: "clock", Holder: "b", Host: "h2", PID: 2, TTL: ttl}); ok {
		t.Fatal("another holder took a live lease on the state's clock")
	}
	before = after
	if err := st.RenewLease(ctx, store.RenewLeaseParams{Name: "clock", Holder: "a", TTL: ttl}); err != nil {
		t.Fatal(err)
	}
	after, _ = st.Now(ctx)
	l, err = st.GetLease(ctx, "clock")
	if err != nil {
		t.Fatal(err)
	}
	within("the renewed lease", l.ExpiresAt)
	before = after
	if err := st.Heartbeat(ctx, store.HeartbeatParams{ID: "o", Host: "h", PID: 1, TTL: ttl}); err != nil {
		t.Fatal(err)
	}
	after, _ = st.Now(ctx)
	o, err := st.GetOwner(ctx, "o")
	if err != nil {
		t.Fatal(err)
	}
	within("the heartbeat", o.ExpiresAt)
	if o.HeartbeatAt.Before(before) || o.HeartbeatAt.After(after) {
		t.Errorf("heartbeat at %s, want between %s and %s", o.HeartbeatAt, before, after)
	}
}
