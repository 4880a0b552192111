package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/rewind-dev/rewind/dsl"
	"github.com/rewind-dev/rewind/skew"
	"github.com/rewind-dev/rewind/store"
	"github.com/rewind-dev/rewind/timetable"
	"github.com/rewind-dev/rewind/web"
)

func init() { register(newDatesCmd) }

func newDatesCmd(g *globals) *cobra.Command {
	var (
		ws               workspaceFlags
		start, end, nowS string
		asJSON, recorded bool
	)
	c := &cobra.Command{
		Use:   "dates PIPELINE [PATH]",
		Short: "List the due data intervals of a pipeline: what a catchup would run",
		Long: `Dates prints the data intervals of PIPELINE that are due (their end is not
after --now, default the current time), from start_date or --start to
end_date or --end: exactly the runs that 'rewind run --catchup' would
create. A date (YYYY-MM-DD) selects whole days by ds, inclusive, in the
pipeline's timezone; a timestamp (RFC 3339) selects exact logical dates.
Times are in the pipeline's timezone. PATH (or --path) is the workspace.

A skew probe runs once per date. With --recorded no probe runs: each date
shows the probe value that a run recorded in the state (rewind run, the
scheduler, backfill apply), or "not probed yet", and a date that has a run
is routed by its tasks' history too (an OOM escalation; a try that ran at
least history_min_duration and over hot_factor x the task's median), as a
backfill plan routes it; this is what the web view serves at /api/dates.
Each hot date names the detector that found it (hot_dates, hot_when, probe,
history, oom_escalation): first in its reason, and as "detector" in --json.`,
		Example: `  rewind dates daily_revenue --start 2025-07-01 --end 2025-07-31
  rewind dates hourly_events --now 2025-03-31T00:00:00+02:00 --json
  rewind dates daily_revenue --recorded --json`,
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			w, p, win, err := datesWindow(g, &ws, args, start, end, nowS)
			if err != nil {
				return err
			}
			var dates []web.DateJSON
			var warnings []string
			if recorded {
				dates, warnings, err = recordedDates(cmd.Context(), g, w, p, win)
			} else {
				if dates, warnings, err = web.Dates(skew.ProbeContext(cmd.Context(), win.Now), p, win); err != nil {
					err = exitWith(exitUsage, "%v", err)
				}
			}
			if err != nil {
				return err
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
	c.Flags().BoolVar(&recorded, "recorded", false, "run no probe: show the probe values runs recorded in the state")
	return c
}

// recordedDates is dates --recorded: the probe values and the attempts'
// history of the state (none without a state; dates never creates one).
func recordedDates(ctx context.Context, g *globals, w *dsl.Workspace, p *dsl.Pipeline, win timetable.Window) ([]web.DateJSON, []string, error) {
	var rd web.RecordReader = noRecords{}
	exists, err := g.hasState()
	if err != nil {
		return nil, nil, err
	}
	if exists {
		st, err := openExisting(ctx, g)
		if err != nil {
			return nil, nil, err
		}
		defer st.Close()
		rd = st
	}
	dates, warnings, err := web.RecordedDates(ctx, rd, w, p, win, 0)
	if err != nil {
		return nil, nil, stateError(err, exitUsage)
	}
	return dates, warnings, nil
}

// noRecords is a state without runs or probe results.
type noRecords struct{}

func (noRecords) ListProbes(context.Context, store.ListProbesParams) ([]store.ProbeResult, error) {
	return nil, nil
}

func (noRecords) ListRuns(context.Context, store.ListRunsParams) ([]store.Run, error) {
	return nil, nil
}

func (noRecords) TaskDurations(context.Context, store.TaskDurationsParams) (map[string][]time.Duration, error) {
	return nil, nil
}

// datesWindow reads the flags of dates: the pipeline (args[0]) of the
// workspace (args[1], or --path) and the window of its due intervals.
func datesWindow(g *globals, ws *workspaceFlags, args []string, start, end, nowS string) (*dsl.Workspace, *dsl.Pipeline, timetable.Window, error) {
	var win timetable.Window
	window, err := parseRange(start, end)
	if err != nil {
		return nil, nil, win, err
	}
	path, err := g.workspace(pathArg(args[1:]))
	if err != nil {
		return nil, nil, win, err
	}
	w, err := ws.load(g, path)
	if err != nil {
		return nil, nil, win, err
	}
	p, err := findPipeline(w, args[0])
	if err != nil {
		return nil, nil, win, err
	}
	now := time.Now()
	if nowS != "" {
		if now, err = parseNow(nowS); err != nil {
			return nil, nil, win, err
		}
	}
	win = timetable.Window{StartDate: p.StartDate, EndDate: p.EndDate, Now: now}
	win.From, win.To = window.Bounds(p.Timezone)
	return w, p, win, nil
}

// printDates prints one due interval a line: ds, interval, pool and why.
func printDates(w io.Writer, dates []web.DateJSON) {
	for _, d := range dates {
		line := fmt.Sprintf("%s  %s -> %s  %s", d.DS, d.DataIntervalStart, d.DataIntervalEnd, d.Pool)
		if d.Reason != "" {
			line += "  (" + d.Reason + ")"
		} else if d.Probe != nil && d.Probe.State == web.ProbeNotProbed {
			line += "  (not probed yet)"
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
