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
	"github.com/rewind-dev/rewind/lease"
	"github.com/rewind-dev/rewind/skew"
	"github.com/rewind-dev/rewind/store"
)

// The engine of one execution (`rewind run`, a backfill's run phase) is
// split by what each part decides:
//
//	engine.go      the execution: options, the loop, its summary
//	cache.go       what the engine knows of the state: a cache of the runs
//	               it drives, rebuilt from the store whenever the store says
//	               that someone else changed it (Store.Epoch)
//	materialize.go which intervals get runs (a cursor per pipeline)
//	decide.go      pure: a run's task instances in, transitions out
//	dispatch.go    admitting runs, queueing ready task instances under the
//	               limits, claiming queued work from the store by pool
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

// RunResult is a run that finished during the execution.
type RunResult struct {
	Pipeline    string
	DS          string
	LogicalDate time.Time
	State       store.RunState
	Duration    time.Duration
	FailedTasks []string
}

// Summary is what an execution did.
type Summary struct {
	Created     int         // runs materialized
	Finished    []RunResult // runs that finished, oldest logical date first
	Unfinished  int         // runs in scope left queued or running (interrupted)
	Attempts    int
	Interrupted bool
	Paused      []string // selected pipelines skipped because they are paused
	Progress    Progress
	// Waiting are the runs left waiting for upstream data when the
	// execution ended (a producer's run failed, or has not run), oldest
	// first; Held the runs of backfills that this execution does not run;
	// Stuck the other runs left unfinished (a depends_on_past task whose
	// previous run did not succeed).
	Waiting []WaitingRun
	Held    []HeldRuns
	Stuck   []StuckRun
	// Warnings are what the execution could not do as asked but went on
	// without (a skew probe that failed: the date ran on its own pool).
	Warnings []string
}

// WaitingRun is a run that waits for a run of a pipeline it consumes.
type WaitingRun struct {
	Pipeline    string
	DS          string
	LogicalDate time.Time
	// Upstream is the consumed pipeline; UpstreamDS, UpstreamLogicalDate
	// and UpstreamState its run the date waits for (state "none", and no
	// date, when it has no run for the interval).
	Upstream            string
	UpstreamDS          string
	UpstreamLogicalDate time.Time
	UpstreamState       string
}

// HeldRuns are the unfinished runs of one backfill, which only its apply
// runs: it is not running (stopped, failed, or on hold).
type HeldRuns struct {
	Pipeline      string
	BackfillID    string
	BackfillState string // the backfill's state; "paused" when on hold
	DS            []string
}

// StuckRun is a run left unfinished for another reason.
type StuckRun struct {
	Pipeline    string
	DS          string
	LogicalDate time.Time
	Waiting     []string // its unfinished tasks, "task (state)"
}

// Failed reports whether a run of the execution failed.
func (s *Summary) Failed() bool {
	for _, r := range s.Finished {
		if r.State == store.RunFailed {
			return true
		}
	}
	return false
}

// Incomplete reports whether runs in scope were left unfinished by an
// execution that was not interrupted: waiting for upstream data, held by
// a backfill, or stuck. Not all requested runs succeeded.
func (s *Summary) Incomplete() bool {
	return len(s.Waiting)+len(s.Held)+len(s.Stuck) > 0
}

