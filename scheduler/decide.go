package scheduler

import (
	"sort"
	"time"

	"github.com/rewind-dev/rewind/dsl"
	"github.com/rewind-dev/rewind/store"
)

// Deciding is pure: a snapshot of the state in scope (read in the pass's
// transaction) goes in, the transitions of the pass come out as commands.
// It touches neither the store nor processes nor the engine's cache; apply
// carries the commands out with guarded statements, and the cache follows
// what apply wrote once the transaction committed. A guard that finds the
// store different only means that the next pass reads again and decides
// again.

// snapshot is what one pass decides on.
type snapshot struct {
	now time.Time
	// stopping: the execution is interrupted: record what ended, start
	// nothing.
	stopping bool
	// pipes are the selected pipelines (their queues of runs not admitted,
	// in admission order) and active the admitted runs, as the cache lists
	// them: the scope of the pass.
	pipes  []*pipe
	byName map[string]*pipe
	active []*runNode
	// runs and tis are the rows of the admitted runs and of their task
	// instances as the pass's transaction read them; the cache's copy
	// stands for runs not read (queued ones, finished ones).
	runs map[int64]store.Run
	tis  map[int64]store.TaskInstance
	// external: the producers outside this execution of a consumer's run
	// had all succeeded at the last look (by run id).
	external map[int64]bool
	usage    usage
	// starts are each limit's recent queueing times (for its rate).
	starts    map[string][]time.Time
	limits    map[string]*dsl.Limit
	escalate  map[string]string // pool -> the pool its memory kills are retried on
	pools     map[string]*dsl.Pool
	backfill  *BackfillRun
	held      bool // the backfill is on hold
	claim     store.ClaimReadyParams
	pending   []completion   // ended attempts to record
	committed []commitResult // output commits done, to record
}

// command is one transition of a pass, carried out by apply.
type command interface{ command() }

type (
	// recordAttempt records how an attempt ended. moves says whether the
	// snapshot had its task instance running on the attempt's try (the
	// store then moves it too).
	recordAttempt struct {
		c     completion
		p     store.FinishAttemptParams
		moves bool
	}
	// completeCommit records an output commit's outcome, finishing its run.
	completeCommit struct {
		res    commitResult
		state  store.RunState
		failed []string
	}
	admitRun struct{ run *runNode }
	// taskMove moves a task instance, guarded on the state it was decided from.
	taskMove struct {
		node *tiNode
		from store.TaskState
		to   store.TaskState
	}
	finishRun struct {
		run    *runNode
		state  store.RunState
		failed []string
	}
	// requestCommit hands a complete run's outputs to the outbox.
	requestCommit struct{ run *runNode }
	// advanceWatermark recomputes a pipeline's watermark after runs succeeded.
	advanceWatermark struct{ p *pipe }
	// enqueueTask queues a ready task instance for a claimer of its pool.
	enqueueTask struct{ node *tiNode }
	// claimWork claims queued work for this process.
	claimWork struct{ p store.ClaimReadyParams }
)

func (recordAttempt) command()    {}
func (completeCommit) command()   {}
func (admitRun) command()         {}
func (taskMove) command()         {}
func (finishRun) command()        {}
func (requestCommit) command()    {}
func (advanceWatermark) command() {}
func (enqueueTask) command()      {}
func (claimWork) command()        {}

// decided is the outcome of decide: the commands in the order apply runs
// them, and what the engine keeps for later passes.
type decided struct {
	commands []command
	// nextRetry is the earliest time a retry delay or a rate limit ends
	// (zero if none).
	nextRetry time.Time
	// starts replace the snapshot's limit starts once the pass committed.
	starts map[string][]time.Time
	// producersOK are the consumer runs found ready; waiting those found
	// waiting for upstream data.
	producersOK []*runNode
	waiting     map[*runNode]bool
}

