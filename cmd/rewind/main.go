// Command rewind is the CLI of the rewind pipeline scheduler: flags, output
// formatting and exit codes. Everything else lives in the packages it calls.
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/rewind-dev/rewind/store"
)

// Exit codes (contract).
const (
	exitOK        = 0 // every requested run succeeded
	exitFailed    = 1 // some run failed; validate found errors
	exitUsage     = 2 // usage or configuration error
	exitLeaseBusy = 3 // another rewind run holds the state's lease
	exitState     = 4 // the state could not be read or written
	exitInterrupt = 130
)

// exitError carries an exit code out of a command; its message, if any, has
// been printed already unless msg is set.
type exitError struct {
	code int
	msg  string
}

func (e *exitError) Error() string { return e.msg }

func exitWith(code int, format string, args ...any) error {
	return &exitError{code: code, msg: fmt.Sprintf(format, args...)}
}

// globals are the flags every command shares.
type globals struct {
	state  string
	stdout io.Writer
	stderr io.Writer
}

var commands []func(*globals) *cobra.Command

// register adds a subcommand constructor; each command file calls it from init.
func register(f func(*globals) *cobra.Command) { commands = append(commands, f) }

func newRoot(g *globals) *cobra.Command {
	root := &cobra.Command{
		Use:   "rewind",
		Short: "rewind schedules pipelines and makes catchup and backfill safe",
		Long: `rewind runs pipelines declared in HCL on a cron schedule, one run per
execution date, under concurrency limits. It materializes history with
'rewind run --catchup' and turns restatements into backfill plans that can be
read, applied, validated and rolled back.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetOut(g.stdout)
	root.SetErr(g.stderr)
	root.PersistentFlags().StringVar(&g.state, "state", "", "state DSN: sqlite:PATH or postgres://... (default $REWIND_STATE or sqlite:.rewind/state.db)")
	for _, f := range commands {
		root.AddCommand(f(g))
	}
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return &exitError{code: exitUsage, msg: err.Error() + "\nRun '" + c.CommandPath() + " --help' for usage."}
	})
	return root
}

// rewindMain runs the CLI with args and returns the process exit code.
func rewindMain(args []string, stdout, stderr io.Writer) int {
	g := &globals{stdout: stdout, stderr: stderr}
	root := newRoot(g)
	root.SetArgs(terraformStyleVar(args))
	err := root.Execute()
	if err == nil {
		return exitOK
	}
	// g.stderr, not stderr: once a workspace with sensitive values is
	// loaded, it scrubs them (redactOutput).
	var ee *exitError
	if errors.As(err, &ee) {
		if ee.msg != "" {
			fmt.Fprintln(g.stderr, "rewind: "+ee.msg)
		}
		return ee.code
	}
	fmt.Fprintln(g.stderr, "rewind: "+err.Error())
	if store.IsUnavailable(err) {
		return exitState
	}
	// Cobra's own errors: unknown command, wrong number of arguments.
	return exitUsage
}

// terraformStyleVar accepts Terraform's single-dash -var name=value beside
// --var name=value.
func terraformStyleVar(args []string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		switch {
		case a == "--":
			copy(out[i:], args[i:])
			return out
		case a == "-var" || strings.HasPrefix(a, "-var="):
			a = "-" + a
		}
		out[i] = a
	}
	return out
}

func main() {
	os.Exit(rewindMain(os.Args[1:], os.Stdout, os.Stderr))
}
