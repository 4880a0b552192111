package main

import (
	"fmt"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/rewind-dev/rewind/store"
	"github.com/rewind-dev/rewind/timetable"
)

func init() { register(newClearCmd) }

func itoa(i int) string { return strconv.Itoa(i) }

func newClearCmd(g *globals) *cobra.Command {
	var (
		start, end string
		onlyFailed bool
		task       string
	)
	c := &cobra.Command{
		Use:   "clear PIPELINE --start DATE --end DATE",
		Short: "Clear task instances so that the next run runs them again",
		Long: `Clear puts the task instances of the runs in [--start, --end] back to
scheduled, like Airflow's 'tasks clear': the next 'rewind run' runs them
again, with a fresh retry budget. A date (YYYY-MM-DD) selects whole days by
ds, inclusive, in the pipeline's timezone; a timestamp (RFC 3339) selects
exact logical dates. --only-failed clears only failed and upstream_failed
instances; --task only the named task. Running attempts are never cleared.
The runs of a backfill that is not running (stopped, failed, cancelled) are
handed back to their pipeline.`,
		Example: `  rewind clear daily_revenue --start 2025-07-01 --end 2025-09-30 --only-failed
  rewind clear daily_revenue --start 2025-07-03 --end 2025-07-03 --task fx_join
  rewind clear hourly --start 2026-11-30T10:00:00Z --end 2026-11-30T10:00:00Z`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if start == "" || end == "" {
				return exitWith(exitUsage, "clear needs --start and --end")
			}
			window, err := parseRange(start, end)
			if err != nil {
				return err
			}
			if _, err := g.workspace(""); err != nil {
				return err
			}
			ctx := cmd.Context()
			st, err := openExisting(ctx, g)
			if err != nil {
				return err
			}
			defer st.Close()
			if err := knownPipeline(ctx, g, st, args[0]); err != nil {
				return err
			}
			// ds is in the pipeline's timezone: find the logical dates of the window from the runs.
			runs, err := st.ListRuns(ctx, store.ListRunsParams{Pipelines: []string{args[0]}, WithTasks: task != ""})
			if err != nil {
				return stateError(err, exitState)
			}
			if task != "" {
				if err := checkTask(g, args[0], task, runs); err != nil {
					return err
				}
			}
			from, to := logicalSpan(runs, window)
			n := 0
			if !from.IsZero() {
				n, err = st.ClearTasks(ctx, store.ClearTasksParams{Pipeline: args[0], From: from, To: to, OnlyFailed: onlyFailed, Task: task, Now: time.Now()})
				if err != nil {
					return stateError(err, exitState)
				}
			}
			fmt.Fprintf(g.stdout, "cleared %d task instances of %s from %s to %s\n", n, args[0], start, end)
			return nil
		},
	}
	c.Flags().StringVar(&start, "start", "", "first ds (YYYY-MM-DD) or logical date (RFC 3339)")
	c.Flags().StringVar(&end, "end", "", "last ds or logical date, inclusive")
	c.Flags().BoolVar(&onlyFailed, "only-failed", false, "clear only failed and upstream_failed task instances")
	c.Flags().StringVar(&task, "task", "", "clear only this task")
	return c
}

// logicalSpan is the first and the last logical date of the runs in
// window (zero when none is): a date bound is by ds, in the pipeline's
// timezone, which the runs know.
func logicalSpan(runs []store.Run, window timetable.Range) (from, to time.Time) {
	for _, r := range runs {
		if !window.Contains(r.DS, r.LogicalDate) {
			continue
		}
		if from.IsZero() || r.LogicalDate.Before(from) {
			from = r.LogicalDate
		}
		if r.LogicalDate.After(to) {
			to = r.LogicalDate
		}
	}
	return from, to
}
