package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/signal"
	"slices"
	"sort"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"

	"github.com/rewind-dev/rewind/dsl"
	"github.com/rewind-dev/rewind/executor"
	"github.com/rewind-dev/rewind/lease"
	"github.com/rewind-dev/rewind/notify"
	"github.com/rewind-dev/rewind/scheduler"
	"github.com/rewind-dev/rewind/store"
	"github.com/rewind-dev/rewind/web"
)

func init() { register(newRunCmd) }

// runFlags are the flags of run.
type runFlags struct {
	ws            workspaceFlags
	catchup       bool
	pipelines     []string
	now           string
	quiet         bool
	asJSON        bool
	newState      bool
	wait          bool
	maxActiveRuns int
	grace         time.Duration
}

func newRunCmd(g *globals) *cobra.Command {
	var f runFlags
	c := &cobra.Command{
		Use:   "run [PATH]",
		Short: "Materialize the due runs and execute them",
		Long: `Run materializes one run per due data interval of the pipelines in PATH
(default ".": every *.hcl file of the directory) and executes their tasks as
local processes until every run has finished.

Without --catchup it is what a crontab line calls for the nightly run: a
pipeline with catchup = true gets every missed interval, one with
catchup = false only the latest. --catchup fills every due interval since
start_date for the selected pipelines, whatever catchup says.

State is kept in PATH/.rewind/state.db, whatever the working directory
(see --state); logs under PATH/.rewind/logs.
A rewind killed at any moment loses nothing: the next run adopts attempts
still running, records those that finished, and re-runs only lost ones.
Only one rewind executes on a state at a time: a second one exits with
code 3 at once, or waits for the first with --wait.

A run waiting for upstream data (consumes) holds no max_active_runs slot;
the summary lists the runs left waiting, with the upstream run each waits
for, and the runs held by a backfill that is not running.

A pipeline with catchup = false gets only its latest due interval: the
run that creates it says on stderr (with --quiet too) how many due
intervals before it, since the pipeline's previous run, got no run, and
how to run them.

--json prints, instead of the summary, one JSON object on stdout: created,
attempts, succeeded, failed, interrupted, unfinished, runs (each finished
run by pipeline and logical date: pipeline, logical_date, ds, run_id,
kind, state, duration_seconds, reason, failed_tasks with task, state,
outcome, exit_code, try_number, pool, log_path), paused, skipped (pipeline,
count, first_logical_date, last_logical_date), waiting, held, stuck and
warnings. stderr stays as it is. Nothing is printed on stdout when the
execution did not start (exit 2, 3, 4).

Exit codes: 0 every run succeeded, 1 some run failed or was left
unfinished (waiting for upstream data, held by a backfill), 2 usage or
configuration error, 3 another rewind holds the state, 4 the state could
not be read or written, 130 interrupted.`,
		Example: `  rewind run --catchup examples/daily_revenue
  rewind run --pipeline daily_revenue --now 2025-07-11T00:00:00Z .
  rewind run --quiet /etc/rewind/pipelines     # from cron
  rewind run --json | jq -r '.runs[] | select(.state == "failed") | .run_id'`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			o, err := f.options(cmd, g, args)
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			if err := g.checkStateNotLost(f.newState); err != nil {
				return err
			}
			if o.Store, err = openStore(ctx, g); err != nil {
				if ctx.Err() != nil {
					return exitWith(exitInterrupt, "interrupted")
				}
				return err
			}
			defer o.Store.Close()
			if !f.quiet && limitsPools(o.Workspace) {
				fmt.Fprintln(g.stderr, "info: pool limits enforced by "+executor.Enforcement())
			}
			prog := newProgress(g.stderr, f.quiet)
			o.OnProgress = prog.update
			o.OnWarning = func(msg string) {
				if !f.quiet {
					fmt.Fprintln(g.stderr, "warning: "+msg)
				}
			}
			sum, err := scheduler.Run(ctx, o)
			prog.finish()
			return f.report(ctx, g, o.Store, sum, err)
		},
	}
	f.ws.add(c)
	c.Flags().BoolVar(&f.catchup, "catchup", false, "run every due interval since start_date, even for pipelines with catchup = false")
	c.Flags().StringArrayVar(&f.pipelines, "pipeline", nil, "run only this pipeline (repeatable)")
	c.Flags().StringVar(&f.now, "now", "", "fix the clock that decides which intervals are due (RFC 3339)")
	c.Flags().BoolVar(&f.newState, "new-state", false, "start a new SQLite state even though logs of an earlier one are there (its runs run again)")
	c.Flags().BoolVarP(&f.quiet, "quiet", "q", false, "print nothing but errors, the runs that failed and the due intervals catchup = false passed over")
	c.Flags().BoolVar(&f.asJSON, "json", false, "print the summary as one JSON object on stdout")
	c.Flags().BoolVar(&f.wait, "wait", false, "wait for another rewind on the same state to finish instead of exiting with code 3")
	c.Flags().IntVar(&f.maxActiveRuns, "max-active-runs", 0, "override every pipeline's max_active_runs")
	c.Flags().DurationVar(&f.grace, "grace", 10*time.Second, "on Ctrl-C, how long running attempts get before they are killed")
	return c
}

