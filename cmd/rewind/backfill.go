package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/rewind-dev/rewind/backfill"
	"github.com/rewind-dev/rewind/dsl"
	"github.com/rewind-dev/rewind/lease"
	"github.com/rewind-dev/rewind/ops"
	"github.com/rewind-dev/rewind/skew"
	"github.com/rewind-dev/rewind/store"
)

func init() { register(newBackfillCmd) }

// planFlags are the flags plan and apply share.
type planFlags struct {
	ws            workspaceFlags
	start, end    string
	reprocess     string
	reverse       bool
	maxActiveRuns int
	now           string
	downstream    bool
	tasks         []string
	taskDown      bool
	batch         string
	noBatch       bool
}

func (f *planFlags) add(c *cobra.Command) {
	f.ws.add(c)
	c.Flags().StringVar(&f.start, "start", "", "first ds (YYYY-MM-DD, whole days in the pipeline's timezone) or logical date (RFC 3339)")
	c.Flags().StringVar(&f.end, "end", "", "last ds or logical date, inclusive")
	c.Flags().StringVar(&f.reprocess, "reprocess", "none", "dates that already have a run: none (missing only), failed (and failed ones), completed (all)")
	c.Flags().BoolVar(&f.reverse, "reverse", false, "run the newest dates first")
	c.Flags().IntVar(&f.maxActiveRuns, "max-active-runs", 0, "runs of the backfill at once (default: the pipeline's max_active_runs)")
	c.Flags().StringVar(&f.now, "now", "", "the clock (RFC 3339): only due intervals are backfilled")
	c.Flags().BoolVar(&f.downstream, "include-downstream", false, "pause and rebuild every pipeline downstream, not only the direct consumers")
	c.Flags().StringArrayVar(&f.tasks, "task", nil, "re-run only this task (repeatable); the others keep their outcome (default --reprocess completed)")
	c.Flags().BoolVar(&f.taskDown, "downstream", false, "with --task, also the tasks that depend on it")
	c.Flags().StringVar(&f.batch, "batch", "", "one run covers the dates of each span: 6h, 1d, 1w, 1mo (default: the pipeline's backfill { batch })")
	c.Flags().BoolVar(&f.noBatch, "no-batch", false, "one run per date, whatever the pipeline's backfill { batch } says")
}

// request is the flags as package backfill reads them.
func (f *planFlags) request(cmd *cobra.Command, pipeline string) backfill.Request {
	return backfill.Request{Pipeline: pipeline, Start: f.start, End: f.end, Reprocess: f.reprocess, Reverse: f.reverse,
		MaxActiveRuns: f.maxActiveRuns, MaxActiveRunsSet: cmd.Flags().Changed("max-active-runs"), Now: f.now,
		IncludeDownstream: f.downstream, Tasks: f.tasks, TaskDownstream: f.taskDown, Batch: f.batch, NoBatch: f.noBatch}
}

// check validates the flags and the pipeline before any state is opened.
func (f *planFlags) check(cmd *cobra.Command, g *globals, pipeline string) (*dsl.Workspace, error) {
	q := f.request(cmd, pipeline)
	if err := q.Check(); err != nil {
		return nil, opsError(err)
	}
	path, err := g.workspace("")
	if err != nil {
		return nil, err
	}
	w, err := f.ws.load(g, path)
	if err != nil {
		return nil, err
	}
	if _, err := q.Params(w); err != nil {
		return nil, opsError(err)
	}
	return w, nil
}

func (f *planFlags) plan(cmd *cobra.Command, g *globals, w *dsl.Workspace, pipeline string, st store.Store) (*backfill.Plan, error) {
	pp, err := f.request(cmd, pipeline).Params(w)
	if err != nil {
		return nil, opsError(err)
	}
	plan, err := backfill.Compute(cmd.Context(), st, pp)
	var routes *backfill.RoutesError
	switch {
	case errors.As(err, &routes) && errors.Is(err, skew.ErrProbe):
		return nil, exitWith(exitUsage, "%v (fix the probe, or remove it from the skew block, before planning)", routes.Err)
	case errors.As(err, &routes):
		return nil, stateError(routes.Err, exitState)
	case err != nil:
		return nil, stateError(err, exitUsage)
	}
	return plan, nil
}

