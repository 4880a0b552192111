// Package storetest is the conformance suite every store backend passes:
// each operation of store.Store, its guards, and claims raced by concurrent
// schedulers.
package storetest

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	_ "time/tzdata" // Europe/Rome on machines without a zoneinfo database

	"github.com/rewind-dev/rewind/store"
)

// now is the suite's fixed clock.
var now = time.Date(2026, 1, 15, 12, 0, 0, 0, time.UTC)

var ctx = context.Background()

// Run runs the conformance suite. open must return a new, empty store for
// each call; the suite closes it.
func Run(t *testing.T, open func(t *testing.T) store.Store) {
	fresh := func(t *testing.T) store.Store {
		t.Helper()
		st := open(t)
		t.Cleanup(func() {
			if err := st.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
		})
		return st
	}
	tests := []struct {
		name string
		fn   func(t *testing.T, st store.Store)
	}{
		{"Pipelines", testPipelines},
		{"PausedFlag", testPaused},
		{"MaterializeIdempotent", testMaterializeIdempotent},
		{"MaterializeLeavesOtherKindAlone", testMaterializeOtherKind},
		{"MaterializeTasksOnlyForNewRuns", testMaterializeTasksOnlyForNewRuns},
		{"MaterializeRejectsBadInput", testMaterializeRejects},
		{"ListRunsOrderAndFilters", testListRunsOrderAndFilters},
		{"ListRunsWithTasksAndAttempts", testWithTasksAndAttempts},
		{"OffsetsPreserved", testOffsetsPreserved},
		{"RunAdmitAndFinish", testRunAdmitFinish},
		{"HappyPath", testHappyPath},
		{"ClaimConflict", testClaimConflict},
		{"UniqueAttemptPerTry", testUniqueAttemptPerTry},
		{"RetryPathCountsFailures", testRetryPath},
		{"InterruptedAndLostDoNotCount", testInterruptedLost},
		{"AttemptGuards", testAttemptGuards},
		{"SetTaskStatesGuard", testSetTaskStates},
		{"ClearTasksOnlyFailed", testClearOnlyFailed},
		{"ClearTasksAll", testClearAll},
		{"ClearTasksTaskFilter", testClearTaskFilter},
		{"ClearTasksDateWindow", testClearWindow},
		{"RunningAttempts", testRunningAttempts},
		{"FindAttempt", testFindAttempt},
		{"WatermarkWithGap", testWatermarkGap},
		{"WatermarkNotFound", testWatermarkNotFound},
		{"WatermarkAfterClear", testWatermarkAfterClear},
		{"Leases", testLeases},
		{"LeaseStaleTakeover", testLeaseStale},
		{"InTxCommitsTogether", testInTxCommit},
		{"TaskDurations", testTaskDurations},
		{"Backfills", testBackfills},
		{"ReprocessRuns", testReprocessRuns},
		{"SetWatermark", testSetWatermark},
		{"InTxRollsBack", testInTxRollback},
		{"ConcurrentClaims", func(t *testing.T, st store.Store) { ClaimRace(t, []store.Store{st}, 8) }},
		{"CatchupThrough", testCatchupThrough},
		{"EnqueueTasks", testEnqueueTasks},
		{"ClaimReadyOrderAndFields", testClaimReadyOrder},
		{"ClaimReadyCapacity", testClaimReadyCapacity},
		{"ClaimReadyFilters", testClaimReadyFilters},
		{"ClaimReadyRollsBackWithItsBatch", testClaimReadyRollback},
		{"UsageEmpty", testUsageEmpty},
		{"AttemptOnlyOnItsTry", testAttemptOnlyOnItsTry},
		{"SlurmJobID", testSlurmJobID},
		{"FinishRunGuard", testFinishRunGuard},
		{"ClearTasksClearsQueued", testClearQueued},
		{"ReprocessRunsResetsQueued", testReprocessQueued},
		{"ReprocessRunsLeavesItsOwn", testReprocessOwn},
		{"ClearHandsBackRunsOfStoppedBackfills", testClearDetaches},
		{"ReprocessRunsOfSomeTasks", testReprocessTasks},
		{"Owners", testOwners},
		{"RecoveryOfALostOwner", testRecoveryOfLostOwner},
		{"LeaseGeneration", testLeaseGeneration},
		{"FencedWrites", testFenced},
		{"FencedInsideInTx", testFencedInTx},
		{"Epoch", testEpoch},
		{"Outbox", testOutbox},
		{"CompleteCommitOfAClearedRun", testCompleteCommitCleared},
		{"TaskDurationsOnlyThePipeline", testTaskDurationsOtherPipeline},
		{"TaskDurationsLatestRuns", testTaskDurationsLatestRuns},
		{"ConcurrentClaimReady", func(t *testing.T, st store.Store) { ClaimReadyRace(t, []store.Store{st}, 4) }},
		{"ConcurrentFencedWriters", func(t *testing.T, st store.Store) { FenceRace(t, st, st) }},
		{"ConcurrentCommits", func(t *testing.T, st store.Store) { CommitRace(t, []store.Store{st}, 4) }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, fresh(t)) })
	}
}

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

// Helpers.

func date(y int, m time.Month, d int) time.Time { return time.Date(y, m, d, 0, 0, 0, 0, time.UTC) }

// daily returns n consecutive daily run specs from start, midnight in loc.
func daily(loc *time.Location, start time.Time, n int) []store.RunSpec {
	specs := make([]store.RunSpec, n)
	for i := range specs {
		d := time.Date(start.Year(), start.Month(), start.Day()+i, 0, 0, 0, 0, loc)
		e := time.Date(start.Year(), start.Month(), start.Day()+i+1, 0, 0, 0, 0, loc)
		specs[i] = store.RunSpec{LogicalDate: d, DS: d.Format("2006-01-02"), DataIntervalStart: d, DataIntervalEnd: e}
	}
	return specs
}

func tasks(names ...string) []store.TaskSpec {
	ts := make([]store.TaskSpec, len(names))
	for i, n := range names {
		ts[i] = store.TaskSpec{Name: n, Pool: "default"}
	}
	return ts
}

// materialize creates the runs and returns the pipeline's runs with tasks.
func materialize(t *testing.T, st store.Store, pipeline string, kind store.RunKind, specs []store.RunSpec, taskNames ...string) []store.Run {
	t.Helper()
	if _, err := st.MaterializeRuns(ctx, store.MaterializeRunsParams{
		Pipeline: pipeline, Kind: kind, Runs: specs, Tasks: tasks(taskNames...), Now: now,
	}); err != nil {
		t.Fatalf("MaterializeRuns: %v", err)
	}
	return listRuns(t, st, store.ListRunsParams{Pipelines: []string{pipeline}, WithTasks: true})
}

func listRuns(t *testing.T, st store.Store, p store.ListRunsParams) []store.Run {
	t.Helper()
	runs, err := st.ListRuns(ctx, p)
	if err != nil {
		t.Fatalf("ListRuns: %v", err)
	}
	return runs
}

// task returns the task instance of a run by name.
func task(t *testing.T, r store.Run, name string) store.TaskInstance {
	t.Helper()
	for _, ti := range r.Tasks {
		if ti.Task == name {
			return ti
		}
	}
	t.Fatalf("run %s has no task %s (tasks loaded: %d)", r.DS, name, len(r.Tasks))
	return store.TaskInstance{}
}

// reload returns the current state of one task instance with its attempts.
func reload(t *testing.T, st store.Store, id int64) store.TaskInstance {
	t.Helper()
	for _, r := range listRuns(t, st, store.ListRunsParams{WithAttempts: true}) {
		for _, ti := range r.Tasks {
			if ti.ID == id {
				return ti
			}
		}
	}
	t.Fatalf("task instance %d not found", id)
	return store.TaskInstance{}
}

func claim(t *testing.T, st store.Store, id int64) store.Attempt {
	t.Helper()
	a, err := st.ClaimTask(ctx, store.ClaimTaskParams{TaskInstanceID: id, Pool: "default", Host: "host-a", Now: now})
	if err != nil {
		t.Fatalf("ClaimTask(%d): %v", id, err)
	}
	return a
}

func start(t *testing.T, st store.Store, a store.Attempt) {
	t.Helper()
	if err := st.StartAttempt(ctx, store.StartAttemptParams{AttemptID: a.ID, PID: 4242, PIDStart: 99, Now: now}); err != nil {
		t.Fatalf("StartAttempt(%d): %v", a.ID, err)
	}
}

func intp(i int) *int { return &i }

// finish records an outcome the way the scheduler does.
func finish(t *testing.T, st store.Store, a store.Attempt, outcome store.AttemptState, taskState store.TaskState) {
	t.Helper()
	p := store.FinishAttemptParams{AttemptID: a.ID, State: outcome, TaskState: taskState, Now: now.Add(time.Minute)}
	switch outcome {
	case store.AttemptSuccess:
		p.ExitCode = intp(0)
	case store.AttemptSkipped:
		p.ExitCode = intp(99)
	case store.AttemptFailed:
		p.ExitCode = intp(1)
		p.CountFailure = true
	}
	if err := st.FinishAttempt(ctx, p); err != nil {
		t.Fatalf("FinishAttempt(%d, %s): %v", a.ID, outcome, err)
	}
}

// runTask claims, starts and finishes one attempt of a task instance.
func runTask(t *testing.T, st store.Store, id int64, outcome store.AttemptState, taskState store.TaskState) store.Attempt {
	t.Helper()
	a := claim(t, st, id)
	start(t, st, a)
	finish(t, st, a, outcome, taskState)
	return a
}

func wantErr(t *testing.T, what string, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Errorf("%s: got error %v, want %v", what, err, target)
	}
}

// Pipelines.