// options checks the flags and loads the workspace (args[0], or --path):
// the options of scheduler.Run, but for its Store and callbacks.
func (f *runFlags) options(cmd *cobra.Command, g *globals, args []string) (scheduler.Options, error) {
	nowT, err := parseNow(f.now)
	if err != nil {
		return scheduler.Options{}, err
	}
	if err := positive(cmd, "max-active-runs", f.maxActiveRuns, "a number of runs"); err != nil {
		return scheduler.Options{}, err
	}
	if f.grace < 0 {
		return scheduler.Options{}, exitWith(exitUsage, "--grace %s: want a duration of 0 or more", f.grace)
	}
	path, err := g.workspace(pathArg(args))
	if err != nil {
		return scheduler.Options{}, err
	}
	w, err := f.ws.load(g, path)
	if err != nil {
		return scheduler.Options{}, err
	}
	for _, name := range f.pipelines {
		if _, err := findPipeline(w, name); err != nil {
			return scheduler.Options{}, err
		}
	}
	if _, _, err := g.stateDSN(); err != nil {
		return scheduler.Options{}, err
	}
	return scheduler.Options{
		Workspace: w, Pipelines: f.pipelines, Catchup: f.catchup, Now: nowT,
		MaxActiveRuns: f.maxActiveRuns, Home: homeDir(g), Wait: f.wait, Grace: f.grace,
		EnsureAgent: agentStarter(g, lease.DefaultTTL), Notify: true,
	}, nil
}

// limitsPools reports whether a pool of w limits memory or CPUs.
func limitsPools(w *dsl.Workspace) bool {
	return slices.ContainsFunc(slices.Collect(maps.Values(w.Pools)), func(p *dsl.Pool) bool { return p.Memory > 0 || p.CPUs > 0 })
}

