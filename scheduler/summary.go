package scheduler

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/rewind-dev/rewind/store"
)

// RunResult is a run that finished during the execution.
type RunResult struct {
	Pipeline    string
	DS          string
	LogicalDate time.Time
	Kind        store.RunKind
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
	// Skipped are, per pipeline with catchup = false, the due intervals
	// passed over when the execution gave the latest one a run, by
	// pipeline name.
	Skipped  []SkippedIntervals
	Progress Progress
	// Waiting are the runs left waiting for upstream data when the
	// execution ended (a producer's run failed, or has not run), oldest
	// first; Held the runs of backfills that this execution does not run;
	// Stuck the other runs left unfinished (a depends_on_past task whose
	// previous run did not succeed).
	Waiting []WaitingRun
	Held    []HeldRuns
	Stuck   []StuckRun
	// Warnings are what the execution could not do as asked but went on
	// without (a skew probe that failed: the date ran on its own pool).
	Warnings []string
	// Notifications is what became of the notifications this execution
	// delivered (Options.Notify).
	Notifications NotifySummary
}

// NotifySummary counts the notifications an execution sent: delivered,
// left to retry (Errors says why, redacted), given up; DeadlinesMissed
// the deadline_missed notifications it queued.
type NotifySummary struct {
	Delivered, Retried, GaveUp int
	DeadlinesMissed            int
	Errors                     []string
}

// WaitingRun is a run that waits for a run of a pipeline it consumes.
type WaitingRun struct {
	Pipeline    string
	DS          string
	LogicalDate time.Time
	// Upstream is the consumed pipeline; UpstreamDS, UpstreamLogicalDate
	// and UpstreamState its run the date waits for (state "none", and no
	// date, when it has no run for the interval).
	Upstream            string
	UpstreamDS          string
	UpstreamLogicalDate time.Time
	UpstreamState       string
}

// HeldRuns are the unfinished runs of one backfill, which only its apply
// runs: it is not running (stopped, failed, or on hold).
type HeldRuns struct {
	Pipeline      string
	BackfillID    string
	BackfillState string // the backfill's state; "paused" when on hold
	DS            []string
}

// StuckRun is a run left unfinished for another reason.
type StuckRun struct {
	Pipeline    string
	DS          string
	LogicalDate time.Time
	Waiting     []string // its unfinished tasks, "task (state)"
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

// Incomplete reports whether runs in scope were left unfinished by an
// execution that was not interrupted: waiting for upstream data, held by
// a backfill, or stuck. Not all requested runs succeeded.
func (s *Summary) Incomplete() bool {
	return len(s.Waiting)+len(s.Held)+len(s.Stuck) > 0
}

// leftovers fills the summary's Waiting, Held and Stuck from the runs of
// the selected pipelines that are still unfinished.
func (e *engine) leftovers(ctx context.Context) error {
	s := e.summary
	for _, p := range e.cache.order {
		if p.paused && !(e.o.Backfill != nil && e.o.Backfill.IncludePaused && e.o.Backfill.Pipeline == p.def.Name) {
			continue // reported as paused
		}
		for _, r := range p.all {
			if r.done {
				continue
			}
			w, ok, err := e.waitingFor(ctx, r)
			if err != nil {
				return err
			}
			if ok {
				s.Waiting = append(s.Waiting, w)
				continue
			}
			sr := StuckRun{Pipeline: p.def.Name, DS: r.run.DS, LogicalDate: r.run.LogicalDate}
			for _, n := range r.tis {
				if !n.ti.State.Terminal() {
					sr.Waiting = append(sr.Waiting, fmt.Sprintf("%s (%s)", n.ti.Task, n.ti.State))
				}
			}
			s.Stuck = append(s.Stuck, sr)
		}
	}
	seen := map[int64]bool{}
	byID := map[string]*HeldRuns{}
	for _, r := range e.cache.held {
		if seen[r.ID] {
			continue
		}
		seen[r.ID] = true
		h := byID[r.BackfillID]
		if h == nil {
			h = &HeldRuns{Pipeline: r.Pipeline, BackfillID: r.BackfillID, BackfillState: "unknown"}
			if b, err := e.base.GetBackfill(ctx, r.BackfillID); err == nil {
				h.BackfillState = string(b.State)
				if b.OnHold && b.State == store.BackfillRunning {
					h.BackfillState = "paused"
				}
			} else if !errors.Is(err, store.ErrNotFound) {
				return err
			}
			byID[r.BackfillID] = h
		}
		h.DS = append(h.DS, r.DS)
	}
	for _, h := range byID {
		sort.Strings(h.DS)
		s.Held = append(s.Held, *h)
	}
	sort.Slice(s.Held, func(i, j int) bool {
		if s.Held[i].Pipeline != s.Held[j].Pipeline {
			return s.Held[i].Pipeline < s.Held[j].Pipeline
		}
		return s.Held[i].BackfillID < s.Held[j].BackfillID
	})
	sort.SliceStable(s.Waiting, func(i, j int) bool { return s.Waiting[i].LogicalDate.Before(s.Waiting[j].LogicalDate) })
	sort.SliceStable(s.Stuck, func(i, j int) bool { return s.Stuck[i].LogicalDate.Before(s.Stuck[j].LogicalDate) })
	return nil
}

// waitingFor finds the producer run an unfinished consumer run waits for:
// the first one, by the order of consumes and logical date, within its
// data interval that has not succeeded (read from the store: the
// execution is over).
func (e *engine) waitingFor(ctx context.Context, r *runNode) (WaitingRun, bool, error) {
	w := WaitingRun{Pipeline: r.p.def.Name, DS: r.run.DS, LogicalDate: r.run.LogicalDate}
	if len(r.p.def.Consumes) == 0 || r.producersOK {
		return w, false, nil
	}
	from, to := r.run.DataIntervalStart, r.run.DataIntervalEnd
	for _, name := range r.p.def.Consumes {
		runs, err := e.base.ListRuns(ctx, store.ListRunsParams{Pipelines: []string{name}, From: from, To: to})
		if err != nil {
			return w, false, err
		}
		found := false
		for _, pr := range runs {
			if !pr.LogicalDate.Before(to) {
				continue
			}
			found = true
			if pr.State != store.RunSuccess {
				w.Upstream, w.UpstreamDS, w.UpstreamLogicalDate, w.UpstreamState = name, pr.DS, pr.LogicalDate, string(pr.State)
				return w, true, nil
			}
		}
		if !found {
			w.Upstream, w.UpstreamState = name, "none"
			return w, true, nil
		}
	}
	return w, false, nil
}
