package scheduler_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rewind-dev/rewind/dsl"
	"github.com/rewind-dev/rewind/scheduler"
	"github.com/rewind-dev/rewind/store"
	"github.com/rewind-dev/rewind/store/pgtest"
)

// The engine's store is the truth: these tests change the state under a
// running engine, cut its context at chosen store calls, and leave attempts
// to owners on other hosts, on every backend.

// backends runs fn on a fresh SQLite state and on a fresh PostgreSQL
// database (skipped where none is configured outside CI).
func backends(t *testing.T, fn func(t *testing.T, dsn stateFor)) {
	t.Run("sqlite", func(t *testing.T) {
		fn(t, func(_ *testing.T, dir string) string { return "sqlite:" + filepath.Join(dir, ".rewind", "state.db") })
	})
	t.Run("postgres", func(t *testing.T) {
		pgtest.DSN(t) // skips here when no server is configured
		fn(t, func(t *testing.T, _ string) string { return pgtest.DSN(t) })
	})
}

// stateFor names a fresh state for a test whose workspace is dir.
type stateFor func(t *testing.T, dir string) string

// newEnvOn is newEnv on the state dsn names.
func newEnvOn(t *testing.T, hcl string, dsn stateFor) *env {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "main.hcl"), []byte(hcl), 0o644); err != nil {
		t.Fatal(err)
	}
	ws, diags := dsl.Load(dir, dsl.LoadOptions{})
	if diags.HasErrors() {
		t.Fatalf("load: %s", diags.Error())
	}
	state := dsn(t, dir)
	st, err := store.Open(context.Background(), state)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return &env{t: t, dir: dir, st: st, ws: ws, home: filepath.Join(dir, ".rewind"), state: state}
}

// faultStore cancels the execution right after the n-th ClaimReady: a
// deterministic Ctrl-C in the middle of a pass that claims.
type faultStore struct {
	store.Store
	calls  *atomic.Int32
	n      int32
	cancel func()
}

func (f *faultStore) wrap(s store.Store) *faultStore {
	return &faultStore{Store: s, calls: f.calls, n: f.n, cancel: f.cancel}
}

func (f *faultStore) Fenced(lease, holder string, gen int64) store.Store {
	return f.wrap(f.Store.Fenced(lease, holder, gen))
}

func (f *faultStore) InTx(ctx context.Context, fn func(store.Store) error) error {
	return f.Store.InTx(ctx, func(tx store.Store) error { return fn(f.wrap(tx)) })
}

func (f *faultStore) ClaimReady(ctx context.Context, p store.ClaimReadyParams) ([]store.ClaimedAttempt, error) {
	got, err := f.Store.ClaimReady(ctx, p)
	if f.calls.Add(1) == f.n {
		f.cancel()
	}
	return got, err
}

const shortTasks = `
pipeline "p" {
  schedule        = "@hourly"
  start_date      = "2025-07-01"
  max_active_runs = 16
  task "a" {
    command = "echo \"start $REWIND_LOGICAL_DATE a\" >> events.log; echo \"end $REWIND_LOGICAL_DATE a\" >> events.log"
  }
  task "b" {
    depends_on = [task.a]
    command    = "echo \"start $REWIND_LOGICAL_DATE b\" >> events.log; sleep 0.02; echo \"end $REWIND_LOGICAL_DATE b\" >> events.log"
  }
}
`