// report prints the summary of a run and returns its exit code.
func (f *runFlags) report(ctx context.Context, g *globals, st store.Store, sum *scheduler.Summary, err error) error {
	if err != nil && ctx.Err() != nil && !store.IsUnavailable(err) {
		// Ctrl-C while the state was being opened or read: nothing
		// was half-done; the next 'rewind run' starts afresh.
		return exitWith(exitInterrupt, "interrupted")
	}
	var busy *lease.BusyError
	if errors.As(err, &busy) {
		return exitWith(exitLeaseBusy, "%v", busy)
	}
	most := mostFailed
	if f.asJSON {
		most = -1 // a script reads them all
	}
	failed := failedRuns(st, sum, most)
	switch {
	case sum != nil && f.asJSON:
		if jerr := printJSON(g, web.RunReport(sum, failed)); jerr != nil && err == nil {
			err = jerr
		}
		failed = failed[:min(len(failed), mostFailed)]
	case sum != nil && !f.quiet:
		printSummary(g.stdout, sum, failed)
		if len(sum.Finished) == 0 && err == nil {
			printFailedWaiting(g.stdout, st, f.pipelines)
		}
	}
	if sum != nil {
		printSkipped(g.stderr, sum.Skipped)
	}
	if f.quiet {
		// From cron, the runs that failed are what someone must hear of.
		for _, r := range failed {
			fmt.Fprintln(g.stderr, "failed run: "+r.Line())
		}
		if n := failedCount(sum); n > len(failed) {
			fmt.Fprintf(g.stderr, "... and %d more failed runs (rewind runs --failed lists them)\n", n-len(failed))
		}
	}
	if sum != nil {
		printNotifications(g.stderr, sum.Notifications)
	}
	if err != nil {
		if strings.HasPrefix(err.Error(), "unknown pipeline") {
			return exitWith(exitUsage, "%v", err)
		}
		if sum != nil && sum.Interrupted && !store.IsUnavailable(err) {
			return exitWith(exitInterrupt, "interrupted: %v", err)
		}
		return stateError(err, exitFailed)
	}
	if sum.Interrupted {
		return exitWith(exitInterrupt, "interrupted: %d runs left unfinished; the next 'rewind run' resumes them", sum.Unfinished)
	}
	if sum.Incomplete() && f.quiet {
		n := len(sum.Waiting) + len(sum.Stuck)
		for _, h := range sum.Held {
			n += len(h.DS)
		}
		return exitWith(exitFailed, "%s left unfinished (waiting for upstream data, or held by a backfill): 'rewind run' without --quiet lists them", plural(n, "run"))
	}
	if sum.Failed() || sum.Incomplete() {
		return &exitError{code: exitFailed}
	}
	return nil
}

// printNotifications says, on stderr and also with --quiet (a silent alert
// channel is what cron must not hide), which deadlines were missed and
// which notifications could not be sent.
func printNotifications(w io.Writer, n scheduler.NotifySummary) {
	if n.DeadlinesMissed > 0 {
		fmt.Fprintf(w, "deadline missed: %s queued (deadline_missed)\n", plural(n.DeadlinesMissed, "notification"))
	}
	if n.Retried > 0 {
		fmt.Fprintf(w, "warning: %s not delivered; the next rewind tries again: %s\n", plural(n.Retried, "notification"), n.Errors[len(n.Errors)-1])
	}
	if n.GaveUp > 0 {
		fmt.Fprintf(w, "error: %s given up after %s of tries\n", plural(n.GaveUp, "notification"), notify.MaxAge)
	}
}

// progress shows a catchup: a live bar on a terminal, a plain line every
// few seconds otherwise, nothing with --quiet.
type progress struct {
	w     io.Writer
	quiet bool
	bar   *progressbar.ProgressBar
	last  time.Time
	cur   scheduler.Progress
}

func newProgress(w io.Writer, quiet bool) *progress {
	p := &progress{w: w, quiet: quiet}
	if !quiet && isTerminal(w) {
		p.bar = progressbar.NewOptions(-1,
			progressbar.OptionSetWriter(w),
			progressbar.OptionSetDescription("runs"),
			progressbar.OptionShowCount(),
			progressbar.OptionSetPredictTime(true),
			progressbar.OptionShowElapsedTimeOnFinish(),
			progressbar.OptionThrottle(100*time.Millisecond),
			progressbar.OptionClearOnFinish(),
		)
	}
	return p
}

