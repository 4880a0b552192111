package scheduler

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
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
	if r == nil {
		return nil // a commit completed for a run this execution did not load
	}
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

// queueRunRecovered queues, in tx (the transaction that finished the run
// success), run_recovered for the blocks of the run's pipeline that get
// it, when the run's latest failure was notified: once per failure.
func (e *engine) queueRunRecovered(ctx context.Context, tx store.Store, r *runNode, now time.Time) error {
	if r == nil {
		return nil
	}
	def := r.p.def
	if r.run.Kind == store.KindBackfill || !notify.Wanted(e.o.Workspace, def, dsl.EventRunRecovered) {
		return nil
	}
	ns, err := tx.ListNotifications(ctx, store.ListNotificationsParams{Pipeline: def.Name, Event: dsl.EventRunFailed})
	if err != nil {
		return err
	}
	// Keys are run_failed:PIPELINE:RUN_ID:INSTANT:BLOCK/CHANNEL; the
	// pipeline's name in a key may be an earlier one (rewind rename moves
	// the rows, not their keys).
	runID := store.RunID(r.run.Kind, r.run.LogicalDate)
	failure := ""
	for _, n := range ns { // oldest first: the last is the latest failure
		if _, rest, ok := strings.Cut(n.Key, ":"+runID+":"); ok && strings.HasPrefix(n.Key, dsl.EventRunFailed+":") {
			failure, _, _ = strings.Cut(rest, ":")
		}
	}
	if failure == "" {
		return nil
	}
	q, err := notify.Queue(e.o.Workspace, notify.Event{
		Name: dsl.EventRunRecovered, Pipeline: def, Run: r.run, State: string(store.RunSuccess), At: now,
		Key: dsl.EventRunRecovered + ":" + def.Name + ":" + store.RunID(r.run.Kind, r.run.LogicalDate) + ":" + failure,
	})
	if err != nil {
		return err
	}
	_, err = tx.EnqueueNotifications(ctx, q)
	return err
}

// maxMissedPerCheck bounds the deadline_missed notifications one look
// queues per pipeline: a minutely pipeline whose scheduler was down for a
// day pages for its latest 50 intervals, not 1,440 times.
const maxMissedPerCheck = 50

// CheckDeadlines queues deadline_missed for every interval of the
// workspace's pipelines (those with a deadline and a notify block that
// gets the event) whose deadline, the end of its data interval plus the
// pipeline's deadline, passed since the last look and after which its
// run had not succeeded (or did not exist). The first look at a pipeline
// only records when it looked: deadlines that passed before rewind knew
// them are not reported, nor those that passed while the pipeline had no
// deadline (its look is forgotten then). A paused pipeline is looked at
// without notifications; a catchup = false pipeline only for the runs it
// has and the latest interval whose deadline passed. now is the clock
// (zero, or later than the state's clock: the state's). It returns how
// many notifications it queued.
func CheckDeadlines(ctx context.Context, st store.Store, ws *dsl.Workspace, now time.Time, log *slog.Logger) (int, error) {
	stateNow, err := st.Now(ctx)
	if err != nil {
		return 0, err
	}
	if now.IsZero() || now.After(stateNow) {
		// A clock ahead of the state's (--now in the future) would page
		// for deadlines that have not passed and skip the looks until then.
		now = stateNow
	}
	queued := 0
	var paused map[string]bool
	var looked []string
	for _, p := range ws.Pipelines {
		if p.Deadline <= 0 || !notify.Wanted(ws, p, dsl.EventDeadlineMissed) {
			continue
		}
		looked = append(looked, p.Name)
		if paused == nil {
			sps, err := st.ListPipelines(ctx)
			if err != nil {
				return 0, err
			}
			paused = map[string]bool{}
			for _, sp := range sps {
				paused[sp.Name] = sp.Paused
			}
		}
		n, err := checkDeadline(ctx, st, ws, p, paused[p.Name], now, log)
		queued += n
		if err != nil {
			return queued, fmt.Errorf("pipeline %s: deadlines: %w", p.Name, err)
		}
	}
	// A pipeline whose deadline (or its block) went away starts over with
	// a first look when it comes back.
	return queued, st.ForgetDeadlineChecks(ctx, looked)
}

