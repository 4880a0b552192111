package scheduler

import (
	"context"
	"errors"
	"fmt"
	"maps"
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

// usageOf sums Usage's rows as a pass counts them.
func (e *engine) usageOf(rows []store.UsageRow) usage {
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
	return u
}

// clone copies the counts a pass changes as it decides.
func (u usage) clone() usage {
	c := func(m map[string]int) map[string]int {
		if m == nil {
			return map[string]int{}
		}
		return maps.Clone(m)
	}
	return usage{poolRunning: c(u.poolRunning), poolFill: c(u.poolFill), pipeTasks: c(u.pipeTasks), limitUsed: c(u.limitUsed)}
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

// claimParams ask the store for queued work of the selected pipelines, by
// pool: the same call a worker on another machine makes.
func (e *engine) claimParams(now time.Time) store.ClaimReadyParams {
	p := store.ClaimReadyParams{
		Pools: e.capacities(), Pipelines: e.claimPipelines,
		Owner: e.self.ID, Host: e.self.Host, Limit: claimLimit, Now: now,
	}
	if b := e.o.Backfill; b != nil {
		p.BackfillID, p.ReverseBackfill = b.ID, b.Reverse
	}
	return p
}

// claim takes queued work from the store in tx. Each claimed task instance
// is running, with an attempt row owned by this process, before its
// process exists, so that no process ever runs unrecorded. Work of a run
// this execution does not drive (it appeared meanwhile) is given back
// without using a retry, and the pass says that the store differs.
func (e *engine) claim(ctx context.Context, tx store.Store, p store.ClaimReadyParams) ([]claim, bool, error) {
	got, err := tx.ClaimReady(ctx, p)
	if err != nil {
		return nil, false, err
	}
	differs := false
	out := make([]claim, 0, len(got))
	for _, ca := range got {
		n := e.cache.byTI[ca.TaskInstanceID]
		if n == nil || n.task == nil {
			differs = true
			if err := tx.FinishAttempt(ctx, store.FinishAttemptParams{
				AttemptID: ca.ID, State: store.AttemptInterrupted, TaskState: store.TaskScheduled, Now: p.Now,
			}); err != nil && !errors.Is(err, store.ErrConflict) {
				return nil, differs, err
			}
			continue
		}
		out = append(out, claim{node: n, attempt: ca.Attempt})
	}
	return out, differs, nil
}

// producerRecheck bounds how often a consumer's run re-reads the state for
// producers outside this execution.
const producerRecheck = 10 * time.Second

// routeOf is the pool of n's next attempt: the one found since its last
// attempt ended, else computed (reading durations in st if it must) from
// its history and the attempts ended, recorded in this pass.
func (e *engine) routeOf(ctx context.Context, st store.Store, n *tiNode, ended []store.Attempt) skew.Route {
	if n.route != nil && len(ended) == 0 {
		return *n.route
	}
	p := n.run.p
	var probe *skew.Probes
	if sk := n.task.EffectiveSkew(p.def); sk != nil {
		probe = e.probes[sk]
	}
	h := skew.History{Attempts: append(n.hist[:len(n.hist):len(n.hist)], ended...)}
	if len(h.Attempts) > 0 && n.task.EffectiveSkew(p.def) != nil {
		h.Median = e.median(ctx, st, p, n.task.Name)
	}
	return skew.Task(e.o.Workspace, p.def, n.task, e.runVars(n.run), probe, h)
}

// median is the median duration of the task's recent successful attempts.
// The pipeline's are read from the state the first time a route needs one
// (a date that runs again, of a task with a skew block), so that a tick
// that needs no history reads none.
func (e *engine) median(ctx context.Context, st store.Store, p *pipe, task string) time.Duration {
	if p.medians == nil {
		durations, err := st.TaskDurations(ctx, store.TaskDurationsParams{Pipeline: p.def.Name, Limit: 500})
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
		// Each block with a probe, and the task whose own block it is
		// (nil: the pipeline's).
		skews := map[*dsl.Skew]*dsl.Task{}
		for _, t := range p.def.Tasks {
			if sk := t.EffectiveSkew(p.def); sk.HasProbe() {
				if sk == p.def.Skew {
					skews[sk] = nil
				} else {
					skews[sk] = t
				}
			}
		}
		for sk, owner := range skews {
			var rvs []dsl.RunVars
			for _, r := range p.all {
				if !r.done {
					rvs = append(rvs, e.runVars(r))
				}
			}
			e.probes[sk] = skew.Measure(skew.ProbeContext(ctx, e.o.Now), p.def, sk, rvs)
			// Recorded for the web view, which shows them and never runs a
			// probe itself. A state that cannot take them costs the view
			// its values, not the run.
			if err := e.base.RecordProbes(ctx, skew.Results(p.def, owner, sk, rvs, e.probes[sk], time.Now())); err != nil {
				e.log.Warn("cannot record the probe results", "pipeline", p.def.Name, "error", err)
			}
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
