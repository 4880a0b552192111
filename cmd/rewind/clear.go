package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/rewind-dev/rewind/dsl"
	"github.com/rewind-dev/rewind/ops"
	"github.com/rewind-dev/rewind/store"
)

func init() { register(newClearCmd) }

func itoa(i int) string { return strconv.Itoa(i) }

// selectionFlags are the flags that select task instances: clear, mark.
type selectionFlags struct {
	start, end string
	task       string
	downstream bool
}

func (f *selectionFlags) add(c *cobra.Command, verb string) {
	c.Flags().StringVar(&f.start, "start", "", "first ds (YYYY-MM-DD) or logical date (RFC 3339)")
	c.Flags().StringVar(&f.end, "end", "", "last ds or logical date, inclusive")
	c.Flags().StringVar(&f.task, "task", "", verb+" only this task")
	c.Flags().BoolVar(&f.downstream, "downstream", false, "with --task, also the tasks that depend on it")
}

// open checks the flags of verb (clear, mark) before anything is opened,
// then opens the existing state and checks that it knows the pipeline.
func (f *selectionFlags) open(ctx context.Context, g *globals, verb, pipeline string) (store.Store, error) {
	if f.start == "" || f.end == "" {
		return nil, exitWith(exitUsage, "%s needs --start and --end", verb)
	}
	if _, err := parseRange(f.start, f.end); err != nil {
		return nil, err
	}
	if f.downstream && f.task == "" {
		return nil, exitWith(exitUsage, "--downstream goes with --task NAME")
	}
	if _, err := g.workspace(""); err != nil {
		return nil, err
	}
	st, err := openExisting(ctx, g)
	if err != nil {
		return nil, err
	}
	if err := knownPipeline(ctx, g, st, pipeline); err != nil {
		st.Close()
		return nil, err
	}
	return st, nil
}

func (f *selectionFlags) selection(pipeline string) ops.Selection {
	return ops.Selection{Pipeline: pipeline, Start: f.start, End: f.end, Task: f.task, Downstream: f.downstream}
}

// args are the flags as the audit trail records them.
func (f *selectionFlags) args() map[string]any {
	a := map[string]any{"start": f.start, "end": f.end}
	if f.task != "" {
		a["task"] = f.task
	}
	if f.downstream {
		a["downstream"] = true
	}
	return a
}

func newClearCmd(g *globals) *cobra.Command {
	var (
		f          selectionFlags
		onlyFailed bool
	)
	c := &cobra.Command{
		Use:   "clear PIPELINE --start DATE --end DATE",
		Short: "Clear task instances so that the next run runs them again",
		Long: `Clear puts the task instances of the runs in [--start, --end] back to
scheduled, like Airflow's 'tasks clear': the next 'rewind run' runs them
again, with a fresh retry budget. A date (YYYY-MM-DD) selects whole days by
ds, inclusive, in the pipeline's timezone; a timestamp (RFC 3339) selects
exact logical dates. --only-failed clears only failed and upstream_failed
instances; --task only the named task (with --downstream, the tasks that
depend on it too). Running attempts are never cleared.
The runs of a backfill that is not running (stopped, failed, cancelled) are
handed back to their pipeline. The clear is recorded in 'rewind audit'.`,
		Example: `  rewind clear daily_revenue --start 2025-07-01 --end 2025-09-30 --only-failed
  rewind clear daily_revenue --start 2025-07-03 --end 2025-07-03 --task fx_join
  rewind clear daily_revenue --start 2025-07-03 --end 2025-07-03 --task extract_fx_rates --downstream
  rewind clear hourly --start 2026-11-30T10:00:00Z --end 2026-11-30T10:00:00Z`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			st, err := f.open(ctx, g, "clear", args[0])
			if err != nil {
				return err
			}
			defer st.Close()
			n, err := ops.Clear(ctx, st, looseWorkspace(g), ops.ClearParams{Selection: f.selection(args[0]), OnlyFailed: onlyFailed, Now: time.Now()})
			a := f.args()
			if onlyFailed {
				a["only_failed"] = true
			}
			audit(ctx, g, st, ops.Entry{Action: "clear", Target: args[0], Pipeline: args[0], Args: a, Err: err})
			if err != nil {
				return opsError(err)
			}
			fmt.Fprintf(g.stdout, "cleared %d task instances of %s from %s to %s\n", n, args[0], f.start, f.end)
			return nil
		},
	}
	f.add(c, "clear")
	c.Flags().BoolVar(&onlyFailed, "only-failed", false, "clear only failed and upstream_failed task instances")
	return c
}

// looseWorkspace is the workspace's definitions when its files load
// without error, else nil: the commands that act on the state alone
// (clear, mark) take names from the state too.
func looseWorkspace(g *globals) *dsl.Workspace {
	ws, diags := dsl.Load(g.wsPath(), dsl.LoadOptions{Env: os.Environ()})
	if diags.HasErrors() {
		return nil
	}
	return ws
}

// opsError is the exit code of an operator command's error: 2 for what
// the command or the state refused, else as stateError says.
func opsError(err error) error {
	if ops.KindOf(err) != 0 {
		return exitWith(exitUsage, "%v", err)
	}
	return stateError(err, exitState)
}

// audit records an operator command given on the command line; a state
// that cannot record it is said on stderr, and the command's outcome
// stands.
func audit(ctx context.Context, g *globals, st store.Store, e ops.Entry) {
	if err := ops.Record(ctx, st, ops.CLI(), e); err != nil {
		fmt.Fprintf(g.stderr, "rewind: not recorded in the audit trail: %v\n", err)
	}
}