func checkDeadline(ctx context.Context, st store.Store, ws *dsl.Workspace, p *dsl.Pipeline, paused bool, now time.Time, log *slog.Logger) (int, error) {
	since, ok, err := st.DeadlineChecked(ctx, p.Name)
	if err != nil || !ok || !now.After(since) {
		if err == nil && !ok {
			err = st.SetDeadlineChecked(ctx, p.Name, now)
		}
		return 0, err
	}
	tt, err := timetable.New(p.Schedule, p.Timezone)
	if err != nil {
		return 0, err
	}
	// Intervals whose end is in (since - deadline, now - deadline].
	lo, hi := since.Add(-p.Deadline), now.Add(-p.Deadline)
	var latest time.Time
	if !p.Catchup {
		if iv, ok := tt.Latest(timetable.Window{StartDate: p.StartDate, EndDate: p.EndDate, Now: hi}); ok {
			latest = iv.Start
		}
	}
	var window []timetable.Interval
	if !paused {
		w := timetable.Window{StartDate: p.StartDate, EndDate: p.EndDate, Now: hi}
		if prev := tt.Prev(lo); !prev.IsZero() {
			w.From = tt.Prev(prev)
		}
		for iv := range tt.Intervals(w) {
			if iv.End.After(lo) {
				window = append(window, iv)
			}
		}
	}
	var ns []store.Notification
	if len(window) > 0 {
		// One read of the window's runs; the tasks only of those reported.
		runs, err := st.ListRuns(ctx, store.ListRunsParams{Pipelines: []string{p.Name}, From: window[0].Start, To: window[len(window)-1].Start})
		if err != nil {
			return 0, err
		}
		byDate := map[int64]store.Run{}
		for _, r := range runs {
			if prev, ok := byDate[r.LogicalDate.Unix()]; ok && r.Kind == store.KindBackfill && prev.Kind != store.KindBackfill {
				continue
			}
			byDate[r.LogicalDate.Unix()] = r
		}
		var missed []timetable.Interval
		for _, iv := range window {
			r, ok := byDate[iv.Start.Unix()]
			if ok && r.State == store.RunSuccess && !r.EndedAt.After(iv.End.Add(p.Deadline)) {
				continue
			}
			if !p.Catchup && !ok && !iv.Start.Equal(latest) {
				continue // never run by design
			}
			missed = append(missed, iv)
		}
		if len(missed) > maxMissedPerCheck {
			log.Warn("more deadlines missed than one look notifies: the latest are", "pipeline", p.Name, "notified", maxMissedPerCheck, "missed", len(missed))
			missed = missed[len(missed)-maxMissedPerCheck:]
		}
		for _, iv := range missed {
			deadline := iv.End.Add(p.Deadline)
			run, state := store.Run{Pipeline: p.Name, LogicalDate: iv.Start, DataIntervalStart: iv.Start, DataIntervalEnd: iv.End}, "missing"
			if r, ok := byDate[iv.Start.Unix()]; ok {
				state = string(r.State)
				full, err := st.ListRuns(ctx, store.ListRunsParams{Pipelines: []string{p.Name}, From: iv.Start, To: iv.Start, WithTasks: true, WithAttempts: true})
				if err != nil {
					return 0, err
				}
				run = r
				for _, f := range full {
					if f.ID == r.ID {
						run = f
					}
				}
			}
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
	}
	added, err := st.EnqueueNotifications(ctx, ns)
	if err != nil {
		return 0, err
	}
	return added, st.SetDeadlineChecked(ctx, p.Name, now)
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
	// One deadline for the send in flight and the final round: a slow
	// block does not hold a cron job past it.
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), finalDelivery)
	defer cancel()
	stopSends := context.AfterFunc(fctx, n.cancel)
	defer stopSends()
	n.stopping.Store(true)
	<-n.done
	n.stopping.Store(false)
	r, err := n.d.Round(fctx)
	n.add(r)
	if err != nil {
		n.rounds.Errors = append(n.rounds.Errors, n.d.Workspace.RedactError(err).Error())
	}
	return NotifySummary{Delivered: n.rounds.Delivered, Retried: n.rounds.Retried, GaveUp: n.rounds.GaveUp, DeadlinesMissed: n.missed, Errors: n.rounds.Errors}
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