func newBackfillCmd(g *globals) *cobra.Command {
	c := &cobra.Command{
		Use:   "backfill",
		Short: "Re-run a window of a pipeline as a plan you can read, apply, follow and resume",
		Long: `A backfill is not a re-run of a job but a small migration: 'plan' shows
what will happen without changing anything; 'apply' records the backfill and
runs its phases (pause the consumers, verify the sources of every date, reset
the watermarks, run the dates as backfill runs, rebuild the consumers, write
the report to .rewind/backfills/ID.md and send it to every notify block);
'status' shows where it is; 'apply --resume ID' continues after a crash.`,
	}
	c.AddCommand(newBackfillPlanCmd(g), newBackfillApplyCmd(g), newBackfillStatusCmd(g), newBackfillListCmd(g), newBackfillCancelCmd(g),
		newBackfillHoldCmd(g, true), newBackfillHoldCmd(g, false), newBackfillRollbackCmd(g))
	return c
}

func newBackfillPlanCmd(g *globals) *cobra.Command {
	var (
		f      planFlags
		asJSON bool
		out    string
	)
	c := &cobra.Command{
		Use:   "plan PIPELINE --start D --end D",
		Short: "Show what a backfill would do, changing nothing",
		Example: `  rewind backfill plan daily_revenue --start 2025-07-01 --end 2025-09-28 --reprocess completed
  rewind backfill plan daily_revenue --start 2025-07-01 --end 2025-09-28 --json --out plan.json`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			w, err := f.check(cmd, g, args[0])
			if err != nil {
				return err
			}
			// A plan changes nothing: without a state it is planned against
			// an empty one, which is not kept.
			st, cleanup, err := openForPlan(cmd.Context(), g)
			if err != nil {
				return err
			}
			defer cleanup()
			plan, err := f.plan(cmd, g, w, args[0], st)
			if err != nil {
				return err
			}
			if out != "" {
				b, _ := json.MarshalIndent(plan, "", "  ")
				if err := os.WriteFile(out, append(b, '\n'), 0o644); err != nil {
					return exitWith(exitFailed, "%v", err)
				}
			}
			if asJSON {
				return printJSON(g, plan)
			}
			printPlan(g.stdout, plan)
			return nil
		},
	}
	f.add(c)
	c.Flags().BoolVar(&asJSON, "json", false, "print the plan as JSON")
	c.Flags().StringVar(&out, "out", "", "also write the plan as JSON to this file (for apply --plan)")
	return c
}

func printPlan(w io.Writer, p *backfill.Plan) {
	fmt.Fprintf(w, "backfill of %s from %s to %s (reprocess %s", p.Pipeline, p.Start, p.End, p.Reprocess)
	if p.Reverse {
		fmt.Fprint(w, ", newest first")
	}
	if p.Batch != "" {
		fmt.Fprintf(w, ")\n%d of %d dates run in %d batches of %s, %d at a time: %d waves", p.Selected, len(p.Dates), len(p.Batches), p.Batch, p.Parallel, p.Waves)
	} else {
		fmt.Fprintf(w, ")\n%d of %d dates run, %d at a time: %d waves", p.Selected, len(p.Dates), p.Parallel, p.Waves)
	}
	if p.EstimateSeconds > 0 {
		fmt.Fprintf(w, ", about %s (median run %s)", (time.Duration(p.EstimateSeconds * float64(time.Second))).Round(time.Second), time.Duration(p.RunSeconds*float64(time.Second)).Round(time.Millisecond))
	}
	fmt.Fprintln(w)
	if len(p.Tasks) > 0 {
		fmt.Fprintf(w, "tasks re-run: %s (the others keep their outcome)\n", strings.Join(p.Tasks, ", "))
	}
	if p.Paused {
		if p.IncludePaused {
			fmt.Fprintf(w, "%s is paused: the backfill's dates run anyway (--include-paused), its scheduled runs stay paused\n", p.Pipeline)
		} else {
			fmt.Fprintf(w, "%s is paused: apply refuses this backfill unless --include-paused (or rewind unpause %s first)\n", p.Pipeline, p.Pipeline)
		}
	}
	// A sub-daily pipeline's dates are named by their date-time: 24 lines
	// of one day say nothing.
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	head := "DS"
	if p.SubDaily() {
		head = "LOGICAL DATE"
	}
	// HOT BY: the detector that routed the date to its pool.
	if p.Outputs {
		// Where the date's current result lives: main, or only a branch
		// (a backfill not cut over); the backfill's version goes to its
		// branch, then to main at the cutover.
		fmt.Fprintln(tw, head+"\tSTATE\tACTION\tPOOL\tHOT BY\tRESULT\tREASON")
	} else {
		fmt.Fprintln(tw, head+"\tSTATE\tACTION\tPOOL\tHOT BY\tREASON")
	}
	for _, d := range p.Dates {
		name := p.DateName(d)
		if p.Outputs {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", name, d.State, d.Action, d.Pool, d.Detector, d.Result, d.Reason)
		} else {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", name, d.State, d.Action, d.Pool, d.Detector, d.Reason)
		}
	}
	tw.Flush()
	printBatches(w, p)
	for _, r := range p.Requires {
		fmt.Fprintf(w, "source check, every date first: %s\n", r)
	}
	for _, wm := range p.Watermarks {
		to := wm.ResetTo
		if to == "" {
			to = "(none)"
		}
		fmt.Fprintf(w, "watermark reset: %s %s -> %s\n", wm.Pipeline, wm.Current, to)
	}
	for _, d := range p.Downstream {
		fmt.Fprintf(w, "downstream: %s paused during the backfill, its dates rebuilt after\n", d)
	}
	if p.Outputs {
		fmt.Fprintln(w, "outputs: the backfill's version of each date wins; a date the nightly run takes meanwhile is taken back and cut over with the others")
	}
}

