package storetest

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rewind-dev/rewind/store"
)

// ClaimRace materializes runs through stores[0], then has goroutines per
// store race ClaimTask over every task instance, each goroutine trying all
// of them in its own order. Every task instance must be claimed exactly once
// and every losing claim must fail with store.ErrConflict. Passing several
// stores opened on the same state stands for several processes.
func ClaimRace(t *testing.T, stores []store.Store, goroutinesPerStore int) {
	t.Helper()
	const days = 30
	runs := materialize(t, stores[0], "race", store.KindScheduled, daily(time.UTC, date(2025, 7, 1), days), "extract", "load")
	var ids []int64
	for _, r := range runs {
		for _, ti := range r.Tasks {
			ids = append(ids, ti.ID)
		}
	}
	if len(ids) != 2*days {
		t.Fatalf("materialized %d task instances, want %d", len(ids), 2*days)
	}
	var (
		mu     sync.Mutex
		wins   = map[int64]int{}
		errs   []error
		wg     sync.WaitGroup
		worker = 0
	)
	for _, st := range stores {
		for g := 0; g < goroutinesPerStore; g++ {
			worker++
			wg.Add(1)
			go func(st store.Store, w int) {
				defer wg.Done()
				for k := range ids {
					id := ids[(k*7+w*13)%len(ids)]
					a, err := st.ClaimTask(ctx, store.ClaimTaskParams{
						TaskInstanceID: id, Pool: "default", Host: fmt.Sprintf("worker-%d", w), Now: now,
					})
					mu.Lock()
					switch {
					case err == nil:
						wins[id]++
						if a.TryNumber != 1 {
							errs = append(errs, fmt.Errorf("task instance %d claimed with try %d, want 1", id, a.TryNumber))
						}
					case !errors.Is(err, store.ErrConflict):
						errs = append(errs, fmt.Errorf("claim %d: %w", id, err))
					}
					mu.Unlock()
				}
			}(st, worker)
		}
	}
	wg.Wait()
	for _, err := range errs {
		t.Error(err)
	}
	for _, id := range ids {
		if wins[id] != 1 {
			t.Errorf("task instance %d claimed %d times, want exactly 1", id, wins[id])
		}
	}
	got := listRuns(t, stores[0], store.ListRunsParams{Pipelines: []string{"race"}, WithAttempts: true})
	for _, r := range got {
		for _, ti := range r.Tasks {
			if ti.State != store.TaskRunning || ti.TryNumber != 1 || len(ti.Attempts) != 1 {
				t.Errorf("%s %s: state %s try %d with %d attempts, want running, try 1, 1 attempt",
					r.DS, ti.Task, ti.State, ti.TryNumber, len(ti.Attempts))
			}
		}
	}
}

