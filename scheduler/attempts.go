package scheduler

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"syscall"
	"time"

	"github.com/rewind-dev/rewind/dsl"
	"github.com/rewind-dev/rewind/executor"
	"github.com/rewind-dev/rewind/executor/procenv"
	"github.com/rewind-dev/rewind/store"
)

// completion is how one attempt this process supervised ended.
type completion struct {
	attempt store.Attempt
	res     executor.Result
	// adopted attempts were started by a rewind that stopped; noStatus: the
	// process is gone and left no exit status (lost).
	adopted   bool
	noStatus  bool
	launchErr error
	// node is the attempt's task instance in the cache (nil when not in
	// scope), found when a pass records the completion.
	node *tiNode
	// panicked: the goroutine that waited for the attempt panicked; the
	// execution stops and leaves the attempt to the next rewind.
	panicked error
}

// watch waits, in a goroutine of its own, for an attempt this execution
// supervises, and sends how it ended. Waiting stops with the attempts'
// context (attemptsCtx): interrupted, or left running (executor.ErrLeave),
// when nothing is sent: the next rewind adopts it. A panic is sent as such,
// never swallowed: the execution stops rather than wait for ever.
func (e *engine) watch(att store.Attempt, adopted bool, wait func(context.Context) executor.Result) {
	e.wg.Go(func() {
		c := completion{attempt: att, adopted: adopted}
		func() {
			defer func() {
				if r := recover(); r != nil {
					c.panicked = fmt.Errorf("waiting for attempt %d panicked: %v\n%s", att.ID, r, debug.Stack())
				}
			}()
			c.res = wait(e.attemptsCtx)
		}()
		if c.res.Left && c.panicked == nil && errors.Is(context.Cause(e.attemptsCtx), executor.ErrLeave) {
			return
		}
		select {
		case e.events <- c:
		case <-e.gone:
		}
	})
}

// startAll starts the processes of committed claims and keeps their pids for
// writeStarts. An attempt that cannot start fails like one that exited
// non-zero; one claimed while an interrupt arrived is given back: both are
// recorded by the next pass.
func (e *engine) startAll(ctx context.Context, claimed []claim) {
	if len(claimed) == 0 {
		return
	}
	bg := context.WithoutCancel(ctx)
	started := make([]store.StartAttemptParams, 0, len(claimed))
	var failed []completion
	waves := map[string][]slurmStart{}
	var waveOrder []string
	for _, c := range claimed {
		e.progress.Attempts++
		if ctx.Err() != nil {
			failed = append(failed, completion{attempt: c.attempt, res: executor.Result{Interrupted: true}})
			continue
		}
		if err := e.ensureSetup(ctx, c.attempt.Pool); err != nil {
			failed = append(failed, e.launchError(c.attempt, err))
			continue
		}
		spec, err := e.spec(c.node, c.attempt)
		if err != nil {
			failed = append(failed, e.launchError(c.attempt, err))
			continue
		}
		if pl := e.o.Workspace.Pools[c.attempt.Pool]; pl.Slurm() {
			// A Slurm pool: the attempt is a batch job, submitted with the
			// others of its pool and pipeline in this pass (its wave).
			key := c.attempt.Pool + "\x00" + c.node.run.p.def.Name
			if waves[key] == nil {
				waveOrder = append(waveOrder, key)
			}
			waves[key] = append(waves[key], slurmStart{c: c, spec: spec})
			continue
		}
		h, err := executor.Start(spec)
		if err != nil {
			failed = append(failed, e.launchError(c.attempt, err))
			continue
		}
		started = append(started, store.StartAttemptParams{AttemptID: c.attempt.ID, PID: h.PID, PIDStart: h.PIDStart, Now: time.Now()})
		att := c.attempt
		e.supervise(att.Pool)
		e.watch(att, false, h.Wait)
	}
	for _, key := range waveOrder {
		s, f := e.submitWave(bg, waves[key])
		started, failed = append(started, s...), append(failed, f...)
	}
	e.pending = append(e.pending, failed...)
	e.started = append(e.started, started...)
}

