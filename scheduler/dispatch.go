package scheduler

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sort"
	"time"

	"github.com/rewind-dev/rewind/dsl"
	"github.com/rewind-dev/rewind/skew"
	"github.com/rewind-dev/rewind/store"
)

// usage is what is in flight according to the store: running attempts and
// queued task instances. Pool slots, reserved slots, max_active_tasks and
// limits are checked against it, never against counters of this process.
type usage struct {
	poolRunning map[string]int // running attempts per pool
	poolFill    map[string]int // the part of them that belongs to backfill runs
	pipeTasks   map[string]int // running + queued per pipeline (max_active_tasks)
	limitUsed   map[string]int // running + queued per limit (concurrency)
}

func (e *engine) readUsage(ctx context.Context) error {
	rows, err := e.st.Usage(ctx)
	if err != nil {
		return err
	}
	u := usage{poolRunning: map[string]int{}, poolFill: map[string]int{}, pipeTasks: map[string]int{}, limitUsed: map[string]int{}}
	for _, r := range rows {
		u.poolRunning[r.Pool] += r.Running
		if r.Backfill {
			u.poolFill[r.Pool] += r.Running
		}
		u.pipeTasks[r.Pipeline] += r.Running + r.Queued
		if p := e.cache.pipes[r.Pipeline]; p != nil {
			if t := p.def.Task(r.Task); t != nil {
				for _, l := range t.Limits {
					u.limitUsed[l] += r.Running + r.Queued
				}
			}
		}
	}
	e.usage = u
	return nil
}

// passResult is what one pass leaves to do outside its transaction.
type passResult struct {
	claimed   []claim
	commits   []commitJob
	nextRetry time.Time // earliest retry or rate-limit wake-up (zero if none)
}

// pass admits runs, applies the decisions of every admitted run, finishes
// complete runs (or hands their outputs to the outbox), queues the ready
// task instances that fit the limits and claims queued work for this
// process. A guarded statement that finds the store changed marks the cache
// stale: the loop re-reads before the next pass.
func (e *engine) pass(ctx context.Context) (passResult, error) {
	var res passResult
	now := time.Now()
	if err := e.readUsage(ctx); err != nil {
		return res, err
	}
	c := e.cache
	var ready []*tiNode
	for {
		if err := e.admit(ctx, now); err != nil {
			return res, err
		}
		ready = ready[:0]
		finished := false
		kept := c.active[:0]
		for _, r := range c.active {
			if r.done {
				continue
			}
			if r.committing {
				kept = append(kept, r)
				continue
			}
			d := decideRun(r, now)
			if err := e.applyMoves(ctx, d.moves); err != nil {
				return res, err
			}
			if !d.nextRetry.IsZero() && (res.nextRetry.IsZero() || d.nextRetry.Before(res.nextRetry)) {
				res.nextRetry = d.nextRetry
			}
			if !d.complete {
				kept = append(kept, r)
				if r.run.Kind == store.KindBackfill && e.o.Backfill.held() {
					continue // on hold: its running attempts finish, nothing new starts
				}
				for _, n := range d.ready {
					ok, err := e.producersReady(ctx, r, now)
					if err != nil {
						return res, err
					}
					if !ok {
						break
					}
					ready = append(ready, n)
				}
				continue
			}
			if d.state == store.RunSuccess && len(r.p.def.Outputs) > 0 {
				// A run is a success only once its outputs are committed:
				// the commit leaves this transaction through the outbox.
				item, err := e.st.RequestCommit(ctx, store.RequestCommitParams{RunID: r.run.ID, Now: now})
				if errors.Is(err, store.ErrConflict) {
					c.stale = true
					kept = append(kept, r)
					continue
				}
				if err != nil {
					return res, err
				}
				r.committing = true
				res.commits = append(res.commits, commitJob{item: item, run: r})
				kept = append(kept, r)
				continue
			}
			err := e.st.FinishRun(ctx, store.FinishRunParams{RunID: r.run.ID, State: d.state, Now: now})
			if errors.Is(err, store.ErrConflict) {
				c.stale = true
				kept = append(kept, r)
				continue
			}
			if err != nil {
				return res, err
			}
			if err := e.runFinished(ctx, r, d.state, d.failed, now); err != nil {
				return res, err
			}
			finished = true
		}
		c.active = kept
		if !finished || c.stale {
			break // else slots of max_active_runs were freed: admit more first
		}
	}
	if c.stale {
		return res, nil
	}
	wake, err := e.enqueue(ctx, ready, now)
	if err != nil {
		return res, err
	}
	if !wake.IsZero() && (res.nextRetry.IsZero() || wake.Before(res.nextRetry)) {
		res.nextRetry = wake
	}
	res.claimed, err = e.claim(ctx, now)
	return res, err
}

