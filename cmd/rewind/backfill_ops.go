package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/rewind-dev/rewind/backfill"
	"github.com/rewind-dev/rewind/lease"
	"github.com/rewind-dev/rewind/ops"
	"github.com/rewind-dev/rewind/store"
	"github.com/rewind-dev/rewind/web"
	"github.com/spf13/cobra"
)

func newBackfillRollbackCmd(g *globals) *cobra.Command {
	var now string
	c := &cobra.Command{
		Use:   "rollback ID",
		Short: "Restore the window's dates of the backfill's outputs on main as they were before its cutover, and rebuild the consumers",
		Long: `Rollback works whenever main holds the backfill's cutover, whatever the
backfill's state (success, or failed or stopped after its cutover). It
pauses the consumers, restores the window's dates of each output on main
from the pre_backfill_ID tag (later commits kept), then clears and runs
the consumers' dates of the window, as apply does after its cutover. The
backfill then shows rolled_back. A rollback that died is finished by
running it again.

Exit codes: 0 rolled back, 1 a step failed, 2 main holds no cutover of the
backfill (or an unknown id), 3 another rewind owns the backfill or holds
the state, 4 the state could not be read or written.`,
		Example: "  rewind backfill rollback daily_revenue_20260123T101500",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			path, err := g.workspace("")
			if err != nil {
				return err
			}
			clock, err := parseNow(now)
			if err != nil {
				return err
			}
			st, err := openExisting(cmd.Context(), g)
			if err != nil {
				return err
			}
			defer st.Close()
			b, err := findBackfill(cmd, st, args)
			if err != nil {
				return err
			}
			w, err := loadWorkspace(g, path, nil)
			if err != nil {
				return err
			}
			res, err := backfill.RollbackBackfill(cmd.Context(), backfill.RollbackOptions{Store: st, Workspace: w, ID: args[0],
				Home: homeDir(g), Now: clock, EnsureAgent: agentStarter(g, lease.DefaultTTL)})
			audit(cmd.Context(), g, st, ops.Entry{Action: "backfill.rollback", Target: b.ID, Pipeline: b.Pipeline, Err: err})
			var owned *backfill.OwnedError
			var busy *lease.BusyError
			switch {
			case errors.As(err, &owned):
				return exitWith(exitLeaseBusy, "%v", owned)
			case errors.As(err, &busy):
				return exitWith(exitLeaseBusy, "%v", busy)
			case errors.Is(err, backfill.ErrBackfillState):
				return exitWith(exitUsage, "%v", err)
			case err != nil:
				return exitWith(exitFailed, "%v", err)
			}
			fmt.Fprintf(g.stdout, "backfill %s rolled back: the window's dates on main are as at %s, later commits kept\n", args[0], backfill.TagName(args[0]))
			if len(res.Rebuilt) > 0 {
				fmt.Fprintf(g.stdout, "consumers rebuilt: %s\n", strings.Join(res.Rebuilt, ", "))
			}
			return nil
		},
	}
	c.Flags().StringVar(&now, "now", "", "the clock (RFC 3339) of the consumers' rebuild")
	return c
}

func newBackfillStatusCmd(g *globals) *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:     "status [ID]",
		Short:   "Show a backfill's phase and the state of each of its dates (default: the latest)",
		Example: "  rewind backfill status daily_revenue_20260123T101500",
		Args:    cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			if _, err := g.workspace(""); err != nil {
				return err
			}
			st, err := openExisting(ctx, g)
			if err != nil {
				return err
			}
			defer st.Close()
			b, err := findBackfill(cmd, st, args)
			if err != nil {
				return err
			}
			runs, err := st.ListRuns(ctx, store.ListRunsParams{Pipelines: []string{b.Pipeline}, From: b.From, To: b.To})
			if err != nil {
				return stateError(err, exitState)
			}
			status := web.BackfillStatus(b, runs)
			if asJSON {
				return printJSON(g, status)
			}
			printBackfillStatus(g.stdout, b, status)
			return nil
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return c
}

// printBackfillStatus prints where backfill b is and how many of its dates
// are in each state.
func printBackfillStatus(w io.Writer, b store.Backfill, status web.BackfillStatusJSON) {
	counts := map[string]int{}
	for _, d := range status.Dates {
		counts[d.State]++
	}
	from, to := backfill.WindowOf(b)
	fmt.Fprintf(w, "backfill %s of %s, %s .. %s: %s, phase %s\n", b.ID, b.Pipeline, from, to, backfill.ShownState(b), b.Phase)
	fmt.Fprintf(w, "dates: %d queued, %d running, %d success, %d failed\n", counts["queued"], counts["running"], counts["success"], counts["failed"])
	if status.Batch != "" {
		fmt.Fprintf(w, "batches of %s: %d runs cover the dates (each covered date ends with its batch's run)\n", status.Batch, status.Batches)
	}
	// Each phase, in the order apply runs them: done, the one it is at
	// (running, failed, cancelled), pending; one that had nothing to do
	// says skipped, and why.
	fmt.Fprintln(w, "phases:")
	for _, p := range status.Phases {
		switch {
		case p.Name == backfill.PhaseDone:
		case p.Skipped != "":
			fmt.Fprintf(w, "  %s: skipped (%s)\n", p.Name, p.Skipped)
		default:
			fmt.Fprintf(w, "  %s: %s\n", p.Name, p.State)
		}
	}
	if b.Detail != "" {
		fmt.Fprintln(w, b.Detail)
	}
}

