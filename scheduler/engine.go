package scheduler

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"github.com/sourcegraph/conc"

	"github.com/rewind-dev/rewind/dsl"
	"github.com/rewind-dev/rewind/executor"
	"github.com/rewind-dev/rewind/lease"
	"github.com/rewind-dev/rewind/skew"
	"github.com/rewind-dev/rewind/store"
)

// The engine of one execution (`rewind run`, a backfill's run phase) is
// split by what each part decides:
//
//	engine.go      the execution: options, the loop, its summary
//	cache.go       what the engine knows of the state: a cache of the runs
//	               it drives, changed only by committed passes and rebuilt
//	               from the store whenever the store says that someone else
//	               changed it (Store.Epoch) or a guard found it different
//	materialize.go which intervals get runs (a cursor per pipeline)
//	pass.go        one pass: read a snapshot in the fenced transaction,
//	               decide, apply the commands, settle the cache after commit
//	decide.go      pure: a snapshot in, the pass's commands out (admissions,
//	               task moves, run finishes, queueing under the limits,
//	               claims, outcomes of ended attempts, commit results)
//	dispatch.go    usage, pool capacities, claims, routing
//	attempts.go    starting attempts and recording how they ended
//	recover.go     attempts left running by a rewind that stopped
//	commit.go      output commits, which leave the store's transactions
//	               through its outbox
//
// The store is the one source of truth: every transition is a guarded
// statement; a conflict means "re-read and decide again".

// SkipExitCode is the exit code with which a task says "skip me" (as
// Airflow's BashOperator): the task instance becomes skipped, and so do the
// tasks downstream of it.
const SkipExitCode = 99

// maxRetryDelay caps exponential retry backoff.
const maxRetryDelay = 24 * time.Hour

// epochEvery is how often a running engine asks the store whether another
// command changed the state (clear, pause, cancel): such changes are seen
// within this time plus one pass.
const epochEvery = 500 * time.Millisecond

// Options configure one execution of `rewind run`.
type Options struct {
	Store     store.Store
	Workspace *dsl.Workspace
	// Pipelines selects pipelines by name; empty = every pipeline.
	Pipelines []string
	// Catchup fills every due interval even where the pipeline says catchup = false.
	Catchup bool
	// Now is the logical clock that decides which intervals are due (--now);
	// zero = the wall clock. Retry delays and timeouts always use the wall clock.
	Now time.Time
	// Clock, when set (and Now is zero), is the logical clock: an execution
	// that lasts (a long catchup or backfill) looks for newly due intervals
	// every RefreshEvery, so tonight's run is not left waiting.
	Clock func() time.Time
	// RefreshEvery is how often a long execution materializes newly due
	// intervals when the clock is not fixed (default 30s).
	RefreshEvery time.Duration
	// MaxActiveRuns overrides every pipeline's max_active_runs when > 0.
	MaxActiveRuns int
	// Home is the directory of runs/ and logs/ (".rewind" by default).
	Home string
	// Wait for the lease when another rewind holds it, instead of failing.
	Wait bool
	// Grace is how long running attempts get to stop on interrupt (default 10s).
	Grace time.Duration
	// LeaveSlurmJobs: on interrupt, attempts that run as Slurm jobs are
	// not cancelled: they stay running, in Slurm and in the state, and the
	// next rewind adopts them by their job ids (rewind scheduler, whose
	// stop is a restart or a handover). Without it they are scancelled.
	LeaveSlurmJobs bool
	// Backfill, when set, also executes the runs of that backfill (of its
	// pipeline, which must be selected). Without it, runs of backfills are
	// left alone: only `rewind backfill apply` runs them.
	Backfill *BackfillRun
	// OnProgress is called after every change of the counts (from one goroutine).
	OnProgress func(Progress)
	// OnWarning, when set, is called with each warning as it happens (they
	// are also kept in Summary.Warnings).
	OnWarning func(string)
	Log       *slog.Logger
	// Holder overrides the identity of this process in the lease and as the
	// owner of its attempts (tests stand in for another host with it).
	Holder *lease.Holder
	// EnsureAgent, when set, starts this machine's host agent unless it
	// runs (package agent); it is called before the first local attempt
	// of the execution starts or is adopted. Set where the state is shared
	// by several machines.
	EnsureAgent func() error
	// Notify: look for missed deadlines when the execution starts, deliver
	// the state's notifications beside it, and those still due when it
	// ends (rewind run, backfill apply). `rewind scheduler` does both on
	// its own timers instead.
	Notify bool
}

// BackfillRun says how the runs of one backfill execute.
type BackfillRun struct {
	ID            string
	Pipeline      string
	MaxActiveRuns int  // 0: the pipeline's max_active_runs
	Reverse       bool // newest logical date first
	// IncludePaused runs the backfill's runs although the pipeline is
	// paused (its scheduled runs stay paused).
	IncludePaused bool
	// Hold, while true, starts nothing new of the backfill (backfill
	// pause): running attempts finish, and the execution waits for Hold to
	// be false again instead of ending.
	Hold *atomic.Bool
}

