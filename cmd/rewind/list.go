package main

import (
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/rewind-dev/rewind/timetable"
)

func init() { register(newListCmd) }

func newListCmd(g *globals) *cobra.Command {
	var (
		ws   workspaceFlags
		nowS string
	)
	c := &cobra.Command{
		Use:     "list [PATH]",
		Short:   "List pipelines: schedule, next interval to become due, task count",
		Example: "  rewind list examples/daily_revenue",
		Args:    cobra.MaximumNArgs(1),
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
	return c
}