// decider is the state of the pass as its commands will leave it.
type decider struct {
	s     *snapshot
	out   decided
	tis   map[int64]store.TaskInstance // overlay of s.tis after this pass's commands
	state map[*runNode]store.RunState  // runs admitted or finished in this pass
	done  map[*runNode]bool            // finished or handed to the outbox in this pass
	usage usage
	// watermarks are the pipelines whose watermark this pass recomputes.
	watermarks     map[*pipe]bool
	watermarkOrder []*pipe
}

// decide computes the commands of one pass: record what ended, then admit
// runs up to max_active_runs, move task instances, finish complete runs (or
// request their output commits), admit more where runs finished, queue the
// ready task instances that fit max_active_tasks and the limits, and claim.
func decide(s *snapshot) decided {
	d := &decider{
		s: s, tis: make(map[int64]store.TaskInstance, len(s.tis)),
		state: map[*runNode]store.RunState{}, done: map[*runNode]bool{},
	}
	d.out.waiting = map[*runNode]bool{}
	for id, ti := range s.tis {
		d.tis[id] = ti
	}
	d.usage = s.usage.clone()
	for _, c := range s.pending {
		d.record(c)
	}
	for _, res := range s.committed {
		state := store.RunSuccess
		var failed []string
		if res.err != nil {
			state, failed = store.RunFailed, []string{res.err.Error()}
		}
		d.emit(completeCommit{res: res, state: state, failed: failed})
		if r := res.job.run; r != nil && !r.done && r.committing {
			// The run finishes with the commit's outcome: its slot is free
			// and its consumers see it in this pass.
			d.done[r], d.state[r] = true, state
			if state == store.RunSuccess {
				d.watermark(r.p)
			}
		}
	}
	if s.stopping {
		d.emitWatermarks()
		return d.out
	}
	var ready []*tiNode
	active := append([]*runNode(nil), s.active...)
	decidedRun := map[*runNode]bool{}
	admitted := map[*runNode]bool{}
	for {
		active = append(active, d.admit(admitted)...)
		finished := false
		for _, r := range active {
			if decidedRun[r] || !d.running(r) || r.committing {
				continue
			}
			decidedRun[r] = true
			rd := decideRun(r, s.now, d.ti)
			for _, m := range rd.moves {
				d.emit(m)
				ti := d.ti(m.node)
				ti.State = m.to
				d.tis[ti.ID] = ti
			}
			d.soonest(rd.nextRetry)
			if !rd.complete {
				if r.run.Kind == store.KindBackfill && s.held {
					continue // on hold: its running attempts finish, nothing new starts
				}
				for _, n := range rd.ready {
					if !d.producersReady(r) {
						break
					}
					ready = append(ready, n)
				}
				continue
			}
			d.done[r] = true
			if rd.state == store.RunSuccess && len(r.p.def.Outputs) > 0 {
				// A run is a success only once its outputs are committed:
				// the commit leaves the transaction through the outbox.
				d.emit(requestCommit{run: r})
				continue
			}
			d.emit(finishRun{run: r, state: rd.state, failed: rd.failed})
			d.state[r] = rd.state
			if rd.state == store.RunSuccess {
				d.watermark(r.p)
			}
			finished = true
		}
		if !finished {
			break // else slots of max_active_runs were freed: admit more first
		}
	}
	d.emitWatermarks()
	d.enqueue(ready)
	d.emit(claimWork{p: s.claim})
	return d.out
}

func (d *decider) emit(c command) { d.out.commands = append(d.out.commands, c) }

// watermark recomputes p's watermark after a run succeeded, at most every
// watermarkEvery while runs succeed (the engine does it once more at the end).
// The command comes after every run the pass finishes (emitWatermarks), so
// that the watermark counts them all: the cache then marks it up to date.
func (d *decider) watermark(p *pipe) {
	if d.watermarks[p] || d.s.now.Sub(p.watermarkAt) < watermarkEvery {
		return
	}
	if d.watermarks == nil {
		d.watermarks = map[*pipe]bool{}
	}
	d.watermarks[p] = true
	d.watermarkOrder = append(d.watermarkOrder, p)
}