// held reports whether the backfill is on hold.
func (b *BackfillRun) held() bool { return b != nil && b.Hold != nil && b.Hold.Load() }

// Progress counts the runs of one execution.
type Progress struct {
	Total     int // runs in scope: materialized and not finished before this execution
	Succeeded int
	Failed    int
	Running   int // admitted runs
	Queued    int // runs waiting for max_active_runs
	Attempts  int // attempts launched or adopted so far
	Started   time.Time
}

// Done is the number of finished runs.
func (p Progress) Done() int { return p.Succeeded + p.Failed }

// engine is one execution. Its fields are a cache of the store (runs, task
// instances) plus what only this process can know (the processes it
// supervises).
type engine struct {
	o Options
	// base is fenced by the lease: every write checks its generation. A
	// pass gets its transaction explicitly.
	base  store.Store
	self  lease.Holder
	log   *slog.Logger
	cache *cache
	// limitStarts keeps each limit's recent queueing times, for its rate.
	limitStarts map[string][]time.Time
	pools       map[string]*poolLife
	local       map[string]int // attempts this process supervises, per pool (pool setup/teardown)
	probes      map[*dsl.Skew]*skew.Probes
	lakes       *Lakes
	running     int // goroutines waiting for an attempt: each sends one completion
	events      chan completion
	// attemptsCtx is what the goroutines waiting for attempts wait with:
	// cancelled when the execution is interrupted or loses its lease (they
	// stop their attempts), or with executor.ErrLeave when it stops on an
	// error of the state (they leave them running, for the next rewind to
	// adopt). gone is closed when Run returns: nothing waits for events.
	attemptsCtx  context.Context
	stopAttempts context.CancelCauseFunc
	gone         chan struct{}
	agentStarted bool // EnsureAgent was called
	// fence ends when the execution loses its lease: what it does outside
	// the state (output commits) stops there.
	fence    context.Context
	commits  *committer
	foreign  map[int64]store.RunningAttempt // attempts owned by a live rewind elsewhere
	wg       conc.WaitGroup
	progress Progress
	summary  *Summary
	epoch    int64
	// pending are ended attempts whose outcomes the next pass records, and
	// committed the output commits it records; both are kept until a pass
	// that recorded them committed.
	pending   []completion
	committed []commitResult
	// started are the processes started whose pids the state does not
	// have yet (see writeStarts).
	started []store.StartAttemptParams
	// journal keeps exit codes where a full disk cannot stop them
	// (journal.go); journaled is what it held when this execution started.
	journal   *journal
	journaled map[string]int
	// claimPipelines narrows claims to the selected pipelines (nil when
	// every pipeline of the workspace is selected).
	claimPipelines []string
}

