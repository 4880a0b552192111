package main

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/rewind-dev/rewind/dsl"
	"github.com/rewind-dev/rewind/skew"
	"github.com/rewind-dev/rewind/timetable"
)

func init() { register(newDatesCmd) }

// dateJSON is one element of `dates --json` (contract).
type dateJSON struct {
	LogicalDate       string `json:"logical_date"`
	DS                string `json:"ds"`
	DataIntervalStart string `json:"data_interval_start"`
	DataIntervalEnd   string `json:"data_interval_end"`
	Pool              string `json:"pool"`
	Reason            string `json:"reason"`
}

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
			window, err := parseRange(start, end)
			if err != nil {
				return err
			}
			path, err := g.workspace(pathArg(args[1:]))
			if err != nil {
				return err
			}
			w, err := ws.load(g, path)
			if err != nil {
				return err
			}
			p, err := findPipeline(w, args[0])
			if err != nil {
				return err
			}
			now := time.Now()
			if nowS != "" {
				if now, err = parseNow(nowS); err != nil {
					return err
				}
			}
			win := timetable.Window{StartDate: p.StartDate, EndDate: p.EndDate, Now: now}
			win.From, win.To = window.Bounds(p.Timezone)
			tt, err := timetable.New(p.Schedule, p.Timezone)
			if err != nil {
				return exitWith(exitUsage, "pipeline %s: %v", p.Name, err)
			}
			var ivs []timetable.Interval
			for iv := range tt.Intervals(win) {
				ivs = append(ivs, iv)
			}
			routes, warnings := skew.DateRoutesChecked(skew.ProbeContext(cmd.Context(), now), p, ivs)
			for _, w := range warnings {
				fmt.Fprintln(g.stderr, "warning: "+w)
			}
			if asJSON {
				out := make([]dateJSON, len(ivs))
				for i, iv := range ivs {
					out[i] = dateJSON{
						LogicalDate: iv.Start.Format(time.RFC3339), DS: iv.DS(),
						DataIntervalStart: iv.Start.Format(time.RFC3339), DataIntervalEnd: iv.End.Format(time.RFC3339),
						Pool: routes[i].Pool, Reason: routes[i].Reason,
					}
				}
				enc := json.NewEncoder(g.stdout)
				enc.SetIndent("", "  ")
				enc.SetEscapeHTML(false)
				return enc.Encode(out)
			}
			n := len(ivs)
			for i, iv := range ivs {
				line := fmt.Sprintf("%s  %s -> %s  %s", iv.DS(), iv.Start.Format(time.RFC3339), iv.End.Format(time.RFC3339), routes[i].Pool)
				if routes[i].Reason != "" {
					line += "  (" + routes[i].Reason + ")"
				}
				fmt.Fprintln(g.stdout, line)
			}
			fmt.Fprintf(g.stderr, "%d due intervals\n", n)
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
