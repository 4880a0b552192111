package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/rewind-dev/rewind/store"
)

func init() { register(newLogsCmd) }

func newLogsCmd(g *globals) *cobra.Command {
	var try int
	c := &cobra.Command{
		Use:   "logs PIPELINE DS TASK",
		Short: "Print the log of a task's attempt",
		Long: `Logs prints the output (stdout and stderr) of one attempt of a task: the
latest attempt, or try number N with --try N.`,
		Example: `  rewind logs daily_revenue 2025-07-03 fx_join
  rewind logs daily_revenue 2025-07-03 fx_join --try 1`,
		Args: cobra.ExactArgs(3),
		RunE: func(cmd *cobra.Command, args []string) error {
			if try < 0 {
				return exitWith(exitUsage, "--try %d: a try number is 1 or more (0, the default, is the latest)", try)
			}
			st, err := openStore(cmd.Context(), g)
			if err != nil {
				return err
			}
			defer st.Close()
			a, err := st.FindAttempt(cmd.Context(), store.FindAttemptParams{Pipeline: args[0], DS: args[1], Task: args[2], TryNumber: try})
			if errors.Is(err, store.ErrNotFound) {
				return exitWith(exitFailed, "no attempt of %s %s %s%s", args[0], args[1], args[2], tryText(try))
			}
			if err != nil {
				return exitWith(exitFailed, "%v", err)
			}
			f, err := openLog(g, a.LogPath)
			if err != nil {
				return exitWith(exitFailed, "log of try %d: %v", a.TryNumber, err)
			}
			defer f.Close()
			_, err = io.Copy(g.stdout, f)
			return err
		},
	}
	c.Flags().IntVar(&try, "try", 0, "try number (default: the latest)")
	return c
}

func tryText(try int) string {
	if try == 0 {
		return ""
	}
	return " try " + itoa(try)
}

// openLog opens an attempt's log for reading: never through a symbolic
// link, and, for a SQLite state, only inside the logs directory beside it
// (a log path in the state points nowhere else).
func openLog(g *globals, path string) (*os.File, error) {
	if _, ok := store.SQLitePath(store.DSNFromEnv(g.state)); ok {
		logs, err := filepath.Abs(filepath.Join(homeDir(g), "logs"))
		if err != nil {
			return nil, err
		}
		if rel, err := filepath.Rel(logs, filepath.Clean(path)); err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
			return nil, fmt.Errorf("%s is outside the state's log directory %s", path, logs)
		}
	}
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if errors.Is(err, syscall.ELOOP) {
		return nil, fmt.Errorf("%s is a symbolic link: not followed", path)
	}
	return f, err
}
