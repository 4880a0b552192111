package main

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/rewind-dev/rewind/ops"
	"github.com/rewind-dev/rewind/store"
)

func init() {
	register(func(g *globals) *cobra.Command { return newPauseCmd(g, true) })
	register(func(g *globals) *cobra.Command { return newPauseCmd(g, false) })
}

func newPauseCmd(g *globals, paused bool) *cobra.Command {
	use, short := "pause", "Pause a pipeline: 'rewind run' creates and runs none of its runs"
	if !paused {
		use, short = "unpause", "Unpause a pipeline: the next 'rewind run' catches up"
	}
	return &cobra.Command{
		Use:     use + " PIPELINE",
		Short:   short,
		Long:    short + ". PIPELINE is a pipeline of the workspace (--path, default \".\") or of its state;\nan unknown name is refused (exit 2). It is recorded in 'rewind audit'.",
		Example: "  rewind " + use + " daily_revenue --path examples/daily_revenue",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			if _, err := g.workspace(""); err != nil {
				return err
			}
			// The name must be a pipeline of the workspace or of its state,
			// checked before the state is created or changed.
			exists, err := g.hasState()
			if err != nil {
				return err
			}
			var st store.Store
			if exists {
				if st, err = openExisting(ctx, g); err != nil {
					return err
				}
				defer st.Close()
			}
			if err := knownPipeline(ctx, g, st, args[0]); err != nil {
				return err
			}
			if st == nil {
				if st, err = openStore(ctx, g); err != nil {
					return err
				}
				defer st.Close()
			}
			err = ops.SetPaused(ctx, st, looseWorkspace(g), args[0], paused, time.Now())
			audit(ctx, g, st, ops.Entry{Action: use, Target: args[0], Pipeline: args[0], Err: err})
			if err != nil {
				return opsError(err)
			}
			fmt.Fprintf(g.stdout, "%s: %sd\n", args[0], use)
			return nil
		},
	}
}
