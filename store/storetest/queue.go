package storetest

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/rewind-dev/rewind/store"
)

func testEnqueueTasks(t *testing.T, st store.Store) {
	runs := materialize(t, st, "p", store.KindScheduled, daily(time.UTC, date(2025, 7, 1), 1), "a", "b", "c", "d", "e")
	r := runs[0]
	id := func(name string) int64 { return task(t, r, name).ID }
	// b waits for its retry an hour; c's retry is due now; d runs; e succeeded.
	for name, retryAt := range map[string]time.Time{"b": now.Add(time.Hour), "c": now} {
		a := claim(t, st, id(name))
		if err := st.FinishAttempt(ctx, store.FinishAttemptParams{AttemptID: a.ID, State: store.AttemptFailed, ExitCode: intp(1),
			TaskState: store.TaskUpForRetry, CountFailure: true, NextTryAt: retryAt, Now: now}); err != nil {
			t.Fatal(err)
		}
	}
	claim(t, st, id("d"))
	runTask(t, st, id("e"), store.AttemptSuccess, store.TaskSuccess)

	items := []store.EnqueueItem{
		{TaskInstanceID: id("a"), Pool: "large", Reason: "hot_dates", Priority: 3, LogPath: "/logs/a.{try}.log"},
		{TaskInstanceID: id("b"), Pool: "large"},
		{TaskInstanceID: id("c"), LogPath: "/logs/c.{try}.log"}, // no pool: keeps its own
		{TaskInstanceID: id("d"), Pool: "large"},
		{TaskInstanceID: id("e"), Pool: "large"},
		{TaskInstanceID: 987654, Pool: "large"},
	}
	if n := enqueue(t, st, now, items...); n != 2 {
		t.Errorf("EnqueueTasks moved %d, want 2 (a scheduled, c due)", n)
	}
	a := reload(t, st, id("a"))
	if a.State != store.TaskQueued || a.Pool != "large" || a.Reason != "hot_dates" || a.Priority != 3 ||
		a.LogPath != "/logs/a.{try}.log" || a.TryNumber != 0 || len(a.Attempts) != 0 || !a.UpdatedAt.Equal(now) {
		t.Errorf("queued a = %+v", a)
	}
	c := reload(t, st, id("c"))
	if c.State != store.TaskQueued || c.Pool != "default" || c.TryNumber != 1 || c.Failures != 1 || !c.NextTryAt.IsZero() {
		t.Errorf("queued retry c = state %s pool %s try %d failures %d next %v", c.State, c.Pool, c.TryNumber, c.Failures, c.NextTryAt)
	}
	want := map[string]store.TaskState{"b": store.TaskUpForRetry, "d": store.TaskRunning, "e": store.TaskSuccess}
	for name, state := range want {
		if got := reload(t, st, id(name)); got.State != state || got.Pool != "default" {
			t.Errorf("%s = %s in pool %s; want %s, untouched", name, got.State, got.Pool, state)
		}
	}
	// Queued is not claimable by id, and enqueueing again moves nothing.
	_, err := st.ClaimTask(ctx, store.ClaimTaskParams{TaskInstanceID: id("a"), Now: now})
	wantErr(t, "ClaimTask of a queued task instance", err, store.ErrConflict)
	if n := enqueue(t, st, now, items[0]); n != 0 {
		t.Errorf("second EnqueueTasks moved %d", n)
	}
	// b's retry comes due.
	if n := enqueue(t, st, now.Add(time.Hour), items[1]); n != 1 {
		t.Errorf("EnqueueTasks of a due retry moved %d, want 1", n)
	}
	if n := enqueue(t, st, now); n != 0 {
		t.Errorf("EnqueueTasks of nothing moved %d", n)
	}
}

