package main

import (
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/rewind-dev/rewind/dsl"
	"github.com/rewind-dev/rewind/skew"
	"github.com/rewind-dev/rewind/timetable"
	"github.com/rewind-dev/rewind/web"
)

func init() { register(newDatesCmd) }

func newDatesCmd(g *globals) *cobra.Command {
	var (
		ws               workspaceFlags
		start, end, nowS string
		asJSON           bool
	)
	c := &cobra.Command{
		Use:   "dates PIPELINE [PATH]",
		Short: "List the due data intervals of a pipeline: what a catchup would run",
		Long: `Dates prints the data intervals of PIPELINE that are due (their end is not
after --now, default the current time), from start_date or --start to
end_date or --end: exactly the runs that 'rewind run --catchup' would
create. A date (YYYY-MM-DD) selects whole days by ds, inclusive, in the
pipeline's timezone; a timestamp (RFC 3339) selects exact logical dates.
Times are in the pipeline's timezone. PATH (or --path) is the workspace.`,
		Example: `  rewind dates daily_revenue --start 2025-07-01 --end 2025-07-31
  rewind dates hourly_events --now 2025-03-31T00:00:00+02:00 --json`,
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			p, win, err := datesWindow(g, &ws, args, start, end, nowS)
			if err != nil {
				return err
			}
			dates, warnings, err := web.Dates(skew.ProbeContext(cmd.Context(), win.Now), p, win)
			if err != nil {
				return exitWith(exitUsage, "%v", err)
			}
			for _, w := range warnings {
				fmt.Fprintln(g.stderr, "warning: "+w)
			}
			if asJSON {
				return printJSON(g, dates)
			}
			printDates(g.stdout, dates)
			fmt.Fprintf(g.stderr, "%d due intervals\n", len(dates))
			return nil
		},
	}
	ws.add(c)
	c.Flags().StringVar(&start, "start", "", "first ds (YYYY-MM-DD, the pipeline's timezone) or logical date (RFC 3339)")
	c.Flags().StringVar(&end, "end", "", "last ds or logical date, inclusive")
	c.Flags().StringVar(&nowS, "now", "", "the clock: intervals ending after it are not due (RFC 3339)")
	c.Flags().BoolVar(&asJSON, "json", false, "print a JSON array")
	return c
}

// datesWindow reads the flags of dates: the pipeline (args[0]) of the
// workspace (args[1], or --path) and the window of its due intervals.
func datesWindow(g *globals, ws *workspaceFlags, args []string, start, end, nowS string) (*dsl.Pipeline, timetable.Window, error) {
	var win timetable.Window
	window, err := parseRange(start, end)
	if err != nil {
		return nil, win, err
	}
	path, err := g.workspace(pathArg(args[1:]))
	if err != nil {
		return nil, win, err
	}
	w, err := ws.load(g, path)
	if err != nil {
		return nil, win, err
	}
	p, err := findPipeline(w, args[0])
	if err != nil {
		return nil, win, err
	}
	now := time.Now()
	if nowS != "" {
		if now, err = parseNow(nowS); err != nil {
			return nil, win, err
		}
	}
	win = timetable.Window{StartDate: p.StartDate, EndDate: p.EndDate, Now: now}
	win.From, win.To = window.Bounds(p.Timezone)
	return p, win, nil
}

// printDates prints one due interval a line: ds, interval, pool and why.
func printDates(w io.Writer, dates []web.DateJSON) {
	for _, d := range dates {
		line := fmt.Sprintf("%s  %s -> %s  %s", d.DS, d.DataIntervalStart, d.DataIntervalEnd, d.Pool)
		if d.Reason != "" {
			line += "  (" + d.Reason + ")"
		}
		fmt.Fprintln(w, line)
	}
}

// findPipeline is the pipeline of the loaded workspace named name; an
// unknown name is a usage error that lists the known ones.
func findPipeline(w *dsl.Workspace, name string) (*dsl.Pipeline, error) {
	if p := w.Pipeline(name); p != nil {
		return p, nil
	}
	known := map[string]bool{}
	for _, p := range w.Pipelines {
		known[p.Name] = true
	}
	return nil, unknownName("pipeline", name, known)
}