// ClaimReadyRace queues 200 task instances of one pool (100 of scheduled
// runs, 100 of a backfill's) and has goroutines per store enqueue them all
// again and then claim with ClaimReady, hold each attempt a moment and
// finish it, until all ran; a monitor reads Usage meanwhile. Enqueueing
// moves each task instance once over all racers; no task instance is
// claimed twice; and the pool never has more running attempts than its
// Slots, nor of backfill runs than its BackfillSlots, whether counted by the
// claimers (who count an attempt from the claim's commit until just before
// its outcome is recorded, so never more than the state holds) or read from
// the state. Passing several stores opened on the same state stands for
// several processes.
func ClaimReadyRace(t *testing.T, stores []store.Store, goroutinesPerStore int) {
	t.Helper()
	const days = 100
	pool := store.PoolCapacity{Name: "race", Slots: 5, BackfillSlots: 2}
	materialize(t, stores[0], "race", store.KindScheduled, daily(time.UTC, date(2025, 1, 1), days), "t")
	runs := materializeBackfill(t, stores[0], "race", "bf", daily(time.UTC, date(2024, 1, 1), days), "t")
	var items []store.EnqueueItem
	for _, r := range runs {
		items = append(items, store.EnqueueItem{TaskInstanceID: r.Tasks[0].ID, Pool: pool.Name, LogPath: "/logs/" + r.DS + ".{try}"})
	}
	if len(items) != 2*days {
		t.Fatalf("materialized %d task instances, want %d", len(items), 2*days)
	}
	var (
		mu                   sync.Mutex
		wins                 = map[int64]int{}
		errs                 []error
		enqueued             atomic.Int64
		inflight, inflightBF atomic.Int64
		finished             atomic.Int64
		maxSeen, maxSeenBF   atomic.Int64
		wg, monitor          sync.WaitGroup
		done                 = make(chan struct{})
		deadline             = time.Now().Add(2 * time.Minute)
		fail                 = func(err error) { mu.Lock(); errs = append(errs, err); mu.Unlock() }
		raise                = func(max *atomic.Int64, v int64) {
			for m := max.Load(); v > m && !max.CompareAndSwap(m, v); m = max.Load() {
			}
		}
		total  = int64(len(items))
		worker = 0
	)
	monitor.Add(1)
	go func() {
		defer monitor.Done()
		for {
			select {
			case <-done:
				return
			default:
			}
			rows, err := stores[0].Usage(ctx)
			if err != nil {
				fail(fmt.Errorf("Usage: %w", err))
				return
			}
			var running, backfill int
			for _, u := range rows {
				if u.Pool == pool.Name {
					running += u.Running
					if u.Backfill {
						backfill += u.Running
					}
				}
			}
			if running > pool.Slots || backfill > pool.BackfillSlots {
				fail(fmt.Errorf("the state shows %d running attempts (%d of backfill runs) in a pool of %d slots (%d for backfills)",
					running, backfill, pool.Slots, pool.BackfillSlots))
			}
			time.Sleep(time.Millisecond)
		}
	}()
	for _, st := range stores {
		for g := 0; g < goroutinesPerStore; g++ {
			worker++
			wg.Add(1)
			go func(st store.Store, w int) {
				defer wg.Done()
				owner := fmt.Sprintf("owner-%d", w)
				n, err := st.EnqueueTasks(ctx, store.EnqueueTasksParams{Items: items, Now: now})
				if err != nil {
					fail(fmt.Errorf("EnqueueTasks: %w", err))
					return
				}
				enqueued.Add(int64(n))
				for finished.Load() < total {
					if time.Now().After(deadline) {
						fail(fmt.Errorf("%s: gave up with %d of %d finished", owner, finished.Load(), total))
						return
					}
					got, err := st.ClaimReady(ctx, store.ClaimReadyParams{Pools: []store.PoolCapacity{pool}, BackfillID: "bf",
						Owner: owner, Host: owner, Limit: 3, Now: now})
					if err != nil {
						fail(fmt.Errorf("ClaimReady: %w", err))
						return
					}
					for _, c := range got {
						raise(&maxSeen, inflight.Add(1))
						if c.Kind == store.KindBackfill {
							raise(&maxSeenBF, inflightBF.Add(1))
						}
						mu.Lock()
						wins[c.TaskInstanceID]++
						mu.Unlock()
						if c.Owner != owner || c.TryNumber != 1 || !isNonce(c.Nonce) {
							fail(fmt.Errorf("claimed %+v", c.Attempt))
						}
					}
					if len(got) == 0 {
						time.Sleep(time.Millisecond)
						continue
					}
					time.Sleep(2 * time.Millisecond) // the processes run
					for _, c := range got {
						inflight.Add(-1)
						if c.Kind == store.KindBackfill {
							inflightBF.Add(-1)
						}
						if err := st.FinishAttempt(ctx, store.FinishAttemptParams{AttemptID: c.ID, State: store.AttemptSuccess, ExitCode: intp(0),
							TaskState: store.TaskSuccess, Now: now}); err != nil {
							fail(fmt.Errorf("FinishAttempt(%d): %w", c.ID, err))
							return
						}
						finished.Add(1)
					}
				}
			}(st, worker)
		}
	}
	wg.Wait()
	close(done)
	monitor.Wait()
	for _, err := range errs {
		t.Error(err)
	}
	if enqueued.Load() != total {
		t.Errorf("EnqueueTasks moved %d task instances over all racers, want %d", enqueued.Load(), total)
	}
	if maxSeen.Load() > int64(pool.Slots) || maxSeenBF.Load() > int64(pool.BackfillSlots) {
		t.Errorf("claimers held %d attempts (%d of backfill runs) at once; the pool has %d slots (%d for backfills)",
			maxSeen.Load(), maxSeenBF.Load(), pool.Slots, pool.BackfillSlots)
	}
	t.Logf("claimers held at most %d attempts at once, %d of backfill runs", maxSeen.Load(), maxSeenBF.Load())
	for _, it := range items {
		if wins[it.TaskInstanceID] != 1 {
			t.Errorf("task instance %d claimed %d times, want exactly 1", it.TaskInstanceID, wins[it.TaskInstanceID])
		}
	}
	for _, r := range listRuns(t, stores[0], store.ListRunsParams{Pipelines: []string{"race"}, WithAttempts: true}) {
		ti := r.Tasks[0]
		if ti.State != store.TaskSuccess || ti.TryNumber != 1 || len(ti.Attempts) != 1 {
			t.Errorf("%s: %s try %d with %d attempts, want success, try 1, one attempt", r.DS, ti.State, ti.TryNumber, len(ti.Attempts))
		}
	}
}

