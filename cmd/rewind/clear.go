package main

import (
	"fmt"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/rewind-dev/rewind/store"
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
		Long: `Clear puts the task instances of the runs whose ds lies in [--start, --end]
back to scheduled, like Airflow's 'tasks clear': the next 'rewind run' runs
them again, with a fresh retry budget. --only-failed clears only failed and
upstream_failed instances; --task only the named task. Running attempts are
never cleared.`,
		Example: `  rewind clear daily_revenue --start 2025-07-01 --end 2025-09-30 --only-failed
  rewind clear daily_revenue --start 2025-07-03 --end 2025-07-03 --task fx_join`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if start == "" || end == "" {
				return exitWith(exitUsage, "clear needs --start and --end")
			}
			for _, d := range []string{start, end} {
				if _, err := time.Parse("2006-01-02", d); err != nil {
					return exitWith(exitUsage, "date %q: want YYYY-MM-DD", d)
				}
			}
			if end < start {
				return exitWith(exitUsage, "--end %s is before --start %s", end, start)
			}
			ctx := cmd.Context()
			st, err := openStore(ctx, g)
			if err != nil {
				return err
			}
			defer st.Close()
			// ds is in the pipeline's timezone: find the logical dates of the window from the runs.
			runs, err := st.ListRuns(ctx, store.ListRunsParams{Pipelines: []string{args[0]}})
			if err != nil {
				return exitWith(exitFailed, "%v", err)
			}
			var from, to time.Time
			for _, r := range runs {
				if r.DS < start || r.DS > end {
					continue
				}
				if from.IsZero() || r.LogicalDate.Before(from) {
					from = r.LogicalDate
				}
				if r.LogicalDate.After(to) {
					to = r.LogicalDate
				}
			}
			n := 0
			if !from.IsZero() {
				n, err = st.ClearTasks(ctx, store.ClearTasksParams{Pipeline: args[0], From: from, To: to, OnlyFailed: onlyFailed, Task: task, Now: time.Now()})
				if err != nil {
					return exitWith(exitFailed, "%v", err)
				}
			}
			fmt.Fprintf(g.stdout, "cleared %d task instances of %s from %s to %s\n", n, args[0], start, end)
			return nil
		},
	}
	c.Flags().StringVar(&start, "start", "", "first ds to clear (YYYY-MM-DD)")
	c.Flags().StringVar(&end, "end", "", "last ds to clear, inclusive (YYYY-MM-DD)")
	c.Flags().BoolVar(&onlyFailed, "only-failed", false, "clear only failed and upstream_failed task instances")
	c.Flags().StringVar(&task, "task", "", "clear only this task")
	return c
}
