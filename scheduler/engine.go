package scheduler

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/sourcegraph/conc"

	"github.com/rewind-dev/rewind/dsl"
	"github.com/rewind-dev/rewind/executor"
	"github.com/rewind-dev/rewind/store"
)

// SkipExitCode is the exit code with which a task says "skip me" (as
// Airflow's BashOperator): the task instance becomes skipped, and so do the
// tasks downstream of it.
const SkipExitCode = 99

// maxRetryDelay caps exponential retry backoff.
const maxRetryDelay = 24 * time.Hour

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
	// Backfill, when set, also executes the runs of that backfill (of its
	// pipeline, which must be selected). Without it, runs of backfills are
	// left alone: only `rewind backfill apply` runs them.
	Backfill *BackfillRun
	// OnProgress is called after every change of the counts (from one goroutine).
	OnProgress func(Progress)
	Log        *slog.Logger
}

// BackfillRun says how the runs of one backfill execute.
type BackfillRun struct {
	ID            string
	Pipeline      string
	MaxActiveRuns int  // 0: the pipeline's max_active_runs
	Reverse       bool // newest logical date first
}

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

type pipe struct {
	def *dsl.Pipeline
	// The watermark is recomputed at most every watermarkEvery while runs
	// succeed, and once at the end.
	watermarkDirty bool
	watermarkAt    time.Time
	maxRuns        int
	maxFills       int // max_active_runs of the backfill's runs
	activeRuns     int // admitted scheduled and manual runs
	activeFills    int // admitted backfill runs: their own max_active_runs
	activeTasks    int
	queued         []*runNode               // not admitted, oldest first, backfill runs after the others
	medians        map[string]time.Duration // per task: median of recent successful attempts
	loaded         map[int64]bool           // ids of the runs in all
	all            []*runNode               // every loaded run, oldest first (for depends_on_past)
}

type runNode struct {
	run   store.Run
	p     *pipe
	tis   []*tiNode // in the pipeline's topological order
	prev  *runNode  // previous loaded run of the pipeline
	key   string    // directory name of the run
	done  bool
	begun time.Time
	// producersOK: every run of the pipelines this one consumes, within its
	// data interval, has succeeded (checked until true; the state is
	// re-read at most every producerRecheck).
	producersOK      bool
	producersChecked time.Time
}

type tiNode struct {
	ti   store.TaskInstance
	task *dsl.Task // nil when the task no longer exists in the pipeline
	run  *runNode
	idx  int
	// hist is every attempt so far, oldest first: history routes hot dates
	// and OOM escalations.
	hist  []store.Attempt
	route *Route // cached until the next attempt ends
}

type completion struct {
	node    *tiNode
	attempt store.Attempt
	res     executor.Result
	// adopted attempts (started by a rewind that died) report a status code only.
	adopted   bool
	code      int
	haveCode  bool
	adoptErr  error
	launchErr error
}

