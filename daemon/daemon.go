// Package daemon is `rewind scheduler`: the long-running process that watches
// the pipeline files (an edit is reloaded, a broken one keeps the last good
// definition and says where it broke), wakes at each due tick and runs an
// execution of the engine (package scheduler) for what is due, and elects
// one active scheduler among several on one state through the leader lease
// (package lease), the others standing by. It also renders the crontab
// entries for teams that run `rewind run` from cron instead, translated
// from each pipeline's timezone into the one the cron daemon schedules in
// (Debian's cron ignores CRON_TZ), which a systemd timer reads as well.
//
// It decides no transition of a run or a task itself: every execution is
// the engine's, fenced by the execution lease.
package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/hashicorp/hcl/v2"

	"github.com/rewind-dev/rewind/dsl"
	"github.com/rewind-dev/rewind/lease"
	"github.com/rewind-dev/rewind/metrics"
	"github.com/rewind-dev/rewind/scheduler"
	"github.com/rewind-dev/rewind/store"
	"github.com/rewind-dev/rewind/timetable"
)

// The long-running scheduler (`rewind scheduler`) is a loop over Run: each
// tick (the end of the next data interval of any pipeline) it executes what
// is due, and between ticks it holds no execution lease and no
// transaction (only the leader lease, leader.go). So a `rewind run` from
// cron beside it keeps working: the execution lease decides who executes,
// and Serve waits for it (Options.Wait) when a tick comes while another
// rewind holds the state.
//
// Idle, a pass of the loop is a stat of the workspace's *.hcl files, a read
// of the store's epoch, and a look at the cached next tick of each
// pipeline; the leader lease is renewed every TTL/8.

// DefaultPollEvery is how often Serve looks at the workspace's files, the
// store's epoch and the clock between ticks. A change of the files is
// loaded once they stay the same for one poll (a write seen half-done is
// not loaded), so within two polls.
const DefaultPollEvery = 2 * time.Second

// serveRetryEvery is how long Serve waits, after an execution that failed
// (the state was unavailable, the lease was lost), before trying again.
const serveRetryEvery = 10 * time.Second

// ServeOptions configure Serve.
type ServeOptions struct {
	Store store.Store
	// Path is the workspace: a directory (its *.hcl files) or one .hcl file,
	// as dsl.Load takes it. Its files are watched and reloaded when they change.
	Path        string
	LoadOptions dsl.LoadOptions
	// Workspace is the definition loaded by the caller from Path; nil:
	// Serve loads it, and a configuration error ends it at once.
	Workspace *dsl.Workspace
	// Home is the directory of runs/ and logs/ (".rewind" by default).
	Home string
	// Grace is how long running attempts get to stop when ctx ends (default 10s).
	Grace time.Duration
	// Clock is the logical clock that decides which intervals are due
	// (default time.Now). Tests drive ticks with a fake one.
	Clock func() time.Time
	// PollEvery is how often the files, the store's epoch and the clock are
	// looked at between ticks (default DefaultPollEvery).
	PollEvery time.Duration
	// RefreshEvery is passed to Run: how often a long execution
	// materializes newly due intervals (default 30s).
	RefreshEvery time.Duration
	// Reload, when it receives, reloads the workspace (SIGHUP).
	Reload <-chan struct{}
	// OnLoad is called with each definition that Serve uses: the first one
	// and each valid reload (the CLI scrubs their sensitive values from its
	// output).
	OnLoad func(*dsl.Workspace)
	// OnRun is called after each execution with its summary and error.
	OnRun     func(*scheduler.Summary, error)
	OnWarning func(string)
	Log       *slog.Logger
	// Holder is the identity of this scheduler in the leases and as the
	// owner of its attempts (default Self()).
	Holder *lease.Holder
	// EnsureAgent is scheduler.Options.EnsureAgent for every execution.
	EnsureAgent func() error
	// PauseNewOver: a pipeline the state has never seen whose catchup
	// would create more than this many runs starts paused, logged at WARN
	// with the count and the unpause command (0: never).
	PauseNewOver int
	// LeaseTTL is how long the leases of this scheduler (the leadership,
	// the execution's) and its heartbeat last without renewal (default
	// LeaseTTL): a standby takes over within it after the active one dies.
	LeaseTTL time.Duration
	// Metrics, when set, counts this scheduler's executions (their
	// duration and result), its leadership and its takeovers.
	Metrics *metrics.Scheduler
}