// Ctrl-C cut in the middle of the N-th claim, for several N: the execution
// returns (never hangs, never fails with a store error), reports the
// interrupt, and the next one finishes with no ended task run twice.
func TestInterruptAfterNthClaim(t *testing.T) {
	backends(t, func(t *testing.T, dsn stateFor) {
		for _, n := range []int32{1, 2, 5, 13} {
			t.Run(fmt.Sprint("claim", n), func(t *testing.T) {
				e := newEnvOn(t, shortTasks, dsn)
				now := utc("2025-07-05T04:00:00Z") // 100 runs
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				fs := &faultStore{Store: e.st, calls: &atomic.Int32{}, n: n, cancel: cancel}
				done := make(chan struct{})
				var sum *scheduler.Summary
				var err error
				go func() {
					defer close(done)
					sum, err = scheduler.Run(ctx, scheduler.Options{Store: fs, Workspace: e.ws, Home: e.home, Catchup: true, Now: now, Grace: 5 * time.Second})
				}()
				select {
				case <-done:
				case <-time.After(60 * time.Second):
					t.Fatal("the interrupted execution never returned")
				}
				if err != nil {
					t.Fatalf("interrupted execution failed: %v", err)
				}
				if !sum.Interrupted {
					t.Fatalf("summary does not say interrupted: %+v", sum)
				}
				again := e.run(scheduler.Options{Catchup: true, Now: now})
				if again.Failed() || again.Interrupted {
					t.Fatalf("resume: %+v", again)
				}
				// A task's "end" line may repeat only after an attempt that was
				// still running when the interrupt came (recorded
				// interrupted); an attempt that ended is never run again.
				ends := map[string]int{}
				for _, l := range e.events("events.log") {
					if strings.HasPrefix(l, "end ") {
						ends[l]++
					}
				}
				if len(ends) != 200 {
					t.Errorf("%d distinct task ends, want 200", len(ends))
				}
				for _, r := range e.runs("p") {
					for _, ti := range r.Tasks {
						l := "end " + r.LogicalDate.UTC().Format(time.RFC3339) + " " + ti.Task
						interrupted := 0
						for _, a := range ti.Attempts {
							if a.State == store.AttemptInterrupted {
								interrupted++
							}
						}
						if ends[l] < 1 || ends[l] > 1+interrupted {
							t.Errorf("%q %d times with %d interrupted attempts", l, ends[l], interrupted)
						}
					}
				}
				for _, r := range e.runs("p") {
					if r.State != store.RunSuccess {
						t.Errorf("run %s is %s", r.LogicalDate.Format(time.RFC3339), r.State)
					}
					for _, ti := range r.Tasks {
						ok := 0
						for _, a := range ti.Attempts {
							if a.State == store.AttemptSuccess {
								ok++
							} else if a.State != store.AttemptInterrupted {
								t.Errorf("%s %s try %d: %s", r.DS, ti.Task, a.TryNumber, a.State)
							}
						}
						if ok != 1 {
							t.Errorf("%s %s: %d successful attempts", r.LogicalDate.Format(time.RFC3339), ti.Task, ok)
						}
					}
				}
			})
		}
	})
}

