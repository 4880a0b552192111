package main

import (
	"context"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/rewind-dev/rewind/dsl"
	"github.com/rewind-dev/rewind/timetable"
	"github.com/rewind-dev/rewind/web"
)

func init() { register(newListCmd) }

func newListCmd(g *globals) *cobra.Command {
	var (
		ws     workspaceFlags
		nowS   string
		asJSON bool
	)
	c := &cobra.Command{
		Use:   "list [PATH]",
		Short: "List pipelines: schedule, next interval to become due, task count",
		Long: `List prints the pipelines of the workspace PATH (default "."): schedule,
timezone, the next interval to become due and when, and the number of tasks.

--json prints one JSON array, by name, of the pipelines of the workspace
and of its state: name, schedule, timezone, in_workspace, paused, next_due
(ds, logical_date, due_at: when its run becomes due, RFC 3339 with the
pipeline's offset; null when end_date has passed), last_run, watermark,
runs (counted by state) and tasks. It reads the state when there is one
and never creates one.`,
		Example: `  rewind list examples/daily_revenue
  rewind list --json | jq -r '.[] | select(.paused) | .name'`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			path, err := g.workspace(pathArg(args))
			if err != nil {
				return err
			}
			w, err := ws.load(g, path)
			if err != nil {
				return err
			}
			now := time.Now()
			if nowS != "" {
				if now, err = parseNow(nowS); err != nil {
					return err
				}
			}
			if asJSON {
				return listJSON(cmd.Context(), g, w, now)
			}
			tw := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "PIPELINE\tSCHEDULE\tTIMEZONE\tNEXT DUE\tTASKS")
			for _, p := range w.Pipelines {
				next := "-"
				if tt, err := timetable.New(p.Schedule, p.Timezone); err == nil {
					if iv, ok := tt.Upcoming(timetable.Window{StartDate: p.StartDate, EndDate: p.EndDate, Now: now}); ok {
						next = fmt.Sprintf("%s (due %s)", iv.DS(), iv.End.Format(time.RFC3339))
					}
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\n", p.Name, p.Schedule, p.Timezone, next, len(p.Tasks))
			}
			return tw.Flush()
		},
	}
	ws.add(c)
	c.Flags().StringVar(&nowS, "now", "", "the clock (RFC 3339)")
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON, with what the state says of each pipeline")
	return c
}

// listJSON prints list --json: the pipelines of w and of its state, if it
// has one.
func listJSON(ctx context.Context, g *globals, w *dsl.Workspace, now time.Time) error {
	var rd web.PipelineReader
	exists, err := g.hasState()
	if err != nil {
		return err
	}
	if exists {
		st, err := openExisting(ctx, g)
		if err != nil {
			return err
		}
		defer st.Close()
		rd = st
	}
	ps, err := web.Pipelines(ctx, w, rd, now)
	if err != nil {
		return stateError(err, exitState)
	}
	return printJSON(g, ps)
}
