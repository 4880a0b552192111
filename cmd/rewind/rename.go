package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/rewind-dev/rewind/rename"
	"github.com/rewind-dev/rewind/scheduler"
)

func init() { register(newRenameCmd) }

func newRenameCmd(g *globals) *cobra.Command {
	var (
		ws    workspaceFlags
		force bool
		wait  bool
	)
	c := &cobra.Command{
		Use:   "rename OLD NEW",
		Short: "Carry the history of a pipeline renamed in its file over to its new name",
		Long: `Rename moves everything the state keeps under pipeline OLD to NEW, in one
transaction: its runs with their task instances and attempts, its
watermark, probe results, pause flag, notifications, deadline checks and
backfills (their ids do not change), and the log paths of its attempts; then it moves OLD's log and
run directories (.rewind/logs/OLD, .rewind/runs/OLD) to NEW's. The next
'rewind run' of NEW runs none of the finished work again.

Rename the pipeline in its file first: NEW must be a pipeline of the
workspace and OLD no longer one (--force renames all the same). 'rewind
run' and 'rewind scheduler' hold a pipeline back, paused, when it is new
to the state and has the tasks of a pipeline the files no longer declare,
and say 'renamed from OLD?' with this command.

It refuses, changing nothing, when NEW has runs in the state already, when
OLD has none, when a backfill of either is running, when NEW's directories
hold files, and (exit 3) while another rewind holds the state's lease
(--wait waits for it) or attempts of OLD are still running.

A rename stopped after its transaction (killed, the disk full) leaves
files under OLD: run it again, it moves them. With the state on
PostgreSQL and logs on several machines under the same path, run it on
each of them: the first renames the state, the others move their files.

Exit codes: 0 renamed, 2 refused (or an unknown pipeline), 3 another rewind
holds the state, 4 the state or the files could not be read or written.`,
		Example: `  rewind rename daily_sales daily_revenue
  rewind rename daily_sales daily_revenue --path /etc/rewind/pipelines`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			path, err := g.workspace("")
			if err != nil {
				return err
			}
			w, err := ws.load(g, path)
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			st, err := openExisting(ctx, g)
			if err != nil {
				return err
			}
			defer st.Close()
			res, err := rename.Pipeline(ctx, rename.Options{Store: st, Workspace: w, Home: homeDir(g), From: args[0], To: args[1], Force: force, Wait: wait})
			var refused *rename.Refusal
			if errors.As(err, &refused) {
				code := exitUsage
				if refused.Busy {
					code = exitLeaseBusy
				}
				return exitWith(code, "rename %s to %s refused: %s", args[0], args[1], refused.Msg)
			}
			if err != nil {
				return stateError(err, exitState)
			}
			printRename(g, args[0], args[1], res)
			return nil
		},
	}
	ws.add(c)
	c.Flags().BoolVar(&force, "force", false, "rename although the workspace does not declare NEW, or still declares OLD")
	c.Flags().BoolVar(&wait, "wait", false, "wait for another rewind on the same state to finish instead of exiting with code 3")
	return c
}

func printRename(g *globals, from, to string, res rename.Result) {
	if res.Finished {
		fmt.Fprintf(g.stdout, "the history of %s is under %s in the state already: moved the files an earlier rename left\n", from, to)
	} else {
		r := res.RenameResult
		parts := []string{plural(r.Runs, "run"), plural(r.TaskInstances, "task instance"), plural(r.Attempts, "attempt")}
		if r.Watermark {
			parts = append(parts, "the watermark")
		}
		if r.Probes > 0 {
			parts = append(parts, plural(r.Probes, "probe result"))
		}
		if r.Backfills > 0 {
			parts = append(parts, plural(r.Backfills, "backfill"))
		}
		fmt.Fprintf(g.stdout, "renamed %s to %s: %s\n", from, to, strings.Join(parts, ", "))
	}
	for _, m := range res.Moved {
		fmt.Fprintf(g.stdout, "moved %s to %s\n", shownPath(m[0]), shownPath(m[1]))
	}
	if n := len(res.Kept); n > 0 {
		fmt.Fprintf(g.stderr, "warning: %s left under %s: %s has a file of the same name\n", plural(n, "file"), from, to)
		for i, p := range res.Kept {
			if i == 5 {
				fmt.Fprintf(g.stderr, "  ... and %d more\n", n-i)
				break
			}
			fmt.Fprintln(g.stderr, "  "+shownPath(p))
		}
	}
}

// shownPath is path relative to the working directory when it is below it.
func shownPath(path string) string {
	wd, err := os.Getwd()
	if err != nil {
		return path
	}
	rel, err := filepath.Rel(wd, path)
	if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
		return path
	}
	return rel
}

// renamedHint is what run says of a pipeline held back because it looks
// renamed.
func renamedHint(r scheduler.Renamed) string {
	state := "is paused and has no run"
	if r.Held {
		state = "is new to the state, so paused"
	}
	return fmt.Sprintf("pipeline %s %s: renamed from %s? '%s' carries the history of %s over; 'rewind unpause %s' runs %s from its start_date instead",
		r.Pipeline, state, r.From, r.RenameCommand(), r.From, r.Pipeline, r.Pipeline)
}