func testPipelines(t *testing.T, st store.Store) {
	p, err := st.UpsertPipeline(ctx, store.UpsertPipelineParams{Name: "daily_revenue", Hash: "h1", Now: now})
	if err != nil {
		t.Fatal(err)
	}
	if p.Name != "daily_revenue" || p.Hash != "h1" || p.Paused || !p.UpdatedAt.Equal(now) {
		t.Errorf("created pipeline = %+v", p)
	}
	p, err = st.UpsertPipeline(ctx, store.UpsertPipelineParams{Name: "daily_revenue", Hash: "h1", Now: now.Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	if !p.UpdatedAt.Equal(now) {
		t.Errorf("same hash moved UpdatedAt to %v", p.UpdatedAt)
	}
	p, err = st.UpsertPipeline(ctx, store.UpsertPipelineParams{Name: "daily_revenue", Hash: "h2", Now: now.Add(2 * time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	if p.Hash != "h2" || !p.UpdatedAt.Equal(now.Add(2*time.Hour)) {
		t.Errorf("changed hash: got %+v", p)
	}
	if _, err := st.UpsertPipeline(ctx, store.UpsertPipelineParams{Name: "a_first", Hash: "x", Now: now}); err != nil {
		t.Fatal(err)
	}
	got, err := st.GetPipeline(ctx, "daily_revenue")
	if err != nil || got.Hash != "h2" {
		t.Errorf("GetPipeline = %+v, %v", got, err)
	}
	list, err := st.ListPipelines(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 || list[0].Name != "a_first" || list[1].Name != "daily_revenue" {
		t.Errorf("ListPipelines = %+v, want a_first, daily_revenue", list)
	}
	_, err = st.GetPipeline(ctx, "nope")
	wantErr(t, "GetPipeline(unknown)", err, store.ErrNotFound)
}

func testPaused(t *testing.T, st store.Store) {
	if _, err := st.UpsertPipeline(ctx, store.UpsertPipelineParams{Name: "p", Hash: "h", Now: now}); err != nil {
		t.Fatal(err)
	}
	if err := st.SetPaused(ctx, store.SetPausedParams{Name: "p", Paused: true, Now: now}); err != nil {
		t.Fatal(err)
	}
	if p, err := st.GetPipeline(ctx, "p"); err != nil || !p.Paused {
		t.Errorf("after pause: %+v, %v", p, err)
	}
	if p, err := st.UpsertPipeline(ctx, store.UpsertPipelineParams{Name: "p", Hash: "h2", Now: now}); err != nil || !p.Paused {
		t.Errorf("upsert unpaused the pipeline: %+v, %v", p, err)
	}
	if err := st.SetPaused(ctx, store.SetPausedParams{Name: "p", Paused: false, Now: now}); err != nil {
		t.Fatal(err)
	}
	if p, err := st.GetPipeline(ctx, "p"); err != nil || p.Paused {
		t.Errorf("after unpause: %+v, %v", p, err)
	}
	wantErr(t, "SetPaused(unknown)", st.SetPaused(ctx, store.SetPausedParams{Name: "nope", Paused: true, Now: now}), store.ErrNotFound)
}

// Materialization.

func testMaterializeIdempotent(t *testing.T, st store.Store) {
	p := store.MaterializeRunsParams{
		Pipeline: "daily_revenue", Kind: store.KindScheduled,
		Runs: daily(time.UTC, date(2025, 7, 1), 10), Tasks: tasks("extract", "convert"), Now: now,
	}
	n, err := st.MaterializeRuns(ctx, p)
	if err != nil || n != 10 {
		t.Fatalf("first materialize = %d, %v; want 10", n, err)
	}
	n, err = st.MaterializeRuns(ctx, p)
	if err != nil || n != 0 {
		t.Fatalf("second materialize = %d, %v; want 0", n, err)
	}
	p.Runs = daily(time.UTC, date(2025, 7, 6), 10) // 5 existing, 5 new
	n, err = st.MaterializeRuns(ctx, p)
	if err != nil || n != 5 {
		t.Fatalf("overlapping materialize = %d, %v; want 5", n, err)
	}
	runs := listRuns(t, st, store.ListRunsParams{WithTasks: true})
	if len(runs) != 15 {
		t.Fatalf("%d runs, want 15", len(runs))
	}
	for _, r := range runs {
		if r.State != store.RunQueued || r.Kind != store.KindScheduled || !r.CreatedAt.Equal(now) ||
			!r.StartedAt.IsZero() || !r.EndedAt.IsZero() {
			t.Errorf("new run %s = %+v", r.DS, r)
		}
		if len(r.Tasks) != 2 {
			t.Errorf("run %s has %d task instances, want 2", r.DS, len(r.Tasks))
			continue
		}
		for _, ti := range r.Tasks {
			if ti.State != store.TaskScheduled || ti.TryNumber != 0 || ti.Failures != 0 || ti.Pool != "default" || ti.RunID != r.ID {
				t.Errorf("new task instance %s %s = %+v", r.DS, ti.Task, ti)
			}
		}
	}
}

func testMaterializeOtherKind(t *testing.T, st store.Store) {
	materialize(t, st, "p", store.KindScheduled, daily(time.UTC, date(2025, 11, 28), 1), "t")
	n, err := st.MaterializeRuns(ctx, store.MaterializeRunsParams{
		Pipeline: "p", Kind: store.KindBackfill, BackfillID: "bf1",
		Runs: daily(time.UTC, date(2025, 11, 28), 2), Tasks: tasks("t"), Now: now,
	})
	if err != nil || n != 1 {
		t.Fatalf("backfill materialize = %d, %v; want 1", n, err)
	}
	runs := listRuns(t, st, store.ListRunsParams{})
	if len(runs) != 2 {
		t.Fatalf("%d runs, want 2", len(runs))
	}
	if runs[0].Kind != store.KindScheduled || runs[0].BackfillID != "" {
		t.Errorf("existing run changed: kind %s backfill %q", runs[0].Kind, runs[0].BackfillID)
	}
	if runs[1].Kind != store.KindBackfill || runs[1].BackfillID != "bf1" {
		t.Errorf("new run: kind %s backfill %q, want backfill bf1", runs[1].Kind, runs[1].BackfillID)
	}
	// The same instant is the same run, whatever offset it is written with.
	rome, err := time.LoadLocation("Europe/Rome")
	if err != nil {
		t.Fatal(err)
	}
	same := date(2025, 11, 28).In(rome)
	n, err = st.MaterializeRuns(ctx, store.MaterializeRunsParams{
		Pipeline: "p", Kind: store.KindManual,
		Runs: []store.RunSpec{{LogicalDate: same, DS: "2025-11-28", DataIntervalStart: same, DataIntervalEnd: same.Add(24 * time.Hour)}},
		Now:  now,
	})
	if err != nil || n != 0 {
		t.Errorf("materialize of the same instant in another zone = %d, %v; want 0", n, err)
	}
}

func testMaterializeTasksOnlyForNewRuns(t *testing.T, st store.Store) {
	materialize(t, st, "p", store.KindScheduled, daily(time.UTC, date(2025, 7, 1), 1), "extract")
	runs := materialize(t, st, "p", store.KindScheduled, daily(time.UTC, date(2025, 7, 1), 2), "extract", "load")
	if len(runs) != 2 {
		t.Fatalf("%d runs, want 2", len(runs))
	}
	if len(runs[0].Tasks) != 1 || runs[0].Tasks[0].Task != "extract" {
		t.Errorf("existing run got tasks %+v, want only extract", runs[0].Tasks)
	}
	if len(runs[1].Tasks) != 2 {
		t.Errorf("new run has %d tasks, want 2", len(runs[1].Tasks))
	}
}

func testMaterializeRejects(t *testing.T, st store.Store) {
	cases := []store.MaterializeRunsParams{
		{Pipeline: "", Kind: store.KindScheduled, Runs: daily(time.UTC, date(2025, 7, 1), 1)},
		{Pipeline: "p", Kind: "nightly", Runs: daily(time.UTC, date(2025, 7, 1), 1)},
		{Pipeline: "p", Kind: store.KindScheduled, Runs: []store.RunSpec{{DS: "2025-07-01"}}},
	}
	for _, p := range cases {
		p.Now = now
		if n, err := st.MaterializeRuns(ctx, p); err == nil {
			t.Errorf("MaterializeRuns(%+v) = %d, nil; want an error", p, n)
		}
	}
	if runs := listRuns(t, st, store.ListRunsParams{}); len(runs) != 0 {
		t.Errorf("rejected input left %d runs", len(runs))
	}
}

// Runs.

func testListRunsOrderAndFilters(t *testing.T, st store.Store) {
	materialize(t, st, "zeta", store.KindScheduled, daily(time.UTC, date(2025, 7, 3), 2), "t")
	specs := daily(time.UTC, date(2025, 7, 1), 4)
	specs[0], specs[3] = specs[3], specs[0] // insertion order is not the listing order
	materialize(t, st, "alpha", store.KindScheduled, specs, "t")

	runs := listRuns(t, st, store.ListRunsParams{})
	var got []string
	for _, r := range runs {
		got = append(got, r.Pipeline+"/"+r.DS)
	}
	want := []string{"alpha/2025-07-01", "alpha/2025-07-02", "alpha/2025-07-03", "alpha/2025-07-04", "zeta/2025-07-03", "zeta/2025-07-04"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("order = %v, want %v", got, want)
	}
	if runs[0].Tasks != nil {
		t.Errorf("tasks filled without WithTasks")
	}

	if err := st.AdmitRun(ctx, store.AdmitRunParams{RunID: runs[1].ID, Now: now}); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		p    store.ListRunsParams
		want int
	}{
		{"pipeline", store.ListRunsParams{Pipelines: []string{"zeta"}}, 2},
		{"two pipelines", store.ListRunsParams{Pipelines: []string{"zeta", "alpha"}}, 6},
		{"unknown pipeline", store.ListRunsParams{Pipelines: []string{"nope"}}, 0},
		{"running", store.ListRunsParams{States: []store.RunState{store.RunRunning}}, 1},
		{"queued", store.ListRunsParams{States: []store.RunState{store.RunQueued}}, 5},
		{"queued or running", store.ListRunsParams{States: []store.RunState{store.RunQueued, store.RunRunning}}, 6},
		{"from inclusive", store.ListRunsParams{From: date(2025, 7, 3)}, 4},
		{"to inclusive", store.ListRunsParams{To: date(2025, 7, 2)}, 2},
		{"window", store.ListRunsParams{Pipelines: []string{"alpha"}, From: date(2025, 7, 2), To: date(2025, 7, 3)}, 2},
		{"empty window", store.ListRunsParams{From: date(2025, 7, 2).Add(time.Hour), To: date(2025, 7, 2).Add(2 * time.Hour)}, 0},
	}
	for _, c := range cases {
		if got := listRuns(t, st, c.p); len(got) != c.want {
			t.Errorf("%s: %d runs, want %d", c.name, len(got), c.want)
		}
	}
}

func testWithTasksAndAttempts(t *testing.T, st store.Store) {
	runs := materialize(t, st, "p", store.KindScheduled, daily(time.UTC, date(2025, 7, 1), 2), "zulu", "alpha", "mike")
	var names []string
	for _, ti := range runs[0].Tasks {
		names = append(names, ti.Task)
	}
	if fmt.Sprint(names) != "[alpha mike zulu]" {
		t.Errorf("tasks ordered %v, want by name", names)
	}
	id := task(t, runs[0], "mike").ID
	runTask(t, st, id, store.AttemptFailed, store.TaskUpForRetry)
	runTask(t, st, id, store.AttemptSuccess, store.TaskSuccess)

	withTasks := listRuns(t, st, store.ListRunsParams{WithTasks: true})
	if ti := task(t, withTasks[0], "mike"); ti.Attempts != nil {
		t.Errorf("attempts filled without WithAttempts: %+v", ti.Attempts)
	}
	all := listRuns(t, st, store.ListRunsParams{WithAttempts: true})
	ti := task(t, all[0], "mike")
	if len(ti.Attempts) != 2 || ti.Attempts[0].TryNumber != 1 || ti.Attempts[1].TryNumber != 2 {
		t.Fatalf("attempts = %+v, want tries 1 and 2", ti.Attempts)
	}
	if ti.Attempts[0].State != store.AttemptFailed || ti.Attempts[1].State != store.AttemptSuccess {
		t.Errorf("attempt states %s, %s", ti.Attempts[0].State, ti.Attempts[1].State)
	}
	if a := task(t, all[1], "mike").Attempts; a == nil || len(a) != 0 {
		t.Errorf("second run's task has attempts %#v, want an empty list", a)
	}
	empty := materialize(t, st, "no_tasks", store.KindManual, daily(time.UTC, date(2025, 7, 1), 1))
	if len(empty) != 1 || empty[0].Tasks == nil || len(empty[0].Tasks) != 0 {
		t.Errorf("run without tasks listed WithTasks = %#v, want an empty task list", empty)
	}
	// A filter applies to tasks and attempts as to runs.
	second := listRuns(t, st, store.ListRunsParams{From: date(2025, 7, 2), WithAttempts: true})
	if len(second) != 1 || len(second[0].Tasks) != 3 || len(task(t, second[0], "mike").Attempts) != 0 {
		t.Errorf("filtered listing = %+v", second)
	}
}

func testOffsetsPreserved(t *testing.T, st store.Store) {
	rome, err := time.LoadLocation("Europe/Rome")
	if err != nil {
		t.Fatal(err)
	}
	winter := time.Date(2025, 1, 15, 0, 0, 0, 0, rome)
	summer := time.Date(2025, 7, 15, 0, 0, 0, 0, rome)
	dstDay := time.Date(2025, 3, 30, 0, 0, 0, 0, rome) // a 23-hour day: +01:00 to +02:00
	specs := []store.RunSpec{
		{LogicalDate: winter, DS: "2025-01-15", DataIntervalStart: winter, DataIntervalEnd: winter.AddDate(0, 0, 1)},
		{LogicalDate: dstDay, DS: "2025-03-30", DataIntervalStart: dstDay, DataIntervalEnd: dstDay.AddDate(0, 0, 1)},
		{LogicalDate: summer, DS: "2025-07-15", DataIntervalStart: summer, DataIntervalEnd: summer.AddDate(0, 0, 1)},
	}
	materialize(t, st, "rome", store.KindScheduled, specs, "t")
	utc := daily(time.UTC, date(2025, 7, 15), 1)
	materialize(t, st, "utc", store.KindScheduled, utc, "t")

	offset := func(tm time.Time) int { _, off := tm.Zone(); return off }
	check := func(what string, got, want time.Time) {
		t.Helper()
		if !got.Equal(want) || offset(got) != offset(want) {
			t.Errorf("%s = %s, want %s", what, got.Format(time.RFC3339Nano), want.Format(time.RFC3339Nano))
		}
	}
	runs := listRuns(t, st, store.ListRunsParams{Pipelines: []string{"rome"}})
	if len(runs) != 3 {
		t.Fatalf("%d runs, want 3", len(runs))
	}
	for i, r := range runs {
		check(r.DS+" logical date", r.LogicalDate, specs[i].LogicalDate)
		check(r.DS+" interval start", r.DataIntervalStart, specs[i].DataIntervalStart)
		check(r.DS+" interval end", r.DataIntervalEnd, specs[i].DataIntervalEnd)
	}
	if got := runs[0].LogicalDate.Format(time.RFC3339); got != "2025-01-15T00:00:00+01:00" {
		t.Errorf("winter date prints %s", got)
	}
	if got := runs[2].LogicalDate.Format(time.RFC3339); got != "2025-07-15T00:00:00+02:00" {
		t.Errorf("summer date prints %s", got)
	}
	if got := runs[1].DataIntervalEnd.Sub(runs[1].DataIntervalStart); got != 23*time.Hour {
		t.Errorf("DST day interval is %v, want 23h", got)
	}
	u := listRuns(t, st, store.ListRunsParams{Pipelines: []string{"utc"}})
	if len(u) != 1 || u[0].LogicalDate.Format(time.RFC3339) != "2025-07-15T00:00:00Z" {
		t.Errorf("UTC run = %+v", u)
	}
	// Range filters compare instants: summer midnight in Rome is 22:00 UTC the day before.
	if got := listRuns(t, st, store.ListRunsParams{Pipelines: []string{"rome"}, From: date(2025, 7, 14).Add(22 * time.Hour), To: date(2025, 7, 14).Add(22 * time.Hour)}); len(got) != 1 {
		t.Errorf("instant filter found %d runs, want 1", len(got))
	}

	finishRuns(t, st, listRuns(t, st, store.ListRunsParams{Pipelines: []string{"rome"}, WithTasks: true}),
		store.RunSuccess, store.RunSuccess, store.RunSuccess)
	wm, err := st.AdvanceWatermark(ctx, store.AdvanceWatermarkParams{Pipeline: "rome", Now: now})
	if err != nil {
		t.Fatal(err)
	}
	check("watermark", wm.LogicalDate, summer)
	got, err := st.GetWatermark(ctx, "rome")
	if err != nil {
		t.Fatal(err)
	}
	check("stored watermark", got.LogicalDate, summer)
}

func testRunAdmitFinish(t *testing.T, st store.Store) {
	runs := materialize(t, st, "p", store.KindScheduled, daily(time.UTC, date(2025, 7, 1), 3), "t")
	admitted := now.Add(time.Minute)
	if err := st.AdmitRun(ctx, store.AdmitRunParams{RunID: runs[0].ID, Now: admitted}); err != nil {
		t.Fatal(err)
	}
	wantErr(t, "AdmitRun twice", st.AdmitRun(ctx, store.AdmitRunParams{RunID: runs[0].ID, Now: now}), store.ErrConflict)
	wantErr(t, "AdmitRun(unknown)", st.AdmitRun(ctx, store.AdmitRunParams{RunID: 987654, Now: now}), store.ErrNotFound)

	ended := now.Add(time.Hour)
	runTask(t, st, runs[0].Tasks[0].ID, store.AttemptSuccess, store.TaskSuccess)
	if err := st.FinishRun(ctx, store.FinishRunParams{RunID: runs[0].ID, State: store.RunSuccess, Now: ended}); err != nil {
		t.Fatal(err)
	}
	// A run whose tasks can never run fails without being admitted.
	setTasks(t, st, runs[1], store.TaskUpstreamFailed)
	if err := st.FinishRun(ctx, store.FinishRunParams{RunID: runs[1].ID, State: store.RunFailed, Now: ended}); err != nil {
		t.Fatal(err)
	}
	wantErr(t, "FinishRun twice", st.FinishRun(ctx, store.FinishRunParams{RunID: runs[0].ID, State: store.RunFailed, Now: ended}), store.ErrConflict)
	wantErr(t, "AdmitRun of a finished run", st.AdmitRun(ctx, store.AdmitRunParams{RunID: runs[0].ID, Now: now}), store.ErrConflict)
	wantErr(t, "FinishRun(unknown)", st.FinishRun(ctx, store.FinishRunParams{RunID: 987654, State: store.RunSuccess, Now: now}), store.ErrNotFound)
	if err := st.FinishRun(ctx, store.FinishRunParams{RunID: runs[2].ID, State: store.RunRunning, Now: now}); err == nil {
		t.Errorf("FinishRun to running succeeded")
	}

	got := listRuns(t, st, store.ListRunsParams{})
	if got[0].State != store.RunSuccess || !got[0].StartedAt.Equal(admitted) || !got[0].EndedAt.Equal(ended) {
		t.Errorf("finished run = %s started %v ended %v", got[0].State, got[0].StartedAt, got[0].EndedAt)
	}
	if got[1].State != store.RunFailed || !got[1].StartedAt.IsZero() || !got[1].EndedAt.Equal(ended) {
		t.Errorf("failed run = %s started %v ended %v", got[1].State, got[1].StartedAt, got[1].EndedAt)
	}
	if got[2].State != store.RunQueued {
		t.Errorf("untouched run is %s", got[2].State)
	}
}

// Task instances and attempts.

func testHappyPath(t *testing.T, st store.Store) {
	runs := materialize(t, st, "p", store.KindScheduled, daily(time.UTC, date(2025, 7, 1), 1), "extract")
	ti := runs[0].Tasks[0]
	if err := st.AdmitRun(ctx, store.AdmitRunParams{RunID: runs[0].ID, Now: now}); err != nil {
		t.Fatal(err)
	}

	a, err := st.ClaimTask(ctx, store.ClaimTaskParams{
		TaskInstanceID: ti.ID, Pool: "large", Host: "host-a", Owner: "owner-a", Now: now,
		LogPath: "/logs/p/2025-07-01/extract.{try}.log", Reason: "hot_dates",
	})
	if err != nil {
		t.Fatal(err)
	}
	if a.ID == 0 || a.TaskInstanceID != ti.ID || a.TryNumber != 1 || a.State != store.AttemptRunning ||
		a.Pool != "large" || a.Host != "host-a" || a.PID != 0 || a.ExitCode != nil || !a.EndedAt.IsZero() {
		t.Errorf("claimed attempt = %+v", a)
	}
	if a.LogPath != "/logs/p/2025-07-01/extract.1.log" || a.Reason != "hot_dates" {
		t.Errorf("log path %q, reason %q; want {try} replaced by 1 and the reason kept", a.LogPath, a.Reason)
	}
	if a.Owner != "owner-a" || !isNonce(a.Nonce) {
		t.Errorf("owner %q, nonce %q; want owner-a and 32 hex characters", a.Owner, a.Nonce)
	}
	got := reload(t, st, ti.ID)
	if got.State != store.TaskRunning || got.TryNumber != 1 || got.Pool != "large" {
		t.Errorf("after claim: %s try %d pool %s, want running try 1 pool large", got.State, got.TryNumber, got.Pool)
	}
	if at := got.Attempts[0]; at.Owner != a.Owner || at.Nonce != a.Nonce {
		t.Errorf("stored attempt owner %q nonce %q; want %q %q", at.Owner, at.Nonce, a.Owner, a.Nonce)
	}

	started := now.Add(time.Second)
	if err := st.StartAttempt(ctx, store.StartAttemptParams{AttemptID: a.ID, PID: 31337, PIDStart: 1 << 40, Now: started}); err != nil {
		t.Fatal(err)
	}
	got = reload(t, st, ti.ID)
	if got.State != store.TaskRunning {
		t.Errorf("after start: %s, want running", got.State)
	}
	if at := got.Attempts[0]; at.PID != 31337 || at.PIDStart != 1<<40 || !at.StartedAt.Equal(started) || at.State != store.AttemptRunning {
		t.Errorf("started attempt = %+v", at)
	}

	ended := now.Add(time.Minute)
	if err := st.FinishAttempt(ctx, store.FinishAttemptParams{
		AttemptID: a.ID, State: store.AttemptSuccess, ExitCode: intp(0), PeakRSS: 64 << 20,
		TaskState: store.TaskSuccess, Now: ended,
	}); err != nil {
		t.Fatal(err)
	}
	got = reload(t, st, ti.ID)
	if got.State != store.TaskSuccess || got.Failures != 0 || got.TryNumber != 1 || !got.UpdatedAt.Equal(ended) {
		t.Errorf("after success: %+v", got)
	}
	at := got.Attempts[0]
	if at.State != store.AttemptSuccess || at.ExitCode == nil || *at.ExitCode != 0 || at.PeakRSS != 64<<20 ||
		!at.EndedAt.Equal(ended) || at.Signal != "" || at.LogPath != a.LogPath {
		t.Errorf("finished attempt = %+v", at)
	}
	if err := st.FinishRun(ctx, store.FinishRunParams{RunID: runs[0].ID, State: store.RunSuccess, Now: ended}); err != nil {
		t.Fatal(err)
	}
	if ra, err := st.RunningAttempts(ctx); err != nil || len(ra) != 0 {
		t.Errorf("RunningAttempts = %+v, %v; want none", ra, err)
	}
}

func testClaimConflict(t *testing.T, st store.Store) {
	runs := materialize(t, st, "p", store.KindScheduled, daily(time.UTC, date(2025, 7, 1), 1), "t")
	id := runs[0].Tasks[0].ID
	a := claim(t, st, id)
	_, err := st.ClaimTask(ctx, store.ClaimTaskParams{TaskInstanceID: id, Now: now})
	wantErr(t, "claim of a claimed task", err, store.ErrConflict)
	start(t, st, a)
	_, err = st.ClaimTask(ctx, store.ClaimTaskParams{TaskInstanceID: id, Now: now})
	wantErr(t, "claim of a running task", err, store.ErrConflict)
	finish(t, st, a, store.AttemptSuccess, store.TaskSuccess)
	_, err = st.ClaimTask(ctx, store.ClaimTaskParams{TaskInstanceID: id, Now: now})
	wantErr(t, "claim of a successful task", err, store.ErrConflict)
	_, err = st.ClaimTask(ctx, store.ClaimTaskParams{TaskInstanceID: 987654, Now: now})
	wantErr(t, "claim of an unknown task", err, store.ErrNotFound)
	if got := reload(t, st, id); got.TryNumber != 1 || len(got.Attempts) != 1 {
		t.Errorf("refused claims changed the task: try %d, %d attempts", got.TryNumber, len(got.Attempts))
	}
	// An empty pool keeps the task instance's pool.
	other := materialize(t, st, "q", store.KindScheduled, daily(time.UTC, date(2025, 7, 1), 1), "t")
	b, err := st.ClaimTask(ctx, store.ClaimTaskParams{TaskInstanceID: other[0].Tasks[0].ID, Now: now})
	if err != nil || b.Pool != "default" {
		t.Errorf("claim without pool = %+v, %v; want pool default", b, err)
	}
}

func testUniqueAttemptPerTry(t *testing.T, st store.Store) {
	runs := materialize(t, st, "p", store.KindScheduled, daily(time.UTC, date(2025, 7, 1), 1), "t")
	id := runs[0].Tasks[0].ID
	seen := map[int64]bool{}
	for try := 1; try <= 3; try++ {
		a := claim(t, st, id)
		if a.TryNumber != try {
			t.Errorf("claim %d got try %d", try, a.TryNumber)
		}
		if seen[a.ID] {
			t.Errorf("attempt id %d reused", a.ID)
		}
		seen[a.ID] = true
		start(t, st, a)
		finish(t, st, a, store.AttemptFailed, store.TaskUpForRetry)
	}
	got := reload(t, st, id)
	if len(got.Attempts) != 3 {
		t.Fatalf("%d attempts, want 3", len(got.Attempts))
	}
	for i, a := range got.Attempts {
		if a.TryNumber != i+1 {
			t.Errorf("attempt %d has try %d", i, a.TryNumber)
		}
	}
	// A clear keeps counting tries: the next attempt is try 4, not a second try 1.
	if _, err := st.ClearTasks(ctx, store.ClearTasksParams{Pipeline: "p", From: date(2025, 7, 1), To: date(2025, 7, 1), Now: now}); err != nil {
		t.Fatal(err)
	}
	if a := claim(t, st, id); a.TryNumber != 4 {
		t.Errorf("claim after clear got try %d, want 4", a.TryNumber)
	}
}

func testRetryPath(t *testing.T, st store.Store) {
	runs := materialize(t, st, "p", store.KindScheduled, daily(time.UTC, date(2025, 7, 1), 1), "t")
	id := runs[0].Tasks[0].ID
	retryAt := now.Add(30 * time.Second)
	for try := 1; try <= 2; try++ {
		a := claim(t, st, id)
		start(t, st, a)
		if err := st.FinishAttempt(ctx, store.FinishAttemptParams{
			AttemptID: a.ID, State: store.AttemptFailed, ExitCode: intp(2), TaskState: store.TaskUpForRetry,
			CountFailure: true, NextTryAt: retryAt, Now: now,
		}); err != nil {
			t.Fatal(err)
		}
		got := reload(t, st, id)
		if got.State != store.TaskUpForRetry || got.Failures != try || !got.NextTryAt.Equal(retryAt) {
			t.Errorf("after failure %d: %s failures %d next %v", try, got.State, got.Failures, got.NextTryAt)
		}
	}
	a := claim(t, st, id)
	if got := reload(t, st, id); !got.NextTryAt.IsZero() {
		t.Errorf("claim kept NextTryAt %v", got.NextTryAt)
	}
	start(t, st, a)
	if err := st.FinishAttempt(ctx, store.FinishAttemptParams{
		AttemptID: a.ID, State: store.AttemptFailed, Signal: "killed", TaskState: store.TaskFailed, CountFailure: true, Now: now,
	}); err != nil {
		t.Fatal(err)
	}
	got := reload(t, st, id)
	if got.State != store.TaskFailed || got.Failures != 3 || got.TryNumber != 3 || len(got.Attempts) != 3 {
		t.Errorf("after last failure: %s failures %d try %d attempts %d", got.State, got.Failures, got.TryNumber, len(got.Attempts))
	}
	last := got.Attempts[2]
	if last.ExitCode != nil || last.Signal != "killed" || last.State != store.AttemptFailed {
		t.Errorf("killed attempt = exit %v signal %q state %s", last.ExitCode, last.Signal, last.State)
	}
	if c := got.Attempts[0].ExitCode; c == nil || *c != 2 {
		t.Errorf("first attempt exit code = %v, want 2", c)
	}
}

func testInterruptedLost(t *testing.T, st store.Store) {
	runs := materialize(t, st, "p", store.KindScheduled, daily(time.UTC, date(2025, 7, 1), 1), "t")
	id := runs[0].Tasks[0].ID
	runTask(t, st, id, store.AttemptInterrupted, store.TaskScheduled)
	if got := reload(t, st, id); got.State != store.TaskScheduled || got.Failures != 0 || got.TryNumber != 1 {
		t.Errorf("after interrupted: %s failures %d try %d", got.State, got.Failures, got.TryNumber)
	}
	a := claim(t, st, id) // lost before it even started
	finish(t, st, a, store.AttemptLost, store.TaskScheduled)
	got := reload(t, st, id)
	if got.State != store.TaskScheduled || got.Failures != 0 || got.TryNumber != 2 {
		t.Errorf("after lost: %s failures %d try %d", got.State, got.Failures, got.TryNumber)
	}
	if got.Attempts[0].State != store.AttemptInterrupted || got.Attempts[1].State != store.AttemptLost {
		t.Errorf("attempt states %s, %s", got.Attempts[0].State, got.Attempts[1].State)
	}
	if a := claim(t, st, id); a.TryNumber != 3 {
		t.Errorf("claim after lost got try %d, want 3", a.TryNumber)
	}
}

func testAttemptGuards(t *testing.T, st store.Store) {
	runs := materialize(t, st, "p", store.KindScheduled, daily(time.UTC, date(2025, 7, 1), 1), "t")
	id := runs[0].Tasks[0].ID
	a := claim(t, st, id)
	start(t, st, a)
	wantErr(t, "StartAttempt twice", st.StartAttempt(ctx, store.StartAttemptParams{AttemptID: a.ID, PID: 1, Now: now}), store.ErrConflict)
	finish(t, st, a, store.AttemptSuccess, store.TaskSuccess)
	wantErr(t, "FinishAttempt twice", st.FinishAttempt(ctx, store.FinishAttemptParams{
		AttemptID: a.ID, State: store.AttemptFailed, TaskState: store.TaskFailed, CountFailure: true, Now: now,
	}), store.ErrConflict)
	wantErr(t, "StartAttempt after finish", st.StartAttempt(ctx, store.StartAttemptParams{AttemptID: a.ID, PID: 1, Now: now}), store.ErrConflict)
	wantErr(t, "StartAttempt(unknown)", st.StartAttempt(ctx, store.StartAttemptParams{AttemptID: 987654, Now: now}), store.ErrNotFound)
	wantErr(t, "FinishAttempt(unknown)", st.FinishAttempt(ctx, store.FinishAttemptParams{
		AttemptID: 987654, State: store.AttemptSuccess, TaskState: store.TaskSuccess, Now: now,
	}), store.ErrNotFound)
	if got := reload(t, st, id); got.State != store.TaskSuccess || got.Failures != 0 || got.Attempts[0].State != store.AttemptSuccess {
		t.Errorf("refused transitions changed the task: %+v", got)
	}
	if err := st.FinishAttempt(ctx, store.FinishAttemptParams{AttemptID: a.ID, State: store.AttemptRunning, TaskState: store.TaskSuccess, Now: now}); err == nil {
		t.Errorf("FinishAttempt with outcome running succeeded")
	}
}

func testSetTaskStates(t *testing.T, st store.Store) {
	runs := materialize(t, st, "p", store.KindScheduled, daily(time.UTC, date(2025, 7, 1), 1), "a", "b", "c")
	r := runs[0]
	runTask(t, st, task(t, r, "a").ID, store.AttemptFailed, store.TaskFailed)
	runTask(t, st, task(t, r, "b").ID, store.AttemptSuccess, store.TaskSuccess)
	ids := []int64{task(t, r, "a").ID, task(t, r, "b").ID, task(t, r, "c").ID, 987654}
	n, err := st.SetTaskStates(ctx, store.SetTaskStatesParams{
		IDs: ids, From: []store.TaskState{store.TaskScheduled, store.TaskUpForRetry}, To: store.TaskUpstreamFailed, Now: now,
	})
	if err != nil || n != 1 {
		t.Fatalf("SetTaskStates = %d, %v; want 1", n, err)
	}
	want := map[string]store.TaskState{"a": store.TaskFailed, "b": store.TaskSuccess, "c": store.TaskUpstreamFailed}
	for _, ti := range listRuns(t, st, store.ListRunsParams{WithTasks: true})[0].Tasks {
		if ti.State != want[ti.Task] {
			t.Errorf("task %s is %s, want %s", ti.Task, ti.State, want[ti.Task])
		}
	}
	if n, err := st.SetTaskStates(ctx, store.SetTaskStatesParams{IDs: nil, From: []store.TaskState{store.TaskScheduled}, To: store.TaskSkipped, Now: now}); err != nil || n != 0 {
		t.Errorf("SetTaskStates(no ids) = %d, %v", n, err)
	}
	if _, err := st.SetTaskStates(ctx, store.SetTaskStatesParams{IDs: ids, From: []store.TaskState{store.TaskFailed}, To: "bogus", Now: now}); err == nil {
		t.Errorf("SetTaskStates to an unknown state succeeded")
	}
}

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

// states summarizes runs as "ds:runstate:extract,load" lines.
func states(runs []store.Run) []string {
	var out []string
	for _, r := range runs {
		s := r.DS[5:] + ":" + string(r.State) + ":"
		for i, ti := range r.Tasks {
			if i > 0 {
				s += ","
			}
			s += string(ti.State)
		}
		out = append(out, s)
	}
	return out
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

func testRunningAttempts(t *testing.T, st store.Store) {
	runs := materialize(t, st, "p", store.KindScheduled, daily(time.UTC, date(2025, 7, 1), 2), "extract", "load")
	a := claim(t, st, task(t, runs[0], "extract").ID)
	start(t, st, a)
	b := claim(t, st, task(t, runs[1], "load").ID) // claimed, process not started yet
	runTask(t, st, task(t, runs[1], "extract").ID, store.AttemptSuccess, store.TaskSuccess)

	ra, err := st.RunningAttempts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(ra) != 2 {
		t.Fatalf("RunningAttempts = %d, want 2", len(ra))
	}
	if ra[0].ID != a.ID || ra[0].Pipeline != "p" || ra[0].RunID != runs[0].ID || ra[0].Task != "extract" ||
		ra[0].PID != 4242 || ra[0].PIDStart != 99 || ra[0].Host != "host-a" {
		t.Errorf("first running attempt = %+v", ra[0])
	}
	if ra[1].ID != b.ID || ra[1].RunID != runs[1].ID || ra[1].Task != "load" || ra[1].PID != 0 {
		t.Errorf("second running attempt = %+v", ra[1])
	}
	finish(t, st, a, store.AttemptLost, store.TaskScheduled)
	if ra, err := st.RunningAttempts(ctx); err != nil || len(ra) != 1 {
		t.Errorf("after lost: %d running, %v; want 1", len(ra), err)
	}
}

func testFindAttempt(t *testing.T, st store.Store) {
	runs := materialize(t, st, "p", store.KindScheduled, daily(time.UTC, date(2025, 7, 1), 2), "t")
	id := runs[1].Tasks[0].ID
	first := runTask(t, st, id, store.AttemptFailed, store.TaskUpForRetry)
	second := runTask(t, st, id, store.AttemptSuccess, store.TaskSuccess)
	find := func(try int) (store.Attempt, error) {
		return st.FindAttempt(ctx, store.FindAttemptParams{Pipeline: "p", DS: "2025-07-02", Task: "t", TryNumber: try})
	}
	if a, err := find(0); err != nil || a.ID != second.ID {
		t.Errorf("latest = %+v, %v; want attempt %d", a, err, second.ID)
	}
	if a, err := find(1); err != nil || a.ID != first.ID || a.State != store.AttemptFailed {
		t.Errorf("try 1 = %+v, %v; want attempt %d", a, err, first.ID)
	}
	_, err := find(3)
	wantErr(t, "try 3", err, store.ErrNotFound)
	for _, p := range []store.FindAttemptParams{
		{Pipeline: "p", DS: "2025-07-01", Task: "t"}, // task never ran
		{Pipeline: "p", DS: "2025-07-03", Task: "t"},
		{Pipeline: "p", DS: "2025-07-02", Task: "other"},
		{Pipeline: "other", DS: "2025-07-02", Task: "t"},
	} {
		_, err := st.FindAttempt(ctx, p)
		wantErr(t, fmt.Sprintf("FindAttempt(%+v)", p), err, store.ErrNotFound)
	}
}

// Watermarks.

// finishRuns admits runs[i] and, for success or failed, first settles its
// task instances that could still run (success, or failed), then finishes
// it; queued leaves it alone. runs must carry their tasks.
func finishRuns(t *testing.T, st store.Store, runs []store.Run, states ...store.RunState) {
	t.Helper()
	for i, s := range states {
		if s == store.RunQueued {
			continue
		}
		if err := st.AdmitRun(ctx, store.AdmitRunParams{RunID: runs[i].ID, Now: now}); err != nil {
			t.Fatal(err)
		}
		if s == store.RunRunning {
			continue
		}
		to := store.TaskSuccess
		if s == store.RunFailed {
			to = store.TaskFailed
		}
		setTasks(t, st, runs[i], to)
		if err := st.FinishRun(ctx, store.FinishRunParams{RunID: runs[i].ID, State: s, Now: now}); err != nil {
			t.Fatal(err)
		}
	}
}

// setTasks moves the task instances of r that could still run (scheduled,
// queued, up_for_retry) to state to, as the scheduler would decide.
func setTasks(t *testing.T, st store.Store, r store.Run, to store.TaskState) {
	t.Helper()
	var ids []int64
	for _, ti := range r.Tasks {
		ids = append(ids, ti.ID)
	}
	if _, err := st.SetTaskStates(ctx, store.SetTaskStatesParams{
		IDs: ids, From: []store.TaskState{store.TaskScheduled, store.TaskQueued, store.TaskUpForRetry}, To: to, Now: now,
	}); err != nil {
		t.Fatal(err)
	}
}

func advance(t *testing.T, st store.Store, pipeline string) (store.Watermark, error) {
	t.Helper()
	return st.AdvanceWatermark(ctx, store.AdvanceWatermarkParams{Pipeline: pipeline, Now: now})
}

func testWatermarkGap(t *testing.T, st store.Store) {
	runs := materialize(t, st, "p", store.KindScheduled, daily(time.UTC, date(2025, 7, 1), 5), "t")
	runTask(t, st, runs[1].Tasks[0].ID, store.AttemptFailed, store.TaskFailed)
	finishRuns(t, st, runs, store.RunSuccess, store.RunFailed, store.RunSuccess, store.RunRunning, store.RunQueued)
	wm, err := advance(t, st, "p")
	if err != nil {
		t.Fatal(err)
	}
	if wm.Pipeline != "p" || !wm.LogicalDate.Equal(date(2025, 7, 1)) || !wm.UpdatedAt.Equal(now) {
		t.Errorf("watermark = %+v, want 2025-07-01", wm)
	}
	got, err := st.GetWatermark(ctx, "p")
	if err != nil || !got.LogicalDate.Equal(wm.LogicalDate) {
		t.Errorf("GetWatermark = %+v, %v", got, err)
	}

	// Re-running the failed day and finishing the rest moves it to the end.
	if _, err := st.ClearTasks(ctx, store.ClearTasksParams{Pipeline: "p", From: date(2025, 7, 2), To: date(2025, 7, 2), Now: now}); err != nil {
		t.Fatal(err)
	}
	finishRuns(t, st, runs, store.RunQueued, store.RunSuccess)
	setTasks(t, st, runs[3], store.TaskSuccess)
	if err := st.FinishRun(ctx, store.FinishRunParams{RunID: runs[3].ID, State: store.RunSuccess, Now: now}); err != nil {
		t.Fatal(err)
	}
	if wm, err := advance(t, st, "p"); err != nil || !wm.LogicalDate.Equal(date(2025, 7, 4)) {
		t.Errorf("watermark = %+v, %v; want 2025-07-04 (07-05 still queued)", wm, err)
	}
	finishRuns(t, st, runs, store.RunQueued, store.RunQueued, store.RunQueued, store.RunQueued, store.RunSuccess)
	if wm, err := advance(t, st, "p"); err != nil || !wm.LogicalDate.Equal(date(2025, 7, 5)) {
		t.Errorf("watermark = %+v, %v; want 2025-07-05", wm, err)
	}
}

func testWatermarkNotFound(t *testing.T, st store.Store) {
	_, err := advance(t, st, "p")
	wantErr(t, "AdvanceWatermark with no runs", err, store.ErrNotFound)
	_, err = st.GetWatermark(ctx, "p")
	wantErr(t, "GetWatermark with none", err, store.ErrNotFound)

	runs := materialize(t, st, "p", store.KindScheduled, daily(time.UTC, date(2025, 7, 1), 3), "t")
	finishRuns(t, st, runs, store.RunFailed, store.RunSuccess, store.RunSuccess)
	_, err = advance(t, st, "p")
	wantErr(t, "AdvanceWatermark with the first run failed", err, store.ErrNotFound)
	_, err = st.GetWatermark(ctx, "p")
	wantErr(t, "GetWatermark with the first run failed", err, store.ErrNotFound)
}

func testWatermarkAfterClear(t *testing.T, st store.Store) {
	runs := materialize(t, st, "p", store.KindScheduled, daily(time.UTC, date(2025, 7, 1), 3), "t")
	finishRuns(t, st, runs, store.RunSuccess, store.RunSuccess, store.RunSuccess)
	if wm, err := advance(t, st, "p"); err != nil || !wm.LogicalDate.Equal(date(2025, 7, 3)) {
		t.Fatalf("watermark = %+v, %v; want 2025-07-03", wm, err)
	}
	if _, err := st.ClearTasks(ctx, store.ClearTasksParams{Pipeline: "p", From: date(2025, 7, 2), To: date(2025, 7, 2), Now: now}); err != nil {
		t.Fatal(err)
	}
	if wm, err := advance(t, st, "p"); err != nil || !wm.LogicalDate.Equal(date(2025, 7, 1)) {
		t.Errorf("watermark after restating 07-02 = %+v, %v; want 2025-07-01", wm, err)
	}
	if wm, err := st.GetWatermark(ctx, "p"); err != nil || !wm.LogicalDate.Equal(date(2025, 7, 1)) {
		t.Errorf("stored watermark = %+v, %v; want 2025-07-01", wm, err)
	}
	// Another pipeline's runs do not count.
	other := materialize(t, st, "q", store.KindScheduled, daily(time.UTC, date(2025, 6, 1), 1), "t")
	finishRuns(t, st, other, store.RunFailed)
	if wm, err := advance(t, st, "p"); err != nil || !wm.LogicalDate.Equal(date(2025, 7, 1)) {
		t.Errorf("watermark with another pipeline failing = %+v, %v", wm, err)
	}
}

// Leases.

func acquire(t *testing.T, st store.Store, holder, stale string, at time.Time) (store.Lease, bool) {
	t.Helper()
	l, held, err := st.AcquireLease(ctx, store.AcquireLeaseParams{
		Name: "scheduler", Holder: holder, Host: "host-a", PID: len(holder), PIDStart: 7,
		TTL: 30 * time.Second, Now: at, Stale: stale,
	})
	if err != nil {
		t.Fatalf("AcquireLease(%s): %v", holder, err)
	}
	return l, held
}

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

// TaskDurations reports the latest successful attempts' durations per task.
func testTaskDurations(t *testing.T, st store.Store) {
	runs := materialize(t, st, "p", store.KindScheduled, daily(time.UTC, date(2025, 7, 1), 3), "a", "b")
	for i, r := range runs {
		for _, ti := range r.Tasks {
			att, err := st.ClaimTask(ctx, store.ClaimTaskParams{TaskInstanceID: ti.ID, Now: now})
			if err != nil {
				t.Fatal(err)
			}
			if err := st.StartAttempt(ctx, store.StartAttemptParams{AttemptID: att.ID, PID: 1, Now: now}); err != nil {
				t.Fatal(err)
			}
			state, task := store.AttemptSuccess, store.TaskSuccess
			if ti.Task == "b" && i == 2 {
				state, task = store.AttemptFailed, store.TaskFailed
			}
			if err := st.FinishAttempt(ctx, store.FinishAttemptParams{AttemptID: att.ID, State: state, TaskState: task,
				Now: now.Add(time.Duration(i+1) * time.Minute)}); err != nil {
				t.Fatal(err)
			}
		}
	}
	got, err := st.TaskDurations(ctx, store.TaskDurationsParams{Pipeline: "p", Limit: 2})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]time.Duration{"a": {3 * time.Minute, 2 * time.Minute}, "b": {2 * time.Minute, time.Minute}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("TaskDurations = %v; want %v (newest first, successes only, at most 2)", got, want)
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

func testSetWatermark(t *testing.T, st store.Store) {
	if err := st.SetWatermark(ctx, store.SetWatermarkParams{Pipeline: "p", LogicalDate: date(2025, 7, 3), Now: now}); err != nil {
		t.Fatal(err)
	}
	wm, err := st.GetWatermark(ctx, "p")
	if err != nil || !wm.LogicalDate.Equal(date(2025, 7, 3)) {
		t.Errorf("GetWatermark = %v, %v", wm.LogicalDate, err)
	}
	if err := st.SetWatermark(ctx, store.SetWatermarkParams{Pipeline: "p", Now: now}); err != nil {
		t.Fatal(err)
	}
	_, err = st.GetWatermark(ctx, "p")
	wantErr(t, "a removed watermark", err, store.ErrNotFound)
}

// The store as the one source of truth: routing, claiming by capacity,
// owners, fencing, the epoch and the outbox.

// isNonce reports whether s is 32 lower-case hex characters.
func isNonce(s string) bool {
	_, err := hex.DecodeString(s)
	return len(s) == 32 && err == nil && s == strings.ToLower(s)
}

func upsert(t *testing.T, st store.Store, name, hash string) store.Pipeline {
	t.Helper()
	p, err := st.UpsertPipeline(ctx, store.UpsertPipelineParams{Name: name, Hash: hash, Now: now})
	if err != nil {
		t.Fatalf("UpsertPipeline(%s): %v", name, err)
	}
	return p
}

func getPipeline(t *testing.T, st store.Store, name string) store.Pipeline {
	t.Helper()
	p, err := st.GetPipeline(ctx, name)
	if err != nil {
		t.Fatalf("GetPipeline(%s): %v", name, err)
	}
	return p
}

// materializeBackfill creates backfill runs of a backfill and returns the
// pipeline's runs with tasks.
func materializeBackfill(t *testing.T, st store.Store, pipeline, backfill string, specs []store.RunSpec, taskNames ...string) []store.Run {
	t.Helper()
	if _, err := st.MaterializeRuns(ctx, store.MaterializeRunsParams{
		Pipeline: pipeline, Kind: store.KindBackfill, BackfillID: backfill, Runs: specs, Tasks: tasks(taskNames...), Now: now,
	}); err != nil {
		t.Fatalf("MaterializeRuns(backfill %s): %v", backfill, err)
	}
	return listRuns(t, st, store.ListRunsParams{Pipelines: []string{pipeline}, WithTasks: true})
}

func enqueue(t *testing.T, st store.Store, at time.Time, items ...store.EnqueueItem) int {
	t.Helper()
	n, err := st.EnqueueTasks(ctx, store.EnqueueTasksParams{Items: items, Now: at})
	if err != nil {
		t.Fatalf("EnqueueTasks: %v", err)
	}
	return n
}

// enqueueRuns queues every task instance of runs in pool.
func enqueueRuns(t *testing.T, st store.Store, pool string, runs ...store.Run) int {
	t.Helper()
	var items []store.EnqueueItem
	for _, r := range runs {
		for _, ti := range r.Tasks {
			items = append(items, store.EnqueueItem{TaskInstanceID: ti.ID, Pool: pool, LogPath: "/logs/" + r.DS + "/" + ti.Task + ".{try}.log"})
		}
	}
	return enqueue(t, st, now, items...)
}

func claimReady(t *testing.T, st store.Store, p store.ClaimReadyParams) []store.ClaimedAttempt {
	t.Helper()
	if p.Now.IsZero() {
		p.Now = now
	}
	if p.Owner == "" {
		p.Owner = "owner-a"
	}
	if p.Host == "" {
		p.Host = "host-a"
	}
	got, err := st.ClaimReady(ctx, p)
	if err != nil {
		t.Fatalf("ClaimReady: %v", err)
	}
	return got
}

// claimedNames lists claims as "ds/task" (and "bf:" for backfill runs).
func claimedNames(cs []store.ClaimedAttempt) []string {
	var out []string
	for _, c := range cs {
		name := c.LogicalDate.Format("01-02") + "/" + c.Task
		if c.Kind == store.KindBackfill {
			name = "bf:" + name
		}
		out = append(out, name)
	}
	return out
}

func succeed(t *testing.T, st store.Store, a store.Attempt) {
	t.Helper()
	if err := st.FinishAttempt(ctx, store.FinishAttemptParams{AttemptID: a.ID, State: store.AttemptSuccess, ExitCode: intp(0),
		TaskState: store.TaskSuccess, Now: now.Add(time.Minute)}); err != nil {
		t.Fatalf("FinishAttempt(%d): %v", a.ID, err)
	}
}

func usageOf(t *testing.T, st store.Store) map[string]store.UsageRow {
	t.Helper()
	rows, err := st.Usage(ctx)
	if err != nil {
		t.Fatalf("Usage: %v", err)
	}
	out := map[string]store.UsageRow{}
	for _, u := range rows {
		out[fmt.Sprintf("%s/%s/%s/%v", u.Pool, u.Pipeline, u.Task, u.Backfill)] = u
	}
	return out
}

func epoch(t *testing.T, st store.Store) int64 {
	t.Helper()
	e, err := st.Epoch(ctx)
	if err != nil {
		t.Fatalf("Epoch: %v", err)
	}
	return e
}

func testCatchupThrough(t *testing.T, st store.Store) {
	if p := upsert(t, st, "p", "h1"); !p.CatchupThrough.IsZero() {
		t.Errorf("new pipeline CatchupThrough = %v, want zero", p.CatchupThrough)
	}
	through := func(runs []store.RunSpec, at time.Time) (int, error) {
		return st.MaterializeRuns(ctx, store.MaterializeRunsParams{
			Pipeline: "p", Kind: store.KindScheduled, Runs: runs, Tasks: tasks("t"), Through: at, Now: now,
		})
	}
	if n, err := through(daily(time.UTC, date(2025, 7, 1), 2), date(2025, 7, 2)); err != nil || n != 2 {
		t.Fatalf("MaterializeRuns with Through = %d, %v", n, err)
	}
	if got := getPipeline(t, st, "p").CatchupThrough; !got.Equal(date(2025, 7, 2)) {
		t.Errorf("CatchupThrough = %v, want 2025-07-02", got)
	}
	// Nothing due: no run, and the catchup still moves on.
	if n, err := through(nil, date(2025, 7, 5)); err != nil || n != 0 {
		t.Fatalf("MaterializeRuns without runs = %d, %v", n, err)
	}
	if got := getPipeline(t, st, "p").CatchupThrough; !got.Equal(date(2025, 7, 5)) {
		t.Errorf("CatchupThrough = %v, want 2025-07-05", got)
	}
	// It never moves back.
	if _, err := through(daily(time.UTC, date(2025, 7, 3), 1), date(2025, 7, 3)); err != nil {
		t.Fatal(err)
	}
	if got := getPipeline(t, st, "p").CatchupThrough; !got.Equal(date(2025, 7, 5)) {
		t.Errorf("CatchupThrough after an earlier Through = %v, want 2025-07-05", got)
	}
	if _, err := through(nil, time.Time{}); err != nil {
		t.Fatal(err)
	}
	if p := upsert(t, st, "p", "h1"); !p.CatchupThrough.Equal(date(2025, 7, 5)) {
		t.Errorf("same hash: CatchupThrough = %v, want kept", p.CatchupThrough)
	}
	if p := upsert(t, st, "p", "h2"); !p.CatchupThrough.IsZero() {
		t.Errorf("changed hash: CatchupThrough = %v, want reset to zero", p.CatchupThrough)
	}
	if got := getPipeline(t, st, "p").CatchupThrough; !got.IsZero() {
		t.Errorf("stored CatchupThrough after a hash change = %v", got)
	}
	// An instant in another zone is the same instant.
	rome, err := time.LoadLocation("Europe/Rome")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := through(nil, time.Date(2025, 7, 6, 0, 0, 0, 0, rome)); err != nil {
		t.Fatal(err)
	}
	if got := getPipeline(t, st, "p").CatchupThrough; !got.Equal(date(2025, 7, 5).Add(22 * time.Hour)) {
		t.Errorf("CatchupThrough = %v, want 2025-07-06T00:00+02:00", got)
	}
	// An unknown pipeline: nothing is created.
	_, err = st.MaterializeRuns(ctx, store.MaterializeRunsParams{Pipeline: "nope", Kind: store.KindScheduled,
		Runs: daily(time.UTC, date(2025, 7, 1), 1), Tasks: tasks("t"), Through: date(2025, 7, 1), Now: now})
	wantErr(t, "MaterializeRuns with Through for an unknown pipeline", err, store.ErrNotFound)
	if runs := listRuns(t, st, store.ListRunsParams{Pipelines: []string{"nope"}}); len(runs) != 0 {
		t.Errorf("refused MaterializeRuns created %d runs", len(runs))
	}
}

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

func runningAttempts(t *testing.T, st store.Store) []store.RunningAttempt {
	t.Helper()
	ra, err := st.RunningAttempts(ctx)
	if err != nil {
		t.Fatalf("RunningAttempts: %v", err)
	}
	return ra
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

// An attempt's outcome moves its task instance only on its own try, and a
// task instance moved on meanwhile does not take a pid.
func testAttemptOnlyOnItsTry(t *testing.T, st store.Store) {
	runs := materialize(t, st, "p", store.KindScheduled, daily(time.UTC, date(2025, 7, 1), 1), "t")
	id := runs[0].Tasks[0].ID
	enqueueRuns(t, st, "default", runs...)
	first := claimReady(t, st, store.ClaimReadyParams{Pools: []store.PoolCapacity{{Name: "default", Slots: 1}}, Limit: 1})
	if len(first) != 1 {
		t.Fatalf("claimed %d", len(first))
	}
	a := first[0].Attempt
	start(t, st, a)
	if ti := reload(t, st, id); ti.State != store.TaskRunning || ti.Attempts[0].PID != 4242 {
		t.Errorf("after StartAttempt: %s pid %d; want running, 4242", ti.State, ti.Attempts[0].PID)
	}
	wantErr(t, "StartAttempt twice", st.StartAttempt(ctx, store.StartAttemptParams{AttemptID: a.ID, PID: 1, Now: now}), store.ErrConflict)
	// The scheduler gives the task instance up (recovery) and queues it again.
	if n, err := st.SetTaskStates(ctx, store.SetTaskStatesParams{IDs: []int64{id}, From: []store.TaskState{store.TaskRunning},
		To: store.TaskScheduled, Now: now}); err != nil || n != 1 {
		t.Fatalf("SetTaskStates = %d, %v", n, err)
	}
	enqueueRuns(t, st, "default", runs...)
	// The old process reports: its attempt gets the outcome, the task stays queued.
	succeed(t, st, a)
	if ti := reload(t, st, id); ti.State != store.TaskQueued || ti.Attempts[0].State != store.AttemptSuccess {
		t.Errorf("late outcome: task %s attempt %s; want queued, success", ti.State, ti.Attempts[0].State)
	}
	second := claimReady(t, st, store.ClaimReadyParams{Pools: []store.PoolCapacity{{Name: "default", Slots: 1}}, Limit: 1})
	if len(second) != 1 || second[0].TryNumber != 2 {
		t.Fatalf("second claim = %+v, want try 2", second)
	}
	b := second[0].Attempt
	// The task instance moves on before the process starts: no pid for it.
	if _, err := st.SetTaskStates(ctx, store.SetTaskStatesParams{IDs: []int64{id}, From: []store.TaskState{store.TaskRunning},
		To: store.TaskUpstreamFailed, Now: now}); err != nil {
		t.Fatal(err)
	}
	wantErr(t, "StartAttempt of a task instance moved on", st.StartAttempt(ctx, store.StartAttemptParams{AttemptID: b.ID, PID: 7, Now: now}), store.ErrConflict)
	finish(t, st, b, store.AttemptInterrupted, store.TaskScheduled)
	if ti := reload(t, st, id); ti.State != store.TaskUpstreamFailed || ti.Attempts[1].PID != 0 || ti.Attempts[1].State != store.AttemptInterrupted {
		t.Errorf("after: task %s, attempt pid %d state %s", ti.State, ti.Attempts[1].PID, ti.Attempts[1].State)
	}
}

func testFinishRunGuard(t *testing.T, st store.Store) {
	runs := materialize(t, st, "p", store.KindScheduled, daily(time.UTC, date(2025, 7, 1), 3), "a", "b")
	r := runs[0]
	if err := st.AdmitRun(ctx, store.AdmitRunParams{RunID: r.ID, Now: now}); err != nil {
		t.Fatal(err)
	}
	refused := func(what string) {
		t.Helper()
		for _, state := range []store.RunState{store.RunSuccess, store.RunFailed} {
			wantErr(t, fmt.Sprintf("FinishRun(%s) with %s", state, what),
				st.FinishRun(ctx, store.FinishRunParams{RunID: r.ID, State: state, Now: now}), store.ErrConflict)
		}
		got := listRuns(t, st, store.ListRunsParams{Pipelines: []string{"p"}})[0]
		if got.State != store.RunRunning || !got.EndedAt.IsZero() {
			t.Errorf("refused FinishRun changed the run: %s ended %v", got.State, got.EndedAt)
		}
	}
	refused("scheduled task instances")
	enqueueRuns(t, st, "default", r)
	refused("queued task instances")
	got := claimReady(t, st, store.ClaimReadyParams{Pools: []store.PoolCapacity{{Name: "default", Slots: 1}}, Limit: 1})
	if len(got) != 1 || got[0].Task != "a" {
		t.Fatalf("claim = %v", claimedNames(got))
	}
	refused("a running task instance")
	if err := st.FinishAttempt(ctx, store.FinishAttemptParams{AttemptID: got[0].ID, State: store.AttemptFailed, ExitCode: intp(1),
		TaskState: store.TaskUpForRetry, CountFailure: true, NextTryAt: now.Add(time.Minute), Now: now}); err != nil {
		t.Fatal(err)
	}
	refused("a task instance up for retry")
	if _, err := st.SetTaskStates(ctx, store.SetTaskStatesParams{IDs: []int64{task(t, r, "a").ID}, From: []store.TaskState{store.TaskUpForRetry},
		To: store.TaskFailed, Now: now}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.SetTaskStates(ctx, store.SetTaskStatesParams{IDs: []int64{task(t, r, "b").ID}, From: []store.TaskState{store.TaskQueued},
		To: store.TaskUpstreamFailed, Now: now}); err != nil {
		t.Fatal(err)
	}
	wantErr(t, "FinishRun(success) with a failed task instance",
		st.FinishRun(ctx, store.FinishRunParams{RunID: r.ID, State: store.RunSuccess, Now: now}), store.ErrConflict)
	if err := st.FinishRun(ctx, store.FinishRunParams{RunID: r.ID, State: store.RunFailed, Now: now}); err != nil {
		t.Errorf("FinishRun(failed) with nothing left to run: %v", err)
	}
	// Success and skipped is success.
	runTask(t, st, task(t, runs[1], "a").ID, store.AttemptSuccess, store.TaskSuccess)
	runTask(t, st, task(t, runs[1], "b").ID, store.AttemptSkipped, store.TaskSkipped)
	if err := st.FinishRun(ctx, store.FinishRunParams{RunID: runs[1].ID, State: store.RunSuccess, Now: now}); err != nil {
		t.Errorf("FinishRun(success) with success and skipped: %v", err)
	}
	// A run without task instances has nothing to wait for.
	empty := materialize(t, st, "empty", store.KindManual, daily(time.UTC, date(2025, 7, 1), 1))
	if err := st.FinishRun(ctx, store.FinishRunParams{RunID: empty[0].ID, State: store.RunSuccess, Now: now}); err != nil {
		t.Errorf("FinishRun of a run without tasks: %v", err)
	}
	got2 := listRuns(t, st, store.ListRunsParams{Pipelines: []string{"p"}})
	if got2[0].State != store.RunFailed || got2[1].State != store.RunSuccess || got2[2].State != store.RunQueued {
		t.Errorf("runs = %s %s %s", got2[0].State, got2[1].State, got2[2].State)
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

func finishRun(t *testing.T, st store.Store, id int64, state store.RunState) {
	t.Helper()
	if err := st.AdmitRun(ctx, store.AdmitRunParams{RunID: id, Now: now}); err != nil && !errors.Is(err, store.ErrConflict) {
		t.Fatal(err)
	}
	if err := st.FinishRun(ctx, store.FinishRunParams{RunID: id, State: state, Now: now}); err != nil {
		t.Fatal(err)
	}
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

// printRuns prints runs with their task instances and attempts, exit codes
// by value.
func printRuns(runs []store.Run) string {
	var b strings.Builder
	for _, r := range runs {
		tis := r.Tasks
		r.Tasks = nil
		fmt.Fprintf(&b, "%+v\n", r)
		for _, ti := range tis {
			as := ti.Attempts
			ti.Attempts = nil
			fmt.Fprintf(&b, "  %+v\n", ti)
			for _, a := range as {
				exit := "nil"
				if a.ExitCode != nil {
					exit = fmt.Sprint(*a.ExitCode)
				}
				a.ExitCode = nil
				fmt.Fprintf(&b, "    %+v exit %s\n", a, exit)
			}
		}
	}
	return b.String()
}

// digest reads everything the writes could change.
func digest(t *testing.T, st store.Store) string {
	t.Helper()
	var b strings.Builder
	fmt.Fprintln(&b, printRuns(listRuns(t, st, store.ListRunsParams{WithAttempts: true})))
	pl, err := st.ListPipelines(ctx)
	fmt.Fprintln(&b, pl, err)
	bf, err := st.ListBackfills(ctx)
	fmt.Fprintln(&b, bf, err)
	ob, err := st.ListOutbox(ctx, nil)
	fmt.Fprintln(&b, ob, err)
	u, err := st.Usage(ctx)
	fmt.Fprintln(&b, u, err)
	wm, err := st.GetWatermark(ctx, "p")
	fmt.Fprintln(&b, wm, err)
	o, err := st.GetOwner(ctx, "o1")
	fmt.Fprintln(&b, o, err)
	fmt.Fprintln(&b, epoch(t, st))
	return b.String()
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
		called := false
		err := writes[name](f)
		wantErr(t, name+" after a takeover", err, store.ErrFenced)
		if store.IsUnavailable(err) {
			t.Errorf("%s: IsUnavailable(ErrFenced) = true", name)
		}
		if name == "InTx" {
			err := f.InTx(ctx, func(store.Store) error { called = true; return nil })
			wantErr(t, "empty InTx after a takeover", err, store.ErrFenced)
			if called {
				t.Errorf("InTx of a fenced store ran its function")
			}
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

func testTaskDurationsOtherPipeline(t *testing.T, st store.Store) {
	for _, name := range []string{"p", "q"} {
		runs := materialize(t, st, name, store.KindScheduled, daily(time.UTC, date(2025, 7, 1), 2), "a")
		for i, r := range runs {
			a := claim(t, st, r.Tasks[0].ID)
			d := time.Duration(i+1) * time.Minute
			if name == "q" {
				d *= 10
			}
			if err := st.FinishAttempt(ctx, store.FinishAttemptParams{AttemptID: a.ID, State: store.AttemptSuccess, TaskState: store.TaskSuccess, Now: now.Add(d)}); err != nil {
				t.Fatal(err)
			}
		}
	}
	got, err := st.TaskDurations(ctx, store.TaskDurationsParams{Pipeline: "p", Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string][]time.Duration{"a": {2 * time.Minute, time.Minute}}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("TaskDurations(p) = %v; want %v", got, want)
	}
	if got, err := st.TaskDurations(ctx, store.TaskDurationsParams{Pipeline: "nope"}); err != nil || len(got) != 0 {
		t.Errorf("TaskDurations(nope) = %v, %v", got, err)
	}
}

// TaskDurations looks at the pipeline's latest TaskDurationsRuns(Limit)
// runs by logical date, not at its whole history: its cost is bounded.
func testTaskDurationsLatestRuns(t *testing.T, st store.Store) {
	const limit = 1
	n := store.TaskDurationsRuns(limit) + 2
	runs := materialize(t, st, "p", store.KindScheduled, daily(time.UTC, date(2025, 7, 1), n), "a")
	for i, r := range runs {
		a := claim(t, st, r.Tasks[0].ID)
		state, task := store.AttemptFailed, store.TaskFailed
		if i < 2 || i == n-1 {
			state, task = store.AttemptSuccess, store.TaskSuccess // the two oldest, and the newest
		}
		if err := st.FinishAttempt(ctx, store.FinishAttemptParams{AttemptID: a.ID, State: state, TaskState: task, Now: now.Add(time.Duration(i+1) * time.Minute)}); err != nil {
			t.Fatal(err)
		}
	}
	got, err := st.TaskDurations(ctx, store.TaskDurationsParams{Pipeline: "p", Limit: limit})
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string][]time.Duration{"a": {time.Duration(n) * time.Minute}}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("TaskDurations = %v; want %v (the newest success only)", got, want)
	}
	// With a larger limit, the older runs are looked at too.
	got, err = st.TaskDurations(ctx, store.TaskDurationsParams{Pipeline: "p", Limit: 5})
	if err != nil || len(got["a"]) != 3 {
		t.Errorf("TaskDurations(limit 5) = %v, %v; want the 3 successes", got, err)
	}
}

// An attempt submitted to Slurm records its job id in place of a pid: read
// back with the attempt (runs, running attempts), started once only.
func testSlurmJobID(t *testing.T, st store.Store) {
	runs := materialize(t, st, "p", store.KindScheduled, daily(time.UTC, date(2025, 7, 1), 2), "t")
	enqueueRuns(t, st, "default", runs...)
	got := claimReady(t, st, store.ClaimReadyParams{Pools: []store.PoolCapacity{{Name: "default", Slots: 2}}, Limit: 2})
	if len(got) != 2 {
		t.Fatalf("claimed %d", len(got))
	}
	slurm, local := got[0].Attempt, got[1].Attempt
	if slurm.JobID != "" {
		t.Errorf("a claimed attempt has job id %q", slurm.JobID)
	}
	if err := st.StartAttempt(ctx, store.StartAttemptParams{AttemptID: slurm.ID, JobID: "4711", Now: now}); err != nil {
		t.Fatalf("StartAttempt with a job id: %v", err)
	}
	start(t, st, local)
	wantErr(t, "StartAttempt of a submitted attempt again", st.StartAttempt(ctx, store.StartAttemptParams{AttemptID: slurm.ID, JobID: "4712", Now: now}), store.ErrConflict)
	wantErr(t, "StartAttempt of a submitted attempt with a pid", st.StartAttempt(ctx, store.StartAttemptParams{AttemptID: slurm.ID, PID: 5, Now: now}), store.ErrConflict)
	jobs := map[int64]string{}
	for _, ra := range runningAttempts(t, st) {
		jobs[ra.ID] = ra.JobID
	}
	if len(jobs) != 2 || jobs[slurm.ID] != "4711" || jobs[local.ID] != "" {
		t.Errorf("running attempts' job ids = %v, want %d: 4711 and %d: none", jobs, slurm.ID, local.ID)
	}
	if ti := reload(t, st, slurm.TaskInstanceID); len(ti.Attempts) != 1 || ti.Attempts[0].JobID != "4711" || ti.Attempts[0].PID != 0 {
		t.Errorf("attempt read back: %+v", ti.Attempts)
	}
	succeed(t, st, slurm)
	if ti := reload(t, st, slurm.TaskInstanceID); ti.Attempts[0].JobID != "4711" || ti.Attempts[0].State != store.AttemptSuccess {
		t.Errorf("finished attempt: %+v", ti.Attempts[0])
	}
}