type engine struct {
	o        Options
	st       store.Store
	host     string
	log      *slog.Logger
	pipes    map[string]*pipe
	order    []*pipe
	active   []*runNode // admitted, unfinished
	byTI     map[int64]*tiNode
	poolUsed map[string]int
	poolFill map[string]int // the part of poolUsed taken by backfill attempts
	// limitUsed counts running attempts per limit; limitStarts keeps each
	// limit's recent attempt starts, for its rate.
	limitUsed   map[string]int
	limitStarts map[string][]time.Time
	pools       map[string]*poolLife
	probes      map[*dsl.Skew]*probeResult
	lakes       *Lakes
	running     int
	events      chan completion
	wg          conc.WaitGroup
	progress    Progress
	summary     *Summary
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
	now := o.Now
	if o.Clock != nil && now.IsZero() {
		now = o.Clock()
	}
	defs, err := selectPipelines(o.Workspace, o.Pipelines)
	if err != nil {
		return nil, err
	}
	self := Self()
	if err := AcquireLease(ctx, o.Store, self, o.Wait); err != nil {
		return nil, err
	}
	defer ReleaseLease(context.WithoutCancel(ctx), o.Store, self)
	leaseCtx, stopLease := context.WithCancel(context.WithoutCancel(ctx))
	defer stopLease()
	runCtx, cancelRun := context.WithCancelCause(ctx)
	defer cancelRun(nil)
	go keepLease(leaseCtx, o.Store, self, func(err error) {
		cancelRun(fmt.Errorf("lost the state lease: %w", err))
	})

	e := &engine{
		o: o, st: o.Store, host: self.Host, log: o.Log,
		pipes: map[string]*pipe{}, byTI: map[int64]*tiNode{}, poolUsed: map[string]int{}, poolFill: map[string]int{},
		limitUsed: map[string]int{}, limitStarts: map[string][]time.Time{}, pools: map[string]*poolLife{},
		probes: map[*dsl.Skew]*probeResult{}, lakes: NewLakes(o.Workspace),
		events: make(chan completion, 64), summary: &Summary{},
	}
	e.progress.Started = time.Now()
	for _, def := range defs {
		sp, err := e.st.UpsertPipeline(ctx, store.UpsertPipelineParams{Name: def.Name, Hash: def.Hash, Now: time.Now()})
		if err != nil {
			return nil, err
		}
		if sp.Paused {
			e.summary.Paused = append(e.summary.Paused, def.Name)
			continue
		}
		n, err := Materialize(ctx, e.st, MaterializeParams{Pipeline: def, Catchup: def.Catchup || o.Catchup, Now: now})
		e.summary.Created += n
		if err != nil {
			return e.summary, err
		}
		p := &pipe{def: def, maxRuns: def.MaxActiveRuns}
		if o.MaxActiveRuns > 0 {
			p.maxRuns = o.MaxActiveRuns
		}
		p.maxFills = p.maxRuns
		if b := o.Backfill; b != nil && b.Pipeline == def.Name && b.MaxActiveRuns > 0 {
			p.maxFills = b.MaxActiveRuns
		}
		e.pipes[def.Name] = p
		e.order = append(e.order, p)
	}
	defer e.lakes.Close()
	if err := e.load(ctx); err != nil {
		return e.summary, err
	}
	if err := e.recover(runCtx); err != nil {
		return e.summary, err
	}
	err = e.loop(runCtx)
	e.wg.Wait()
	for _, p := range e.order {
		if p.watermarkDirty {
			if werr := e.advanceWatermark(context.WithoutCancel(ctx), p, time.Now()); werr != nil && err == nil {
				err = werr
			}
		}
	}
	e.summary.Attempts = e.progress.Attempts
	e.summary.Progress = e.progress
	for _, p := range e.order {
		for _, r := range p.all {
			if !r.done {
				e.summary.Unfinished++
			}
		}
	}
	sort.SliceStable(e.summary.Finished, func(i, j int) bool {
		return e.summary.Finished[i].LogicalDate.Before(e.summary.Finished[j].LogicalDate)
	})
	if err == nil && runCtx.Err() != nil {
		if cause := context.Cause(runCtx); cause != nil && !errors.Is(cause, context.Canceled) {
			err = cause
		}
		e.summary.Interrupted = true
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

// load reads the unfinished runs of the selected pipelines (every run, for a
// pipeline with depends_on_past tasks, which needs the previous runs' states).
func (e *engine) load(ctx context.Context) error {
	for _, p := range e.order {
		durations, err := e.st.TaskDurations(ctx, store.TaskDurationsParams{Pipeline: p.def.Name, Limit: 500})
		if err != nil {
			return err
		}
		p.medians = map[string]time.Duration{}
		for task, ds := range durations {
			p.medians[task] = medianDuration(ds)
		}
		params := store.ListRunsParams{Pipelines: []string{p.def.Name}, WithTasks: true, WithAttempts: true}
		if !hasDependsOnPast(p.def) {
			params.States = []store.RunState{store.RunQueued, store.RunRunning}
		}
		runs, err := e.st.ListRuns(ctx, params)
		if err != nil {
			return err
		}
		e.addRuns(p, runs)
	}
	e.runProbes(ctx)
	return nil
}

// addRuns adds loaded runs (oldest first, newer than those already loaded)
// to a pipeline's queues.
func (e *engine) addRuns(p *pipe, runs []store.Run) {
	var prev *runNode
	if len(p.all) > 0 {
		prev = p.all[len(p.all)-1]
	}
	for _, r := range runs {
		if r.Kind == store.KindBackfill && r.State != store.RunSuccess && r.State != store.RunFailed &&
			(e.o.Backfill == nil || r.BackfillID != e.o.Backfill.ID) {
			continue // another backfill's run: its apply runs it
		}
		if p.loaded[r.ID] {
			continue
		}
		if p.loaded == nil {
			p.loaded = map[int64]bool{}
		}
		p.loaded[r.ID] = true
		n := e.node(p, r)
		n.prev = prev
		prev = n
		p.all = append(p.all, n)
		switch r.State {
		case store.RunQueued:
			p.queued = append(p.queued, n)
			e.progress.Total++
			e.progress.Queued++
		case store.RunRunning:
			e.active = append(e.active, n)
			if n.run.Kind == store.KindBackfill {
				p.activeFills++
			} else {
				p.activeRuns++
			}
			n.begun = time.Now()
			e.progress.Total++
			e.progress.Running++
		default:
			n.done = true
		}
	}
	// Scheduled and manual runs outrank backfill runs in the queue; a
	// reverse backfill runs newest first.
	reverse := e.o.Backfill != nil && e.o.Backfill.Reverse
	sort.SliceStable(p.queued, func(i, j int) bool {
		a, b := p.queued[i].run, p.queued[j].run
		if fa, fb := a.Kind == store.KindBackfill, b.Kind == store.KindBackfill; fa != fb {
			return fb
		} else if fa && reverse {
			return a.LogicalDate.After(b.LogicalDate)
		}
		return false
	})
}

// refresh materializes the intervals that became due since the execution
// started, and queues their runs.
func (e *engine) refresh(ctx context.Context) error {
	now := e.o.Clock()
	for _, p := range e.order {
		if sp, err := e.st.GetPipeline(ctx, p.def.Name); err == nil && sp.Paused {
			continue
		}
		n, err := Materialize(ctx, e.st, MaterializeParams{Pipeline: p.def, Catchup: p.def.Catchup || e.o.Catchup, Now: now})
		if err != nil {
			return err
		}
		if n == 0 {
			continue
		}
		e.summary.Created += n
		runs, err := e.st.ListRuns(ctx, store.ListRunsParams{Pipelines: []string{p.def.Name}, States: []store.RunState{store.RunQueued}, WithTasks: true, WithAttempts: true})
		if err != nil {
			return err
		}
		e.addRuns(p, runs)
	}
	return nil
}

// runProbes measures, with each skew probe, every date about to run.
func (e *engine) runProbes(ctx context.Context) {
	for _, p := range e.order {
		skews := map[*dsl.Skew]bool{}
		for _, t := range p.def.Tasks {
			if sk := t.EffectiveSkew(p.def); sk.HasProbe() {
				skews[sk] = true
			}
		}
		for sk := range skews {
			var rvs []dsl.RunVars
			for _, r := range p.all {
				if !r.done {
					rvs = append(rvs, e.runVars(r))
				}
			}
			e.probes[sk] = runProbes(ctx, sk, rvs)
			for key, msg := range e.probes[sk].errs {
				e.log.Warn("probe failed: the date is not treated as hot", "pipeline", p.def.Name, "logical_date", time.Unix(key, 0).In(p.def.Timezone).Format(time.RFC3339), "error", msg)
			}
		}
	}
}

func hasDependsOnPast(p *dsl.Pipeline) bool {
	for _, t := range p.Tasks {
		if t.DependsOnPast {
			return true
		}
	}
	return false
}

func (e *engine) node(p *pipe, r store.Run) *runNode {
	n := &runNode{run: r, p: p, key: runKey(r.LogicalDate.In(p.def.Timezone))}
	byName := make(map[string]store.TaskInstance, len(r.Tasks))
	for _, ti := range r.Tasks {
		byName[ti.Task] = ti
	}
	for i, t := range p.def.Tasks {
		ti, ok := byName[t.Name]
		if !ok {
			continue // a task added after the run was created
		}
		delete(byName, t.Name)
		tn := &tiNode{ti: ti, task: t, run: n, idx: i, hist: ti.Attempts}
		n.tis = append(n.tis, tn)
		e.byTI[ti.ID] = tn
	}
	for _, ti := range r.Tasks {
		if _, gone := byName[ti.Task]; gone {
			// The task was removed from the pipeline: it can never run again.
			tn := &tiNode{ti: ti, run: n, idx: len(p.def.Tasks)}
			n.tis = append(n.tis, tn)
			e.byTI[ti.ID] = tn
		}
	}
	for _, tn := range n.tis {
		tn.ti.Attempts = nil
	}
	n.run.Tasks = nil
	return n
}

// runKey names a run's directories: its logical date in the pipeline's
// timezone with the offset, so the two runs of a repeated DST hour differ.
func runKey(t time.Time) string { return t.Format("2006-01-02T150405-0700") }

// recover settles attempts left running by a rewind that died: an attempt
// whose process still runs is adopted, one whose wrapper recorded an exit
// status gets that outcome, and one with neither is lost and runs again
// without using a retry.
func (e *engine) recover(ctx context.Context) error {
	stale, err := e.st.RunningAttempts(ctx)
	if err != nil {
		return err
	}
	for _, a := range stale {
		node := e.byTI[a.TaskInstanceID]
		pid := a.PID
		if pid == 0 {
			pid = executor.FindWrapper(a.LogPath)
		}
		if executor.Alive(pid, a.LogPath) {
			if node == nil {
				continue // a pipeline outside this execution: left to the rewind that selects it
			}
			e.log.Info("adopting attempt of a previous rewind", "pipeline", a.Pipeline, "task", a.Task, "try", a.TryNumber, "pid", pid)
			e.startRunning(node)
			e.progress.Attempts++
			att := a.Attempt
			e.wg.Go(func() {
				code, ok, err := executor.Adopt(ctx, pid, att.LogPath)
				e.events <- completion{node: node, attempt: att, adopted: true, code: code, haveCode: ok, adoptErr: err}
			})
			continue
		}
		c := completion{node: node, attempt: a.Attempt, adopted: true}
		c.code, c.haveCode = executor.ReadStatus(a.LogPath)
		if node == nil {
			if err := e.finishOrphan(ctx, a, c); err != nil {
				return err
			}
			continue
		}
		e.startRunning(node)
		if err := e.complete(ctx, c); err != nil {
			return err
		}
	}
	return nil
}

// finishOrphan records the outcome of a dead attempt of a pipeline outside
// this execution, without its retry policy: success stays success, anything
// else is lost and runs again.
func (e *engine) finishOrphan(ctx context.Context, a store.RunningAttempt, c completion) error {
	p := store.FinishAttemptParams{AttemptID: a.ID, State: store.AttemptLost, TaskState: store.TaskScheduled, Now: time.Now()}
	if c.haveCode && c.code == 0 {
		code := 0
		p.State, p.TaskState, p.ExitCode = store.AttemptSuccess, store.TaskSuccess, &code
	}
	return ignoreConflict(e.st.FinishAttempt(ctx, p))
}

func ignoreConflict(err error) error {
	if errors.Is(err, store.ErrConflict) {
		return nil
	}
	return err
}

func (e *engine) startRunning(n *tiNode) {
	e.running++
	e.poolUsed[n.ti.Pool]++
	if n.run.run.Kind == store.KindBackfill {
		e.poolFill[n.ti.Pool]++
	}
	e.poolBusy(n.ti.Pool)
	if n.task != nil {
		for _, l := range n.task.Limits {
			e.limitUsed[l]++
		}
	}
	n.run.p.activeTasks++
	n.ti.State = store.TaskRunning
}

func (e *engine) stopRunning(n *tiNode) {
	e.running--
	e.poolUsed[n.ti.Pool]--
	if n.run.run.Kind == store.KindBackfill {
		e.poolFill[n.ti.Pool]--
	}
	if e.poolUsed[n.ti.Pool] == 0 {
		e.poolIdle(n.ti.Pool)
	}
	if n.task != nil {
		for _, l := range n.task.Limits {
			e.limitUsed[l]--
		}
	}
	n.run.p.activeTasks--
}

func (e *engine) loop(ctx context.Context) error {
	done := ctx.Done()
	stopping := false
	var pending []completion
	var nextRefresh time.Time
	if e.o.Now.IsZero() {
		nextRefresh = time.Now().Add(e.o.RefreshEvery)
	}
	for {
		if !stopping && !nextRefresh.IsZero() && !time.Now().Before(nextRefresh) {
			if err := e.refresh(context.WithoutCancel(ctx)); err != nil {
				e.drain()
				return err
			}
			nextRefresh = time.Now().Add(e.o.RefreshEvery)
		}
		// One transaction records the finished attempts, the runs admitted
		// and finished, and the claims of the attempts to start; a second
		// one records the processes started. Batching keeps the cost of the
		// state per attempt small when attempts are short.
		var nextRetry time.Time
		var claimed []claim
		err := e.batch(context.WithoutCancel(ctx), func() error {
			for _, c := range pending {
				if err := e.complete(context.WithoutCancel(ctx), c); err != nil {
					return err
				}
			}
			if stopping {
				return nil
			}
			var err error
			nextRetry, claimed, err = e.pass(ctx)
			return err
		})
		pending = pending[:0]
		if err == nil {
			err = e.startAll(ctx, claimed)
		}
		if err != nil {
			e.drain()
			return err
		}
		if !stopping {
			e.report()
		}
		idle := e.running == 0 && (stopping || nextRetry.IsZero())
		teardown, err := e.teardowns(context.WithoutCancel(ctx), idle && stopping)
		if err != nil {
			e.log.Error("pool teardown failed", "error", err)
		}
		if idle && teardown.IsZero() {
			return nil
		}
		wakeAt := teardown
		if !stopping && !nextRetry.IsZero() && (wakeAt.IsZero() || nextRetry.Before(wakeAt)) {
			wakeAt = nextRetry
		}
		if !stopping && e.running > 0 && !nextRefresh.IsZero() && (wakeAt.IsZero() || nextRefresh.Before(wakeAt)) {
			wakeAt = nextRefresh
		}
		var timer *time.Timer
		var wake <-chan time.Time
		if !wakeAt.IsZero() {
			timer = time.NewTimer(time.Until(wakeAt))
			wake = timer.C
		}
		select {
		case c := <-e.events:
			pending = append(pending, c)
			for more := true; more; {
				select {
				case c := <-e.events:
					pending = append(pending, c)
				default:
					more = false
				}
			}
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

// batch runs fn with e.st bound to one transaction of the store.
func (e *engine) batch(ctx context.Context, fn func() error) error {
	return e.o.Store.InTx(ctx, func(tx store.Store) error {
		e.st = tx
		defer func() { e.st = e.o.Store }()
		return fn()
	})
}

// drain waits for the running attempts after a fatal error; their outcomes
// are recorded as far as the store allows.
func (e *engine) drain() {
	for e.running > 0 {
		c := <-e.events
		_ = e.complete(context.Background(), c)
	}
}

// pass admits runs, settles finished runs and claims every task instance
// that is ready and fits the limits. It returns the earliest time a task
// waiting for a retry becomes ready (zero if none), and the claims, whose
// processes startAll starts once the claims are committed.
func (e *engine) pass(ctx context.Context) (time.Time, []claim, error) {
	now := time.Now()
	var nextRetry time.Time
	for {
		// Admit queued runs, oldest first, up to max_active_runs.
		for _, p := range e.order {
			kept := p.queued[:0]
			for _, n := range p.queued {
				fill := n.run.Kind == store.KindBackfill
				if (fill && p.activeFills >= p.maxFills) || (!fill && p.activeRuns >= p.maxRuns) {
					kept = append(kept, n)
					continue
				}
				if err := e.st.AdmitRun(ctx, store.AdmitRunParams{RunID: n.run.ID, Now: now}); err != nil && !errors.Is(err, store.ErrConflict) {
					return nextRetry, nil, err
				}
				n.run.State = store.RunRunning
				n.begun = now
				if fill {
					p.activeFills++
				} else {
					p.activeRuns++
				}
				e.active = append(e.active, n)
				e.progress.Queued--
				e.progress.Running++
			}
			p.queued = kept
		}
		// Settle dependencies; collect ready task instances; finish complete runs.
		var ready []*tiNode
		finished := false
		kept := e.active[:0]
		for _, r := range e.active {
			rd, retry, complete, err := e.settle(ctx, r, now)
			if err != nil {
				return nextRetry, nil, err
			}
			if !retry.IsZero() && (nextRetry.IsZero() || retry.Before(nextRetry)) {
				nextRetry = retry
			}
			if complete {
				if err := e.finishRun(ctx, r, now); err != nil {
					return nextRetry, nil, err
				}
				finished = true
				continue
			}
			kept = append(kept, r)
			ready = append(ready, rd...)
		}
		e.active = kept
		if finished {
			continue // slots of max_active_runs were freed: admit more first
		}
		sort.SliceStable(ready, func(i, j int) bool {
			a, b := ready[i], ready[j]
			if fa, fb := a.run.run.Kind == store.KindBackfill, b.run.run.Kind == store.KindBackfill; fa != fb {
				return fb // scheduled and manual attempts first
			}
			if !a.run.run.LogicalDate.Equal(b.run.run.LogicalDate) {
				return a.run.run.LogicalDate.Before(b.run.run.LogicalDate)
			}
			if a.run.p != b.run.p {
				return a.run.p.def.Name < b.run.p.def.Name
			}
			return a.idx < b.idx
		})
		var claimed []claim
		for _, n := range ready {
			rt := e.routeOf(n)
			fits, wake := e.fits(n, rt.Pool, now)
			if !wake.IsZero() && (nextRetry.IsZero() || wake.Before(nextRetry)) {
				nextRetry = wake
			}
			if !fits {
				continue
			}
			c, ok, err := e.claim(ctx, n, rt)
			if err != nil {
				return nextRetry, nil, err
			}
			if ok {
				claimed = append(claimed, c)
			}
		}
		return nextRetry, claimed, nil
	}
}

// settle moves the task instances of one admitted run along their
// dependencies. It returns the instances ready to launch, the earliest retry
// time, and whether every instance is finished.
func (e *engine) settle(ctx context.Context, r *runNode, now time.Time) (ready []*tiNode, retry time.Time, complete bool, err error) {
	complete = true
	for _, n := range r.tis {
		if n.task == nil && !n.ti.State.Terminal() && n.ti.State != store.TaskRunning && n.ti.State != store.TaskQueued {
			if err := e.setState(ctx, n, store.TaskSkipped); err != nil {
				return nil, retry, false, err
			}
		}
		switch n.ti.State {
		case store.TaskScheduled:
			verdict := e.upstreamVerdict(n)
			switch verdict {
			case store.TaskUpstreamFailed, store.TaskSkipped:
				if err := e.setState(ctx, n, verdict); err != nil {
					return nil, retry, false, err
				}
				continue
			case store.TaskSuccess:
				if ok, err := e.producersReady(ctx, r, now); err != nil {
					return nil, retry, false, err
				} else if ok {
					ready = append(ready, n)
				}
			}
			complete = false
		case store.TaskUpForRetry:
			complete = false
			if !n.ti.NextTryAt.After(now) {
				ready = append(ready, n)
			} else if retry.IsZero() || n.ti.NextTryAt.Before(retry) {
				retry = n.ti.NextTryAt
			}
		case store.TaskQueued, store.TaskRunning:
			complete = false
		}
	}
	return ready, retry, complete, nil
}

// upstreamVerdict says what a scheduled task instance may do: TaskSuccess
// (ready), TaskUpstreamFailed, TaskSkipped, or TaskScheduled (wait).
func (e *engine) upstreamVerdict(n *tiNode) store.TaskState {
	r := n.run
	skipped := false
	for _, dep := range n.task.DependsOn {
		var up *tiNode
		for _, m := range r.tis {
			if m.task != nil && m.task.Name == dep {
				up = m
				break
			}
		}
		if up == nil {
			continue // not in this run (added later): nothing to wait for
		}
		switch up.ti.State {
		case store.TaskFailed, store.TaskUpstreamFailed:
			return store.TaskUpstreamFailed
		case store.TaskSkipped:
			skipped = true
		case store.TaskSuccess:
		default:
			return store.TaskScheduled
		}
	}
	if skipped {
		return store.TaskSkipped
	}
	if n.task.DependsOnPast && r.prev != nil {
		for _, m := range r.prev.tis {
			if m.task == nil || m.task.Name != n.task.Name {
				continue
			}
			switch m.ti.State {
			case store.TaskSuccess, store.TaskSkipped:
			case store.TaskFailed, store.TaskUpstreamFailed:
				// The previous run's instance failed: this one can never run
				// until that one is cleared and succeeds.
				return store.TaskUpstreamFailed
			default:
				return store.TaskScheduled
			}
		}
	}
	return store.TaskSuccess
}

func (e *engine) setState(ctx context.Context, n *tiNode, to store.TaskState) error {
	from := n.ti.State
	if _, err := e.st.SetTaskStates(ctx, store.SetTaskStatesParams{IDs: []int64{n.ti.ID}, From: []store.TaskState{from}, To: to, Now: time.Now()}); err != nil {
		return err
	}
	n.ti.State = to
	return nil
}

// fits says whether an attempt of n may start now in pool: the pipeline's
// max_active_tasks, the pool's slots (less those reserved for scheduled runs
// when n belongs to a backfill), and the task's limits. When only a rate
// limit stands in the way it also returns when to look again.
func (e *engine) fits(n *tiNode, pool string, now time.Time) (bool, time.Time) {
	p := n.run.p
	if p.def.MaxActiveTasks > 0 && p.activeTasks >= p.def.MaxActiveTasks {
		return false, time.Time{}
	}
	if e.poolUsed[pool] >= e.poolSlots(pool) {
		return false, time.Time{}
	}
	if pl := e.o.Workspace.Pools[pool]; pl != nil && n.run.run.Kind == store.KindBackfill &&
		e.poolFill[pool] >= pl.Slots-pl.ReservedForScheduled {
		return false, time.Time{}
	}
	var wake time.Time
	for _, name := range n.task.Limits {
		l := e.o.Workspace.Limits[name]
		if l == nil {
			continue
		}
		if l.Concurrency > 0 && e.limitUsed[name] >= l.Concurrency {
			return false, time.Time{}
		}
		if l.Rate > 0 {
			starts := e.limitStarts[name]
			for len(starts) > 0 && !starts[0].After(now.Add(-l.Per)) {
				starts = starts[1:]
			}
			e.limitStarts[name] = starts
			if len(starts) >= l.Rate {
				if w := starts[0].Add(l.Per); wake.IsZero() || w.Before(wake) {
					wake = w
				}
			}
		}
	}
	return wake.IsZero(), wake
}

func (e *engine) poolSlots(name string) int {
	if pl, ok := e.o.Workspace.Pools[name]; ok {
		return pl.Slots
	}
	return dsl.DefaultPoolSlots
}

func (e *engine) finishRun(ctx context.Context, r *runNode, now time.Time) error {
	state := store.RunSuccess
	var failed []string
	for _, n := range r.tis {
		if n.ti.State != store.TaskSuccess && n.ti.State != store.TaskSkipped {
			state = store.RunFailed
			failed = append(failed, n.ti.Task)
		}
	}
	// A run is a success only once its outputs are committed.
	if state == store.RunSuccess && len(r.p.def.Outputs) > 0 {
		if err := commitOutputs(ctx, e.lakes, r.p.def, r.run, e.runVars(r)); err != nil {
			state = store.RunFailed
			failed = append(failed, err.Error())
			e.log.Error("committing the run's outputs failed", "pipeline", r.p.def.Name, "ds", r.run.DS, "error", err)
			e.outputError(r, err)
		}
	}
	if err := e.st.FinishRun(ctx, store.FinishRunParams{RunID: r.run.ID, State: state, Now: now}); err != nil && !errors.Is(err, store.ErrConflict) {
		return err
	}
	r.run.State = state
	r.done = true
	if r.run.Kind == store.KindBackfill {
		r.p.activeFills--
	} else {
		r.p.activeRuns--
	}
	e.progress.Running--
	if state == store.RunSuccess {
		e.progress.Succeeded++
		r.p.watermarkDirty = true
		if now.Sub(r.p.watermarkAt) >= watermarkEvery {
			if err := e.advanceWatermark(ctx, r.p, now); err != nil {
				return err
			}
		}
	} else {
		e.progress.Failed++
	}
	e.summary.Finished = append(e.summary.Finished, RunResult{
		Pipeline: r.p.def.Name, DS: r.run.DS, LogicalDate: r.run.LogicalDate, State: state,
		Duration: now.Sub(r.begun), FailedTasks: failed,
	})
	return nil
}

// outputError keeps why a run's outputs could not be committed, in
// logs/<pipeline>/outputs/<run>.log.
func (e *engine) outputError(r *runNode, err error) {
	path := filepath.Join(e.o.Home, "logs", r.p.def.Name, "outputs", r.key+".log")
	executor.AppendLine(path, time.Now().Format(time.RFC3339)+" "+err.Error())
}

// producerRecheck bounds how often a consumer's run re-reads the state for
// producers outside this execution.
const producerRecheck = 10 * time.Second

// producersReady is consumes as a sensor: date D of a consumer waits until
// the runs of its producers within its data interval have succeeded (at
// least one, all of them). A run that waits keeps its slot and is checked
// again by the next pass or the next rewind run.
func (e *engine) producersReady(ctx context.Context, r *runNode, now time.Time) (bool, error) {
	if r.producersOK || len(r.p.def.Consumes) == 0 {
		return true, nil
	}
	from, to := r.run.DataIntervalStart, r.run.DataIntervalEnd
	for _, name := range r.p.def.Consumes {
		if pp := e.pipes[name]; pp != nil {
			found, waiting := 0, false
			for _, pr := range pp.all {
				if pr.run.LogicalDate.Before(from) || !pr.run.LogicalDate.Before(to) {
					continue
				}
				found++
				if pr.run.State != store.RunSuccess {
					waiting = true
				}
			}
			if found > 0 && !waiting {
				continue
			}
			if found > 0 {
				return false, nil // it runs in this execution: a later pass sees it end
			}
		}
		if now.Sub(r.producersChecked) < producerRecheck {
			return false, nil
		}
		r.producersChecked = now
		runs, err := e.st.ListRuns(ctx, store.ListRunsParams{Pipelines: []string{name}, From: from, To: to})
		if err != nil {
			return false, err
		}
		ok := false
		for _, pr := range runs {
			if !pr.LogicalDate.Before(to) {
				continue
			}
			if pr.State != store.RunSuccess {
				return false, nil
			}
			ok = true
		}
		if !ok {
			return false, nil
		}
	}
	r.producersOK = true
	return true, nil
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

// routeOf is the pool of n's next attempt, cached until an attempt ends.
func (e *engine) routeOf(n *tiNode) Route {
	if n.route == nil {
		p := n.run.p
		var probe *probeResult
		if sk := n.task.EffectiveSkew(p.def); sk != nil {
			probe = e.probes[sk]
		}
		rt := routeTask(e.o.Workspace, p.def, n.task, e.runVars(n.run), probe, history{attempts: n.hist, median: p.medians[n.task.Name]})
		n.route = &rt
	}
	return *n.route
}

// runVars are the run.* values of a run.
func (e *engine) runVars(r *runNode) dsl.RunVars {
	def := r.p.def
	tz := def.Timezone
	return dsl.RunVars{
		ID:                RunID(r.run.Kind, r.run.LogicalDate.In(tz)),
		Pipeline:          def.Name,
		LogicalDate:       r.run.LogicalDate.In(tz),
		DataIntervalStart: r.run.DataIntervalStart.In(tz),
		DataIntervalEnd:   r.run.DataIntervalEnd.In(tz),
		Kind:              string(r.run.Kind),
		Dir:               filepath.Join(e.o.Home, "runs", def.Name, r.key),
	}
}

// claim is a claimed task instance whose process is to be started.
type claim struct {
	node    *tiNode
	attempt store.Attempt
}

// claim claims a task instance: its attempt row exists before its process
// does, so that no process ever runs unrecorded. ok is false when the task
// instance changed under us (it was cleared): the next pass sees it.
func (e *engine) claim(ctx context.Context, n *tiNode, rt Route) (claim, bool, error) {
	att, err := e.st.ClaimTask(ctx, store.ClaimTaskParams{
		TaskInstanceID: n.ti.ID, Pool: rt.Pool, Reason: rt.Reason, Host: e.host,
		// One directory per task, not per run: creating inodes is the
		// largest cost of an attempt on most filesystems.
		LogPath: filepath.Join(e.o.Home, "logs", n.run.p.def.Name, n.task.Name, n.run.key+".{try}.log"),
		Now:     time.Now(),
	})
	if errors.Is(err, store.ErrConflict) {
		return claim{}, false, nil
	}
	if err != nil {
		return claim{}, false, err
	}
	n.ti.TryNumber = att.TryNumber
	n.ti.State = store.TaskQueued
	n.ti.Pool = att.Pool
	now := time.Now()
	for _, l := range n.task.Limits {
		e.limitStarts[l] = append(e.limitStarts[l], now)
	}
	e.startRunning(n)
	e.progress.Attempts++
	return claim{node: n, attempt: att}, true, nil
}

// startAll starts the processes of committed claims, then records their pids
// in one transaction. An attempt that cannot start fails like one that
// exited non-zero.
func (e *engine) startAll(ctx context.Context, claimed []claim) error {
	if len(claimed) == 0 {
		return nil
	}
	started := make([]store.StartAttemptParams, 0, len(claimed))
	for _, c := range claimed {
		if err := e.ensureSetup(ctx, c.node.ti.Pool); err != nil {
			e.deliverLaunchError(c.node, c.attempt, err)
			continue
		}
		spec, err := e.spec(c.node, c.attempt)
		if err != nil {
			e.deliverLaunchError(c.node, c.attempt, err)
			continue
		}
		h, err := executor.Start(spec)
		if err != nil {
			e.deliverLaunchError(c.node, c.attempt, err)
			continue
		}
		started = append(started, store.StartAttemptParams{AttemptID: c.attempt.ID, PID: h.PID, PIDStart: h.PIDStart, Now: time.Now()})
		n, att := c.node, c.attempt
		e.wg.Go(func() {
			res := h.Wait(ctx)
			e.events <- completion{node: n, attempt: att, res: res}
		})
	}
	return e.batch(context.WithoutCancel(ctx), func() error {
		for _, p := range started {
			if err := e.st.StartAttempt(context.WithoutCancel(ctx), p); err != nil && !errors.Is(err, store.ErrConflict) {
				return err
			}
		}
		return nil
	})
}

func (e *engine) deliverLaunchError(n *tiNode, att store.Attempt, err error) {
	executor.AppendLine(att.LogPath, "rewind: cannot start attempt: "+err.Error())
	e.wg.Go(func() { e.events <- completion{node: n, attempt: att, launchErr: err} })
}

// spec renders the attempt's command and environment.
func (e *engine) spec(n *tiNode, att store.Attempt) (executor.Spec, error) {
	r := n.run
	def := r.p.def
	rv := e.runVars(r)
	if err := os.MkdirAll(rv.Dir, 0o755); err != nil {
		return executor.Spec{}, fmt.Errorf("run directory: %w", err)
	}
	pv := dsl.PoolVars{Name: n.ti.Pool}
	pl := e.o.Workspace.Pools[n.ti.Pool]
	if pl != nil {
		pv = pl.Vars()
	}
	cmd, err := n.task.Render(rv, pv)
	if err != nil {
		return executor.Spec{}, err
	}
	env := append(os.Environ(), TaskEnv(rv, pv, n.task.Name, att.TryNumber)...)
	for k, v := range def.Params {
		env = append(env, "REWIND_PARAM_"+k+"="+v)
	}
	for k, v := range cmd.Env {
		env = append(env, k+"="+v)
	}
	argv := cmd.Argv
	var memory int64
	if pl != nil {
		launcher, err := pl.Launcher()
		if err != nil {
			return executor.Spec{}, fmt.Errorf("pool %s: %w", pl.Name, err)
		}
		argv = append(launcher, argv...)
		memory = pl.Memory
	}
	return executor.Spec{
		Argv: argv, Env: env, Dir: cmd.Dir, LogPath: att.LogPath, MemoryLimit: memory,
		Timeout: n.task.Timeout, Grace: e.o.Grace,
	}, nil
}

// RunID is a run's id as tasks see it (run.id, REWIND_RUN_ID), as Airflow
// names runs: "<kind>__<logical date>".
func RunID(kind store.RunKind, logical time.Time) string {
	return string(kind) + "__" + logical.Format(time.RFC3339)
}

// TaskEnv is the REWIND_* environment of an attempt (contract).
func TaskEnv(rv dsl.RunVars, pv dsl.PoolVars, task string, try int) []string {
	mem, cpus := "", ""
	if pv.Memory > 0 {
		mem = strconv.FormatInt(pv.Memory, 10)
	}
	if pv.CPUs > 0 {
		cpus = strconv.Itoa(pv.CPUs)
	}
	return []string{
		"REWIND_PIPELINE=" + rv.Pipeline,
		"REWIND_TASK=" + task,
		"REWIND_RUN_ID=" + rv.ID,
		"REWIND_DS=" + rv.LogicalDate.Format("2006-01-02"),
		"REWIND_DS_NODASH=" + rv.LogicalDate.Format("20060102"),
		"REWIND_LOGICAL_DATE=" + rv.LogicalDate.Format(time.RFC3339),
		"REWIND_DATA_INTERVAL_START=" + rv.DataIntervalStart.Format(time.RFC3339),
		"REWIND_DATA_INTERVAL_END=" + rv.DataIntervalEnd.Format(time.RFC3339),
		"REWIND_RUN_KIND=" + rv.Kind,
		"REWIND_TRY_NUMBER=" + strconv.Itoa(try),
		"REWIND_POOL=" + pv.Name,
		"REWIND_POOL_MEMORY=" + mem,
		"REWIND_POOL_CPUS=" + cpus,
		"REWIND_RUN_DIR=" + rv.Dir,
	}
}

// complete records how an attempt ended and moves its task instance.
func (e *engine) complete(ctx context.Context, c completion) error {
	n := c.node
	e.stopRunning(n)
	now := time.Now()
	p := store.FinishAttemptParams{AttemptID: c.attempt.ID, Now: now, PeakRSS: c.res.PeakRSS}
	code, haveCode := -1, false
	switch {
	case c.launchErr != nil:
	case c.adopted:
		if c.adoptErr != nil { // stopped waiting (interrupt): a later rewind adopts it again
			n.ti.State = store.TaskRunning
			return nil
		}
		code, haveCode = c.code, c.haveCode
	case c.res.Interrupted:
		p.State, p.TaskState = store.AttemptInterrupted, store.TaskScheduled
	default:
		if c.res.ExitCode != nil {
			code, haveCode = *c.res.ExitCode, true
		}
		p.Signal = c.res.Signal
	}
	if p.State == "" {
		switch {
		case c.adopted && !haveCode:
			p.State, p.TaskState = store.AttemptLost, store.TaskScheduled
		case haveCode && code == 0 && !c.res.TimedOut:
			p.State, p.TaskState = store.AttemptSuccess, store.TaskSuccess
		case haveCode && code == SkipExitCode && !c.res.TimedOut:
			p.State, p.TaskState = store.AttemptSkipped, store.TaskSkipped
		case outOfMemory(c, code, haveCode) && e.escalation(n) != "":
			// Retried at once on the larger pool, without using a retry.
			p.State, p.TaskState, p.NextTryAt = store.AttemptOOM, store.TaskUpForRetry, now
		default:
			p.State, p.CountFailure = store.AttemptFailed, true
			if outOfMemory(c, code, haveCode) {
				p.State = store.AttemptOOM
			}
			if c.res.TimedOut {
				p.Signal = "timeout"
			}
			p.TaskState = store.TaskFailed
			retries := 0
			if n.task != nil {
				retries = n.task.Retries
			}
			if n.ti.Failures+1 <= retries && c.launchErr == nil {
				p.TaskState = store.TaskUpForRetry
				p.NextTryAt = now.Add(retryDelay(n.task, n.ti.Failures+1))
			}
		}
		if haveCode {
			p.ExitCode = &code
		}
	}
	if err := e.st.FinishAttempt(ctx, p); err != nil && !errors.Is(err, store.ErrConflict) {
		return err
	}
	n.ti.State = p.TaskState
	n.ti.NextTryAt = p.NextTryAt
	if p.CountFailure {
		n.ti.Failures++
	}
	att := c.attempt
	att.State, att.EndedAt, att.ExitCode, att.Signal = p.State, now, p.ExitCode, p.Signal
	if att.StartedAt.IsZero() || c.res.Duration > 0 {
		att.StartedAt = now.Add(-c.res.Duration)
	}
	n.hist = append(n.hist, att)
	n.route = nil
	return nil
}

// outOfMemory says whether an attempt ended the way a memory kill ends: over
// its pool's limit (the watchdog), exit code 137, or SIGKILL. A timeout or an
// interrupt is not one.
func outOfMemory(c completion, code int, haveCode bool) bool {
	if c.res.TimedOut || c.res.Interrupted || c.launchErr != nil {
		return false
	}
	return c.res.OOM || (haveCode && code == 137) || c.res.Signal == syscall.SIGKILL.String()
}

// escalation is the pool an attempt of n that ran out of memory is retried
// on ("" if its pool escalates nowhere).
func (e *engine) escalation(n *tiNode) string {
	if pl := e.o.Workspace.Pools[n.ti.Pool]; pl != nil {
		return pl.EscalateTo
	}
	return ""
}

// retryDelay is the wait before retry number k (1-based).
func retryDelay(t *dsl.Task, k int) time.Duration {
	d := t.RetryDelay
	if t.RetryExponentialBackoff && d > 0 {
		f := math.Pow(2, float64(k-1))
		if float64(d)*f > float64(maxRetryDelay) {
			return maxRetryDelay
		}
		d = time.Duration(float64(d) * f)
	}
	return d
}

func (e *engine) report() {
	if e.o.OnProgress != nil {
		e.o.OnProgress(e.progress)
	}
}