// printBatches lists a batched plan's runs: each covers its intervals,
// its data interval spans them.
func printBatches(w io.Writer, p *backfill.Plan) {
	if p.Batch == "" {
		return
	}
	fmt.Fprintf(w, "batches of %s: one run each, its data interval spanning its dates\n", p.Batch)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "BATCH\tINTERVALS\tDATA INTERVAL\tPOOL\tENDS EARLY")
	for _, b := range p.Batches {
		fmt.Fprintf(tw, "%s\t%d\t%s .. %s\t%s\t%s\n", b.Start, b.Intervals, b.Start, b.End, b.Pool, b.Split)
	}
	tw.Flush()
}

// applyFlags are the flags of backfill apply.
type applyFlags struct {
	planFlags
	resume, planFile   string
	quiet, force, wait bool
	includePaused      bool
}

func newBackfillApplyCmd(g *globals) *cobra.Command {
	var f applyFlags
	c := &cobra.Command{
		Use:   "apply PIPELINE --start D --end D | apply --resume ID",
		Short: "Record a backfill and run its phases",
		Long: `Apply records a backfill with an id and runs its phases; each is recorded,
so 'rewind backfill status' shows where it is and 'apply --resume ID'
continues after a crash or Ctrl-C without re-running finished attempts.
Scheduled runs that are due keep running beside the backfill, first.

Like 'rewind run', it exits with code 3 at once when another rewind holds
the state, or waits for it with --wait.

Exit codes: 0 the backfill succeeded, 1 a source check or a run failed,
2 usage or configuration error (an unknown pipeline, task or backfill id),
3 another rewind holds the state, 4 the state could not be read or
written, 130 interrupted (resume with --resume ID).`,
		Example: `  rewind backfill apply daily_revenue --start 2025-07-01 --end 2025-09-28 --reprocess completed --max-active-runs 15
  rewind backfill apply --resume daily_revenue_20260123T101500`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			o, err := f.options(ctx, cmd, g, args)
			if o.Store != nil {
				defer o.Store.Close()
			}
			if err != nil {
				return err
			}
			prog := newProgress(g.stderr, f.quiet)
			o.OnProgress = prog.update
			o.OnPhase = func(id, phase string) {
				if !f.quiet {
					fmt.Fprintf(g.stderr, "backfill %s: %s\n", id, phase)
				}
			}
			res, err := backfill.ApplyBackfill(ctx, o)
			prog.finish()
			auditApply(ctx, g, o, res, err)
			return f.report(g, res, err)
		},
	}
	f.add(c)
	c.Flags().StringVar(&f.resume, "resume", "", "continue the backfill with this id")
	c.Flags().StringVar(&f.planFile, "plan", "", "apply the plan written by 'backfill plan --out FILE'")
	c.Flags().BoolVarP(&f.quiet, "quiet", "q", false, "print nothing but errors")
	c.Flags().BoolVar(&f.force, "force", false, "cut over even when validation finds changes over max_change (never with unfinished dates)")
	c.Flags().BoolVar(&f.includePaused, "include-paused", false, "run the backfill of a paused pipeline (its scheduled runs stay paused)")
	c.Flags().BoolVar(&f.wait, "wait", false, "wait for another rewind on the same state to finish instead of exiting with code 3")
	return c
}

