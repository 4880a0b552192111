package scheduler

import (
	"context"
	"errors"
	"time"

	"github.com/rewind-dev/rewind/agent"
	"github.com/rewind-dev/rewind/executor"
	"github.com/rewind-dev/rewind/store"
)

// Recovery settles attempts left running by a rewind that stopped. Who owns
// an attempt is a fact of the store (its owner row and heartbeat), not of
// this host's process table: an attempt whose owner is alive elsewhere is
// left alone until that owner's heartbeat expires. An attempt of a dead
// owner is adopted when its process still runs on this host (with its
// timeout, memory limit and signals re-armed), gets the outcome its wrapper
// recorded when it ended, and is lost (run again without using a retry)
// when neither can be known.

// recover looks at every attempt the store has in state running.
func (e *engine) recover(ctx context.Context) error {
	stale, err := e.base.RunningAttempts(ctx)
	if err != nil {
		return err
	}
	return e.settleRunning(ctx, stale)
}

// checkForeign looks again at the attempts of owners that were alive: those
// that ended are re-read (ended: the cache is to be read again), those
// whose owner died are taken over.
func (e *engine) checkForeign(ctx context.Context) (ended bool, err error) {
	if len(e.foreign) == 0 {
		return false, nil
	}
	all, err := e.base.RunningAttempts(context.WithoutCancel(ctx))
	if err != nil {
		return false, err
	}
	still := map[int64]bool{}
	var mine []store.RunningAttempt
	for _, a := range all {
		if _, ok := e.foreign[a.ID]; ok {
			still[a.ID] = true
			mine = append(mine, a)
		}
	}
	for id := range e.foreign {
		if !still[id] {
			delete(e.foreign, id) // its owner recorded it: the reload shows how it ended
			ended = true
		}
	}
	return ended, e.settleRunning(ctx, mine)
}

func (e *engine) settleRunning(ctx context.Context, attempts []store.RunningAttempt) error {
	bg := context.WithoutCancel(ctx)
	for _, a := range attempts {
		if a.Owner == e.self.ID {
			continue
		}
		alive, err := e.ownerAlive(bg, a)
		if err != nil {
			return err
		}
		inScope := e.cache.byTI[a.TaskInstanceID] != nil
		if alive {
			if inScope {
				if _, known := e.foreign[a.ID]; !known {
					e.log.Info("leaving an attempt to its live owner", "pipeline", a.Pipeline, "task", a.Task, "try", a.TryNumber, "owner", a.Owner)
				}
				e.foreign[a.ID] = a
			}
			continue
		}
		delete(e.foreign, a.ID)
		if err := e.takeOver(ctx, a, inScope); err != nil {
			return err
		}
	}
	return nil
}