// Serve runs the scheduler until ctx ends: at start (catching up after
// downtime, per each pipeline's catchup) and then at each tick, it executes
// the due runs with Run; it reloads the workspace when its files change or
// Reload receives, keeping the previous definition when the new one has
// errors (their diagnostics are logged with file:line). When ctx ends it
// starts nothing new, gives running attempts the grace period (as Run does
// on interrupt) and returns nil. It returns an error only when the first
// definition cannot be loaded.
func Serve(ctx context.Context, o ServeOptions) error {
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.Clock == nil {
		o.Clock = time.Now
	}
	if o.PollEvery <= 0 {
		o.PollEvery = DefaultPollEvery
	}
	h := lease.Self()
	if o.Holder != nil {
		h = *o.Holder
	}
	if o.LeaseTTL > 0 {
		h.TTL = o.LeaseTTL
	}
	o.Holder = &h
	s := &server{o: o, log: o.Log}
	s.sig = s.signature()
	if o.Workspace == nil {
		ws, diags := dsl.Load(o.Path, o.LoadOptions)
		if diags.HasErrors() {
			return fmt.Errorf("load %s: %s", o.Path, strings.Join(diagLines(diags), "; "))
		}
		o.Workspace = ws
	}
	s.use(o.Workspace)
	return s.loop(ctx)
}

type server struct {
	o   ServeOptions
	log *slog.Logger
	ws  *dsl.Workspace
	// sig is the watched files' names, sizes and modification times.
	sig string
	// changed is the signature of files seen changed at the last poll.
	changed string
	// next is each pipeline's next tick (the end of its first interval not
	// yet due); pipelines without one are absent.
	next map[string]time.Time
	// carry are pipelines whose runs the last execution left unfinished
	// (waiting for upstream data, held, stuck): the next one looks again.
	carry map[string]bool
	epoch int64
	// current is ws, for the notifications' goroutine (notify.go).
	current atomic.Pointer[dsl.Workspace]
	// prevLeader is the last other leader this scheduler stood by behind
	// (host:pid), for scheduler_takeover.
	prevLeader string
}

// use makes ws the definition, and computes every pipeline's next tick.
func (s *server) use(ws *dsl.Workspace) {
	s.pauseNew(ws)
	s.ws = ws
	s.current.Store(ws)
	s.next = map[string]time.Time{}
	s.carry = map[string]bool{}
	now := s.o.Clock()
	for _, p := range ws.Pipelines {
		s.schedule(p, now)
	}
	if s.o.OnLoad != nil {
		s.o.OnLoad(ws)
	}
}

// maxCountDue bounds the count of due runs of a new pipeline.
const maxCountDue = 1_000_000

// pauseNew pauses each pipeline of ws that the state has never seen and
// whose catchup would create more than PauseNewOver runs, as Airflow
// creates new DAGs paused: a pipeline added with an old start_date does
// not run its whole history unasked. One that looks renamed from a
// pipeline the state knows (scheduler.FindRenamed) is paused whatever its
// count, and the WARN names the old name and the command that carries its
// history over.
func (s *server) pauseNew(ws *dsl.Workspace) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	now := s.o.Clock()
	renamed := map[string]scheduler.Renamed{}
	found, err := scheduler.FindRenamed(ctx, s.o.Store, ws, nil)
	if err != nil {
		s.log.Error("cannot tell renamed pipelines", "error", s.redactErr(ws, err))
	}
	for _, r := range found {
		renamed[r.Pipeline] = r
	}
	for _, p := range ws.Pipelines {
		r, isRenamed := renamed[p.Name]
		if !isRenamed && (s.o.PauseNewOver <= 0 || !p.Catchup || p.Schedule == "") {
			continue
		}
		if _, err := s.o.Store.GetPipeline(ctx, p.Name); !errors.Is(err, store.ErrNotFound) {
			continue
		}
		n := dueRuns(p, now)
		if !isRenamed && n <= s.o.PauseNewOver {
			continue
		}
		err = s.o.Store.InTx(ctx, func(tx store.Store) error {
			if _, err := tx.UpsertPipeline(ctx, store.UpsertPipelineParams{Name: p.Name, Hash: p.Hash, Now: now}); err != nil {
				return err
			}
			return tx.SetPaused(ctx, store.SetPausedParams{Name: p.Name, Paused: true, Now: now})
		})
		if err != nil {
			s.log.Error("cannot pause a new pipeline", "pipeline", p.Name, "error", s.redactErr(ws, err))
			continue
		}
		count := strconv.Itoa(n)
		if n == maxCountDue {
			count = "at least " + count
		}
		if isRenamed {
			s.log.Warn("new pipeline paused: renamed from "+r.From+"?", "pipeline", p.Name, "due_runs", count,
				"rename", r.RenameCommand(), "unpause", "rewind unpause "+p.Name)
			continue
		}
		s.log.Warn("new pipeline paused: its catchup would create many runs", "pipeline", p.Name, "due_runs", count,
			"over", s.o.PauseNewOver, "unpause", "rewind unpause "+p.Name)
	}
}

