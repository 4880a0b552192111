package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/rewind-dev/rewind/dsl"
	"github.com/rewind-dev/rewind/store"
	"github.com/rewind-dev/rewind/timetable"
)

func init() { register(newLogsCmd) }

// followEvery is how often logs --follow looks for new output and for the
// end of the attempt.
const followEvery = 200 * time.Millisecond

func newLogsCmd(g *globals) *cobra.Command {
	var (
		try    int
		follow bool
	)
	c := &cobra.Command{
		Use:   "logs PIPELINE DATE|LOGICAL_DATE|RUN_ID TASK",
		Short: "Print the log of a task's attempt",
		Long: `Logs prints the output (stdout and stderr) of one attempt of a task: the
latest attempt, or try number N with --try N. The run is named by its ds
(YYYY-MM-DD), its logical date (RFC 3339, as 'rewind runs' prints it) or its
run id (scheduled__2025-07-01T00:00:00Z); a ds with several runs (an hourly
pipeline) is ambiguous: logs lists them. --follow prints the output of a
running attempt as it is written, until the attempt ends.`,
		Example: `  rewind logs daily_revenue 2025-07-03 fx_join
  rewind logs daily_revenue 2025-07-03 fx_join --try 1
  rewind logs hourly 2026-11-30T10:15:00+05:30 load --follow`,
		Args: cobra.ExactArgs(3),
		RunE: func(cmd *cobra.Command, args []string) error {
			if try < 0 {
				return exitWith(exitUsage, "--try %d: a try number is 1 or more (0, the default, is the latest)", try)
			}
			if _, err := g.workspace(""); err != nil {
				return err
			}
			// What an attempt printed is shown as the web view shows it:
			// with the workspace's sensitive values redacted.
			ws, _ := dsl.Load(g.wsPath(), dsl.LoadOptions{Env: os.Environ()})
			out := ws.NewStreamRedactor(g.stdout)
			ctx := cmd.Context()
			st, err := openExisting(ctx, g)
			if err != nil {
				return err
			}
			defer st.Close()
			pipeline, which, task := args[0], args[1], args[2]
			r, err := findRun(ctx, g, st, pipeline, which)
			if err != nil {
				return err
			}
			ti, err := findTaskInstance(r, task)
			if err != nil {
				return err
			}
			a, err := pickAttempt(r, ti, which, try)
			if err != nil {
				return err
			}
			f, err := openLog(g, a.LogPath)
			if err != nil {
				return exitWith(exitFailed, "log of %s %s %s try %d: %v", pipeline, which, task, a.TryNumber, err)
			}
			defer f.Close()
			if _, err := io.Copy(out, f); err != nil {
				return exitWith(exitFailed, "log of %s %s %s try %d: %v", pipeline, which, task, a.TryNumber, err)
			}
			if follow && a.State == store.AttemptRunning {
				err = followLog(ctx, st, out, f, r, task, a.TryNumber)
			}
			if ferr := out.Flush(); err == nil && ferr != nil {
				err = exitWith(exitFailed, "%v", ferr)
			}
			return err
		},
	}
	c.Flags().IntVar(&try, "try", 0, "try number (default: the latest)")
	c.Flags().BoolVarP(&follow, "follow", "f", false, "print the output of a running attempt as it is written, until it ends")
	return c
}

