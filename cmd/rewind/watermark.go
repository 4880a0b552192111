package main

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/rewind-dev/rewind/dsl"
	"github.com/rewind-dev/rewind/store"
	"github.com/rewind-dev/rewind/web"
)

func init() { register(newWatermarkCmd) }

func newWatermarkCmd(g *globals) *cobra.Command {
	c := &cobra.Command{
		Use:   "watermark",
		Short: "Show or set a pipeline's watermark: the latest logical date up to which every run succeeded",
	}
	c.AddCommand(newWatermarkShowCmd(g), newWatermarkSetCmd(g))
	return c
}

func newWatermarkShowCmd(g *globals) *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "show PIPELINE",
		Short: "Print the pipeline's watermark",
		Long: `Show prints the pipeline's watermark: the latest logical date up to which
every run succeeded. --json prints one JSON object: pipeline, watermark
(RFC 3339 with the pipeline's offset) and updated_at (UTC), both "" when
the pipeline has none.`,
		Example: "  rewind watermark show daily_revenue --json",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if _, err := g.workspace(""); err != nil {
				return err
			}
			st, err := openExisting(cmd.Context(), g)
			if err != nil {
				return err
			}
			defer st.Close()
			if err := knownPipeline(cmd.Context(), g, st, args[0]); err != nil {
				return err
			}
			wm, err := st.GetWatermark(cmd.Context(), args[0])
			if errors.Is(err, store.ErrNotFound) {
				wm, err = store.Watermark{}, nil
			}
			if err != nil {
				return stateError(err, exitState)
			}
			switch {
			case asJSON:
				return printJSON(g, web.Watermark(args[0], wm))
			case wm.LogicalDate.IsZero():
				fmt.Fprintf(g.stdout, "%s: no watermark\n", args[0])
			default:
				fmt.Fprintf(g.stdout, "%s: %s\n", args[0], wm.LogicalDate.Format(time.RFC3339))
			}
			return nil
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return c
}

func newWatermarkSetCmd(g *globals) *cobra.Command {
	var to string
	set := &cobra.Command{
		Use:     "set PIPELINE [--to D]",
		Short:   "Move the watermark (without --to: remove it)",
		Example: "  rewind watermark set daily_revenue --to 2025-06-30",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if _, err := g.workspace(""); err != nil {
				return err
			}
			ctx := cmd.Context()
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
			loc := pipelineZone(g, args[0])
			var date time.Time
			if to != "" {
				if date, err = parseDate("--to", to, loc); err != nil {
					return err
				}
			}
			if st == nil {
				if st, err = openStore(ctx, g); err != nil {
					return err
				}
				defer st.Close()
			}
			if err := st.SetWatermark(cmd.Context(), store.SetWatermarkParams{Pipeline: args[0], LogicalDate: date, Now: time.Now()}); err != nil {
				return stateError(err, exitState)
			}
			if date.IsZero() {
				fmt.Fprintf(g.stdout, "%s: watermark removed\n", args[0])
			} else {
				fmt.Fprintf(g.stdout, "%s: watermark %s\n", args[0], date.Format(time.RFC3339))
			}
			return nil
		},
	}
	set.Flags().StringVar(&to, "to", "", "the new watermark (YYYY-MM-DD, midnight in the pipeline's timezone, or RFC 3339)")
	return set
}

// pipelineZone is the timezone of the workspace's pipeline name, in which
// a date is midnight: UTC when the workspace does not declare it.
func pipelineZone(g *globals, name string) *time.Location {
	if ws, diags := dsl.Load(g.wsPath(), dsl.LoadOptions{Env: os.Environ()}); !diags.HasErrors() {
		if p := ws.Pipeline(name); p != nil {
			return p.Timezone
		}
	}
	return time.UTC
}