func findBackfill(cmd *cobra.Command, st store.Store, args []string) (store.Backfill, error) {
	if len(args) == 1 {
		b, err := st.GetBackfill(cmd.Context(), args[0])
		if errors.Is(err, store.ErrNotFound) {
			return b, exitWith(exitUsage, "no backfill %q (rewind backfill list shows them)", args[0])
		}
		return b, err
	}
	list, err := st.ListBackfills(cmd.Context())
	if err != nil {
		return store.Backfill{}, err
	}
	if len(list) == 0 {
		return store.Backfill{}, exitWith(exitUsage, "no backfill yet")
	}
	return list[0], nil
}

func newBackfillListCmd(g *globals) *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "list",
		Short: "List backfills, newest first",
		Long: `List prints every backfill of the state, newest first: id, pipeline,
window, reprocess, state and phase.

--json prints one JSON array, in the same order, the same as the web
view's /api/backfills: id, pipeline, start and end (the window's first and
last logical dates, RFC 3339 with the pipeline's offset), reprocess,
state, phase, on_hold, rolled_back, created_at and updated_at (UTC).`,
		Example: `  rewind backfill list --path examples/daily_revenue
  rewind backfill list --json | jq -r '.[] | select(.state == "running") | .id'`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if _, err := g.workspace(""); err != nil {
				return err
			}
			st, err := openExisting(cmd.Context(), g)
			if err != nil {
				return err
			}
			defer st.Close()
			list, err := st.ListBackfills(cmd.Context())
			if err != nil {
				return stateError(err, exitState)
			}
			if asJSON {
				return printJSON(g, web.Backfills(list))
			}
			tw := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tPIPELINE\tWINDOW\tREPROCESS\tSTATE\tPHASE")
			for _, b := range list {
				from, to := backfill.WindowOf(b)
				fmt.Fprintf(tw, "%s\t%s\t%s..%s\t%s\t%s\t%s\n", b.ID, b.Pipeline, from, to, b.Reprocess, backfill.ShownState(b), b.Phase)
			}
			return tw.Flush()
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return c
}

func newBackfillCancelCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "cancel ID",
		Short: "Stop a backfill cleanly: running attempts are stopped, consumers unpaused",
		Long: `Cancel marks the backfill cancelled. A running 'backfill apply' sees it within
a second, stops its attempts (recorded interrupted), fails the backfill's
unfinished runs and unpauses the consumers it paused. A backfill whose apply
is not running, or that failed, is settled the same way at once. Its
finished dates live only on its branch: a later backfill with --reprocess
failed runs them again.`,
		Args: cobra.ExactArgs(1),
		RunE: backfillOp(g, "backfill.cancel", "cancelled", backfill.CancelBackfill),
	}
}

// newBackfillHoldCmd is backfill pause (hold) or backfill unpause.
func newBackfillHoldCmd(g *globals, hold bool) *cobra.Command {
	use, short, done, action := "unpause ID", "Let a paused backfill start runs again", "unpaused", "backfill.unpause"
	if hold {
		action = "backfill.pause"
		use, short, done = "pause ID", "Start nothing new of a backfill; its running attempts finish", "paused: nothing new starts until rewind backfill unpause"
	}
	return &cobra.Command{
		Use:   use,
		Short: short,
		Long: `A paused backfill starts no new run or task; its running attempts finish, and
its 'backfill apply' waits. 'backfill unpause ID' lets it go on (a backfill
whose apply is not running goes on with 'apply --resume ID').`,
		Args: cobra.ExactArgs(1),
		RunE: backfillOp(g, action, done, func(ctx context.Context, st store.Store, id string) (store.Backfill, error) {
			return backfill.HoldBackfill(ctx, st, id, hold)
		}),
	}
}

// backfillOp runs an operator command on the backfill named by args (one
// that its state does not allow is a usage error) and says what it did.
func backfillOp(g *globals, action, done string, op func(context.Context, store.Store, string) (store.Backfill, error)) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		ctx := cmd.Context()
		if _, err := g.workspace(""); err != nil {
			return err
		}
		st, err := openExisting(ctx, g)
		if err != nil {
			return err
		}
		defer st.Close()
		b, err := findBackfill(cmd, st, args)
		if err != nil {
			return err
		}
		b, err = op(ctx, st, b.ID)
		audit(ctx, g, st, ops.Entry{Action: action, Target: b.ID, Pipeline: b.Pipeline, Err: err})
		if errors.Is(err, backfill.ErrBackfillState) {
			return exitWith(exitUsage, "%v", err)
		}
		if err != nil {
			return exitWith(exitFailed, "%v", err)
		}
		fmt.Fprintf(g.stdout, "backfill %s: %s\n", b.ID, done)
		return nil
	}
}