// clear --task a of a run while it executes: a runs again, and the run
// ends success only after a's second attempt.
func TestClearWhileRunning(t *testing.T) {
	backends(t, func(t *testing.T, dsn stateFor) {
		e := newEnvOn(t, `
pipeline "p" {
  schedule   = "@daily"
  start_date = "2025-07-01"
  end_date   = "2025-07-01"
  task "a" {
    command = "echo a >> a.log"
  }
  task "b" {
    command = "touch b.started; while [ ! -e b.release ]; do sleep 0.02; done"
  }
}
`, dsn)
		done := make(chan *scheduler.Summary)
		go func() { done <- e.run(scheduler.Options{Now: utc("2025-07-02T00:00:00Z")}) }()
		waitFile(t, filepath.Join(e.dir, "b.started"))
		waitLines(t, e, "a.log", 1)
		// Clear once a's success is in the state (the engine records it in
		// its next batch; a running task instance is never cleared).
		for deadline := time.Now().Add(30 * time.Second); ; {
			r := e.runs("p")[0]
			done := false
			for _, ti := range r.Tasks {
				done = done || (ti.Task == "a" && ti.State == store.TaskSuccess)
			}
			if done {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("a's success never reached the state")
			}
			time.Sleep(10 * time.Millisecond)
		}
		// As `rewind clear p --task a` does, from another Store.
		other, err := store.Open(context.Background(), e.state)
		if err != nil {
			t.Fatal(err)
		}
		defer other.Close()
		n, err := other.ClearTasks(context.Background(), store.ClearTasksParams{Pipeline: "p", From: utc("2025-07-01T00:00:00Z"), To: utc("2025-07-01T00:00:00Z"), Task: "a", Now: time.Now()})
		if err != nil || n != 1 {
			t.Fatalf("clear: %d, %v", n, err)
		}
		waitLines(t, e, "a.log", 2)
		if err := os.WriteFile(filepath.Join(e.dir, "b.release"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
		sum := <-done
		if sum.Failed() {
			t.Fatalf("run failed: %+v", sum)
		}
		r := e.runs("p")[0]
		if r.State != store.RunSuccess {
			t.Fatalf("run is %s", r.State)
		}
		var a store.TaskInstance
		for _, ti := range r.Tasks {
			if ti.Task == "a" {
				a = ti
			}
		}
		if len(a.Attempts) != 2 || a.State != store.TaskSuccess {
			t.Fatalf("a: %s with %d attempts, want success with 2", a.State, len(a.Attempts))
		}
		if r.EndedAt.Before(a.Attempts[1].EndedAt) {
			t.Errorf("run ended at %s, before a's second attempt ended at %s", r.EndedAt, a.Attempts[1].EndedAt)
		}
	})
}

// pause while a catchup runs: within the engine's re-read period no new run
// of the pipeline starts.
func TestPauseWhileRunning(t *testing.T) {
	e := newEnv(t, `
pipeline "p" {
  schedule        = "@daily"
  start_date      = "2025-07-01"
  max_active_runs = 1
  task "a" {
    command = "echo $REWIND_DS >> started.log; sleep 0.2"
  }
}
`)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = scheduler.Run(ctx, scheduler.Options{Store: e.st, Workspace: e.ws, Home: e.home, Now: utc("2025-08-01T00:00:00Z"), Grace: time.Second})
	}()
	waitLines(t, e, "started.log", 2)
	if err := e.st.SetPaused(context.Background(), store.SetPausedParams{Name: "p", Paused: true, Now: time.Now()}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second)
	n := len(e.events("started.log"))
	time.Sleep(2 * time.Second)
	if m := len(e.events("started.log")); m != n {
		t.Errorf("%d runs started between 2 s and 4 s after the pause", m-n)
	}
	cancel()
	<-done
}

// An attempt owned by a live rewind on another host is not run again by a
// rewind that takes over the state; once that owner's heartbeat expires, it
// is lost and runs again (without using a retry).
func TestForeignOwnerKeepsItsAttempts(t *testing.T) {
	backends(t, func(t *testing.T, dsn stateFor) {
		e := newEnvOn(t, `
pipeline "p" {
  schedule   = "@daily"
  start_date = "2025-07-01"
  end_date   = "2025-07-01"
  task "a" {
    command = "echo $REWIND_TRY_NUMBER >> ran.log"
  }
}
`, dsn)
		ctx := context.Background()
		now := utc("2025-07-02T00:00:00Z")
		def := e.ws.Pipeline("p")
		if _, err := e.st.UpsertPipeline(ctx, store.UpsertPipelineParams{Name: "p", Hash: def.Hash, Now: time.Now()}); err != nil {
			t.Fatal(err)
		}
		if _, err := scheduler.Materialize(ctx, e.st, scheduler.MaterializeParams{Pipeline: def, Catchup: true, Now: now}); err != nil {
			t.Fatal(err)
		}
		run := e.runs("p")[0]
		if err := e.st.AdmitRun(ctx, store.AdmitRunParams{RunID: run.ID, Now: time.Now()}); err != nil {
			t.Fatal(err)
		}
		// The other host's rewind claimed the task and keeps heartbeating.
		owner := store.HeartbeatParams{ID: "otherhost:4242:1:feedface", Host: "otherhost", PID: 4242, PIDStart: 1, TTL: 2 * time.Second}
		beat := func() {
			owner.Now = time.Now()
			if err := e.st.Heartbeat(ctx, owner); err != nil {
				t.Error(err)
			}
		}
		beat()
		if _, err := e.st.EnqueueTasks(ctx, store.EnqueueTasksParams{Items: []store.EnqueueItem{{TaskInstanceID: run.Tasks[0].ID, Pool: "default", LogPath: filepath.Join(e.home, "other.{try}.log")}}, Now: time.Now()}); err != nil {
			t.Fatal(err)
		}
		claimed, err := e.st.ClaimReady(ctx, store.ClaimReadyParams{Pools: []store.PoolCapacity{{Name: "default", Slots: 16, BackfillSlots: 16}}, Owner: owner.ID, Host: owner.Host, Limit: 1, Now: time.Now()})
		if err != nil || len(claimed) != 1 {
			t.Fatalf("claim: %v, %v", claimed, err)
		}
		stop := make(chan struct{})
		var wg sync.WaitGroup
		wg.Add(1)
		beats := 6 // 3 s of heartbeats
		go func() {
			defer wg.Done()
			for range beats {
				select {
				case <-stop:
					return
				case <-time.After(500 * time.Millisecond):
					beat()
				}
			}
		}()
		start := time.Now()
		sum := e.run(scheduler.Options{Now: now})
		close(stop)
		wg.Wait()
		if sum.Failed() {
			t.Fatalf("run failed: %+v", sum)
		}
		ran := e.events("ran.log")
		if len(ran) != 1 || ran[0] != "2" {
			t.Fatalf("ran %v, want only try 2 (after the owner's lease.Heartbeat expired)", ran)
		}
		ti := e.runs("p")[0].Tasks[0]
		if len(ti.Attempts) != 2 || ti.Attempts[0].State != store.AttemptLost || ti.Attempts[1].State != store.AttemptSuccess {
			t.Fatalf("attempts %+v, want lost then success", ti.Attempts)
		}
		// The second try started only after the owner's last heartbeat
		// expired: 3 s of heartbeats plus their 2 s TTL.
		if got := ti.Attempts[1].StartedAt.Sub(start); got < 3*time.Second {
			t.Errorf("try 2 started %s after the takeover, while the owner was alive", got)
		}
		if ti.Failures != 0 {
			t.Errorf("failures %d: a lost attempt must not use a retry", ti.Failures)
		}
	})
}

func waitFile(t *testing.T, path string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := os.Stat(path); err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never appeared", path)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func waitLines(t *testing.T, e *env, name string, n int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for len(e.events(name)) < n {
		if time.Now().After(deadline) {
			t.Fatalf("%s has %d lines, want %d", name, len(e.events(name)), n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// countingStore counts the runs the scheduler hands to MaterializeRuns.
type countingStore struct {
	store.Store
	runs int
}

func (c *countingStore) MaterializeRuns(ctx context.Context, p store.MaterializeRunsParams) (int, error) {
	c.runs += len(p.Runs)
	return c.Store.MaterializeRuns(ctx, p)
}

// A refresh of a 10-year hourly pipeline with nothing new walks from its
// catchup cursor: it hands the store no historical interval at all.
func TestRefreshTouchesNoHistory(t *testing.T) {
	e := newEnv(t, `
pipeline "hourly" {
  schedule   = "@hourly"
  start_date = "2015-01-01"
  task "t" { command = ["true"] }
}
`)
	ctx := context.Background()
	def := e.ws.Pipeline("hourly")
	now := utc("2025-01-01T00:00:00Z")
	if _, err := e.st.UpsertPipeline(ctx, store.UpsertPipelineParams{Name: def.Name, Hash: def.Hash, Now: time.Now()}); err != nil {
		t.Fatal(err)
	}
	n, err := scheduler.Materialize(ctx, e.st, scheduler.MaterializeParams{Pipeline: def, Catchup: true, Now: now})
	if err != nil || n != 87672 {
		t.Fatalf("first catchup: %d runs, %v", n, err)
	}
	sp, err := e.st.GetPipeline(ctx, def.Name)
	if err != nil {
		t.Fatal(err)
	}
	if want := utc("2024-12-31T23:00:00Z"); !sp.CatchupThrough.Equal(want) {
		t.Fatalf("cursor %s, want %s", sp.CatchupThrough, want)
	}
	cs := &countingStore{Store: e.st}
	n, err = scheduler.Materialize(ctx, cs, scheduler.MaterializeParams{Pipeline: def, Catchup: true, Now: now, Cursor: sp.CatchupThrough})
	if err != nil || n != 0 || cs.runs != 0 {
		t.Fatalf("refresh with nothing new: created %d, handed %d intervals to the store, %v", n, cs.runs, err)
	}
	n, err = scheduler.Materialize(ctx, cs, scheduler.MaterializeParams{Pipeline: def, Catchup: true, Now: now.Add(2 * time.Hour), Cursor: sp.CatchupThrough})
	if err != nil || n != 2 || cs.runs != 2 {
		t.Fatalf("refresh two hours later: created %d, handed %d intervals, %v; want 2 and 2", n, cs.runs, err)
	}
}
