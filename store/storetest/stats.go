package storetest

import (
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/rewind-dev/rewind/store"
)

// Stats counts by pipeline, pool and state, in the database: runs in
// each state, attempts by outcome (running ones included), queued task
// instances with the oldest's time, backfills, and the runs of running
// backfills only.
func testStats(t *testing.T, st store.Store) {
	empty, err := st.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if empty.Now.IsZero() || len(empty.Runs)+len(empty.Attempts)+len(empty.Queued)+len(empty.Backfills)+len(empty.BackfillRuns) != 0 {
		t.Fatalf("Stats of an empty state = %+v; want the clock and nothing counted", empty)
	}

	// p: four days; day 1 succeeds, day 2 fails after a retry, day 3 is
	// queued in the pool "large", day 4 waits.
	runs := materialize(t, st, "p", store.KindScheduled, daily(time.UTC, date(2025, 7, 1), 4), "t")
	runTask(t, st, runs[0].Tasks[0].ID, store.AttemptSuccess, store.TaskSuccess)
	runTask(t, st, runs[1].Tasks[0].ID, store.AttemptFailed, store.TaskUpForRetry)
	runTask(t, st, runs[1].Tasks[0].ID, store.AttemptFailed, store.TaskFailed)
	finishRun(t, st, runs[0].ID, store.RunSuccess)
	finishRun(t, st, runs[1].ID, store.RunFailed)
	queuedAt := now.Add(-time.Hour)
	enqueue(t, st, queuedAt, store.EnqueueItem{TaskInstanceID: runs[2].Tasks[0].ID, Pool: "large"})
	// q: one run with an attempt still running in "default".
	qruns := materialize(t, st, "q", store.KindScheduled, daily(time.UTC, date(2025, 7, 1), 1), "t")
	start(t, st, claim(t, st, qruns[0].Tasks[0].ID))
	if err := st.AdmitRun(ctx, store.AdmitRunParams{RunID: qruns[0].ID, Now: now}); err != nil {
		t.Fatal(err)
	}
	// Backfills of p: bf-on runs (two runs of its own), bf-done is over
	// (its run is not counted as progress).
	for _, b := range []store.Backfill{
		{ID: "bf-on", Pipeline: "p", From: date(2025, 8, 1), To: date(2025, 8, 2), Reprocess: "none", CreatedAt: now},
		{ID: "bf-done", Pipeline: "p", From: date(2025, 9, 1), To: date(2025, 9, 1), Reprocess: "none", CreatedAt: now},
	} {
		if err := st.CreateBackfill(ctx, b); err != nil {
			t.Fatal(err)
		}
	}
	materializeBackfill(t, st, "p", "bf-on", daily(time.UTC, date(2025, 8, 1), 2), "t")
	done := materializeBackfill(t, st, "p", "bf-done", daily(time.UTC, date(2025, 9, 1), 1), "t")
	runTask(t, st, done[len(done)-1].Tasks[0].ID, store.AttemptSuccess, store.TaskSuccess)
	finishRun(t, st, done[len(done)-1].ID, store.RunSuccess)
	if err := st.UpdateBackfill(ctx, store.UpdateBackfillParams{ID: "bf-done", State: store.BackfillSuccess, Now: now}); err != nil {
		t.Fatal(err)
	}

	got, err := st.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	wantRuns := []store.RunCount{
		{Pipeline: "p", State: store.RunFailed, Count: 1},
		{Pipeline: "p", State: store.RunQueued, Count: 4}, // days 3, 4 and bf-on's two
		{Pipeline: "p", State: store.RunSuccess, Count: 2},
		{Pipeline: "q", State: store.RunRunning, Count: 1},
	}
	check(t, "Runs", got.Runs, wantRuns)
	check(t, "Attempts", got.Attempts, []store.AttemptCount{
		{Pool: "default", State: store.AttemptFailed, Count: 2},
		{Pool: "default", State: store.AttemptRunning, Count: 1},
		{Pool: "default", State: store.AttemptSuccess, Count: 2},
	})
	if len(got.Queued) != 1 || got.Queued[0].Pool != "large" || got.Queued[0].Count != 1 || !got.Queued[0].Oldest.Equal(queuedAt) {
		t.Errorf("Queued = %+v; want 1 in large, queued at %s", got.Queued, queuedAt)
	}
	check(t, "Backfills", got.Backfills, []store.BackfillCount{
		{State: store.BackfillRunning, Count: 1},
		{State: store.BackfillSuccess, Count: 1},
	})
	check(t, "BackfillRuns", got.BackfillRuns, []store.RunCount{{Pipeline: "p", State: store.RunQueued, Count: 2}})

	// The counts follow the runs: every run counted once, whatever their number.
	total := 0
	for _, r := range got.Runs {
		total += r.Count
	}
	if all := listRuns(t, st, store.ListRunsParams{}); total != len(all) {
		t.Errorf("Stats counts %d runs, ListRuns lists %d", total, len(all))
	}
}

// A lease records when its holder took it and last renewed it, on the
// clock of the calls: a re-acquisition by the holder keeps its time, a
// new holder starts anew, a release clears both.
func testLeaseTimes(t *testing.T, st store.Store) {
	l, _ := acquire(t, st, "host-a:100:1", "", now)
	if !l.AcquiredAt.Equal(now) || !l.RenewedAt.Equal(now) {
		t.Fatalf("first acquire: acquired %s, renewed %s; want both %s", l.AcquiredAt, l.RenewedAt, now)
	}
	l, _ = acquire(t, st, "host-a:100:1", "", now.Add(5*time.Second))
	if !l.AcquiredAt.Equal(now) || !l.RenewedAt.Equal(now.Add(5*time.Second)) {
		t.Errorf("re-acquire: acquired %s, renewed %s; want %s, %s", l.AcquiredAt, l.RenewedAt, now, now.Add(5*time.Second))
	}
	if err := st.RenewLease(ctx, store.RenewLeaseParams{Name: "scheduler", Holder: "host-a:100:1", TTL: 30 * time.Second, Now: now.Add(10 * time.Second)}); err != nil {
		t.Fatal(err)
	}
	if l, err := st.GetLease(ctx, "scheduler"); err != nil || !l.AcquiredAt.Equal(now) || !l.RenewedAt.Equal(now.Add(10*time.Second)) {
		t.Errorf("after renewal: %+v, %v; want acquired %s, renewed 10s later", l, err, now)
	}
	l, held := acquire(t, st, "host-b:200:1", "", now.Add(time.Minute))
	if !held || !l.AcquiredAt.Equal(now.Add(time.Minute)) || !l.RenewedAt.Equal(now.Add(time.Minute)) {
		t.Errorf("new holder: %+v, %v; want acquired and renewed at %s", l, held, now.Add(time.Minute))
	}
	if err := st.ReleaseLease(ctx, store.ReleaseLeaseParams{Name: "scheduler", Holder: "host-b:200:1"}); err != nil {
		t.Fatal(err)
	}
	if l, err := st.GetLease(ctx, "scheduler"); err != nil || !l.AcquiredAt.IsZero() || !l.RenewedAt.IsZero() {
		t.Errorf("after release: %+v, %v; want no times", l, err)
	}
}

// check compares a Stats list with what it should be.
func check[T any](t *testing.T, what string, got, want []T) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Stats.%s =\n%s\nwant\n%s", what, fmt.Sprintf("%+v", got), fmt.Sprintf("%+v", want))
	}
}