// emitWatermarks emits the watermark commands of the pass, after the runs
// it finished.
func (d *decider) emitWatermarks() {
	for _, p := range d.watermarkOrder {
		d.emit(advanceWatermark{p: p})
	}
}

func (d *decider) soonest(t time.Time) {
	if !t.IsZero() && (d.out.nextRetry.IsZero() || t.Before(d.out.nextRetry)) {
		d.out.nextRetry = t
	}
}

// ti is a task instance as the pass leaves it: the transaction's row, else
// the cache's.
func (d *decider) ti(n *tiNode) store.TaskInstance {
	if ti, ok := d.tis[n.ti.ID]; ok {
		return ti
	}
	return n.ti
}

// runState is a run's state as the pass leaves it.
func (d *decider) runState(r *runNode) store.RunState {
	if st, ok := d.state[r]; ok {
		return st
	}
	if row, ok := d.s.runs[r.run.ID]; ok {
		return row.State
	}
	return r.run.State
}

// running: an admitted run that this pass may decide for.
func (d *decider) running(r *runNode) bool {
	return !r.done && !d.done[r] && d.runState(r) == store.RunRunning
}

// record decides how an ended attempt is recorded.
func (d *decider) record(c completion) {
	if c.res.Left {
		return // a Slurm job left running: the next rewind adopts it
	}
	var task *dsl.Task
	ti, known := d.s.tis[c.attempt.TaskInstanceID]
	if n := c.node; n != nil {
		task = n.task
		if !known {
			ti, known = n.ti, true
		}
	}
	p := attemptOutcome(c, task, ti.Failures, d.s.escalate[c.attempt.Pool], d.s.now)
	p.AttemptID = c.attempt.ID
	moves := known && ti.State == store.TaskRunning && ti.TryNumber == c.attempt.TryNumber
	d.emit(recordAttempt{c: c, p: p, moves: moves})
	if moves {
		ti.State, ti.NextTryAt = p.TaskState, p.NextTryAt
		if p.CountFailure {
			ti.Failures++
		}
		d.tis[ti.ID] = ti
		// Its slot is free for what this pass queues.
		if n := c.node; n != nil {
			d.usage.pipeTasks[n.run.p.def.Name]--
			d.usage.poolRunning[c.attempt.Pool]--
			if n.run.run.Kind == store.KindBackfill {
				d.usage.poolFill[c.attempt.Pool]--
			}
			if n.task != nil {
				for _, l := range n.task.Limits {
					d.usage.limitUsed[l]--
				}
			}
		}
	}
}