// FenceRace has two writers, on stores a and b (the same store for one
// process, two stores on one state for two), take the lease from each
// other over and over, each appending runs through a store fenced by the
// generation it got: a batch reads the pipeline's last run and creates the
// next hour's, tagged with the writer's generation. A fenced write that
// lands after the lease moved on would put an older generation after a
// newer one: the generations must never decrease along the runs, each
// generation belongs to one writer, and losers get ErrFenced.
func FenceRace(t *testing.T, a, b store.Store) {
	t.Helper()
	const total = 120
	start := date(2025, 1, 1)
	var (
		created, fenced atomic.Int64
		mu              sync.Mutex
		errs            []error
		wg              sync.WaitGroup
		fail            = func(err error) { mu.Lock(); errs = append(errs, err); mu.Unlock() }
		deadline        = time.Now().Add(2 * time.Minute)
	)
	var ready sync.WaitGroup // both writers start together
	ready.Add(2)
	writer := func(st store.Store, self, other string) {
		defer wg.Done()
		ready.Done()
		ready.Wait()
		for created.Load() < total && time.Now().Before(deadline) {
			l, held, err := st.AcquireLease(ctx, store.AcquireLeaseParams{Name: "fence", Holder: self, Host: "h", TTL: time.Hour, Now: now, Stale: other})
			if err != nil || !held {
				fail(fmt.Errorf("%s: AcquireLease = %+v, %v, %v", self, l, held, err))
				return
			}
			f := st.Fenced("fence", self, l.Generation)
			for k := 0; k < 4 && created.Load() < total; k++ {
				var n int
				err := f.InTx(ctx, func(tx store.Store) error {
					runs, err := tx.ListRuns(ctx, store.ListRunsParams{Pipelines: []string{"fence"}})
					if err != nil {
						return err
					}
					next := start
					if len(runs) > 0 {
						next = runs[len(runs)-1].LogicalDate.Add(time.Hour)
					}
					n, err = tx.MaterializeRuns(ctx, store.MaterializeRunsParams{Pipeline: "fence", Kind: store.KindScheduled, Now: now,
						Runs: []store.RunSpec{{LogicalDate: next, DS: fmt.Sprintf("%08d %s", l.Generation, self), DataIntervalStart: next, DataIntervalEnd: next}}})
					return err
				})
				if errors.Is(err, store.ErrFenced) {
					fenced.Add(1)
					break
				}
				if err != nil && !errors.Is(err, store.ErrConflict) {
					fail(fmt.Errorf("%s: fenced write: %w", self, err))
					return
				}
				created.Add(int64(n))
				time.Sleep(200 * time.Microsecond) // let the other writer in
			}
		}
	}
	wg.Add(2)
	go writer(a, "host-a:1:1", "host-b:2:1")
	go writer(b, "host-b:2:1", "host-a:1:1")
	wg.Wait()
	for _, err := range errs {
		t.Error(err)
	}
	runs := listRuns(t, a, store.ListRunsParams{Pipelines: []string{"fence"}})
	if len(runs) < total {
		t.Errorf("%d runs, want at least %d", len(runs), total)
	}
	holderOf := map[string]string{}
	last := ""
	for i, r := range runs {
		gen, holder, _ := strings.Cut(r.DS, " ")
		if gen < last {
			t.Errorf("run %d written by generation %s after generation %s: a fenced write landed after a takeover", i, gen, last)
		}
		last = gen
		if h, ok := holderOf[gen]; ok && h != holder {
			t.Errorf("generation %s wrote for %s and %s", gen, h, holder)
		}
		holderOf[gen] = holder
		if i > 0 && !r.LogicalDate.Equal(runs[i-1].LogicalDate.Add(time.Hour)) {
			t.Errorf("run %d at %v after %v", i, r.LogicalDate, runs[i-1].LogicalDate)
		}
	}
	if len(holderOf) < 2 {
		t.Errorf("only %d generations wrote: the writers did not take the lease from each other", len(holderOf))
	}
	t.Logf("%d runs by %d generations, %d writes fenced", len(runs), len(holderOf), fenced.Load())
}