func testClaimReadyOrder(t *testing.T, st store.Store) {
	materialize(t, st, "p", store.KindScheduled, daily(time.UTC, date(2025, 7, 2), 1), "t")
	materialize(t, st, "p", store.KindScheduled, daily(time.UTC, date(2025, 7, 3), 1), "t", "u")
	materialize(t, st, "p", store.KindManual, daily(time.UTC, date(2025, 7, 1), 1), "t")
	materializeBackfill(t, st, "p", "bf1", daily(time.UTC, date(2025, 6, 1), 2), "t")
	runs := materializeBackfill(t, st, "p", "bf2", daily(time.UTC, date(2025, 5, 1), 1), "t")
	var items []store.EnqueueItem
	for _, r := range runs {
		for _, ti := range r.Tasks {
			it := store.EnqueueItem{TaskInstanceID: ti.ID, Pool: "default", Reason: "r-" + ti.Task, LogPath: "/logs/" + r.DS + "/{try}.log"}
			if r.DS == "2025-07-03" && ti.Task == "t" {
				it.Priority = 2
			} else if r.DS == "2025-07-03" {
				it.Priority = 1
			}
			items = append(items, it)
		}
	}
	if n := enqueue(t, st, now, items...); n != 7 {
		t.Fatalf("enqueued %d, want 7", n)
	}
	got := claimReady(t, st, store.ClaimReadyParams{
		Pools: []store.PoolCapacity{{Name: "default", Slots: 100, BackfillSlots: 100}}, BackfillID: "bf1",
		Owner: "owner-1", Host: "host-1", Limit: 100,
	})
	want := []string{"07-01/t", "07-02/t", "07-03/u", "07-03/t", "bf:06-01/t", "bf:06-02/t"}
	if fmt.Sprint(claimedNames(got)) != fmt.Sprint(want) {
		t.Errorf("claim order = %v, want %v", claimedNames(got), want)
	}
	byID := map[int64]store.Run{}
	for _, r := range runs {
		byID[r.ID] = r
	}
	nonces := map[string]bool{}
	for _, c := range got {
		r := byID[c.RunID]
		if c.Pipeline != "p" || c.Kind != r.Kind || !c.LogicalDate.Equal(r.LogicalDate) || task(t, r, c.Task).ID != c.TaskInstanceID {
			t.Errorf("claimed %+v does not match its run %+v", c, r)
		}
		a := c.Attempt
		if a.ID == 0 || a.TryNumber != 1 || a.State != store.AttemptRunning || a.Owner != "owner-1" || a.Host != "host-1" ||
			a.Pool != "default" || a.Reason != "r-"+c.Task || a.LogPath != "/logs/"+r.DS+"/1.log" || !a.StartedAt.Equal(now) ||
			a.PID != 0 || a.ExitCode != nil || !a.EndedAt.IsZero() {
			t.Errorf("claimed attempt = %+v", a)
		}
		if !isNonce(a.Nonce) || nonces[a.Nonce] {
			t.Errorf("nonce %q: want 32 hex characters, unique", a.Nonce)
		}
		nonces[a.Nonce] = true
		ti := reload(t, st, c.TaskInstanceID)
		if ti.State != store.TaskRunning || ti.TryNumber != 1 || len(ti.Attempts) != 1 {
			t.Errorf("claimed task instance = %s try %d with %d attempts, want running try 1, one attempt", ti.State, ti.TryNumber, len(ti.Attempts))
			continue
		}
		if stored := ti.Attempts[0]; stored.ID != a.ID || stored.Nonce != a.Nonce || stored.Owner != a.Owner || stored.LogPath != a.LogPath {
			t.Errorf("stored attempt %+v, claimed %+v", stored, a)
		}
	}
	// bf2's task instance is still queued; nothing else is.
	if u := usageOf(t, st); u["default/p/t/true"].Queued != 1 || u["default/p/t/true"].Running != 2 ||
		u["default/p/t/false"].Running != 3 || u["default/p/u/false"].Running != 1 || u["default/p/t/false"].Queued != 0 {
		t.Errorf("usage after claims = %+v", u)
	}

	// Reverse: a backfill's newest dates first.
	rev := materializeBackfill(t, st, "r", "bf3", daily(time.UTC, date(2025, 4, 1), 3), "t")
	enqueueRuns(t, st, "default", rev...)
	got = claimReady(t, st, store.ClaimReadyParams{
		Pools: []store.PoolCapacity{{Name: "default", Slots: 100, BackfillSlots: 100}}, Pipelines: []string{"r"},
		BackfillID: "bf3", ReverseBackfill: true, Limit: 100,
	})
	if want := []string{"bf:04-03/t", "bf:04-02/t", "bf:04-01/t"}; fmt.Sprint(claimedNames(got)) != fmt.Sprint(want) {
		t.Errorf("reverse backfill order = %v, want %v", claimedNames(got), want)
	}
}

