package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/rewind-dev/rewind/dsl"
)

func init() { register(newValidateCmd) }

func newValidateCmd(g *globals) *cobra.Command {
	var (
		vars   []string
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "validate [PATH]",
		Short: "Check the pipeline files of a workspace",
		Long: `validate loads every *.hcl file of PATH (default: the current directory),
or the single file PATH, and checks pools, pipelines, tasks, skew rules,
variables and locals. Every problem is reported with its file, line, column
and a source snippet, and validate exits 1. On success it prints one line with
the number of pipelines, tasks and pools and exits 0.

--json prints one JSON object instead, on stdout, with the same exit code:
valid, the counts (pipelines, tasks, pools; 0 when not valid) and every
diagnostic with its file, line, column, end_line, end_column, severity
(error or warning), summary and detail.`,
		Example: `  rewind validate
  rewind validate examples/daily_revenue
  rewind validate --var env=prod pipelines/
  rewind validate --json | jq -r '.diagnostics[] | "\(.file):\(.line): \(.summary)"'`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			path, err := g.workspace(pathArg(args))
			if err != nil {
				return err
			}
			opts, err := loadOptions(vars)
			if err != nil {
				return err
			}
			ws, diags := dsl.Load(path, opts)
			redactOutput(g, ws)
			tasks := 0
			for _, p := range ws.Pipelines {
				tasks += len(p.Tasks)
			}
			if asJSON {
				doc := validateJSON{Valid: !diags.HasErrors()}
				if doc.Valid {
					doc.Pipelines, doc.Tasks, doc.Pools = len(ws.Pipelines), tasks, len(ws.Pools)
				}
				doc.Diagnostics, doc.NotShown = dsl.Diagnostics(diags)
				if err := printJSON(g, doc); err != nil {
					return err
				}
			} else if len(diags) > 0 {
				writeDiagnostics(g, ws.Files, diags)
			}
			if diags.HasErrors() {
				return &exitError{code: exitFailed}
			}
			if !asJSON {
				fmt.Fprintf(g.stdout, "valid: %s, %s, %s\n",
					plural(len(ws.Pipelines), "pipeline"), plural(tasks, "task"), plural(len(ws.Pools), "pool"))
			}
			return nil
		},
	}
	cmd.Flags().StringArrayVar(&vars, "var", nil, "set an input variable: name=value (repeatable)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the outcome and every diagnostic as JSON")
	return cmd
}

// validateJSON is what validate --json prints.
type validateJSON struct {
	Valid       bool             `json:"valid"`
	Pipelines   int              `json:"pipelines"`
	Tasks       int              `json:"tasks"`
	Pools       int              `json:"pools"`
	Diagnostics []dsl.Diagnostic `json:"diagnostics"`
	// NotShown counts the diagnostics past the first dsl.MaxDiagnostics.
	NotShown int `json:"diagnostics_not_shown"`
}

func plural(n int, word string) string {
	if n == 1 {
		return fmt.Sprintf("1 %s", word)
	}
	return fmt.Sprintf("%d %ss", n, word)
}
