package main

import (
	"errors"
	"io"
	"os"

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
			f, err := os.Open(a.LogPath)
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
