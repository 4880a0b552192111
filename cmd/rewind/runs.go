package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/rewind-dev/rewind/store"
	"github.com/rewind-dev/rewind/timetable"
	"github.com/rewind-dev/rewind/web"
)

func init() { register(newRunsCmd) }

// JSON shapes of `runs --json` (contract): one definition, in package
// web, for the CLI and the web view.
type (
	runJSON     = web.RunJSON
	taskJSON    = web.TaskJSON
	attemptJSON = web.AttemptJSON
)

var runStates = []string{string(store.RunQueued), string(store.RunRunning), string(store.RunSuccess), string(store.RunFailed)}

func newRunsCmd(g *globals) *cobra.Command {
	var (
		pipeline   string
		asJSON     bool
		states     []string
		statuses   []string
		start, end string
		limit      int
		failed     bool
	)
	c := &cobra.Command{
		Use:   "runs",
		Short: "List runs, their tasks and every attempt",
		Long: `Runs lists the runs in the state of the workspace (--path, default "."),
oldest logical date first: each run with the state of each task, then one
line per attempt (task, try, pool, exit status, duration, and why it ran in
that pool). A run that failed although its tasks succeeded failed in its
output commit: its reason says so.

Filters: --pipeline, --status (repeatable, or a comma list: queued,
running, success, failed), --failed (the same as --status failed),
--start/--end (a date selects whole days by ds,
inclusive; a timestamp exact logical dates) and --limit N (the N latest of
the runs selected). --json prints one JSON array of runs with their tasks
and every attempt. --state names the state to read (sqlite:PATH or
postgres://...), as for every command; a run state given to --state
still filters, with a note to use --status.`,
		Example: `  rewind runs
  rewind runs --path examples/daily_revenue --failed
  rewind runs --pipeline daily_revenue --start 2025-07-01 --end 2025-07-07
  rewind runs --pipeline daily_revenue --json | jq '.[] | select(.state == "failed")'`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if _, err := g.workspace(""); err != nil {
				return err
			}
			if err := positive(cmd, "limit", limit, "a number of runs"); err != nil {
				return err
			}
			window, err := parseRange(start, end)
			if err != nil {
				return err
			}
			want, err := runStateFilter(g, states, statuses, failed)
			if err != nil {
				return err
			}
			st, err := openExisting(cmd.Context(), g)
			if err != nil {
				return err
			}
			defer st.Close()
			p := store.ListRunsParams{WithTasks: true, WithAttempts: true, States: want}
			if pipeline != "" {
				if err := knownPipeline(cmd.Context(), g, st, pipeline); err != nil {
					return err
				}
				p.Pipelines = []string{pipeline}
			}
			all, err := st.ListRuns(cmd.Context(), p)
			if err != nil {
				return stateError(err, exitState)
			}
			runs := selectRuns(all, window, limit)
			if asJSON {
				return printJSON(g, web.RunsJSON(runs, homeDir(g)))
			}
			printRuns(g.stdout, runs, homeDir(g))
			return nil
		},
	}
	c.Flags().StringVar(&pipeline, "pipeline", "", "only this pipeline")
	c.Flags().StringArrayVar(&states, "state", nil, "the state to read (sqlite:PATH or postgres://...), as for every command; a run state here still filters (use --status)")
	c.Flags().StringArrayVar(&statuses, "status", nil, "only runs in this state: queued, running, success, failed (repeatable, or a comma list)")
	c.Flags().BoolVar(&failed, "failed", false, "only failed runs (--status failed)")
	c.Flags().StringVar(&start, "start", "", "first ds (YYYY-MM-DD) or logical date (RFC 3339)")
	c.Flags().StringVar(&end, "end", "", "last ds or logical date, inclusive")
	c.Flags().IntVar(&limit, "limit", 0, "only the latest N runs selected")
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return c
}

// runStateFilter reads --state and --failed: the run states to list.
// --state is both the filter (a run state) and, as for every command, the
// state DSN (sqlite:PATH, postgres://...), which it records in g: the
// values cannot be mistaken for one another.
func runStateFilter(g *globals, states, statuses []string, failed bool) ([]store.RunState, error) {
	var want []store.RunState
	lists := slices.Clone(statuses)
	for _, list := range states {
		if isDSN(list) {
			if g.state != "" && g.state != list {
				return nil, exitWith(exitUsage, "--state names two states, %s and %s: give one", g.state, list)
			}
			g.state = list
			continue
		}
		if i := strings.Index(list, "://"); i >= 0 {
			return nil, exitWith(exitUsage, "--state %q: want sqlite:PATH or postgres://...", list[:i]+"://...")
		}
		fmt.Fprintf(g.stderr, "note: --state %s filters by run state for now; use --status %s (--state names the state to read)\n", list, list)
		lists = append(lists, list)
	}
	for _, list := range lists {
		for _, s := range strings.Split(list, ",") {
			s = strings.TrimSpace(s)
			if !slices.Contains(runStates, s) {
				shown := s
				if i := strings.Index(shown, "://"); i >= 0 {
					shown = shown[:i] + "://..."
				}
				return nil, exitWith(exitUsage, "--status %q: want a run state to filter by (%s); --state names the state to read (sqlite:PATH or postgres://...)", shown, strings.Join(runStates, ", "))
			}
			want = append(want, store.RunState(s))
		}
	}
	if failed {
		want = append(want, store.RunFailed)
	}
	return want, nil
}