// options checks the flags, loads the workspace (and the --plan file),
// opens the state and checks that no other rewind holds it: the options
// of backfill.ApplyBackfill, whose Store, when set, the caller closes.
func (f *applyFlags) options(ctx context.Context, cmd *cobra.Command, g *globals, args []string) (backfill.ApplyOptions, error) {
	o := backfill.ApplyOptions{Wait: true, ResumeID: f.resume, Force: f.force, IncludePaused: f.includePaused, EnsureAgent: agentStarter(g, lease.DefaultTTL)}
	var err error
	switch {
	case f.resume != "" || f.planFile != "":
		if len(args) > 0 {
			return o, exitWith(exitUsage, "apply --resume ID and apply --plan FILE take no PIPELINE")
		}
		if _, err := parseNow(f.now); err != nil {
			return o, err
		}
		path, err := g.workspace("")
		if err != nil {
			return o, err
		}
		if o.Workspace, err = f.ws.load(g, path); err != nil {
			return o, err
		}
	case len(args) == 1:
		if o.Workspace, err = f.check(cmd, g, args[0]); err != nil {
			return o, err
		}
	default:
		return o, exitWith(exitUsage, "apply needs PIPELINE with --start and --end, --plan FILE, or --resume ID")
	}
	if f.planFile != "" {
		if o.Plan, err = readPlan(o.Workspace, f.planFile); err != nil {
			return o, err
		}
	}
	if f.resume != "" {
		o.Store, err = openExisting(ctx, g)
	} else {
		o.Store, err = openStore(ctx, g)
	}
	if err != nil {
		return o, err
	}
	if f.resume != "" {
		if _, err := findBackfill(cmd, o.Store, []string{f.resume}); err != nil {
			return o, err
		}
	}
	// Like run: another rewind holding the state's lease is exit 3,
	// or, with --wait, waited for (and said so).
	if err := takeLease(ctx, g, o.Store, f.wait, f.quiet); err != nil {
		return o, err
	}
	o.Home = homeDir(g)
	o.Now, _ = parseNow(f.now)
	if f.resume == "" && o.Plan == nil {
		o.Plan, err = f.plan(cmd, g, o.Workspace, args[0], o.Store)
	}
	return o, err
}

// readPlan reads the plan that 'backfill plan --out FILE' wrote; its
// pipeline must be one of the workspace.
func readPlan(w *dsl.Workspace, file string) (*backfill.Plan, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, exitWith(exitUsage, "--plan: %v", err)
	}
	plan := &backfill.Plan{}
	if err := json.Unmarshal(b, plan); err != nil {
		return nil, exitWith(exitUsage, "--plan %s: %v", file, err)
	}
	if _, err := findPipeline(w, plan.Pipeline); err != nil {
		return nil, err
	}
	return plan, nil
}

