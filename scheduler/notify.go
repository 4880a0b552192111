package scheduler

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/rewind-dev/rewind/dsl"
	"github.com/rewind-dev/rewind/notify"
	"github.com/rewind-dev/rewind/store"
	"github.com/rewind-dev/rewind/timetable"
)

// queueRunFailed queues, in tx (the transaction that finished the run
// failed), run_failed for the notify blocks of the run's pipeline that get
// it. Backfill runs are not notified one by one: their backfill's report
// is (backfill_report).
func (e *engine) queueRunFailed(ctx context.Context, tx store.Store, r *runNode, now time.Time, why string) error {
	def := r.p.def
	if r.run.Kind == store.KindBackfill || !notify.Wanted(e.o.Workspace, def, dsl.EventRunFailed) {
		return nil
	}
	runs, err := tx.ListRuns(ctx, store.ListRunsParams{Pipelines: []string{def.Name}, From: r.run.LogicalDate, To: r.run.LogicalDate, WithTasks: true, WithAttempts: true})
	if err != nil {
		return err
	}
	run := r.run
	for _, rr := range runs {
		if rr.ID == r.run.ID {
			run = rr
		}
	}
	ns, err := notify.Queue(e.o.Workspace, notify.Event{
		Name: dsl.EventRunFailed, Pipeline: def, Run: run, State: string(store.RunFailed), Tasks: notifyTasks(run), Error: why, At: now,
		// The run fails once per clear: the instant tells the failures of
		// one run apart.
		Key: dsl.EventRunFailed + ":" + def.Name + ":" + store.RunID(run.Kind, run.LogicalDate) + ":" + strconv.FormatInt(now.UnixNano(), 10),
	})
	if err != nil {
		return err
	}
	_, err = tx.EnqueueNotifications(ctx, ns)
	return err
}

// maxMissedPerCheck bounds the deadline_missed notifications one look
// queues per pipeline: a minutely pipeline whose scheduler was down for a
// day pages once per interval up to this many, not 1,440 times.
const maxMissedPerCheck = 50

// CheckDeadlines queues deadline_missed for every interval of the
// workspace's pipelines (those with a deadline and a notify block that
// gets the event) whose deadline, the end of its data interval plus the
// pipeline's deadline, passed since the last look and after which its
// run had not succeeded (or did not exist). The first look at a pipeline
// only records when it looked: deadlines that passed before rewind knew
// them are not reported. A paused pipeline is looked at without
// notifications; a catchup = false pipeline only for the runs it has and
// its latest interval. now is the clock (zero: the state's). It returns
// how many notifications it queued.
func CheckDeadlines(ctx context.Context, st store.Store, ws *dsl.Workspace, now time.Time, log *slog.Logger) (int, error) {
	if now.IsZero() {
		var err error
		if now, err = st.Now(ctx); err != nil {
			return 0, err
		}
	}
	queued := 0
	for _, p := range ws.Pipelines {
		if p.Deadline <= 0 || !notify.Wanted(ws, p, dsl.EventDeadlineMissed) {
			continue
		}
		n, err := checkDeadline(ctx, st, ws, p, now, log)
		queued += n
		if err != nil {
			return queued, fmt.Errorf("pipeline %s: deadlines: %w", p.Name, err)
		}
	}
	return queued, nil
}

func checkDeadline(ctx context.Context, st store.Store, ws *dsl.Workspace, p *dsl.Pipeline, now time.Time, log *slog.Logger) (int, error) {
	since, ok, err := st.DeadlineChecked(ctx, p.Name)
	if err != nil || !ok || !now.After(since) {
		if err == nil && !ok {
			err = st.SetDeadlineChecked(ctx, p.Name, now)
		}
		return 0, err
	}
	paused := false
	if pl, err := st.ListPipelines(ctx); err == nil {
		for _, x := range pl {
			if x.Name == p.Name {
				paused = x.Paused
			}
		}
	} else {
		return 0, err
	}
	tt, err := timetable.New(p.Schedule, p.Timezone)
	if err != nil {
		return 0, err
	}
	var latest time.Time
	if !p.Catchup {
		if iv, ok := tt.Latest(timetable.Window{StartDate: p.StartDate, EndDate: p.EndDate, Now: now}); ok {
			latest = iv.Start
		}
	}
	var ns []store.Notification
	count := 0
	// Intervals whose end is in (since - deadline, now - deadline].
	lo, hi := since.Add(-p.Deadline), now.Add(-p.Deadline)
	w := timetable.Window{StartDate: p.StartDate, EndDate: p.EndDate, Now: hi}
	if prev := tt.Prev(lo); !prev.IsZero() {
		w.From = tt.Prev(prev)
	}
	for iv := range tt.Intervals(w) {
		if paused {
			break
		}
		if !iv.End.After(lo) {
			continue
		}
		deadline := iv.End.Add(p.Deadline)
		runs, err := st.ListRuns(ctx, store.ListRunsParams{Pipelines: []string{p.Name}, From: iv.Start, To: iv.Start, WithTasks: true, WithAttempts: true})
		if err != nil {
			return 0, err
		}
		var run store.Run
		state := "missing"
		for _, r := range runs {
			if r.Kind == store.KindBackfill && run.ID != 0 {
				continue
			}
			run, state = r, string(r.State)
		}
		if state == string(store.RunSuccess) && !run.EndedAt.After(deadline) {
			continue
		}
		if !p.Catchup && run.ID == 0 && !iv.Start.Equal(latest) {
			continue // never run by design
		}
		if run.ID == 0 {
			run = store.Run{Pipeline: p.Name, LogicalDate: iv.Start, DataIntervalStart: iv.Start, DataIntervalEnd: iv.End}
		}
		if count == maxMissedPerCheck {
			log.Warn("more deadlines missed than one look notifies: the rest are not", "pipeline", p.Name, "notified", maxMissedPerCheck, "from", iv.Start.Format(time.RFC3339))
			break
		}
		count++
		q, err := notify.Queue(ws, notify.Event{
			Name: dsl.EventDeadlineMissed, Pipeline: p, Run: run, State: state, Deadline: deadline, Tasks: notifyTasks(run), At: now,
			Key: dsl.EventDeadlineMissed + ":" + p.Name + ":" + iv.Start.UTC().Format(time.RFC3339),
		})
		if err != nil {
			return 0, err
		}
		ns = append(ns, q...)
		log.Warn("deadline missed", "pipeline", p.Name, "logical_date", iv.Start.Format(time.RFC3339), "deadline", deadline.Format(time.RFC3339), "state", state)
	}
	added, err := st.EnqueueNotifications(ctx, ns)
	if err != nil {
		return 0, err
	}
	return added, st.SetDeadlineChecked(ctx, p.Name, now)
}