func (p *progress) update(s scheduler.Progress) {
	p.cur = s
	if p.quiet || s.Total == 0 {
		return
	}
	if p.bar != nil {
		p.bar.ChangeMax(s.Total)
		p.bar.Describe(fmt.Sprintf("runs: %d running, %d queued, %d failed", s.Running, s.Queued, s.Failed))
		_ = p.bar.Set(s.Done())
		return
	}
	if time.Since(p.last) < 5*time.Second && s.Done() != s.Total {
		return
	}
	p.last = time.Now()
	fmt.Fprintln(p.w, progressLine(s))
}

func progressLine(s scheduler.Progress) string {
	line := fmt.Sprintf("progress: %d/%d runs done (%d running, %d queued, %d failed)", s.Done(), s.Total, s.Running, s.Queued, s.Failed)
	if d := s.Done(); d > 0 && d < s.Total {
		elapsed := time.Since(s.Started)
		eta := time.Duration(float64(elapsed) / float64(d) * float64(s.Total-d))
		line += ", eta " + eta.Round(time.Second).String()
	}
	return line
}

func (p *progress) finish() {
	if p.bar != nil {
		_ = p.bar.Finish()
	}
}

// mostFailed is how many failed runs a summary names one by one.
const mostFailed = 20

// failedRuns reads what failed in the failed runs of sum (at most most;
// all when most < 0); on a state error, those it could read.
func failedRuns(st store.Store, sum *scheduler.Summary, most int) []scheduler.FailedRun {
	if st == nil || failedCount(sum) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, _ := scheduler.FailedRuns(ctx, st, sum, most)
	return out
}

// printSkipped says, once per pipeline, which due intervals catchup = false
// passed over, and how to run them.
func printSkipped(w io.Writer, skipped []scheduler.SkippedIntervals) {
	for _, s := range skipped {
		first, last := s.First.Format(time.RFC3339), s.Last.Format(time.RFC3339)
		span := first
		if s.Count > 1 {
			span += " .. " + last
		}
		fmt.Fprintf(w, "note: %s has catchup = false: %s before its latest got no run (%s); to run them: rewind run --catchup --pipeline %s, or rewind backfill apply %s --start %s --end %s\n",
			s.Pipeline, plural(s.Count, "due interval"), span, s.Pipeline, s.Pipeline, first, last)
	}
}

func failedCount(sum *scheduler.Summary) int {
	n := 0
	if sum != nil {
		for _, r := range sum.Finished {
			if r.State == store.RunFailed {
				n++
			}
		}
	}
	return n
}

// printFailedWaiting says, when nothing ran, how many runs of the selected
// pipelines are failed and how to run them again.
func printFailedWaiting(w io.Writer, st store.Store, pipelines []string) {
	if st == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	runs, err := st.ListRuns(ctx, store.ListRunsParams{Pipelines: pipelines, States: []store.RunState{store.RunFailed}})
	if err != nil || len(runs) == 0 {
		return
	}
	first := runs[0]
	fmt.Fprintf(w, "%s failed earlier (a failed run is not run again by itself): rewind runs --failed lists them; rewind clear %s --start %s --end %s runs the first again\n",
		plural(len(runs), "run"), first.Pipeline, first.LogicalDate.Format(time.RFC3339), first.LogicalDate.Format(time.RFC3339))
}