// Run materializes the due runs of the selected pipelines and executes them
// until every run is finished (or ctx is cancelled: then running attempts
// are stopped and recorded as interrupted). It holds the state's lease
// throughout, so two rewinds never run the same attempt.
func Run(ctx context.Context, o Options) (*Summary, error) {
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.Home == "" {
		o.Home = ".rewind"
	}
	// Paths recorded in the state are absolute: a later rewind may run elsewhere.
	home, err := filepath.Abs(o.Home)
	if err != nil {
		return nil, err
	}
	o.Home = home
	if o.Grace <= 0 {
		o.Grace = 10 * time.Second
	}
	if o.Clock == nil && o.Now.IsZero() {
		o.Clock = time.Now
	}
	if o.RefreshEvery <= 0 {
		o.RefreshEvery = 30 * time.Second
	}
	defs, err := selectPipelines(o.Workspace, o.Pipelines)
	if err != nil {
		return nil, err
	}
	self := lease.Self()
	if o.Holder != nil {
		self = *o.Holder
	}
	self = self.ForExecution()
	held, err := lease.AcquireExecution(ctx, o.Store, self, o.Wait)
	if err != nil {
		return nil, err
	}
	defer lease.ReleaseExecution(context.WithoutCancel(ctx), o.Store, self)
	// The owner row says that this process is alive, for the attempts it
	// claims; it is renewed with the lease and removed at a clean exit.
	if err := lease.Heartbeat(ctx, o.Store, self); err != nil {
		return nil, err
	}
	leaseCtx, stopLease := context.WithCancel(context.WithoutCancel(ctx))
	defer stopLease()
	runCtx, cancelRun := context.WithCancelCause(ctx)
	defer cancelRun(nil)
	fence, fenceLost := context.WithCancelCause(context.WithoutCancel(ctx))
	defer fenceLost(nil)
	go lease.Keep(leaseCtx, o.Store, lease.Execution, self, true, func(err error) {
		fenceLost(err)
		// Keep steps down at half the TTL after the last renewal; the
		// attempts are stopped within a quarter more, before another
		// rewind can take the lease (at the TTL), whatever --grace says.
		cancelRun(&executor.Stop{Grace: self.Lifetime() / 4, Err: fmt.Errorf("lost the state lease: %w", err)})
	})

	var nt *notifier
	if o.Notify {
		nt = startNotifier(ctx, o, self.ID)
		defer nt.stop()
	}

	fenced := o.Store.Fenced(lease.Execution, self.ID, held.Generation)
	e := &engine{
		o: o, base: fenced, self: self, log: o.Log,
		limitStarts: map[string][]time.Time{}, pools: map[string]*poolLife{}, local: map[string]int{},
		probes: map[*dsl.Skew]*skew.Probes{}, lakes: NewLakes(o.Workspace),
		events: make(chan completion, 64), summary: &Summary{}, foreign: map[int64]store.RunningAttempt{},
		gone: make(chan struct{}), fence: fence,
	}
	defer close(e.gone)
	e.attemptsCtx, e.stopAttempts = context.WithCancelCause(context.WithoutCancel(ctx))
	defer e.stopAttempts(context.Canceled)
	// An interrupt or a lost lease stops the attempts (unless the
	// execution left them running first: the first cause stands).
	defer context.AfterFunc(runCtx, func() { e.stopAttempts(context.Cause(runCtx)) })()
	e.progress.Started = time.Now()
	defer e.lakes.Close()
	e.journal = openJournal(o.Home)
	e.journaled = e.journal.read()
	defer e.journal.close()
	defer executor.DropSpareCgroups()
	if e.epoch, err = e.base.Epoch(ctx); err != nil {
		return nil, err
	}
	e.cache = newCache(e, defs)
	if len(o.Pipelines) > 0 {
		e.claimPipelines = e.cache.names()
	}
	e.commits = newCommitter(e)
	if err := e.materializeAll(ctx, defs); err != nil {
		return e.summary, err
	}
	if err := e.cache.load(ctx, e.base); err != nil {
		return e.summary, err
	}
	e.runProbes(ctx)
	if err := e.recover(runCtx); err != nil {
		e.recordNow(e.pending)
		e.drain(o.Grace)
		e.commits.stop()
		return e.summary, err
	}
	err = e.loop(runCtx)
	e.commits.stop()
	if e.running == 0 {
		e.wg.Wait()
	}
	wctx := context.WithoutCancel(ctx)
	for _, p := range e.cache.order {
		if p.watermarkDirty {
			if werr := e.advanceWatermark(wctx, p, time.Now()); werr != nil && err == nil {
				err = werr
			}
		}
	}
	if e.running == 0 && len(e.foreign) == 0 {
		_ = o.Store.RemoveOwner(wctx, self.ID)
	}
	if nt != nil && ctx.Err() == nil {
		e.summary.Notifications = nt.finish(ctx)
	}
	e.summary.Attempts = e.progress.Attempts
	e.summary.Progress = e.progress
	e.summary.Unfinished = e.cache.unfinished()
	sort.SliceStable(e.summary.Finished, func(i, j int) bool {
		return e.summary.Finished[i].LogicalDate.Before(e.summary.Finished[j].LogicalDate)
	})
	if err == nil && runCtx.Err() != nil {
		if cause := context.Cause(runCtx); cause != nil && !errors.Is(cause, context.Canceled) {
			err = cause
		}
		e.summary.Interrupted = true
	}
	if err == nil && !e.summary.Interrupted {
		err = e.leftovers(wctx)
	}
	return e.summary, err
}

func selectPipelines(ws *dsl.Workspace, names []string) ([]*dsl.Pipeline, error) {
	if len(names) == 0 {
		return ws.Pipelines, nil
	}
	var out []*dsl.Pipeline
	seen := map[string]bool{}
	for _, n := range names {
		p := ws.Pipeline(n)
		if p == nil {
			known := make([]string, len(ws.Pipelines))
			for i, p := range ws.Pipelines {
				known[i] = p.Name
			}
			return nil, fmt.Errorf("unknown pipeline %q (known: %s)", n, strings.Join(known, ", "))
		}
		if !seen[n] {
			seen[n] = true
			out = append(out, p)
		}
	}
	return out, nil
}

// watermarkEvery bounds how often a busy catchup recomputes a watermark.
const watermarkEvery = time.Second

func (e *engine) advanceWatermark(ctx context.Context, p *pipe, now time.Time) error {
	p.watermarkDirty, p.watermarkAt = false, now
	_, err := e.base.AdvanceWatermark(ctx, store.AdvanceWatermarkParams{Pipeline: p.def.Name, Now: now})
	if errors.Is(err, store.ErrNotFound) {
		return nil
	}
	return err
}