// ownerAlive says whether the rewind that claimed a is still alive: on this
// host its process is checked (pid and start time), elsewhere its heartbeat.
// Attempts recorded before owners existed belong to whoever ran on their
// host.
func (e *engine) ownerAlive(ctx context.Context, a store.RunningAttempt) (bool, error) {
	if a.Owner == "" {
		return false, nil
	}
	ow, err := e.base.GetOwner(ctx, a.Owner)
	if errors.Is(err, store.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if e.self.Process(ow.ID, ow.Host, ow.PID, ow.PIDStart) {
		return false, nil // an earlier execution of this process: over
	}
	if e.self.SameNode(ow.ID, ow.Host) {
		start, err := executor.ProcessStart(ow.PID)
		return err == nil && (ow.PIDStart == 0 || start == ow.PIDStart), nil
	}
	now, err := e.base.Now(ctx) // the state's clock, not this machine's
	if err != nil {
		return false, err
	}
	if ow.ExpiresAt.After(now) || a.JobID != "" {
		return ow.ExpiresAt.After(now), nil // a Slurm job is adopted by its id, wherever
	}
	// Its rewind is gone, but its machine may be alive, with the attempt
	// running there: its host agent says so, and settles it (package agent).
	return agent.Alive(ctx, e.base, a.Owner, a.Host)
}

// takeOver settles one attempt whose owner is gone.
func (e *engine) takeOver(ctx context.Context, a store.RunningAttempt, inScope bool) error {
	bg := context.WithoutCancel(ctx)
	if pl := e.o.Workspace.Pools[a.Pool]; a.JobID != "" || pl.Slurm() && a.PID == 0 {
		if done, err := e.takeOverSlurm(ctx, a, inScope); done || err != nil {
			return err
		}
	}
	// machine: its log is a file here; local: its pid is one of this
	// pid namespace and boot (containers may share a host name).
	machine := a.Host == e.self.Host
	local := machine && e.self.SameNode(a.Owner, a.Host)
	pid := a.PID
	if local && pid == 0 {
		pid = executor.FindWrapper(a.LogPath)
	}
	if local && executor.Alive(pid, a.LogPath) {
		switch {
		case !inScope && a.Kind == store.KindBackfill && stoppedBackfillRun(bg, e.base, a.Pipeline, a.RunID):
			// An attempt of a cancelled (or failed) backfill whose rewind
			// died: the cancel stops it, as an apply would have.
			e.log.Info("stopping an attempt of a stopped backfill", "pipeline", a.Pipeline, "task", a.Task, "pid", pid)
			executor.EmptyGroup(pid, e.o.Grace)
		case !inScope:
			return nil // a pipeline outside this execution: left to the rewind that selects it
		default:
			e.adopt(ctx, a, pid)
			return nil
		}
	}
	c := completion{attempt: a.Attempt, adopted: true, noStatus: true}
	if machine || a.JobID != "" {
		if code, ok := executor.ReadStatusNonce(a.LogPath, a.Nonce); ok {
			c.res, c.noStatus = executor.Result{ExitCode: &code}, false
		} else if code, ok := e.journaled[a.Nonce]; ok && a.Nonce != "" {
			// Its status never reached the log (a full disk), but the
			// rewind that waited for it wrote it in the journal.
			c.res, c.noStatus = executor.Result{ExitCode: &code}, false
		}
	}
	if !inScope {
		// Without the pipeline's retry policy: success stays success,
		// anything else is lost and runs again.
		p := store.FinishAttemptParams{AttemptID: a.ID, State: store.AttemptLost, TaskState: store.TaskScheduled, Now: time.Now()}
		if c.res.ExitCode != nil && *c.res.ExitCode == 0 {
			code := 0
			p.State, p.TaskState, p.ExitCode = store.AttemptSuccess, store.TaskSuccess, &code
		}
		if err := e.base.FinishAttempt(bg, p); err != nil && !errors.Is(err, store.ErrConflict) {
			return err
		}
		if a.Kind == store.KindBackfill {
			return settleStoppedBackfillRun(bg, e.base, a.Pipeline, a.RunID)
		}
		return nil
	}
	if c.noStatus {
		e.log.Info("an attempt of a rewind that died is lost: it runs again", "pipeline", a.Pipeline, "task", a.Task, "try", a.TryNumber, "host", a.Host)
	} else {
		e.log.Info("recording the exit of an attempt of a rewind that died", "pipeline", a.Pipeline, "task", a.Task, "try", a.TryNumber, "exit_code", *c.res.ExitCode)
	}
	e.progress.Attempts++
	e.pending = append(e.pending, c) // recorded by the next pass
	return nil
}

// stoppedBackfill returns the backfill that no longer runs (cancelled,
// failed, done) whose unfinished run runID of the pipeline is, or nil.
func stoppedBackfill(ctx context.Context, st store.Store, pipeline string, runID int64) (*store.Backfill, error) {
	runs, err := st.ListRuns(ctx, store.ListRunsParams{Pipelines: []string{pipeline}, States: []store.RunState{store.RunQueued, store.RunRunning}})
	if err != nil {
		return nil, err
	}
	for _, r := range runs {
		if r.ID != runID || r.BackfillID == "" {
			continue
		}
		b, err := st.GetBackfill(ctx, r.BackfillID)
		if err != nil || b.State == store.BackfillRunning {
			return nil, nil
		}
		return &b, nil
	}
	return nil, nil
}

// stoppedBackfillRun reports whether run runID of the pipeline belongs to
// a backfill that no longer runs.
func stoppedBackfillRun(ctx context.Context, st store.Store, pipeline string, runID int64) bool {
	b, err := stoppedBackfill(ctx, st, pipeline, runID)
	return err == nil && b != nil
}

// settleStoppedBackfillRun ends a run of a backfill that no longer runs
// (cancelled, failed) once the last attempt of it is settled: no apply
// will finish it, and a run must not stay running without a process. Its
// waiting task instances fail, as a cancel does; a later backfill with
// reprocess failed, or rewind clear, takes it up again.
func settleStoppedBackfillRun(ctx context.Context, st store.Store, pipeline string, runID int64) error {
	b, err := stoppedBackfill(ctx, st, pipeline, runID)
	if err != nil || b == nil {
		return err
	}
	return CancelBackfillRuns(ctx, st, store.Backfill{ID: b.ID, Pipeline: pipeline})
}

// adopt waits for a live attempt of a dead rewind as for one of its own:
// its timeout counts from its start, its pool's memory limit holds, and an
// interrupt stops it.
func (e *engine) adopt(ctx context.Context, a store.RunningAttempt, pid int) {
	n := e.cache.byTI[a.TaskInstanceID]
	e.log.Info("adopting attempt of a previous rewind", "pipeline", a.Pipeline, "task", a.Task, "try", a.TryNumber, "pid", pid)
	spec := executor.AdoptSpec{
		PID: pid, PIDStart: a.PIDStart, LogPath: a.LogPath, Nonce: a.Nonce,
		StartedAt: a.StartedAt, Grace: e.o.Grace,
	}
	if n.task != nil {
		spec.Timeout = n.task.Timeout
	}
	if pl := e.o.Workspace.Pools[a.Pool]; pl != nil {
		spec.MemoryLimit = pl.Memory
	}
	e.progress.Attempts++
	e.supervise(a.Pool)
	att := a.Attempt
	e.watch(att, true, func(ctx context.Context) executor.Result { return executor.AdoptWait(ctx, spec) })
}

// takeOverSlurm settles an attempt of a Slurm pool whose owner is gone, by
// its job id (found by its nonce when its rewind died before recording
// it): a job Slurm still has is adopted, never submitted again, and one
// that ended gets the outcome Slurm (or its log) has. done is false when
// there is no job to follow: the attempt is then settled as a local one
// whose process is gone (its log's status, else lost).
func (e *engine) takeOverSlurm(ctx context.Context, a store.RunningAttempt, inScope bool) (done bool, err error) {
	bg := context.WithoutCancel(ctx)
	jobID := a.JobID
	if jobID == "" {
		if jobID, err = executor.FindSlurmJob(bg, "", a.Nonce); err != nil {
			// Slurm cannot be asked: the job may run; the attempt stays
			// running until a later recovery can tell.
			e.log.Warn("cannot look for the Slurm job of an attempt", "pipeline", a.Pipeline, "task", a.Task, "try", a.TryNumber, "err", err)
			return true, nil
		}
		if jobID == "" {
			return false, nil
		}
	}
	if !inScope {
		alive, err := executor.SlurmJobAlive(bg, jobID)
		switch {
		case err != nil:
			return true, nil // unknown: left as it is
		case alive && a.Kind == store.KindBackfill && stoppedBackfillRun(bg, e.base, a.Pipeline, a.RunID):
			e.log.Info("cancelling the Slurm job of a stopped backfill", "pipeline", a.Pipeline, "task", a.Task, "job", jobID)
			_, _ = executor.Run(bg, executor.Command{Argv: []string{"scancel", jobID}, Timeout: time.Minute})
			return true, nil
		case alive:
			return true, nil // left to the rewind that selects its pipeline
		}
		return false, nil // ended: settled from its log
	}
	n := e.cache.byTI[a.TaskInstanceID]
	e.log.Info("adopting the Slurm job of a previous rewind", "pipeline", a.Pipeline, "task", a.Task, "try", a.TryNumber, "job", jobID)
	spec := executor.SlurmAdoptSpec{JobID: jobID, LogPath: a.LogPath, Nonce: a.Nonce, Grace: e.o.Grace, Poll: slurmPoll, Leave: e.o.LeaveSlurmJobs}
	if n != nil && n.task != nil {
		spec.Timeout = n.task.Timeout
	}
	if pl := e.o.Workspace.Pools[a.Pool]; pl != nil {
		spec.MemoryLimit = pl.Memory
	}
	e.progress.Attempts++
	e.supervise(a.Pool)
	att := a.Attempt
	att.JobID = jobID
	e.watch(att, true, func(ctx context.Context) executor.Result { return executor.AdoptSlurm(ctx, spec) })
	return true, nil
}