// engine is one execution. Its fields are a cache of the store (runs, task
// instances) plus what only this process can know (the processes it
// supervises).
type engine struct {
	o     Options
	base  store.Store // fenced by the lease: every write checks its generation
	st    store.Store // base, or the transaction of the current batch
	self  lease.Holder
	log   *slog.Logger
	cache *cache
	// usage is the store's count of running attempts and queued task
	// instances, read at the start of every pass.
	usage usage
	// limitStarts keeps each limit's recent queueing times, for its rate.
	limitStarts map[string][]time.Time
	pools       map[string]*poolLife
	local       map[string]int // attempts this process supervises, per pool (pool setup/teardown)
	probes      map[*dsl.Skew]*skew.Probes
	lakes       *Lakes
	running     int // goroutines waiting for an attempt: each sends one completion
	events      chan completion
	commits     *committer
	foreign     map[int64]store.RunningAttempt // attempts owned by a live rewind elsewhere
	wg          conc.WaitGroup
	progress    Progress
	summary     *Summary
	epoch       int64
	// pending are ended attempts whose outcomes the next batch records.
	pending []completion
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
	go lease.Keep(leaseCtx, o.Store, lease.Execution, self, true, func(err error) {
		cancelRun(fmt.Errorf("lost the state lease: %w", err))
	})

	fenced := o.Store.Fenced(lease.Execution, self.ID, held.Generation)
	e := &engine{
		o: o, base: fenced, st: fenced, self: self, log: o.Log,
		limitStarts: map[string][]time.Time{}, pools: map[string]*poolLife{}, local: map[string]int{},
		probes: map[*dsl.Skew]*skew.Probes{}, lakes: NewLakes(o.Workspace),
		events: make(chan completion, 64), summary: &Summary{}, foreign: map[int64]store.RunningAttempt{},
	}
	e.progress.Started = time.Now()
	defer e.lakes.Close()
	e.journal = openJournal(o.Home)
	e.journaled = e.journal.read()
	defer e.journal.close()
	if e.epoch, err = e.st.Epoch(ctx); err != nil {
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
	if err := e.cache.load(ctx); err != nil {
		return e.summary, err
	}
	e.runProbes(ctx)
	if err := e.recover(runCtx); err != nil {
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

// leftovers fills the summary's Waiting, Held and Stuck from the runs of
// the selected pipelines that are still unfinished.
func (e *engine) leftovers(ctx context.Context) error {
	s := e.summary
	for _, p := range e.cache.order {
		if p.paused && !(e.o.Backfill != nil && e.o.Backfill.IncludePaused && e.o.Backfill.Pipeline == p.def.Name) {
			continue // reported as paused
		}
		for _, r := range p.all {
			if r.done {
				continue
			}
			w, ok, err := e.waitingFor(ctx, r)
			if err != nil {
				return err
			}
			if ok {
				s.Waiting = append(s.Waiting, w)
				continue
			}
			sr := StuckRun{Pipeline: p.def.Name, DS: r.run.DS, LogicalDate: r.run.LogicalDate}
			for _, n := range r.tis {
				if !n.ti.State.Terminal() {
					sr.Waiting = append(sr.Waiting, fmt.Sprintf("%s (%s)", n.ti.Task, n.ti.State))
				}
			}
			s.Stuck = append(s.Stuck, sr)
		}
	}
	seen := map[int64]bool{}
	byID := map[string]*HeldRuns{}
	for _, r := range e.cache.held {
		if seen[r.ID] {
			continue
		}
		seen[r.ID] = true
		h := byID[r.BackfillID]
		if h == nil {
			h = &HeldRuns{Pipeline: r.Pipeline, BackfillID: r.BackfillID, BackfillState: "unknown"}
			if b, err := e.st.GetBackfill(ctx, r.BackfillID); err == nil {
				h.BackfillState = string(b.State)
				if b.OnHold && b.State == store.BackfillRunning {
					h.BackfillState = "paused"
				}
			} else if !errors.Is(err, store.ErrNotFound) {
				return err
			}
			byID[r.BackfillID] = h
		}
		h.DS = append(h.DS, r.DS)
	}
	for _, h := range byID {
		sort.Strings(h.DS)
		s.Held = append(s.Held, *h)
	}
	sort.Slice(s.Held, func(i, j int) bool {
		if s.Held[i].Pipeline != s.Held[j].Pipeline {
			return s.Held[i].Pipeline < s.Held[j].Pipeline
		}
		return s.Held[i].BackfillID < s.Held[j].BackfillID
	})
	sort.SliceStable(s.Waiting, func(i, j int) bool { return s.Waiting[i].LogicalDate.Before(s.Waiting[j].LogicalDate) })
	sort.SliceStable(s.Stuck, func(i, j int) bool { return s.Stuck[i].LogicalDate.Before(s.Stuck[j].LogicalDate) })
	return nil
}

// waitingFor finds the producer run an unfinished consumer run waits for:
// the first one, by the order of consumes and logical date, within its
// data interval that has not succeeded (read from the store: the
// execution is over).
func (e *engine) waitingFor(ctx context.Context, r *runNode) (WaitingRun, bool, error) {
	w := WaitingRun{Pipeline: r.p.def.Name, DS: r.run.DS, LogicalDate: r.run.LogicalDate}
	if len(r.p.def.Consumes) == 0 || r.producersOK {
		return w, false, nil
	}
	from, to := r.run.DataIntervalStart, r.run.DataIntervalEnd
	for _, name := range r.p.def.Consumes {
		runs, err := e.st.ListRuns(ctx, store.ListRunsParams{Pipelines: []string{name}, From: from, To: to})
		if err != nil {
			return w, false, err
		}
		found := false
		for _, pr := range runs {
			if !pr.LogicalDate.Before(to) {
				continue
			}
			found = true
			if pr.State != store.RunSuccess {
				w.Upstream, w.UpstreamDS, w.UpstreamLogicalDate, w.UpstreamState = name, pr.DS, pr.LogicalDate, string(pr.State)
				return w, true, nil
			}
		}
		if !found {
			w.Upstream, w.UpstreamState = name, "none"
			return w, true, nil
		}
	}
	return w, false, nil
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

// loop runs passes until every run in scope is finished, or until ctx ends
// and the attempts it supervises have stopped.
func (e *engine) loop(ctx context.Context) error {
	done := ctx.Done()
	stopping := false
	var nextRefresh, nextEpoch time.Time
	if e.o.Now.IsZero() {
		nextRefresh = time.Now().Add(e.o.RefreshEvery)
	}
	bg := context.WithoutCancel(ctx)
	for {
		now := time.Now()
		if !stopping && !nextRefresh.IsZero() && !now.Before(nextRefresh) {
			if err := e.refresh(bg); err != nil {
				return e.fatal(err)
			}
			nextRefresh = time.Now().Add(e.o.RefreshEvery)
		}
		if !stopping && !now.Before(nextEpoch) {
			if err := e.checkEpoch(bg); err != nil {
				return e.fatal(err)
			}
			if err := e.checkForeign(ctx); err != nil {
				return e.fatal(err)
			}
			nextEpoch = time.Now().Add(epochEvery)
		}
		// One transaction records the finished attempts and commits, the
		// runs admitted and finished, the task instances queued and the
		// claims of the attempts to start; a second one records the
		// processes started. The batch never sees ctx: an interrupt stops
		// the next pass, it does not tear one in half.
		var p passResult
		err := e.batch(bg, func() error {
			for _, c := range e.pending {
				if err := e.record(bg, c); err != nil {
					return err
				}
			}
			if err := e.recordCommits(bg); err != nil {
				return err
			}
			if stopping {
				return nil
			}
			var err error
			p, err = e.pass(bg)
			return err
		})
		if errors.Is(err, store.ErrConflict) {
			// Someone changed what this pass decided on: re-read, decide
			// again; the outcomes are recorded by the next batch.
			e.cache.stale = true
			p = passResult{}
			err = nil
		} else {
			e.pending = e.pending[:0]
		}
		if err != nil {
			e.cache.stale = true
			return e.fatal(err)
		}
		if err := e.startAll(ctx, p.claimed); err != nil {
			return e.fatal(err)
		}
		e.commits.submit(p.commits)
		if e.cache.stale && !stopping {
			if err := e.cache.reload(bg); err != nil {
				return e.fatal(err)
			}
			continue
		}
		if !stopping {
			e.report()
		}
		idle := e.running == 0 && e.commits.idle() && (stopping || (p.nextRetry.IsZero() && len(e.foreign) == 0 && !e.waitsForUnhold()))
		teardown, err := e.teardowns(bg, idle && stopping)
		if err != nil {
			e.log.Error("pool teardown failed", "error", err)
		}
		if idle && teardown.IsZero() {
			return nil
		}
		wakeAt := teardown
		soonest := func(t time.Time) {
			if !t.IsZero() && (wakeAt.IsZero() || t.Before(wakeAt)) {
				wakeAt = t
			}
		}
		if !stopping {
			soonest(p.nextRetry)
			soonest(nextEpoch)
			if e.running > 0 || !e.commits.idle() {
				soonest(nextRefresh)
			}
		}
		var timer *time.Timer
		var wake <-chan time.Time
		if !wakeAt.IsZero() {
			timer = time.NewTimer(time.Until(wakeAt))
			wake = timer.C
		}
		select {
		case c := <-e.events:
			e.release(c)
			e.pending = append(e.pending, c)
			for more := true; more; {
				select {
				case c := <-e.events:
					e.release(c)
					e.pending = append(e.pending, c)
				default:
					more = false
				}
			}
		case <-e.commits.done:
		case <-wake:
		case <-done:
			stopping = true
			done = nil
		}
		if timer != nil {
			timer.Stop()
		}
	}
}

// waitsForUnhold reports whether the execution's backfill is on hold with
// runs left: it then waits for backfill unpause rather than ending.
func (e *engine) waitsForUnhold() bool {
	if !e.o.Backfill.held() {
		return false
	}
	for _, r := range e.cache.active {
		if !r.done && r.run.BackfillID == e.o.Backfill.ID {
			return true
		}
	}
	for _, p := range e.cache.order {
		for _, r := range p.queued {
			if r.run.BackfillID == e.o.Backfill.ID {
				return true
			}
		}
	}
	return false
}

// fatal stops the execution after an error of the state: nothing new
// starts; the attempts that run get the grace period to end by themselves
// (their outcomes are recorded as far as the store allows; the ones that
// outlive it are adopted by the next rewind, which also reads the statuses
// the store could not take).
func (e *engine) fatal(err error) error {
	for _, c := range e.pending {
		if rerr := e.record(context.Background(), c); rerr != nil {
			e.log.Warn("could not record an attempt: the next rewind reads its status from its log", "error", rerr)
		}
	}
	e.pending = nil
	e.drain(e.o.Grace)
	return err
}

// batch runs fn with e.st bound to one transaction of the store.
func (e *engine) batch(ctx context.Context, fn func() error) error {
	return e.base.InTx(ctx, func(tx store.Store) error {
		e.st = tx
		defer func() { e.st = e.base }()
		return fn()
	})
}

// drain waits, at most for d, for the attempts this process supervises,
// recording each outcome as far as the store allows.
func (e *engine) drain(d time.Duration) {
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	for e.running > 0 {
		select {
		case c := <-e.events:
			e.release(c)
			if err := e.record(context.Background(), c); err != nil {
				e.log.Warn("could not record an attempt: the next rewind reads its status from its log", "error", err)
			}
		case <-deadline.C:
			e.log.Warn("leaving attempts running: the next rewind adopts them", "attempts", e.running)
			return
		}
	}
}

// warn records a warning of the execution.
func (e *engine) warn(msg string) {
	msg = e.o.Workspace.Redact(msg)
	e.summary.Warnings = append(e.summary.Warnings, msg)
	if e.o.OnWarning != nil {
		e.o.OnWarning(msg)
	}
}

func (e *engine) report() {
	if e.o.OnProgress != nil {
		e.o.OnProgress(e.progress)
	}
}

// watermarkEvery bounds how often a busy catchup recomputes a watermark.
const watermarkEvery = time.Second

func (e *engine) advanceWatermark(ctx context.Context, p *pipe, now time.Time) error {
	p.watermarkDirty, p.watermarkAt = false, now
	_, err := e.st.AdvanceWatermark(ctx, store.AdvanceWatermarkParams{Pipeline: p.def.Name, Now: now})
	if errors.Is(err, store.ErrNotFound) {
		return nil
	}
	return err
}
