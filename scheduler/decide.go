package scheduler

import (
	"time"

	"github.com/rewind-dev/rewind/store"
)

// Deciding is pure: it reads a run's task instances (and the previous run's,
// for depends_on_past) and says what should happen next. It touches neither
// the store nor processes; the engine applies its answer with guarded
// statements and, when one of them conflicts, reads the state again and asks
// again.

// taskMove is one transition decided for a task instance.
type taskMove struct {
	node *tiNode
	from store.TaskState
	to   store.TaskState
}

// decision is what one admitted run needs.
type decision struct {
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

// decideRun decides for one admitted run at now.
func decideRun(r *runNode, now time.Time) decision {
	var d decision
	// States as they will be once the moves are applied, so that a task
	// downstream of one that becomes upstream_failed in this pass follows it
	// in the same pass (task instances are in topological order).
	state := make(map[*tiNode]store.TaskState, len(r.tis))
	for _, n := range r.tis {
		state[n] = n.ti.State
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
			switch v := upstreamVerdict(r, n, state); v {
			case store.TaskUpstreamFailed, store.TaskSkipped:
				move(n, v)
				continue
			case store.TaskSuccess:
				d.ready = append(d.ready, n)
			}
			d.complete = false
		case store.TaskUpForRetry:
			d.complete = false
			if !n.ti.NextTryAt.After(now) {
				d.ready = append(d.ready, n)
			} else if d.nextRetry.IsZero() || n.ti.NextTryAt.Before(d.nextRetry) {
				d.nextRetry = n.ti.NextTryAt
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
func upstreamVerdict(r *runNode, n *tiNode, state map[*tiNode]store.TaskState) store.TaskState {
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
