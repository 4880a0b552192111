package scheduler

import (
	"time"

	"github.com/rewind-dev/rewind/store"
)

// idleWaiting: an admitted run that waits for upstream data with none of
// its tasks started. It holds no max_active_runs slot.
func (d *decider) idleWaiting(r *runNode) bool {
	waiting, seen := d.out.waiting[r]
	if !seen {
		waiting = r.upstreamWaiting
	}
	if !waiting || r.producersOK {
		return false
	}
	for _, n := range r.tis {
		if d.ti(n).State != store.TaskScheduled {
			return false
		}
	}
	return true
}

// producersReady is consumes as a sensor: date D of a consumer waits until
// the runs of its producers within its data interval have succeeded (at
// least one, all of them): those of this execution as the pass leaves
// them, the others as last read (snapshot.external).
func (d *decider) producersReady(r *runNode) bool {
	if r.producersOK || len(r.p.def.Consumes) == 0 {
		return true
	}
	ok := d.producersSucceeded(r)
	if ok {
		d.out.producersOK = append(d.out.producersOK, r)
	}
	d.out.waiting[r] = !ok
	return ok
}

func (d *decider) producersSucceeded(r *runNode) bool {
	for _, name := range r.p.def.Consumes {
		found, waiting := producersIn(d.s.byName[name], r, d.runState)
		if found > 0 && !waiting {
			continue
		}
		if found > 0 || !d.s.external[r.run.ID] {
			return false // it runs in this execution: a later pass sees it end
		}
	}
	return true
}

// producersIn counts the runs of producer pipeline pp (nil: not in this
// execution) within r's data interval, and says whether one of them has
// not succeeded.
func producersIn(pp *pipe, r *runNode, state func(*runNode) store.RunState) (found int, waiting bool) {
	if pp == nil {
		return 0, false
	}
	from, to := r.run.DataIntervalStart, r.run.DataIntervalEnd
	for _, pr := range pp.all {
		if pr.run.LogicalDate.Before(from) || !pr.run.LogicalDate.Before(to) {
			continue
		}
		found++
		if state(pr) != store.RunSuccess {
			waiting = true
		}
	}
	return found, waiting
}

// runDecision is what one admitted run needs.
type runDecision struct {
	moves []taskMove // scheduled -> upstream_failed | skipped; removed tasks -> skipped
	ready []*tiNode  // may be queued now (dependencies met, retry delay over)
	// nextRetry is the earliest time a task instance waiting for a retry
	// becomes ready (zero if none).
	nextRetry time.Time
	// complete: every task instance is finished (after moves); state is then
	// the run's outcome and failed the tasks that made it fail.
	complete bool
	state    store.RunState
	failed   []string
}

// decideRun decides for one admitted run at now; ti gives each task
// instance's row as the pass sees it.
func decideRun(r *runNode, now time.Time, ti func(*tiNode) store.TaskInstance) runDecision {
	var d runDecision
	// States as they will be once the moves are applied, so that a task
	// downstream of one that becomes upstream_failed in this pass follows it
	// in the same pass (task instances are in topological order).
	state := make(map[*tiNode]store.TaskState, len(r.tis))
	for _, n := range r.tis {
		state[n] = ti(n).State
	}
	move := func(n *tiNode, to store.TaskState) {
		d.moves = append(d.moves, taskMove{node: n, from: state[n], to: to})
		state[n] = to
	}
	d.complete = true
	for _, n := range r.tis {
		st := state[n]
		if n.task == nil {
			// The task was removed from the pipeline: it can never run again.
			if st == store.TaskScheduled || st == store.TaskUpForRetry || st == store.TaskQueued {
				move(n, store.TaskSkipped)
			} else if !st.Terminal() {
				d.complete = false
			}
			continue
		}
		switch st {
		case store.TaskScheduled:
			switch v := upstreamVerdict(r, n, state, ti); v {
			case store.TaskUpstreamFailed, store.TaskSkipped:
				move(n, v)
				continue
			case store.TaskSuccess:
				d.ready = append(d.ready, n)
			}
			d.complete = false
		case store.TaskUpForRetry:
			d.complete = false
			if next := ti(n).NextTryAt; !next.After(now) {
				d.ready = append(d.ready, n)
			} else if d.nextRetry.IsZero() || next.Before(d.nextRetry) {
				d.nextRetry = next
			}
		case store.TaskQueued, store.TaskRunning:
			d.complete = false
		}
	}
	if d.complete {
		d.state = store.RunSuccess
		for _, n := range r.tis {
			if s := state[n]; s != store.TaskSuccess && s != store.TaskSkipped {
				d.state = store.RunFailed
				d.failed = append(d.failed, n.ti.Task)
			}
		}
	}
	return d
}

// upstreamVerdict says what a scheduled task instance may do: TaskSuccess
// (ready), TaskUpstreamFailed, TaskSkipped, or TaskScheduled (wait).
func upstreamVerdict(r *runNode, n *tiNode, state map[*tiNode]store.TaskState, ti func(*tiNode) store.TaskInstance) store.TaskState {
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
		switch state[up] {
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
	if n.task.DependsOnPast && r.prev != nil && !firstOfBackfill(r) {
		for _, m := range r.prev.tis {
			if m.task == nil || m.task.Name != n.task.Name {
				continue
			}
			switch ti(m).State {
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

// firstOfBackfill reports whether r is the first run of its backfill: the
// run before it belongs to no backfill or another one. Its depends_on_past
// tasks do not wait for that run (Airflow's rule for a backfill's first
// run): a backfill that restates a window after a failed date runs.
func firstOfBackfill(r *runNode) bool {
	return r.run.Kind == store.KindBackfill && r.run.BackfillID != "" && r.prev.run.BackfillID != r.run.BackfillID
}