// admit moves queued runs to running, oldest first, up to max_active_runs
// (backfill runs up to their own), for pipelines that are not paused.
func (e *engine) admit(ctx context.Context, now time.Time) error {
	bf := e.o.Backfill
	for _, p := range e.cache.order {
		// A paused pipeline admits only the runs of a backfill applied
		// with --include-paused.
		onlyFills := p.paused && bf != nil && bf.IncludePaused && bf.Pipeline == p.def.Name
		if p.paused && !onlyFills {
			continue
		}
		// A run waiting for upstream data holds no slot (Airflow's sensor
		// deadlock): it is admitted only once its producers succeeded, and
		// an admitted run that waits with none of its tasks started (one
		// admitted before its producers were checked) does not count.
		activeRuns, activeFills := p.activeRuns, p.activeFills
		if len(p.def.Consumes) > 0 {
			for _, r := range e.cache.active {
				if r.p == p && !r.done && r.idleWaiting() {
					if r.run.Kind == store.KindBackfill {
						activeFills--
					} else {
						activeRuns--
					}
				}
			}
		}
		kept := p.queued[:0]
		for i, n := range p.queued {
			fill := n.run.Kind == store.KindBackfill
			if (fill && (activeFills >= p.maxFills || bf.held())) || (!fill && (activeRuns >= p.maxRuns || onlyFills)) {
				kept = append(kept, n)
				continue
			}
			if len(p.def.Consumes) > 0 {
				ok, err := e.producersReady(ctx, n, now)
				if err != nil {
					return err
				}
				if !ok {
					kept = append(kept, n) // waits in the queue, on no slot
					continue
				}
			}
			err := e.st.AdmitRun(ctx, store.AdmitRunParams{RunID: n.run.ID, Now: now})
			if errors.Is(err, store.ErrConflict) {
				e.cache.stale = true
				kept = append(kept, p.queued[i:]...)
				break
			}
			if err != nil {
				return err
			}
			n.run.State = store.RunRunning
			n.begun = now
			if fill {
				p.activeFills++
				activeFills++
			} else {
				p.activeRuns++
				activeRuns++
			}
			e.cache.active = append(e.cache.active, n)
			e.progress.Queued--
			e.progress.Running++
		}
		p.queued = kept
	}
	return nil
}

// applyMoves applies decided transitions, each guarded on the state it was
// decided from.
func (e *engine) applyMoves(ctx context.Context, moves []taskMove) error {
	for _, m := range moves {
		n, err := e.st.SetTaskStates(ctx, store.SetTaskStatesParams{IDs: []int64{m.node.ti.ID}, From: []store.TaskState{m.from}, To: m.to, Now: time.Now()})
		if err != nil {
			return err
		}
		if n == 0 {
			e.cache.stale = true
			continue
		}
		m.node.ti.State = m.to
	}
	return nil
}

