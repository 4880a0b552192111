package main

import (
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/rewind-dev/rewind/ops"
)

func init() { register(newAuditCmd) }

func newAuditCmd(g *globals) *cobra.Command {
	var (
		pipeline string
		asJSON   bool
		limit    int
	)
	c := &cobra.Command{
		Use:   "audit [--pipeline P] [--json]",
		Short: "Show who did what to the state, from the web view or the command line",
		Long: `Audit lists the operator commands recorded in the state, newest first: the
web view's actions (who is the sign-in's label, or "token" for a client
that sent the token; from is its address) and the commands clear, mark,
pause, unpause and the backfill commands given on the command line (who is
"cli", from is user@host). Each says when, what (the action, its target and
its arguments) and how it ended: ok, or the error.

--json prints one JSON array of objects with the fields at (RFC 3339, UTC),
who, from, action, target, args (an object) and result.`,
		Example: `  rewind audit --path examples/daily_revenue
  rewind audit --pipeline daily_revenue --json | jq '.[] | select(.result != "ok")'`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if _, err := g.workspace(""); err != nil {
				return err
			}
			if err := positive(cmd, "limit", limit, "a number of entries"); err != nil {
				return err
			}
			ctx := cmd.Context()
			st, err := openExisting(ctx, g)
			if err != nil {
				return err
			}
			defer st.Close()
			if pipeline != "" {
				if err := knownPipeline(ctx, g, st, pipeline); err != nil {
					return err
				}
			}
			list, err := ops.Audit(ctx, st, pipeline, "", limit)
			if err != nil {
				return stateError(err, exitState)
			}
			if asJSON {
				return printJSON(g, list)
			}
			tw := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "AT\tWHO\tFROM\tACTION\tTARGET\tARGS\tRESULT")
			for _, e := range list {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", e.At, e.Who, e.From, e.Action, e.Target, e.Args, e.Result)
			}
			return tw.Flush()
		},
	}
	c.Flags().StringVar(&pipeline, "pipeline", "", "only the commands that concern this pipeline (its backfills included)")
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	c.Flags().IntVar(&limit, "limit", 1000, "at most this many entries, newest first")
	return c
}