// selectRuns keeps the runs in window and, with limit, the latest limit
// logical dates of them, shown as the store orders runs (by pipeline,
// oldest first).
func selectRuns(all []store.Run, window timetable.Range, limit int) []store.Run {
	var runs []store.Run
	for _, r := range all {
		if window.Contains(r.DS, r.LogicalDate) {
			runs = append(runs, r)
		}
	}
	if limit > 0 && len(runs) > limit {
		slices.SortStableFunc(runs, func(a, b store.Run) int { return a.LogicalDate.Compare(b.LogicalDate) })
		runs = runs[len(runs)-limit:]
		slices.SortStableFunc(runs, func(a, b store.Run) int {
			if c := strings.Compare(a.Pipeline, b.Pipeline); c != 0 {
				return c
			}
			return a.LogicalDate.Compare(b.LogicalDate)
		})
	}
	return runs
}

// isDSN reports whether s names a state (sqlite:PATH, postgres://...).
func isDSN(s string) bool {
	return store.IsPostgres(s) || strings.HasPrefix(strings.ToLower(s), "sqlite:")
}

func printRuns(w io.Writer, runs []store.Run, home string) {
	type row struct {
		cells []string
		lines []string // attempts, reason
	}
	header := []string{"PIPELINE", "LOGICAL DATE", "KIND", "STATE", "TASKS"}
	widths := make([]int, len(header))
	for i, h := range header {
		widths[i] = len(h)
	}
	rows := make([]row, 0, len(runs))
	for _, r := range runs {
		var tasks []string
		width := 0
		for _, t := range r.Tasks {
			s := t.Task + "=" + string(t.State)
			if t.TryNumber > 1 {
				s += fmt.Sprintf("(try %d)", t.TryNumber)
			}
			tasks = append(tasks, s)
			width = max(width, len(t.Task))
		}
		x := row{cells: []string{r.Pipeline, r.LogicalDate.Format(time.RFC3339), string(r.Kind), string(r.State), strings.Join(tasks, " ")}}
		for _, t := range r.Tasks {
			for _, a := range t.Attempts {
				x.lines = append(x.lines, fmt.Sprintf("    %-*s  %s", width, t.Task, attemptText(a)))
			}
		}
		if r.BatchOf != 0 && !r.BatchStart.IsZero() {
			x.lines = append(x.lines, "    in the batch of "+store.RunID(r.Kind, r.BatchStart)+": its run did the work of this interval")
		}
		if reason := web.RunReason(r, home); reason != "" {
			x.lines = append(x.lines, "    reason: "+reason)
		}
		for i, c := range x.cells[:len(x.cells)-1] {
			widths[i] = max(widths[i], len(c))
		}
		rows = append(rows, x)
	}
	line := func(cells []string) {
		var b strings.Builder
		for i, c := range cells {
			if i == len(cells)-1 {
				b.WriteString(c)
				break
			}
			fmt.Fprintf(&b, "%-*s  ", widths[i], c)
		}
		fmt.Fprintln(w, strings.TrimRight(b.String(), " "))
	}
	line(header)
	for _, x := range rows {
		line(x.cells)
		for _, l := range x.lines {
			fmt.Fprintln(w, l)
		}
	}
}

// attemptText is one attempt on one line: try, pool, how it ended, how
// long it ran, why it ran in its pool.
func attemptText(a store.Attempt) string {
	end := string(a.State)
	switch {
	case a.State == store.AttemptRunning:
		end = "running"
	case a.ExitCode != nil:
		end = fmt.Sprintf("exit %d", *a.ExitCode)
		if a.State != store.AttemptSuccess && a.State != store.AttemptFailed {
			end += " (" + string(a.State) + ")"
		}
	case a.Signal != "":
		end = "signal " + a.Signal + " (" + string(a.State) + ")"
	}
	dur := "-"
	if !a.StartedAt.IsZero() {
		stop := a.EndedAt
		if stop.IsZero() {
			stop = time.Now()
		}
		dur = roundDuration(stop.Sub(a.StartedAt))
	}
	s := fmt.Sprintf("try %d  %s  %s  %s", a.TryNumber, a.Pool, end, dur)
	if a.Reason != "" {
		s += "  " + a.Reason
	}
	return s
}

func roundDuration(d time.Duration) string {
	switch {
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Minute:
		return d.Round(10 * time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}