// notifyTasks are the task instances of run that did not succeed, as a
// notification names them.
func notifyTasks(run store.Run) []notify.Task {
	var out []notify.Task
	for _, ft := range failedTasks(run) {
		out = append(out, notify.Task{Task: ft.Task, State: ft.State, Outcome: ft.Outcome, ExitCode: ft.ExitCode, TryNumber: ft.Try, Pool: ft.Pool, LogPath: ft.LogPath})
	}
	return out
}

// notifier delivers notifications beside one execution (Options.Notify).
type notifier struct {
	d        *notify.Deliverer
	stopping atomic.Bool
	cancel   context.CancelFunc // cancels the sends: an interrupt
	done     chan struct{}
	missed   int
	rounds   notify.Result
}

// notifyEvery is how often an execution delivers due notifications.
const notifyEvery = time.Second

// finalDelivery bounds the last round of an execution: a webhook that
// hangs does not hold a cron job back longer.
const finalDelivery = 45 * time.Second

// startNotifier looks for missed deadlines, then delivers in the
// background until finish or stop.
func startNotifier(ctx context.Context, o Options, owner string) *notifier {
	n := &notifier{done: make(chan struct{})}
	n.d = &notify.Deliverer{Store: o.Store, Workspace: o.Workspace, Owner: owner + ":notify", Log: o.Log, Stopping: n.stopping.Load}
	missed, err := CheckDeadlines(ctx, o.Store, o.Workspace, o.Now, o.Log)
	if err != nil {
		o.Log.Warn("cannot look for missed deadlines: the next rewind looks", "error", o.Workspace.RedactError(err))
	}
	n.missed = missed
	// The sends outlive the execution's end (finish lets the one in
	// flight end); an interrupt cancels them.
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	n.cancel = cancel
	stopAfter := context.AfterFunc(ctx, cancel)
	go func() {
		defer close(n.done)
		defer stopAfter()
		t := time.NewTicker(notifyEvery)
		defer t.Stop()
		for !n.stopping.Load() {
			r, err := n.d.Round(sctx)
			if err != nil && sctx.Err() == nil {
				o.Log.Warn("cannot deliver notifications: trying again", "error", o.Workspace.RedactError(err), "in", notifyEvery)
			}
			n.add(r)
			select {
			case <-sctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return n
}

func (n *notifier) add(r notify.Result) {
	n.rounds.Delivered += r.Delivered
	n.rounds.Retried += r.Retried
	n.rounds.GaveUp += r.GaveUp
	n.rounds.Errors = append(n.rounds.Errors, r.Errors...)
}

// stop ends the background rounds and cancels a send in flight.
func (n *notifier) stop() {
	n.stopping.Store(true)
	n.cancel()
	<-n.done
}

// finish ends the background rounds (a send in flight ends first),
// delivers what is due now (the failures of this execution), and says
// what became of every notification the execution sent.
func (n *notifier) finish(ctx context.Context) NotifySummary {
	n.stopping.Store(true)
	<-n.done
	n.stopping.Store(false)
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), finalDelivery)
	defer cancel()
	r, err := n.d.Round(fctx)
	n.add(r)
	if err != nil {
		n.rounds.Errors = append(n.rounds.Errors, n.d.Workspace.RedactError(err).Error())
	}
	return NotifySummary{Delivered: n.rounds.Delivered, Retried: n.rounds.Retried, GaveUp: n.rounds.GaveUp, DeadlinesMissed: n.missed, Errors: n.rounds.Errors}
}
