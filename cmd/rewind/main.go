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
	state string
	// path is --path / -C: the workspace of commands without a PATH
	// argument; ws is the workspace a command resolved (globals.workspace).
	path, ws string
	stdout   io.Writer
	stderr   io.Writer
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
	root.PersistentFlags().StringVar(&g.state, "state", "", "state DSN: sqlite:PATH or postgres://... (default $REWIND_STATE, else WORKSPACE/.rewind/state.db)")
	root.PersistentFlags().StringVarP(&g.path, "path", "C", "", "the workspace directory (default: PATH where the command takes one, else .)")
	root.Version = versionLine()
	root.SetVersionTemplate("{{.Version}}\n")
	for _, f := range commands {
		root.AddCommand(f(g))
	}
	addCompletions(root, g)
	// cobra's 'completion bash|zsh|fish|powershell', added now rather than
	// when it runs, so that it is a group like the others.
	root.InitDefaultCompletionCmd()
	// Groups (backfill, lake, watermark): an unknown subcommand is a usage
	// error with suggestions, not the group's help and exit 0.
	for _, c := range root.Commands() {
		if c.HasSubCommands() && c.Run == nil && c.RunE == nil {
			c.Args = cobra.ArbitraryArgs
			c.RunE = groupRunE
		}
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
			fmt.Fprintln(g.stderr, "rewind: "+collapsePrefixes(ee.msg))
		}
		return ee.code
	}
	msg := collapsePrefixes(err.Error())
	if strings.HasPrefix(msg, "unknown command ") && !strings.Contains(msg, "Did you mean") {
		msg += "\nRun 'rewind --help' for the commands."
	}
	fmt.Fprintln(g.stderr, "rewind: "+msg)
	if store.IsUnavailable(err) {
		return exitState
	}
	// Cobra's own errors: unknown command, wrong number of arguments.
	return exitUsage
}

// groupRunE is the RunE of a command that only groups subcommands: without
// arguments it prints its help; an unknown subcommand is a usage error
// that suggests the closest ones.
func groupRunE(c *cobra.Command, args []string) error {
	if len(args) == 0 {
		return c.Help()
	}
	msg := fmt.Sprintf("unknown command %q for %q", args[0], c.CommandPath())
	if c.SuggestionsMinimumDistance <= 0 {
		c.SuggestionsMinimumDistance = 2
	}
	if s := c.SuggestionsFor(args[0]); len(s) > 0 {
		msg += "\n\nDid you mean this?\n\t" + strings.Join(s, "\n\t")
	}
	var names []string
	for _, sub := range c.Commands() {
		if sub.IsAvailableCommand() {
			names = append(names, sub.Name())
		}
	}
	msg += "\n\n" + c.CommandPath() + " commands: " + strings.Join(names, ", ")
	return exitWith(exitUsage, "%s", msg)
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

// collapsePrefixes drops a "prefix: " that repeats the one before it, as
// errors wrapped twice by the same context say it: "output t: output t: no
// file matches" is "output t: no file matches".
func collapsePrefixes(msg string) string {
	lines := strings.Split(msg, "\n")
	for i, line := range lines {
		parts := strings.Split(line, ": ")
		out := parts[:1]
		for _, p := range parts[1:] {
			if p == out[len(out)-1] && p != "" {
				continue
			}
			out = append(out, p)
		}
		lines[i] = strings.Join(out, ": ")
	}
	return strings.Join(lines, "\n")
}