// report prints the outcome of an apply and returns its exit code.
func (f *applyFlags) report(g *globals, res *backfill.BackfillResult, err error) error {
	if res != nil && res.Summary != nil && !f.quiet {
		for _, w := range res.Summary.Warnings {
			fmt.Fprintln(g.stderr, "warning: "+w)
		}
	}
	if res != nil && res.Undelivered != nil {
		// Said even with --quiet: nobody else was told.
		if res.State == store.BackfillFailed {
			// The report of a failed validation: the error below says
			// the ways on.
			fmt.Fprintf(g.stderr, "report not delivered: %v\n", res.Undelivered)
		} else {
			fmt.Fprintf(g.stderr, "report not delivered: %v (rewind backfill apply --resume %s sends it again)\n", res.Undelivered, res.ID)
		}
	}
	var busy *lease.BusyError
	var owned *backfill.OwnedError
	switch {
	case errors.As(err, &busy):
		return exitWith(exitLeaseBusy, "%v", busy)
	case errors.As(err, &owned):
		return exitWith(exitLeaseBusy, "%v", owned)
	case res != nil && res.State == store.BackfillCancelled:
		return exitWith(exitFailed, "backfill %s cancelled", res.ID)
	case res != nil && res.Summary != nil && res.Summary.Interrupted:
		return exitWith(exitInterrupt, "interrupted: continue with 'rewind backfill apply --resume %s'", res.ID)
	case errors.Is(err, backfill.ErrPipelinePaused):
		return exitWith(exitUsage, "%v", err)
	case err != nil:
		if res != nil {
			if len(res.Unpaused) > 0 {
				fmt.Fprintf(g.stderr, "consumers unpaused (main untouched): %s\n", strings.Join(res.Unpaused, ", "))
			}
			if res.ReportPath != "" {
				// A failed validation is reported too.
				fmt.Fprintf(g.stderr, "report: %s\n", res.ReportPath)
			}
			return exitWith(exitFailed, "backfill %s: %v", res.ID, err)
		}
		return exitWith(exitFailed, "%v", err)
	}
	if !f.quiet {
		fmt.Fprintf(g.stdout, "backfill %s: %s\n", res.ID, res.State)
		if res.ReportPath != "" {
			fmt.Fprintf(g.stdout, "report: %s\n", res.ReportPath)
		}
	}
	if res.State != store.BackfillSuccess {
		return &exitError{code: exitFailed}
	}
	return nil
}

// takeLease checks that no other rewind holds the state's lease
// (lease.Probe): exit 3 at once, or with wait, a message and a wait for it.
// The lease is given back at once; the backfill's run phase takes it again.
func takeLease(ctx context.Context, g *globals, st store.Store, wait, quiet bool) error {
	err := lease.Probe(ctx, st, lease.Self(), wait, func(l store.Lease) {
		if !quiet {
			fmt.Fprintf(g.stderr, "waiting for another rewind (pid %d on %s) that holds the state\n", l.PID, l.Host)
		}
	})
	var busy *lease.BusyError
	switch {
	case errors.As(err, &busy):
		return exitWith(exitLeaseBusy, "%v", busy)
	case err != nil && ctx.Err() != nil:
		return exitWith(exitInterrupt, "interrupted")
	case err != nil:
		return stateError(err, exitState)
	}
	return nil
}

// openForPlan opens the state for a plan, which changes nothing: the
// workspace's state if it exists, else an empty one in a temporary
// directory, removed afterwards.
func openForPlan(ctx context.Context, g *globals) (store.Store, func(), error) {
	exists, err := g.hasState()
	if err != nil {
		return nil, nil, err
	}
	if exists {
		st, err := openExisting(ctx, g)
		if err != nil {
			return nil, nil, err
		}
		return st, func() { st.Close() }, nil
	}
	dir, err := os.MkdirTemp("", "rewind-plan-")
	if err != nil {
		return nil, nil, exitWith(exitState, "%v", err)
	}
	st, err := openDSN(ctx, "sqlite:"+filepath.Join(dir, "state.db"))
	if err != nil {
		os.RemoveAll(dir)
		return nil, nil, err
	}
	return st, func() { st.Close(); os.RemoveAll(dir) }, nil
}

// auditApply records an apply (or a resume) in the audit trail, with how
// it ended: ok only when the backfill succeeded.
func auditApply(ctx context.Context, g *globals, o backfill.ApplyOptions, res *backfill.BackfillResult, err error) {
	e := ops.Entry{Action: "backfill.apply", Args: map[string]any{}}
	if o.ResumeID != "" {
		e.Action, e.Target = "backfill.resume", o.ResumeID
	}
	if o.Plan != nil {
		e.Pipeline = o.Plan.Pipeline
		e.Args = map[string]any{"start": o.Plan.Start, "end": o.Plan.End, "reprocess": o.Plan.Reprocess}
	}
	if res != nil {
		e.Target = res.ID
		if err == nil && res.State != store.BackfillSuccess {
			err = fmt.Errorf("backfill %s: %s", res.ID, res.State)
		}
	}
	if e.Pipeline == "" && e.Target != "" {
		if b, gerr := o.Store.GetBackfill(context.WithoutCancel(ctx), e.Target); gerr == nil {
			e.Pipeline = b.Pipeline
		}
	}
	e.Err = err
	audit(context.WithoutCancel(ctx), g, o.Store, e)
}