// findRun finds the run that which names: a ds, a logical date or a run id.
func findRun(ctx context.Context, g *globals, st store.Store, pipeline, which string) (store.Run, error) {
	p := store.ListRunsParams{Pipelines: []string{pipeline}, WithTasks: true, WithAttempts: true}
	var at time.Time
	ds := ""
	switch {
	case timetable.IsDay(which):
		ds = which
	default:
		s := which
		if _, ts, ok := strings.Cut(which, "__"); ok {
			s = ts // a run id: kind__logical date
		}
		t, err := time.Parse(time.RFC3339, s)
		if err != nil {
			return store.Run{}, exitWith(exitUsage, "%q names no run: want a ds (2025-07-01), a logical date (2025-07-01T00:00:00Z) or a run id (scheduled__2025-07-01T00:00:00Z), as 'rewind runs' prints them", which)
		}
		at, p.From, p.To = t, t, t
	}
	runs, err := st.ListRuns(ctx, p)
	if err != nil {
		return store.Run{}, stateError(err, exitState)
	}
	var match []store.Run
	for _, r := range runs {
		if (ds != "" && r.DS == ds) || (ds == "" && r.LogicalDate.Equal(at)) {
			match = append(match, r)
		}
	}
	switch len(match) {
	case 1:
		return match[0], nil
	case 0:
		if err := knownPipeline(ctx, g, st, pipeline); err != nil {
			return store.Run{}, err
		}
		return store.Run{}, exitWith(exitUsage, "no run of %s for %s (rewind runs --pipeline %s lists them)", pipeline, which, pipeline)
	}
	sort.Slice(match, func(i, j int) bool { return match[i].LogicalDate.Before(match[j].LogicalDate) })
	var b strings.Builder
	fmt.Fprintf(&b, "%s has %d runs on %s: name one by its logical date or run id:", pipeline, len(match), which)
	for _, r := range match {
		fmt.Fprintf(&b, "\n  %s  %s", r.LogicalDate.Format(time.RFC3339), store.RunID(r.Kind, r.LogicalDate))
	}
	return store.Run{}, exitWith(exitUsage, "%s", b.String())
}

func findTaskInstance(r store.Run, task string) (store.TaskInstance, error) {
	known := map[string]bool{}
	for _, ti := range r.Tasks {
		if ti.Task == task {
			return ti, nil
		}
		known[ti.Task] = true
	}
	return store.TaskInstance{}, unknownName("task", task, known, "of pipeline "+r.Pipeline)
}

func pickAttempt(r store.Run, ti store.TaskInstance, which string, try int) (store.Attempt, error) {
	if len(ti.Attempts) == 0 {
		return store.Attempt{}, exitWith(exitUsage, "no attempt of %s %s %s yet (the task is %s)", r.Pipeline, which, ti.Task, ti.State)
	}
	if try == 0 {
		return ti.Attempts[len(ti.Attempts)-1], nil
	}
	for _, a := range ti.Attempts {
		if a.TryNumber == try {
			return a, nil
		}
	}
	return store.Attempt{}, exitWith(exitUsage, "no attempt of %s %s %s try %d (the latest is try %d)", r.Pipeline, which, ti.Task, try, ti.Attempts[len(ti.Attempts)-1].TryNumber)
}

// followLog copies what is appended to f until the attempt is no longer
// running (then whatever it wrote last), or ctx ends.
func followLog(ctx context.Context, st store.Store, w io.Writer, f *os.File, r store.Run, task string, try int) error {
	t := time.NewTicker(followEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		if _, err := io.Copy(w, f); err != nil {
			return exitWith(exitFailed, "%v", err)
		}
		runs, err := st.ListRuns(ctx, store.ListRunsParams{Pipelines: []string{r.Pipeline}, From: r.LogicalDate, To: r.LogicalDate, WithTasks: true, WithAttempts: true})
		if err != nil {
			return stateError(err, exitState)
		}
		running := false
		for _, rr := range runs {
			for _, ti := range rr.Tasks {
				if ti.Task != task {
					continue
				}
				for _, a := range ti.Attempts {
					if a.TryNumber == try && a.State == store.AttemptRunning {
						running = true
					}
				}
			}
		}
		if !running {
			_, err := io.Copy(w, f)
			return err
		}
	}
}

// openLog opens an attempt's log for reading: never through a symbolic
// link, and, for a SQLite state, only inside the logs directory beside it
// (a log path in the state points nowhere else).
func openLog(g *globals, path string) (*os.File, error) {
	if dsn, _, err := g.stateDSN(); err == nil {
		if _, ok := store.SQLitePath(dsn); ok {
			logs, err := filepath.Abs(filepath.Join(homeDir(g), "logs"))
			if err != nil {
				return nil, err
			}
			if rel, err := filepath.Rel(logs, filepath.Clean(path)); err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
				return nil, fmt.Errorf("%s is outside the state's log directory %s", path, logs)
			}
		}
	}
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if errors.Is(err, syscall.ELOOP) {
		return nil, fmt.Errorf("%s is a symbolic link: not followed", path)
	}
	return f, err
}