// writeStarts records, in tx, the processes started since the last record
// (e.started): their pids, or Slurm job ids, and when they started. When
// attempts ended while the last ones started, the next pass writes them,
// first, in its transaction: one transaction less per pass, and on
// PostgreSQL four round trips less at the moment the new processes compete
// for the CPU. Otherwise the loop records them (recordStarts) before it
// waits, so a process that runs long is in the state at once. Until then
// recovery finds a local attempt by its log (executor.FindWrapper) and a
// Slurm one by its job name, as for a rewind killed between a start and its
// record. An attempt another rewind ended meanwhile keeps no pid: the guard
// refuses it.
func (e *engine) writeStarts(ctx context.Context, tx store.Store) error {
	if len(e.started) == 0 {
		return nil
	}
	// In attempt id order, as every pass writes its attempts, so that two
	// writers of the same rows do not deadlock.
	slices.SortFunc(e.started, func(a, b store.StartAttemptParams) int { return cmp.Compare(a.AttemptID, b.AttemptID) })
	errs, err := tx.StartAttempts(ctx, e.started)
	if err != nil {
		return err
	}
	for _, err := range errs {
		if err != nil && !errors.Is(err, store.ErrConflict) {
			return err
		}
	}
	return nil
}

// recordStarts records e.started in a transaction of its own. One that
// fails as a whole on a conflict (a deadlock or serialization failure that
// PostgreSQL resolved against it) wrote nothing and is run again.
func (e *engine) recordStarts(ctx context.Context) error {
	var err error
	for try := 0; try < 3 && len(e.started) > 0; try++ {
		err = e.base.InTx(ctx, func(tx store.Store) error { return e.writeStarts(ctx, tx) })
		if err == nil {
			e.started = nil
		}
		if !errors.Is(err, store.ErrConflict) {
			break
		}
	}
	return err
}

// slurmStart is a claimed attempt of a Slurm pool, ready to submit.
type slurmStart struct {
	c    claim
	spec executor.Spec
}

// submitWave submits the attempts of one Slurm pool and pipeline that a
// pass starts together: as job arrays (a wave of one as a job of its
// own), each attempt an element whose id "ARRAYID_i" is recorded in place
// of a pid; recovery adopts it by that id.
func (e *engine) submitWave(ctx context.Context, wave []slurmStart) (started []store.StartAttemptParams, failed []completion) {
	first := wave[0].c
	pl := e.o.Workspace.Pools[first.attempt.Pool]
	specs := make([]executor.Spec, len(wave))
	names := make([]string, len(wave))
	for i, w := range wave {
		specs[i], names[i] = w.spec, e.slurmJobName(w.c.node, w.c.attempt)
	}
	w := executor.SlurmWave{
		Partition: pl.Partition, Name: fmt.Sprintf("rewind:%s:%s:array", first.node.run.p.def.Name, pl.Name),
		Dir: filepath.Join(e.o.Home, "slurm-arrays"), Poll: slurmPoll, Leave: e.o.LeaveSlurmJobs, Names: names,
	}
	handles, errs := executor.SubmitSlurmWave(ctx, specs, w)
	for i, sw := range wave {
		if errs[i] != nil {
			failed = append(failed, e.launchError(sw.c.attempt, errs[i]))
			continue
		}
		sh := handles[i]
		started = append(started, store.StartAttemptParams{AttemptID: sw.c.attempt.ID, JobID: sh.JobID, Now: time.Now()})
		att := sw.c.attempt
		att.JobID = sh.JobID
		e.supervise(att.Pool)
		e.watch(att, false, sh.Wait)
	}
	return started, failed
}

func (e *engine) launchError(att store.Attempt, err error) completion {
	executor.AppendLine(att.LogPath, "rewind: cannot start attempt: "+err.Error())
	return completion{attempt: att, launchErr: err}
}

// supervise counts an attempt process this process waits for.
func (e *engine) supervise(pool string) {
	e.running++
	e.local[pool]++
	e.poolBusy(pool)
	if !e.agentStarted && e.o.EnsureAgent != nil {
		e.agentStarted = true
		if err := e.o.EnsureAgent(); err != nil {
			e.warn(fmt.Sprintf("the host agent did not start (%v): if this rewind dies while its attempts run, another machine takes them for dead", err))
		}
	}
}

// release counts an attempt this process supervised as ended (its
// process is gone); record then writes its outcome.
func (e *engine) release(c completion) {
	if c.res.Left {
		// A Slurm job this execution stopped waiting for: it stays running
		// in the state (the pass records nothing of it), and the next
		// rewind adopts it by its job id.
		e.log.Info("leaving a Slurm job running: the next rewind adopts it", "attempt", c.attempt.ID, "try", c.attempt.TryNumber, "job", c.attempt.JobID)
	}
	if code := c.res.ExitCode; code != nil && !c.res.Interrupted {
		e.journal.put(c.attempt.Nonce, *code)
	}
	e.running--
	if e.local[c.attempt.Pool]--; e.local[c.attempt.Pool] <= 0 {
		e.local[c.attempt.Pool] = 0
		e.poolIdle(c.attempt.Pool)
	}
}