// runFinished updates the copy, the progress and the summary for a run the
// store finished.
func (e *engine) runFinished(ctx context.Context, r *runNode, state store.RunState, failed []string, now time.Time) error {
	r.run.State = state
	r.done = true
	r.committing = false
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

// enqueue routes the ready task instances that fit max_active_tasks and the
// limits and queues them in the store, where a claimer of their pool takes
// them. It returns when a rate limit lets the next one through (zero if
// none waits for one).
func (e *engine) enqueue(ctx context.Context, ready []*tiNode, now time.Time) (time.Time, error) {
	if len(ready) == 0 {
		return time.Time{}, nil
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
	var wake time.Time
	var items []store.EnqueueItem
	var nodes []*tiNode
	var routes []skew.Route
	for _, n := range ready {
		fits, w := e.fits(n, now)
		if !w.IsZero() && (wake.IsZero() || w.Before(wake)) {
			wake = w
		}
		if !fits {
			continue
		}
		rt := e.routeOf(n)
		items = append(items, store.EnqueueItem{
			TaskInstanceID: n.ti.ID, Pool: rt.Pool, Reason: rt.Reason, Priority: n.idx,
			// One directory per task, not per run: creating inodes is the
			// largest cost of an attempt on most filesystems.
			LogPath: filepath.Join(e.o.Home, "logs", n.run.p.def.Name, n.task.Name, n.run.key+".{try}.log"),
		})
		nodes = append(nodes, n)
		routes = append(routes, rt)
		e.usage.pipeTasks[n.run.p.def.Name]++
		for _, l := range n.task.Limits {
			e.usage.limitUsed[l]++
			e.limitStarts[l] = append(e.limitStarts[l], now)
		}
	}
	if len(items) == 0 {
		return wake, nil
	}
	moved, err := e.st.EnqueueTasks(ctx, store.EnqueueTasksParams{Items: items, Now: now})
	if err != nil {
		return wake, err
	}
	if moved != len(items) {
		e.cache.stale = true // some changed under us: the reload tells which
	}
	for i, n := range nodes {
		n.ti.State, n.ti.Pool, n.ti.Reason = store.TaskQueued, routes[i].Pool, routes[i].Reason
	}
	return wake, nil
}

// fits says whether n may be queued now: the pipeline's max_active_tasks
// and the task's limits, counted over what is running and queued. When only
// a rate limit stands in the way it also returns when to look again. Pool
// slots are the claimer's business.
func (e *engine) fits(n *tiNode, now time.Time) (bool, time.Time) {
	p := n.run.p
	if p.def.MaxActiveTasks > 0 && e.usage.pipeTasks[p.def.Name] >= p.def.MaxActiveTasks {
		return false, time.Time{}
	}
	var wake time.Time
	for _, name := range n.task.Limits {
		l := e.o.Workspace.Limits[name]
		if l == nil {
			continue
		}
		if l.Concurrency > 0 && e.usage.limitUsed[name] >= l.Concurrency {
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

// capacities are the pools this process claims work for.
func (e *engine) capacities() []store.PoolCapacity {
	names := map[string]bool{dsl.DefaultPoolName: true}
	for name := range e.o.Workspace.Pools {
		names[name] = true
	}
	out := make([]store.PoolCapacity, 0, len(names))
	for name := range names {
		slots := e.poolSlots(name)
		fill := slots
		if pl := e.o.Workspace.Pools[name]; pl != nil {
			fill = max(0, slots-pl.ReservedForScheduled)
		}
		out = append(out, store.PoolCapacity{Name: name, Slots: slots, BackfillSlots: fill})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// claim is a claimed task instance whose process is to be started.
type claim struct {
	node    *tiNode
	attempt store.Attempt
}

// claimLimit bounds the attempts one pass claims.
const claimLimit = 512

// claim takes queued work of the selected pipelines from the store, by pool:
// the same call a worker on another machine makes. Each claimed task
// instance is running, with an attempt row owned by this process, before
// its process exists, so that no process ever runs unrecorded.
func (e *engine) claim(ctx context.Context, now time.Time) ([]claim, error) {
	p := store.ClaimReadyParams{
		Pools: e.capacities(), Pipelines: e.claimPipelines,
		Owner: e.self.ID, Host: e.self.Host, Limit: claimLimit, Now: now,
	}
	if b := e.o.Backfill; b != nil {
		p.BackfillID, p.ReverseBackfill = b.ID, b.Reverse
	}
	got, err := e.st.ClaimReady(ctx, p)
	if err != nil {
		return nil, err
	}
	out := make([]claim, 0, len(got))
	for _, ca := range got {
		n := e.cache.byTI[ca.TaskInstanceID]
		if n == nil || n.task == nil {
			// Not a run this execution drives (it appeared meanwhile): give
			// it back without using a retry; the reload picks it up.
			e.cache.stale = true
			if err := e.st.FinishAttempt(ctx, store.FinishAttemptParams{
				AttemptID: ca.ID, State: store.AttemptInterrupted, TaskState: store.TaskScheduled, Now: now,
			}); err != nil && !errors.Is(err, store.ErrConflict) {
				return nil, err
			}
			continue
		}
		n.ti.State, n.ti.TryNumber, n.ti.Pool = store.TaskRunning, ca.TryNumber, ca.Pool
		out = append(out, claim{node: n, attempt: ca.Attempt})
	}
	return out, nil
}

// producerRecheck bounds how often a consumer's run re-reads the state for
// producers outside this execution.
const producerRecheck = 10 * time.Second

// producersReady is consumes as a sensor: date D of a consumer waits until
// the runs of its producers within its data interval have succeeded (at
// least one, all of them). A queued run that waits is not admitted, so it
// holds no max_active_runs slot; it is checked again by the next pass or
// the next rewind run.
func (e *engine) producersReady(ctx context.Context, r *runNode, now time.Time) (bool, error) {
	if r.producersOK || len(r.p.def.Consumes) == 0 {
		return true, nil
	}
	ok, err := e.producersSucceeded(ctx, r, now)
	r.upstreamWaiting = err == nil && !ok
	return ok, err
}

// idleWaiting: an admitted run that waits for upstream data with none of
// its tasks started. It holds no max_active_runs slot.
func (r *runNode) idleWaiting() bool {
	if !r.upstreamWaiting || r.producersOK {
		return false
	}
	for _, n := range r.tis {
		if n.ti.State != store.TaskScheduled {
			return false
		}
	}
	return true
}

func (e *engine) producersSucceeded(ctx context.Context, r *runNode, now time.Time) (bool, error) {
	from, to := r.run.DataIntervalStart, r.run.DataIntervalEnd
	for _, name := range r.p.def.Consumes {
		if pp := e.cache.pipes[name]; pp != nil {
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

// routeOf is the pool of n's next attempt, cached until an attempt ends.
func (e *engine) routeOf(n *tiNode) skew.Route {
	if n.route == nil {
		p := n.run.p
		var probe *skew.Probes
		if sk := n.task.EffectiveSkew(p.def); sk != nil {
			probe = e.probes[sk]
		}
		h := skew.History{Attempts: n.hist}
		if len(n.hist) > 0 && n.task.EffectiveSkew(p.def) != nil {
			h.Median = e.median(p, n.task.Name)
		}
		rt := skew.Task(e.o.Workspace, p.def, n.task, e.runVars(n.run), probe, h)
		n.route = &rt
	}
	return *n.route
}

// median is the median duration of the task's recent successful attempts.
// The pipeline's are read from the state the first time a route needs one
// (a date that runs again, of a task with a skew block), so that a tick
// that needs no history reads none.
func (e *engine) median(p *pipe, task string) time.Duration {
	if p.medians == nil {
		durations, err := e.st.TaskDurations(context.Background(), store.TaskDurationsParams{Pipeline: p.def.Name, Limit: 500})
		if err != nil {
			e.log.Warn("cannot read the durations of past attempts: routing without them", "pipeline", p.def.Name, "error", err)
			return 0
		}
		p.medians = map[string]time.Duration{}
		for t, ds := range durations {
			p.medians[t] = skew.MedianDuration(ds)
		}
	}
	return p.medians[task]
}

// runProbes measures, with each skew probe, every date about to run.
func (e *engine) runProbes(ctx context.Context) {
	for _, p := range e.cache.order {
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
			e.probes[sk] = skew.Measure(skew.ProbeContext(ctx, e.o.Now), p.def, sk, rvs)
			keys := make([]int64, 0, len(e.probes[sk].Failures()))
			for key := range e.probes[sk].Failures() {
				keys = append(keys, key)
			}
			slices.Sort(keys)
			for _, key := range keys {
				msg := e.probes[sk].Failures()[key]
				e.log.Warn("probe failed: the date is not treated as hot", "pipeline", p.def.Name, "logical_date", time.Unix(key, 0).In(p.def.Timezone).Format(time.RFC3339), "error", msg)
				e.warn(fmt.Sprintf("%s: %s; the date runs on its own pool, not treated as hot", p.def.Name, msg))
			}
		}
	}
}
