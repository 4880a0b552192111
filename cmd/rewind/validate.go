package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/rewind-dev/rewind/dsl"
)

func init() { register(newValidateCmd) }

func newValidateCmd(g *globals) *cobra.Command {
	var vars []string
	cmd := &cobra.Command{
		Use:   "validate [PATH]",
		Short: "Check the pipeline files of a workspace",
		Long: `validate loads every *.hcl file of PATH (default: the current directory),
or the single file PATH, and checks pools, pipelines, tasks, skew rules,
variables and locals. Every problem is reported with its file, line, column
and a source snippet, and validate exits 1. On success it prints one line with
the number of pipelines, tasks and pools and exits 0.`,
		Example: `  rewind validate
  rewind validate examples/daily_revenue
  rewind validate --var env=prod pipelines/`,
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
			if len(diags) > 0 {
				writeDiagnostics(g, ws.Files, diags)
			}
			if diags.HasErrors() {
				return &exitError{code: exitFailed}
			}
			tasks := 0
			for _, p := range ws.Pipelines {
				tasks += len(p.Tasks)
			}
			fmt.Fprintf(g.stdout, "valid: %s, %s, %s\n",
				plural(len(ws.Pipelines), "pipeline"), plural(tasks, "task"), plural(len(ws.Pools), "pool"))
			return nil
		},
	}
	cmd.Flags().StringArrayVar(&vars, "var", nil, "set an input variable: name=value (repeatable)")
	return cmd
}

func plural(n int, word string) string {
	if n == 1 {
		return fmt.Sprintf("1 %s", word)
	}
	return fmt.Sprintf("%d %ss", n, word)
}