// dueRuns counts the runs p's catchup would create now (at most
// maxCountDue); 0 for a pipeline without a schedule.
func dueRuns(p *dsl.Pipeline, now time.Time) int {
	if p.Schedule == "" {
		return 0
	}
	tt, err := timetable.New(p.Schedule, p.Timezone)
	if err != nil {
		return 0
	}
	n := 0
	for range tt.Intervals(timetable.Window{StartDate: p.StartDate, EndDate: p.EndDate, Now: now}) {
		if n++; n == maxCountDue {
			break
		}
	}
	if !p.Catchup {
		n = min(n, 1)
	}
	return n
}

func (s *server) redactErr(ws *dsl.Workspace, err error) string {
	return ws.RedactError(err).Error()
}

// schedule records p's next tick after now.
func (s *server) schedule(p *dsl.Pipeline, now time.Time) {
	delete(s.next, p.Name)
	if p.Schedule == "" {
		return
	}
	tt, err := timetable.New(p.Schedule, p.Timezone)
	if err != nil {
		return
	}
	if iv, ok := tt.Upcoming(timetable.Window{StartDate: p.StartDate, EndDate: p.EndDate, Now: now}); ok {
		s.next[p.Name] = iv.End
	}
}

// due are the pipelines whose next tick has come, with their consumers and
// the pipelines left unfinished, in workspace order.
func (s *server) due(now time.Time) []string {
	sel := map[string]bool{}
	for name, t := range s.next {
		if !now.Before(t) {
			sel[name] = true
			for _, c := range s.ws.Consumers(name) {
				sel[c.Name] = true
			}
		}
	}
	if len(sel) == 0 {
		return nil
	}
	for name := range s.carry {
		if s.ws.Pipeline(name) != nil {
			sel[name] = true
		}
	}
	var out []string
	for _, p := range s.ws.Pipelines {
		if sel[p.Name] {
			out = append(out, p.Name)
		}
	}
	return out
}

// nextTick is the earliest tick of any pipeline (zero when none).
func (s *server) nextTick() time.Time {
	var t time.Time
	for _, n := range s.next {
		if t.IsZero() || n.Before(t) {
			t = n
		}
	}
	return t
}

// lead is the active scheduler's loop, until ctx ends (stopped, or the
// leadership lost).
func (s *server) lead(ctx context.Context) {
	all := true // every pipeline: when it became active, after a reload, after an operator's change
	var retryAt time.Time
	var pending []string // the pipelines of an execution that failed, tried again
	timer := time.NewTicker(s.o.PollEvery)
	defer timer.Stop()
	if sig := s.signature(); sig != s.sig {
		// The files changed while it stood by.
		s.sig, s.changed = sig, ""
		s.reload()
	}
	for {
		if ctx.Err() != nil {
			return
		}
		now := s.o.Clock()
		names := slices.Concat(pending, s.due(now))
		if (all || len(names) > 0) && (retryAt.IsZero() || !time.Now().Before(retryAt)) {
			ok := s.execute(ctx, all, names)
			if ctx.Err() != nil {
				return
			}
			if ok {
				all, pending, retryAt = false, nil, time.Time{}
			} else {
				pending = names
				retryAt = time.Now().Add(serveRetryEvery)
			}
			if t := s.nextTick(); !t.IsZero() {
				s.log.Debug("next tick", "at", t)
			}
		}
		select {
		case <-ctx.Done():
			continue
		case <-s.o.Reload:
			s.log.Info("reload requested")
			s.sig, s.changed = s.signature(), ""
			if s.reload() {
				all = true
			}
		case <-timer.C:
			// A change is loaded once the files stay the same for one poll:
			// an editor's write seen half-done (a truncated file) is not.
			if sig := s.signature(); sig == s.sig {
				s.changed = ""
			} else if sig != s.changed {
				s.changed = sig
			} else {
				s.sig, s.changed = sig, ""
				if s.reload() {
					all = true
				}
			}
			if ep, err := s.o.Store.Epoch(ctx); err == nil && ep != s.epoch {
				// An operator cleared, paused or cancelled something.
				s.epoch, all = ep, true
			}
		}
	}
}