func testClaimReadyCapacity(t *testing.T, st store.Store) {
	materialize(t, st, "p", store.KindScheduled, daily(time.UTC, date(2025, 7, 1), 4), "t")
	all := materializeBackfill(t, st, "p", "bf1", daily(time.UTC, date(2025, 6, 1), 4), "t")
	enqueueRuns(t, st, "small", all...)
	// An attempt claimed another way, by another owner, takes a slot too.
	other := materialize(t, st, "x", store.KindScheduled, daily(time.UTC, date(2025, 7, 1), 1), "t")
	xa, err := st.ClaimTask(ctx, store.ClaimTaskParams{TaskInstanceID: other[0].Tasks[0].ID, Pool: "small", Owner: "owner-x", Now: now})
	if err != nil {
		t.Fatal(err)
	}
	small := []store.PoolCapacity{{Name: "small", Slots: 3, BackfillSlots: 1}}
	claimAll := func(limit int) []store.ClaimedAttempt {
		t.Helper()
		return claimReady(t, st, store.ClaimReadyParams{Pools: small, BackfillID: "bf1", Limit: limit})
	}
	expect := func(what string, got []store.ClaimedAttempt, want string) []store.ClaimedAttempt {
		t.Helper()
		if fmt.Sprint(claimedNames(got)) != want {
			t.Errorf("%s = %v, want %s", what, claimedNames(got), want)
		}
		return got
	}
	first := expect("first claim (3 slots, one taken by x)", claimAll(10), "[07-01/t 07-02/t]")
	expect("claim of a full pool", claimAll(10), "[]")
	u := usageOf(t, st)
	if u["small/p/t/false"].Running != 2 || u["small/p/t/false"].Queued != 2 || u["small/p/t/true"].Queued != 4 ||
		u["small/x/t/false"].Running != 1 || len(u) != 3 {
		t.Errorf("usage = %+v", u)
	}
	// A finished attempt frees its slot: the scheduled runs go first.
	succeed(t, st, xa)
	third := expect("claim after a slot freed", claimAll(10), "[07-03/t]")
	for _, c := range first {
		succeed(t, st, c.Attempt)
	}
	// Limit bounds one call.
	fourth := expect("claim with limit 1", claimAll(1), "[07-04/t]")
	expect("claim with limit 0", claimAll(0), "[]")
	expect("claim of the last slot", claimAll(10), "[bf:06-01/t]")
	// Slots free, but no backfill slot.
	succeed(t, st, third[0].Attempt)
	succeed(t, st, fourth[0].Attempt)
	expect("claim beyond the backfill slots", claimAll(10), "[]")
	u = usageOf(t, st)
	if u["small/p/t/true"].Running != 1 || u["small/p/t/true"].Queued != 3 || u["small/p/t/false"].Running != 0 || len(u) != 1 {
		t.Errorf("usage = %+v", u)
	}
	for _, ra := range runningAttempts(t, st) {
		succeed(t, st, ra.Attempt)
	}
	// No backfill slots at all: none.
	expect("claim with BackfillSlots 0", claimReady(t, st, store.ClaimReadyParams{Pools: []store.PoolCapacity{{Name: "small", Slots: 3}},
		BackfillID: "bf1", Limit: 10}), "[]")
	// Another pool, or a pool listed twice.
	expect("claim in pool large", claimReady(t, st, store.ClaimReadyParams{Pools: []store.PoolCapacity{{Name: "large", Slots: 9, BackfillSlots: 9}},
		BackfillID: "bf1", Limit: 10}), "[]")
	if _, err := st.ClaimReady(ctx, store.ClaimReadyParams{Pools: []store.PoolCapacity{small[0], small[0]}, Limit: 1, Now: now}); err == nil {
		t.Errorf("ClaimReady with a pool listed twice succeeded")
	}
	expect("claim with the backfill slot free", claimAll(10), "[bf:06-02/t]")
}

