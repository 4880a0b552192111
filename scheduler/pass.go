package scheduler

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/rewind-dev/rewind/skew"
	"github.com/rewind-dev/rewind/store"
)

// A pass is one transaction of the fenced store: read a snapshot of what is
// in scope (readSnapshot), decide (decide, pure), carry the commands out
// (apply), and, once the transaction committed, bring the cache in line
// with what apply wrote (settle). Nothing of the cache changes before the
// commit: a transaction that rolls back leaves the cache as it was, and the
// next pass reads again.

// readSnapshot reads, in the pass's transaction tx, what the pass decides
// on: the usage of pools and limits and the admitted runs with their task
// instances (as many as max_active_runs allows, never the history), both
// in one store call (one round trip on PostgreSQL), and
// whether the producers outside this execution of waiting consumer runs
// have succeeded (at most every producerRecheck per run). differs says
// that the cache lists admitted runs the store no longer has running.
func (e *engine) readSnapshot(ctx context.Context, tx store.Store, now time.Time, stopping bool) (s *snapshot, differs bool, err error) {
	c := e.cache
	s = &snapshot{
		now: now, stopping: stopping, pipes: c.order, byName: c.pipes, active: c.active,
		runs: map[int64]store.Run{}, tis: map[int64]store.TaskInstance{}, external: map[int64]bool{},
		starts: e.limitStarts, limits: e.o.Workspace.Limits, escalate: e.escalations(), pools: e.o.Workspace.Pools,
		backfill: e.o.Backfill, held: e.o.Backfill.held(), claim: e.claimParams(now),
		pending: e.resolve(e.pending), committed: make([]commitResult, len(e.committed)),
	}
	for i, res := range e.committed {
		res.job.run = c.run(res.job.item.RunID) // nil when reloaded without it
		s.committed[i] = res
	}
	active := map[int64]bool{}
	var names []string
	seen := map[*pipe]bool{}
	for _, r := range c.active {
		if r.done {
			continue
		}
		active[r.run.ID] = true
		if !seen[r.p] {
			seen[r.p] = true
			names = append(names, r.p.def.Name)
		}
	}
	in, err := tx.InFlight(ctx, store.InFlightParams{Pipelines: names})
	if err != nil {
		return nil, false, err
	}
	s.usage = e.usageOf(in.Usage)
	for _, r := range in.Runs {
		if !active[r.ID] {
			if n := c.byRun[r.ID]; n != nil && !n.done {
				differs = true // running, and the cache has it queued
			}
			continue
		}
		for _, ti := range r.Tasks {
			s.tis[ti.ID] = ti
		}
		r.Tasks = nil
		s.runs[r.ID] = r
	}
	for id := range active {
		if _, ok := s.runs[id]; !ok {
			s.runs[id] = store.Run{ID: id} // no longer running: decided on after a re-read
			differs = true
		}
	}
	if stopping {
		return s, differs, nil
	}
	return s, differs, e.readProducers(ctx, tx, s)
}

// readProducers looks at the producers outside this execution of the
// unfinished consumer runs that wait for them.
func (e *engine) readProducers(ctx context.Context, tx store.Store, s *snapshot) error {
	bf := e.o.Backfill
	for _, p := range e.cache.order {
		if len(p.def.Consumes) == 0 || (p.paused && !(bf != nil && bf.IncludePaused && bf.Pipeline == p.def.Name)) {
			continue
		}
		for _, r := range p.all {
			if r.done || r.producersOK {
				continue
			}
			if s.now.Sub(r.producersChecked) < producerRecheck {
				s.external[r.run.ID] = r.external
				continue
			}
			var outside []string
			for _, name := range p.def.Consumes {
				if found, _ := producersIn(e.cache.pipes[name], r, func(pr *runNode) store.RunState { return pr.run.State }); found == 0 {
					outside = append(outside, name)
				}
			}
			if len(outside) == 0 {
				continue
			}
			ok, err := producersSucceeded(ctx, tx, r, outside)
			if err != nil {
				return err
			}
			// A memo of what the state said, not a copy of it: the look is
			// repeated every producerRecheck until it finds them succeeded.
			r.producersChecked, r.external = s.now, ok
			s.external[r.run.ID] = ok
		}
	}
	return nil
}