// execute runs one execution of the given pipelines (every one with all)
// and reports whether it could run.
func (s *server) execute(ctx context.Context, all bool, names []string) bool {
	var sel []string
	for _, n := range names {
		if s.ws.Pipeline(n) != nil && !slices.Contains(sel, n) {
			sel = append(sel, n) // a reload may have removed it
		}
	}
	if all {
		sel = nil
	} else if len(sel) == 0 {
		return true
	}
	// The next ticks are computed from the clock as it was before the
	// execution: an interval that came due while it ran is run next.
	now := s.o.Clock()
	// The epoch as it was before the execution: a change an operator makes
	// while it runs (or after its last look) makes the next look run again.
	ep, eerr := s.o.Store.Epoch(context.WithoutCancel(ctx))
	started := time.Now()
	sum, err := scheduler.Run(ctx, scheduler.Options{
		Store: s.o.Store, Workspace: s.ws, Pipelines: sel, Clock: s.o.Clock,
		RefreshEvery: s.o.RefreshEvery, Home: s.o.Home, Wait: true, Grace: s.o.Grace, LeaveSlurmJobs: true,
		OnWarning: s.o.OnWarning, Log: s.log, Holder: s.o.Holder, EnsureAgent: s.o.EnsureAgent,
	})
	s.o.Metrics.Executed(time.Since(started), err)
	if s.o.OnRun != nil {
		s.o.OnRun(sum, err)
	}
	if eerr == nil {
		s.epoch = ep
	}
	if ctx.Err() != nil {
		return true
	}
	if err != nil {
		var busy *lease.BusyError
		if !errors.As(err, &busy) {
			s.log.Error("execution failed: trying again", "error", s.ws.RedactError(err), "in", serveRetryEvery)
		}
		return false
	}
	s.carry = map[string]bool{}
	for _, w := range sum.Waiting {
		s.carry[w.Pipeline] = true
	}
	for _, h := range sum.Held {
		s.carry[h.Pipeline] = true
	}
	for _, r := range sum.Stuck {
		s.carry[r.Pipeline] = true
	}
	for _, p := range s.ws.Pipelines {
		if all || slices.Contains(names, p.Name) {
			s.schedule(p, now)
		}
	}
	const most = 20 // runs logged one by one per execution
	ok, failed := 0, 0
	for i, r := range sum.Finished {
		if i < most {
			s.log.Info("run finished", "pipeline", r.Pipeline, "logical_date", r.LogicalDate.Format(time.RFC3339), "state", string(r.State))
		}
		if r.State == store.RunSuccess {
			ok++
		} else {
			failed++
		}
	}
	if failed > 0 {
		// A failed run is logged at WARN with what failed, so that a log
		// alert can page someone.
		frs, ferr := scheduler.FailedRuns(context.WithoutCancel(ctx), s.o.Store, sum, most)
		for _, fr := range frs {
			s.log.Warn("run failed", "pipeline", fr.Pipeline, "logical_date", fr.LogicalDate.Format(time.RFC3339), "run_id", fr.RunID, "kind", fr.Kind, "tasks", s.ws.Redact(fr.TasksText()))
		}
		if ferr != nil {
			s.log.Warn("run failed: cannot read what failed", "error", s.ws.RedactError(ferr))
		}
		if failed > len(frs) {
			s.log.Warn("more runs failed", "count", failed-len(frs))
		}
	}
	if sum.Created > 0 || len(sum.Finished) > 0 {
		s.log.Info("execution done", "created", sum.Created, "succeeded", ok, "failed", failed, "attempts", sum.Attempts)
	}
	return true
}

// reload loads the workspace again; an invalid one is logged and the
// previous definition kept. It reports whether the new one is in use.
func (s *server) reload() bool {
	ws, diags := dsl.Load(s.o.Path, s.o.LoadOptions)
	if diags.HasErrors() {
		lines := diagLines(diags)
		s.log.Error("reload failed: keeping the previous definition", "errors", len(lines))
		for _, l := range lines {
			s.log.Error("reload: " + l)
		}
		return false
	}
	s.use(ws)
	s.log.Info("reloaded", "pipelines", len(ws.Pipelines))
	return true
}

// diagLines are the error diagnostics as "file:line: summary: detail".
func diagLines(diags hcl.Diagnostics) []string {
	var out []string
	for _, d := range diags {
		if d.Severity != hcl.DiagError {
			continue
		}
		line := d.Summary
		if d.Detail != "" {
			line += ": " + d.Detail
		}
		if d.Subject != nil {
			line = fmt.Sprintf("%s:%d: %s", d.Subject.Filename, d.Subject.Start.Line, line)
		}
		out = append(out, line)
	}
	return out
}

// signature describes the watched files: the *.hcl files of the workspace
// directory (or the one file Path names), by name, size and modification
// time. A file that appears or goes changes it too.
func (s *server) signature() string {
	var files []string
	if fi, err := os.Stat(s.o.Path); err == nil && !fi.IsDir() {
		files = []string{s.o.Path}
	} else {
		files, _ = filepath.Glob(filepath.Join(s.o.Path, "*.hcl"))
	}
	sort.Strings(files)
	var b strings.Builder
	for _, f := range files {
		fi, err := os.Stat(f)
		if err != nil {
			continue
		}
		fmt.Fprintf(&b, "%s %d %d\n", f, fi.Size(), fi.ModTime().UnixNano())
	}
	return b.String()
}
