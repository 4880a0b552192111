package scheduler

import (
	"context"
	"errors"
	"time"

	"github.com/rewind-dev/rewind/executor"
	"github.com/rewind-dev/rewind/store"
)

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
		if !stopping && ctx.Err() != nil {
			// Seen here too, not only where the loop waits: a pass that
			// re-reads and goes round again never waits.
			stopping, done = true, nil
		}
		now := time.Now()
		reload := false
		if !stopping && !nextRefresh.IsZero() && !now.Before(nextRefresh) {
			created, err := e.refresh(bg)
			if err != nil {
				return e.fatal(err)
			}
			reload = created
			nextRefresh = time.Now().Add(e.o.RefreshEvery)
		}
		if !stopping && !now.Before(nextEpoch) {
			moved, err := e.checkEpoch(bg)
			if err != nil {
				return e.fatal(err)
			}
			ended, err := e.checkForeign(ctx)
			if err != nil {
				return e.fatal(err)
			}
			reload = reload || moved || ended
			nextEpoch = time.Now().Add(epochEvery)
		}
		if reload {
			if err := e.cache.reload(bg, e.base); err != nil {
				return e.fatal(err)
			}
		}
		// One transaction reads the snapshot, records the processes started
		// since the last pass (writeStarts), the finished attempts and
		// commits, admits and finishes runs, queues task instances and
		// claims the attempts to start. The pass never sees ctx: an
		// interrupt stops the next pass, it does not tear one in half.
		e.committed = append(e.committed, e.commits.take()...)
		var (
			s       *snapshot
			dec     decided
			a       applied
			differs bool
		)
		now = time.Now()
		err := e.base.InTx(bg, func(tx store.Store) error {
			var err error
			if s, differs, err = e.readSnapshot(bg, tx, now, stopping); err != nil {
				return err
			}
			if err := e.writeStarts(bg, tx); err != nil {
				return err
			}
			dec = decide(s)
			a, err = e.apply(bg, tx, now, dec.commands)
			return err
		})
		if errors.Is(err, store.ErrConflict) {
			// Someone changed what this pass decided on: nothing of it
			// stands; re-read, decide again, record the outcomes then.
			dec, a, differs, err = decided{}, applied{}, true, nil
		} else if err != nil {
			return e.fatal(err)
		} else {
			e.started = nil
			e.settle(s, dec, a)
			differs = differs || a.differs
		}
		e.startAll(ctx, a.claimed)
		e.commits.submit(a.requested)
		if differs && !stopping {
			if err := e.cache.reload(bg, e.base); err != nil {
				return e.fatal(err)
			}
			continue
		}
		if len(e.pending) > 0 {
			continue // attempts that could not start: recorded at once
		}
		if len(e.started) > 0 {
			// Attempts that ended while these started: the next pass
			// records both; otherwise the starts are recorded before the
			// loop waits.
			if got, err := e.collect(); err != nil {
				return e.fatal(err)
			} else if got {
				continue
			}
			if err := e.recordStarts(bg); err != nil {
				return e.fatal(err)
			}
		}
		if !stopping {
			e.report()
		}
		idle := e.running == 0 && e.commits.idle() && (stopping || (dec.nextRetry.IsZero() && len(e.foreign) == 0 && !e.waitsForUnhold()))
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
			soonest(dec.nextRetry)
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
			if err := e.gather(c); err != nil {
				return e.fatal(err)
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

// gather takes c and the other completions already sent into e.pending;
// an error is a panic of the goroutine that waited for one.
func (e *engine) gather(c completion) error {
	for {
		e.release(c)
		if c.panicked != nil {
			return c.panicked
		}
		e.pending = append(e.pending, c)
		select {
		case c = <-e.events:
		default:
			return nil
		}
	}
}

// collect takes, without waiting, the completions already sent into
// e.pending, and reports whether there were any.
func (e *engine) collect() (bool, error) {
	select {
	case c := <-e.events:
		return true, e.gather(c)
	default:
		return false, nil
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
// (their outcomes are recorded as far as the store allows); the ones that
// outlive it are left running, neither signalled nor waited for, and the
// next rewind adopts them (and reads the statuses the store could not take).
func (e *engine) fatal(err error) error {
	e.recordNow(e.pending)
	e.pending = nil
	e.drain(e.o.Grace)
	return err
}

// drain waits, at most for d, for the attempts this process supervises,
// recording each outcome as far as the store allows, then leaves the rest
// running.
func (e *engine) drain(d time.Duration) {
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	for e.running > 0 {
		select {
		case c := <-e.events:
			e.release(c)
			if c.panicked != nil {
				e.log.Error("an attempt is left running: waiting for it failed", "attempt", c.attempt.ID, "error", c.panicked)
				continue
			}
			e.recordNow([]completion{c})
		case <-deadline.C:
			e.leave()
			return
		}
	}
}

// leave stops waiting for the attempts still running, without signalling
// them: the next rewind adopts them.
func (e *engine) leave() {
	e.log.Warn("leaving attempts running: the next rewind adopts them", "attempts", e.running)
	e.stopAttempts(executor.ErrLeave)
	e.running = 0
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