// producersSucceeded reads whether every run of the named producer
// pipelines within r's data interval succeeded (at least one per pipeline).
func producersSucceeded(ctx context.Context, st store.Store, r *runNode, names []string) (bool, error) {
	from, to := r.run.DataIntervalStart, r.run.DataIntervalEnd
	for _, name := range names {
		runs, err := st.ListRuns(ctx, store.ListRunsParams{Pipelines: []string{name}, From: from, To: to})
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
	return true, nil
}

// resolve gives ended attempts their task instances in the cache.
func (e *engine) resolve(cs []completion) []completion {
	out := make([]completion, len(cs))
	for i, c := range cs {
		c.node = e.cache.byTI[c.attempt.TaskInstanceID]
		out[i] = c
	}
	return out
}

// escalations are the pools whose memory kills are retried on another.
func (e *engine) escalations() map[string]string {
	out := map[string]string{}
	for name, pl := range e.o.Workspace.Pools {
		if pl.EscalateTo != "" {
			out[name] = pl.EscalateTo
		}
	}
	return out
}

// applied is what apply wrote: the commands the store took, as it took them.
type applied struct {
	recorded   []recordAttempt
	completed  []completeCommit
	admitted   []*runNode
	moved      []taskMove
	finished   []finishRun
	requested  []commitJob
	watermarks []*pipe
	enqueued   []enqueued
	claimed    []claim
	// differs: a guard found the store other than the snapshot said (an
	// operator or another rewind changed it): the commands decided after
	// it that start work (queueing, claims) were not carried out, and the
	// cache is read again.
	differs bool
}

type enqueued struct {
	node  *tiNode
	route skew.Route
}

// apply carries out a pass's commands in tx, the fenced store's
// transaction, each guarded on the state it was decided from. A guard that
// finds the store different skips the command (and the queueing and claims
// after it); any other error fails the transaction.
func (e *engine) apply(ctx context.Context, tx store.Store, now time.Time, cmds []command) (applied, error) {
	var a applied
	// ended are the attempts recorded in this pass, by task instance: the
	// routes of their next tries follow them (hot dates, memory kills).
	ended := map[*tiNode][]store.Attempt{}
	var items []store.EnqueueItem
	var queued []enqueued
	flush := func() error {
		if len(items) == 0 {
			return nil
		}
		defer func() { items, queued = nil, nil }()
		if a.differs {
			return nil
		}
		moved, err := tx.EnqueueTasks(ctx, store.EnqueueTasksParams{Items: items, Now: now})
		if err != nil {
			return err
		}
		if moved != len(items) {
			a.differs = true // some changed under us: the re-read tells which
			return nil
		}
		a.enqueued = append(a.enqueued, queued...)
		return nil
	}
	// The store's answers to the commands applied in batches (a run of
	// recordAttempt, admitRun or finishRun commands is one call), by
	// index in cmds.
	batched := map[int]error{}
	for i, cmd := range cmds {
		if _, ok := batched[i]; !ok {
			if err := e.applyBatch(ctx, tx, now, cmds, i, batched); err != nil {
				return a, err
			}
		}
		switch c := cmd.(type) {
		case recordAttempt:
			err := batched[i]
			if errors.Is(err, store.ErrConflict) {
				a.differs = true // someone else recorded it (a takeover)
				continue
			}
			if err != nil {
				return a, err
			}
			if c.c.node == nil || !c.moves {
				a.differs = true
			} else {
				ended[c.c.node] = append(ended[c.c.node], c.attempt(now))
			}
			a.recorded = append(a.recorded, c)
		case completeCommit:
			err := tx.CompleteCommit(ctx, store.CompleteCommitParams{OutboxID: c.res.job.item.ID, State: c.state, Now: now})
			if errors.Is(err, store.ErrConflict) || errors.Is(err, store.ErrNotFound) {
				a.differs = true // cleared meanwhile: it runs again
				continue
			}
			if err != nil {
				return a, err
			}
			if c.state == store.RunFailed {
				if err := e.queueRunFailed(ctx, tx, c.res.job.run, now, strings.Join(c.failed, "; ")); err != nil {
					return a, err
				}
			} else if err := e.queueRunRecovered(ctx, tx, c.res.job.run, now); err != nil {
				return a, err
			}
			a.completed = append(a.completed, c)
		case admitRun:
			err := batched[i]
			if errors.Is(err, store.ErrConflict) {
				a.differs = true
				continue
			}
			if err != nil {
				return a, err
			}
			a.admitted = append(a.admitted, c.run)
		case taskMove:
			n, err := tx.SetTaskStates(ctx, store.SetTaskStatesParams{IDs: []int64{c.node.ti.ID}, From: []store.TaskState{c.from}, To: c.to, Now: now})
			if err != nil {
				return a, err
			}
			if n == 0 {
				a.differs = true
				continue
			}
			a.moved = append(a.moved, c)
		case finishRun:
			err := batched[i]
			if errors.Is(err, store.ErrConflict) {
				a.differs = true
				continue
			}
			if err != nil {
				return a, err
			}
			if c.state == store.RunFailed {
				if err := e.queueRunFailed(ctx, tx, c.run, now, ""); err != nil {
					return a, err
				}
			} else if err := e.queueRunRecovered(ctx, tx, c.run, now); err != nil {
				return a, err
			}
			a.finished = append(a.finished, c)
		case requestCommit:
			item, err := tx.RequestCommit(ctx, store.RequestCommitParams{RunID: c.run.run.ID, Now: now})
			if errors.Is(err, store.ErrConflict) {
				a.differs = true
				continue
			}
			if err != nil {
				return a, err
			}
			a.requested = append(a.requested, e.commitJob(item, c.run))
		case advanceWatermark:
			_, err := tx.AdvanceWatermark(ctx, store.AdvanceWatermarkParams{Pipeline: c.p.def.Name, Now: now})
			if err != nil && !errors.Is(err, store.ErrNotFound) {
				return a, err
			}
			a.watermarks = append(a.watermarks, c.p)
		case enqueueTask:
			n := c.node
			rt := e.routeOf(ctx, tx, n, ended[n])
			items = append(items, store.EnqueueItem{
				TaskInstanceID: n.ti.ID, Pool: rt.Pool, Reason: rt.Reason, Priority: n.idx,
				// One directory per task, not per run: creating inodes is the
				// largest cost of an attempt on most filesystems.
				LogPath: filepath.Join(e.o.Home, "logs", n.run.p.def.Name, n.task.Name, n.run.key+".{try}.log"),
			})
			queued = append(queued, enqueued{node: n, route: rt})
		case claimWork:
			if err := flush(); err != nil {
				return a, err
			}
			if a.differs {
				continue
			}
			claimed, differs, err := e.claim(ctx, tx, c.p)
			if err != nil {
				return a, err
			}
			a.claimed, a.differs = claimed, a.differs || differs
		default:
			return a, fmt.Errorf("scheduler: unknown command %T", cmd)
		}
	}
	return a, flush()
}

// applyBatch applies, as one call of the store, the run of commands of
// cmds[i]'s kind that starts at i, when that kind is one the store takes in
// batches (recordAttempt, admitRun, finishRun), and files each command's
// answer in batched by index; other kinds it leaves alone.
func (e *engine) applyBatch(ctx context.Context, tx store.Store, now time.Time, cmds []command, i int, batched map[int]error) error {
	kind := batchKind(cmds[i])
	if kind == 0 {
		return nil
	}
	j := i + 1
	for j < len(cmds) && batchKind(cmds[j]) == kind {
		j++
	}
	var errs []error
	var err error
	switch cmds[i].(type) {
	case recordAttempt:
		ps := make([]store.FinishAttemptParams, 0, j-i)
		for _, c := range cmds[i:j] {
			ps = append(ps, c.(recordAttempt).p)
		}
		errs, err = tx.FinishAttempts(ctx, ps)
	case admitRun:
		ps := make([]store.AdmitRunParams, 0, j-i)
		for _, c := range cmds[i:j] {
			ps = append(ps, store.AdmitRunParams{RunID: c.(admitRun).run.run.ID, Now: now})
		}
		errs, err = tx.AdmitRuns(ctx, ps)
	case finishRun:
		ps := make([]store.FinishRunParams, 0, j-i)
		for _, c := range cmds[i:j] {
			f := c.(finishRun)
			ps = append(ps, store.FinishRunParams{RunID: f.run.run.ID, State: f.state, Now: now})
		}
		errs, err = tx.FinishRuns(ctx, ps)
	default:
		return nil
	}
	if err != nil {
		return err
	}
	for k, e := range errs {
		batched[i+k] = e
	}
	return nil
}

// batchKind tells the kinds of commands applyBatch takes apart (0: not
// batched).
func batchKind(c command) int {
	switch c.(type) {
	case recordAttempt:
		return 1
	case admitRun:
		return 2
	case finishRun:
		return 3
	}
	return 0
}

// attempt is the attempt as recorded at now.
func (rec recordAttempt) attempt(now time.Time) store.Attempt {
	p := rec.p
	att := rec.c.attempt
	att.State, att.EndedAt, att.ExitCode, att.Signal = p.State, now, p.ExitCode, p.Signal
	if att.StartedAt.IsZero() || rec.c.res.Duration > 0 {
		att.StartedAt = now.Add(-rec.c.res.Duration)
	}
	return att
}

// settle brings the cache in line with a committed pass: the rows the
// snapshot read, then what apply wrote.
func (e *engine) settle(s *snapshot, dec decided, a applied) {
	c := e.cache
	for _, r := range s.active {
		row, ok := s.runs[r.run.ID]
		if !ok || row.State == "" {
			continue
		}
		r.run.State = row.State
		for _, n := range r.tis {
			if ti, ok := s.tis[n.ti.ID]; ok {
				n.ti = ti
			}
		}
	}
	now := s.now
	for _, rec := range a.recorded {
		n := rec.c.node
		if n == nil || !rec.moves || n.ti.TryNumber != rec.c.attempt.TryNumber {
			continue
		}
		p := rec.p
		n.ti.State, n.ti.NextTryAt = p.TaskState, p.NextTryAt
		if p.CountFailure {
			n.ti.Failures++
		}
		n.hist = append(n.hist, rec.attempt(now))
		n.route = nil
	}
	for _, res := range e.committed {
		if res.err != nil {
			r := res.job.run
			e.log.Error("committing the run's outputs failed", "pipeline", r.p.def.Name, "ds", r.run.DS, "error", res.err)
			e.outputError(r, res.err)
		}
	}
	e.commits.settle(e.committed)
	e.committed = nil
	e.pending = nil
	for _, cc := range a.completed {
		r := c.run(cc.res.job.item.RunID)
		if r == nil || r.done || !r.committing {
			continue // the re-read after the conflict that reloaded it tells
		}
		e.runFinished(r, cc.state, cc.failed, now)
	}
	for _, r := range a.admitted {
		r.run.State = store.RunRunning
		r.begun = now
		r.p.queued = slices.DeleteFunc(r.p.queued, func(q *runNode) bool { return q == r })
		if r.run.Kind == store.KindBackfill {
			r.p.activeFills++
		} else {
			r.p.activeRuns++
		}
		c.active = append(c.active, r)
	}
	for _, m := range a.moved {
		m.node.ti.State = m.to
	}
	for _, f := range a.finished {
		e.runFinished(f.run, f.state, f.failed, now)
	}
	for _, p := range a.watermarks {
		p.watermarkDirty, p.watermarkAt = false, now
	}
	for _, j := range a.requested {
		j.run.committing = true
	}
	for _, q := range a.enqueued {
		rt := q.route
		q.node.route = &rt
		q.node.ti.State, q.node.ti.Pool, q.node.ti.Reason = store.TaskQueued, rt.Pool, rt.Reason
	}
	for _, cl := range a.claimed {
		n := cl.node
		n.ti.State, n.ti.TryNumber, n.ti.Pool = store.TaskRunning, cl.attempt.TryNumber, cl.attempt.Pool
	}
	if dec.starts != nil {
		e.limitStarts = dec.starts
	}
	for _, r := range dec.producersOK {
		r.producersOK = true
	}
	for r, w := range dec.waiting {
		r.upstreamWaiting = w
	}
	c.active = slices.DeleteFunc(c.active, func(r *runNode) bool { return r.done })
	c.recount()
}

// runFinished updates the cache, the progress and the summary for a run the
// store finished.
func (e *engine) runFinished(r *runNode, state store.RunState, failed []string, now time.Time) {
	r.run.State = state
	r.done = true
	r.committing = false
	if r.run.Kind == store.KindBackfill {
		r.p.activeFills--
	} else {
		r.p.activeRuns--
	}
	if state == store.RunSuccess {
		e.progress.Succeeded++
		r.p.watermarkDirty = true
	} else {
		e.progress.Failed++
	}
	e.summary.Finished = append(e.summary.Finished, RunResult{
		Pipeline: r.p.def.Name, DS: r.run.DS, LogicalDate: r.run.LogicalDate, Kind: r.run.Kind, State: state,
		Duration: now.Sub(r.begun), FailedTasks: failed,
	})
}

// recordNow records the processes started and not yet recorded, then ended
// attempts, outside a pass (the execution is ending), each in its own
// transaction, as far as the store allows.
func (e *engine) recordNow(cs []completion) {
	if err := e.recordStarts(context.Background()); err != nil {
		e.log.Warn("could not record the pids of started attempts: the next rewind finds them by their logs", "error", err)
	}
	for _, c := range e.resolve(cs) {
		err := e.base.InTx(context.Background(), func(tx store.Store) error {
			s := &snapshot{now: time.Now(), stopping: true, escalate: e.escalations(), pending: []completion{c}}
			_, err := e.apply(context.Background(), tx, s.now, decide(s).commands)
			return err
		})
		if err != nil {
			e.log.Warn("could not record an attempt: the next rewind reads its status from its log", "error", err)
		}
	}
}