func testClaimReadyFilters(t *testing.T, st store.Store) {
	p := materialize(t, st, "p", store.KindScheduled, daily(time.UTC, date(2025, 7, 1), 1), "t")
	q := materialize(t, st, "q", store.KindScheduled, daily(time.UTC, date(2025, 6, 1), 1), "t")
	bf1 := materializeBackfill(t, st, "p", "bf1", daily(time.UTC, date(2025, 5, 1), 1), "t")
	bf2 := materializeBackfill(t, st, "p", "bf2", daily(time.UTC, date(2025, 4, 1), 1), "t")
	enqueueRuns(t, st, "default", p[0], q[0], bf1[0], bf2[0])
	pools := []store.PoolCapacity{{Name: "default", Slots: 10, BackfillSlots: 10}}
	// Without a backfill id, backfill runs are nobody's to claim here.
	if got := claimReady(t, st, store.ClaimReadyParams{Pools: pools, Pipelines: []string{"p"}, Limit: 10}); fmt.Sprint(claimedNames(got)) != "[07-01/t]" {
		t.Errorf("claim of p without a backfill = %v, want [07-01/t]", claimedNames(got))
	}
	if got := claimReady(t, st, store.ClaimReadyParams{Pools: pools, Pipelines: []string{"nope"}, BackfillID: "bf1", Limit: 10}); len(got) != 0 {
		t.Errorf("claim of another pipeline = %v", claimedNames(got))
	}
	if got := claimReady(t, st, store.ClaimReadyParams{Pools: pools, BackfillID: "bf2", Limit: 10}); fmt.Sprint(claimedNames(got)) != "[06-01/t bf:04-01/t]" {
		t.Errorf("claim of bf2 = %v, want q's run and bf2's", claimedNames(got))
	}
	if got := claimReady(t, st, store.ClaimReadyParams{Pools: pools, Limit: 10}); len(got) != 0 {
		t.Errorf("claim leaves bf1 queued: got %v", claimedNames(got))
	}
	if u := usageOf(t, st); u["default/p/t/true"].Queued != 1 || u["default/p/t/true"].Running != 1 {
		t.Errorf("usage = %+v", u)
	}
}

// A claim inside a batch that fails leaves the task instance queued, with
// no attempt and no slot taken.
func testClaimReadyRollback(t *testing.T, st store.Store) {
	runs := materialize(t, st, "p", store.KindScheduled, daily(time.UTC, date(2025, 7, 1), 2), "t")
	enqueueRuns(t, st, "default", runs...)
	pools := []store.PoolCapacity{{Name: "default", Slots: 1}}
	boom := errors.New("boom")
	err := st.InTx(ctx, func(tx store.Store) error {
		got, err := tx.ClaimReady(ctx, store.ClaimReadyParams{Pools: pools, Owner: "o", Limit: 5, Now: now})
		if err != nil || len(got) != 1 {
			t.Errorf("ClaimReady in the batch = %d, %v", len(got), err)
		}
		// The batch sees its own claim: the pool is full.
		if more, err := tx.ClaimReady(ctx, store.ClaimReadyParams{Pools: pools, Owner: "o", Limit: 5, Now: now}); err != nil || len(more) != 0 {
			t.Errorf("second ClaimReady in the batch = %d, %v; want none", len(more), err)
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("InTx = %v", err)
	}
	for _, r := range runs {
		if ti := reload(t, st, r.Tasks[0].ID); ti.State != store.TaskQueued || ti.TryNumber != 0 || len(ti.Attempts) != 0 {
			t.Errorf("after rollback: %s try %d with %d attempts; want queued, untouched", ti.State, ti.TryNumber, len(ti.Attempts))
		}
	}
	if ra := runningAttempts(t, st); len(ra) != 0 {
		t.Errorf("running attempts after rollback: %d", len(ra))
	}
	if got := claimReady(t, st, store.ClaimReadyParams{Pools: pools, Limit: 5}); len(got) != 1 {
		t.Errorf("claim after rollback = %d, want 1", len(got))
	}
}

func testUsageEmpty(t *testing.T, st store.Store) {
	materialize(t, st, "p", store.KindScheduled, daily(time.UTC, date(2025, 7, 1), 2), "t")
	if u, err := st.Usage(ctx); err != nil || len(u) != 0 {
		t.Errorf("Usage with nothing in flight = %+v, %v", u, err)
	}
}