// CommitRace has goroutines per store request the commit of the same runs
// and then complete them: every request of a run returns the same outbox
// row, and of the completions of a row exactly one succeeds, the others
// finding no row (ErrNotFound).
func CommitRace(t *testing.T, stores []store.Store, goroutinesPerStore int) {
	t.Helper()
	const days = 20
	runs := materialize(t, stores[0], "commit", store.KindScheduled, daily(time.UTC, date(2025, 3, 1), days), "t")
	for _, r := range runs {
		runTask(t, stores[0], r.Tasks[0].ID, store.AttemptSuccess, store.TaskSuccess)
	}
	var (
		mu        sync.Mutex
		rowOf     = map[int64]map[int64]bool{}
		completed = map[int64]int{}
		errs      []error
		requested sync.WaitGroup // every request is made before any completion
		wg        sync.WaitGroup
	)
	requested.Add(len(stores) * goroutinesPerStore)
	for _, st := range stores {
		for g := 0; g < goroutinesPerStore; g++ {
			wg.Add(1)
			go func(st store.Store) {
				defer wg.Done()
				items := map[int64]int64{}
				for _, r := range runs {
					it, err := st.RequestCommit(ctx, store.RequestCommitParams{RunID: r.ID, Now: now})
					mu.Lock()
					if err != nil {
						errs = append(errs, fmt.Errorf("RequestCommit(%d): %w", r.ID, err))
					} else {
						if rowOf[r.ID] == nil {
							rowOf[r.ID] = map[int64]bool{}
						}
						rowOf[r.ID][it.ID] = true
						items[r.ID] = it.ID
					}
					mu.Unlock()
				}
				requested.Done()
				requested.Wait()
				for _, r := range runs {
					err := st.CompleteCommit(ctx, store.CompleteCommitParams{OutboxID: items[r.ID], State: store.RunSuccess, Now: now})
					mu.Lock()
					switch {
					case err == nil:
						completed[r.ID]++
					case !errors.Is(err, store.ErrNotFound):
						errs = append(errs, fmt.Errorf("CompleteCommit of run %d: %w", r.ID, err))
					}
					mu.Unlock()
				}
			}(st)
		}
	}
	wg.Wait()
	for _, err := range errs {
		t.Error(err)
	}
	for _, r := range runs {
		if len(rowOf[r.ID]) != 1 || completed[r.ID] != 1 {
			t.Errorf("run %d: %d outbox rows, completed %d times; want one row completed once", r.ID, len(rowOf[r.ID]), completed[r.ID])
		}
	}
	for _, r := range listRuns(t, stores[0], store.ListRunsParams{Pipelines: []string{"commit"}}) {
		if r.State != store.RunSuccess {
			t.Errorf("run %s is %s after its commit, want success", r.DS, r.State)
		}
	}
}