// admit decides which queued runs become running, oldest first, up to
// max_active_runs (backfill runs up to their own), for pipelines that are
// not paused.
func (d *decider) admit(admitted map[*runNode]bool) []*runNode {
	var out []*runNode
	bf := d.s.backfill
	// The runs that hold a slot, per pipeline, counted once: a pass costs
	// what is active, not what is active times the pipelines.
	type slots struct{ runs, fills int }
	held := map[*pipe]*slots{}
	count := func(r *runNode) {
		p := r.p
		if !d.running(r) || (len(p.def.Consumes) > 0 && d.idleWaiting(r)) {
			return
		}
		c := held[p]
		if c == nil {
			c = &slots{}
			held[p] = c
		}
		if r.run.Kind == store.KindBackfill {
			c.fills++
		} else {
			c.runs++
		}
	}
	for _, r := range d.s.active {
		count(r)
	}
	for r := range admitted {
		count(r)
	}
	// Scheduled and manual runs holding a slot, per default pool: at most
	// admitCap of them, whatever the number of pipelines (a run admitted
	// beyond what its pool can run only waits, and every pass would read
	// and decide it again).
	byPool := map[string]int{}
	for p, c := range held {
		byPool[poolOf(p)] += c.runs
	}
	for _, p := range d.s.pipes {
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
		activeRuns, activeFills := 0, 0
		if c := held[p]; c != nil {
			activeRuns, activeFills = c.runs, c.fills
		}
		if len(p.queued) == 0 {
			continue
		}
		for _, n := range p.queued {
			if admitted[n] {
				continue
			}
			fill := n.run.Kind == store.KindBackfill
			if (fill && (activeFills >= p.maxFills || d.s.held)) || (!fill && (activeRuns >= p.maxRuns || onlyFills)) {
				continue
			}
			pool := poolOf(p)
			if !fill && byPool[pool] >= d.admitCap(pool) {
				break // this pipeline's later runs wait too
			}
			if len(p.def.Consumes) > 0 && !d.producersReady(n) {
				continue // waits in the queue, on no slot
			}
			d.emit(admitRun{run: n})
			admitted[n] = true
			d.state[n] = store.RunRunning
			if fill {
				activeFills++
			} else {
				activeRuns++
				byPool[pool]++
			}
			out = append(out, n)
		}
	}
	return out
}

// minAdmitCap and admitPerSlot bound the scheduled and manual runs that
// hold a slot at once per default pool: admitPerSlot times its slots, at
// least minAdmitCap.
const (
	minAdmitCap  = 64
	admitPerSlot = 4
)

func (d *decider) admitCap(pool string) int {
	if pl := d.s.pools[pool]; pl != nil && pl.Slots*admitPerSlot > minAdmitCap {
		return pl.Slots * admitPerSlot
	}
	return minAdmitCap
}

// poolOf is the default pool of a pipeline's tasks.
func poolOf(p *pipe) string {
	if p.def.DefaultPool != "" {
		return p.def.DefaultPool
	}
	return dsl.DefaultPoolName
}

// enqueue decides which ready task instances fit max_active_tasks and the
// limits, scheduled and manual runs first, then by logical date.
func (d *decider) enqueue(ready []*tiNode) {
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
	d.out.starts = make(map[string][]time.Time, len(d.s.starts))
	for name, ts := range d.s.starts {
		d.out.starts[name] = ts
	}
	for _, n := range ready {
		if !d.fits(n) {
			continue
		}
		d.emit(enqueueTask{node: n})
		d.usage.pipeTasks[n.run.p.def.Name]++
		for _, l := range n.task.Limits {
			d.usage.limitUsed[l]++
			d.out.starts[l] = append(d.out.starts[l][:len(d.out.starts[l]):len(d.out.starts[l])], d.s.now)
		}
	}
}

// fits says whether n may be queued now: the pipeline's max_active_tasks
// and the task's limits, counted over what is running and queued. When only
// a rate limit stands in the way, the pass wakes up when it lets n through.
// Pool slots are the claimer's business.
func (d *decider) fits(n *tiNode) bool {
	p := n.run.p
	now := d.s.now
	if p.def.MaxActiveTasks > 0 && d.usage.pipeTasks[p.def.Name] >= p.def.MaxActiveTasks {
		return false
	}
	var wake time.Time
	for _, name := range n.task.Limits {
		l := d.s.limits[name]
		if l == nil {
			continue
		}
		if l.Concurrency > 0 && d.usage.limitUsed[name] >= l.Concurrency {
			return false
		}
		if l.Rate > 0 {
			starts := d.out.starts[name]
			for len(starts) > 0 && !starts[0].After(now.Add(-l.Per)) {
				starts = starts[1:]
			}
			d.out.starts[name] = starts
			if len(starts) >= l.Rate {
				if w := starts[0].Add(l.Per); wake.IsZero() || w.Before(wake) {
					wake = w
				}
			}
		}
	}
	d.soonest(wake)
	return wake.IsZero()
}