// printSummary prints one line per pipeline and the failed runs.
func printSummary(w io.Writer, s *scheduler.Summary, failed []scheduler.FailedRun) {
	for _, name := range s.Paused {
		fmt.Fprintf(w, "pipeline %s is paused: nothing run (rewind unpause %s)\n", name, name)
	}
	if len(s.Finished) == 0 {
		if s.Unfinished == 0 && !s.Incomplete() {
			fmt.Fprintln(w, "nothing to run: every due run has finished")
		}
		printLeftovers(w, s)
		return
	}
	type row struct{ ok, failed int }
	rows := map[string]*row{}
	var names []string
	for _, r := range s.Finished {
		x := rows[r.Pipeline]
		if x == nil {
			x = &row{}
			rows[r.Pipeline] = x
			names = append(names, r.Pipeline)
		}
		if r.State == store.RunSuccess {
			x.ok++
		} else {
			x.failed++
		}
	}
	sort.Strings(names)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PIPELINE\tRUNS\tSUCCESS\tFAILED")
	for _, n := range names {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\n", n, rows[n].ok+rows[n].failed, rows[n].ok, rows[n].failed)
	}
	tw.Flush()
	if n := failedCount(s); n > 0 {
		fmt.Fprintln(w, "failed runs:")
		for _, r := range failed {
			fmt.Fprintln(w, "  "+r.Line())
		}
		if len(failed) == 0 {
			for _, r := range s.Finished {
				if r.State == store.RunFailed {
					fmt.Fprintf(w, "  %s %s: %s\n", r.Pipeline, r.LogicalDate.Format(time.RFC3339), collapsePrefixes(strings.Join(r.FailedTasks, ", ")))
				}
			}
		} else if n > len(failed) {
			fmt.Fprintf(w, "  ... and %d more (rewind runs --failed lists them)\n", n-len(failed))
		}
	}
	printLeftovers(w, s)
	fmt.Fprintf(w, "%d attempts in %s\n", s.Attempts, time.Since(s.Progress.Started).Round(time.Millisecond))
}

// printLeftovers lists the runs left unfinished: waiting for upstream data,
// held by a backfill, stuck.
func printLeftovers(w io.Writer, s *scheduler.Summary) {
	const most = 20
	if n := len(s.Waiting); n > 0 {
		fmt.Fprintf(w, "waiting for upstream data: %s (they run once it succeeds: rewind clear the upstream dates, then rewind run)\n", plural(n, "run"))
		for i, r := range s.Waiting {
			if i == most {
				fmt.Fprintf(w, "  ... and %d more (rewind runs --status queued lists them)\n", n-most)
				break
			}
			what := fmt.Sprintf("%s %s (%s)", r.Upstream, runDate(r.UpstreamDS, r.UpstreamLogicalDate, r.LogicalDate), r.UpstreamState)
			if r.UpstreamState == "none" {
				what = r.Upstream + " has no run for it"
			}
			fmt.Fprintf(w, "  %s %s waits for %s\n", r.Pipeline, runDate(r.DS, r.LogicalDate, r.UpstreamLogicalDate), what)
		}
	}
	for _, h := range s.Held {
		window := h.DS[0]
		if last := h.DS[len(h.DS)-1]; last != window {
			window += " .. " + last
		}
		fmt.Fprintf(w, "%s %s (%s): held by backfill %s (%s): resume it with rewind backfill apply --resume %s, cancel it, or rewind clear the dates\n",
			h.Pipeline, window, plural(len(h.DS), "run"), h.BackfillID, h.BackfillState, h.BackfillID)
	}
	if n := len(s.Stuck); n > 0 {
		fmt.Fprintf(w, "left unfinished: %s\n", plural(n, "run"))
		for i, r := range s.Stuck {
			if i == most {
				fmt.Fprintf(w, "  ... and %d more\n", n-most)
				break
			}
			fmt.Fprintf(w, "  %s %s: %s\n", r.Pipeline, r.LogicalDate.Format(time.RFC3339), strings.Join(r.Waiting, ", "))
		}
	}
}

// runDate is how a run is named in a summary: its ds, or its logical date
// when the other side of the line is not a whole day (sub-daily runs).
func runDate(ds string, logical, other time.Time) string {
	if logical.IsZero() {
		return ds
	}
	if !isMidnight(logical) || (!other.IsZero() && !isMidnight(other)) {
		return logical.Format(time.RFC3339)
	}
	return ds
}

func isMidnight(t time.Time) bool {
	h, m, sec := t.Clock()
	return h == 0 && m == 0 && sec == 0 && t.Nanosecond() == 0
}
