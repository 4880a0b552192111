package main

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/rewind-dev/rewind/ops"
	"github.com/rewind-dev/rewind/store"
)

func init() { register(newMarkCmd) }

func newMarkCmd(g *globals) *cobra.Command {
	c := &cobra.Command{
		Use:   "mark success|failed PIPELINE --start DATE --end DATE [--task NAME]",
		Short: "Mark task instances success or failed; their runs follow",
		Long: `Mark sets the task instances of the runs in [--start, --end] (--task: only
that task; with --downstream, the tasks that depend on it too) to success
or failed, like Airflow's 'mark success' and 'mark failed', without running
anything: for a date whose data was fixed by hand, or one that must not be
taken as good. The window is read as by 'rewind clear'.

A selection with a running task instance is refused whole (exit 2):
its attempt decides its state. Each run follows its task instances as the
engine would finish it: failed when one failed, success when every one
succeeded or was skipped; a pipeline with outputs commits them first, so
its run goes back to queued and the next 'rewind run' (or the scheduler)
commits and finishes it. A running 'rewind run' or 'rewind scheduler' sees
the change within a second. The mark is recorded in 'rewind audit'.`,
		Example: `  rewind mark success daily_revenue --start 2025-07-03 --end 2025-07-03 --task extract_fx_rates
  rewind mark failed daily_revenue --start 2025-07-01 --end 2025-07-31`,
	}
	c.AddCommand(newMarkStateCmd(g, store.TaskSuccess), newMarkStateCmd(g, store.TaskFailed))
	return c
}

func newMarkStateCmd(g *globals, state store.TaskState) *cobra.Command {
	var f selectionFlags
	c := &cobra.Command{
		Use:   string(state) + " PIPELINE --start DATE --end DATE",
		Short: "Mark task instances " + string(state) + "; their runs follow",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			st, err := f.open(ctx, g, "mark", args[0])
			if err != nil {
				return err
			}
			defer st.Close()
			res, err := ops.Mark(ctx, st, looseWorkspace(g), ops.MarkParams{Selection: f.selection(args[0]), State: state, Now: time.Now()})
			audit(ctx, g, st, ops.Entry{Action: "mark." + string(state), Target: args[0], Pipeline: args[0], Args: f.args(), Err: err})
			if err != nil {
				return opsError(err)
			}
			fmt.Fprintf(g.stdout, "marked %d task instances of %s %s from %s to %s; %d runs changed state\n", res.Tasks, args[0], state, f.start, f.end, res.Runs)
			return nil
		},
	}
	f.add(c, "mark")
	return c
}