// attemptOutcome is pure: how an attempt ended -> what the store records.
// The process's own exit status wins over an interrupt that came too late
// to matter; an adopted attempt that left no status is lost (it runs again
// without using a retry); a memory kill with an escalation pool is retried
// there at once without using a retry.
func attemptOutcome(c completion, task *dsl.Task, failures int, escalateTo string, now time.Time) store.FinishAttemptParams {
	res := c.res
	p := store.FinishAttemptParams{Now: now, PeakRSS: res.PeakRSS, Signal: res.Signal}
	code, haveCode := -1, false
	if res.ExitCode != nil {
		code, haveCode = *res.ExitCode, true
	}
	switch {
	case c.launchErr != nil:
	case res.Interrupted:
		p.State, p.TaskState = store.AttemptInterrupted, store.TaskScheduled
		return p
	case c.adopted && (c.noStatus || res.NoStatus):
		p.State, p.TaskState = store.AttemptLost, store.TaskScheduled
		return p
	}
	if haveCode {
		p.ExitCode = &code
	}
	oom := c.launchErr == nil && !res.TimedOut && (res.OOM || (haveCode && code == 137) || res.Signal == syscall.SIGKILL.String())
	switch {
	case c.launchErr == nil && haveCode && code == 0 && !res.TimedOut:
		p.State, p.TaskState = store.AttemptSuccess, store.TaskSuccess
	case c.launchErr == nil && haveCode && code == SkipExitCode && !res.TimedOut:
		p.State, p.TaskState = store.AttemptSkipped, store.TaskSkipped
	case oom && escalateTo != "":
		p.State, p.TaskState, p.NextTryAt = store.AttemptOOM, store.TaskUpForRetry, now
	default:
		p.State, p.CountFailure = store.AttemptFailed, true
		if oom {
			p.State = store.AttemptOOM
		}
		if res.TimedOut {
			p.Signal = "timeout"
		}
		p.TaskState = store.TaskFailed
		retries := 0
		if task != nil {
			retries = task.Retries
		}
		if failures+1 <= retries && c.launchErr == nil {
			p.TaskState = store.TaskUpForRetry
			p.NextTryAt = now.Add(retryDelay(task, failures+1))
		}
	}
	return p
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

// spec renders the attempt's command and environment.
func (e *engine) spec(n *tiNode, att store.Attempt) (executor.Spec, error) {
	r := n.run
	def := r.p.def
	rv := e.runVars(r)
	if err := os.MkdirAll(rv.Dir, 0o700); err != nil {
		return executor.Spec{}, fmt.Errorf("run directory: %w", err)
	}
	pv := dsl.PoolVars{Name: att.Pool}
	pl := e.o.Workspace.Pools[att.Pool]
	if pl != nil {
		pv = pl.Vars()
	}
	cmd, err := n.task.Render(rv, pv)
	if err != nil {
		return executor.Spec{}, err
	}
	params := make([]string, 0, len(def.Params))
	for k, v := range def.Params {
		params = append(params, "REWIND_PARAM_"+k+"="+v)
	}
	// Only the contract, the task's own variables and the pass-through
	// set: never rewind's configuration (REWIND_STATE, PG*, ...).
	env := procenv.Of(cmd.Pass, dsl.TaskEnv(rv, pv, n.task.Name, att.TryNumber), params, procenv.Pairs(cmd.Env))
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
		Timeout: n.task.Timeout, Grace: e.o.Grace, Nonce: att.Nonce,
		CPUs: pv.CPUs,
	}, nil
}

// slurmPoll is how often the state of an attempt's Slurm job is read.
var slurmPoll = time.Second

// slurmJobName is the Slurm job name of an attempt (--job-name):
// rewind:<pipeline>:<ds>:<task>:<try>, as squeue and sacct show it.
func (e *engine) slurmJobName(n *tiNode, att store.Attempt) string {
	rv := e.runVars(n.run)
	return fmt.Sprintf("rewind:%s:%s:%s:%d", rv.Pipeline, rv.LogicalDate.Format("2006-01-02"), n.task.Name, att.TryNumber)
}
