package main

import (
	"context"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/rewind-dev/rewind/dsl"
)

// Shell completion (rewind completion bash|zsh|fish, which cobra provides):
// the names a command takes are completed from the workspace files
// (pipelines, the tasks of the pipeline named before, tables of outputs)
// and from the state (backfill ids). Completing reads; it never creates a
// state and prints nothing but the candidates.

// completion says what a positional argument or a flag names.
type completion int

const (
	completeNothing  completion = iota // no candidate, no file
	completeFile                       // the shell's file names (a PATH)
	completePipeline                   // a pipeline of the workspace
	completeTask                       // a task of the pipeline in args[0]
	completeBackfill                   // a backfill id of the state
	completeTable                      // the table of an output of the workspace
)

// completions are, by command path, what each positional argument names;
// pathArg is the index of the command's PATH argument (-1: none), the
// workspace when it is given.
var completions = []struct {
	path    string
	args    []completion
	pathArg int
	flags   map[string]completion
	fixed   map[string][]string
}{
	{path: "run", args: []completion{completeFile}, pathArg: 0, flags: map[string]completion{"pipeline": completePipeline}},
	{path: "runs", pathArg: -1, flags: map[string]completion{"pipeline": completePipeline}, fixed: map[string][]string{"status": runStates}},
	{path: "dates", args: []completion{completePipeline, completeFile}, pathArg: 1},
	{path: "graph", args: []completion{completePipeline, completeFile}, pathArg: 1, fixed: map[string][]string{"format": {"dot", "mermaid"}}},
	{path: "clear", args: []completion{completePipeline}, pathArg: -1, flags: map[string]completion{"task": completeTask}},
	{path: "logs", args: []completion{completePipeline, completeNothing, completeTask}, pathArg: -1},
	{path: "mark success", args: []completion{completePipeline}, pathArg: -1, flags: map[string]completion{"task": completeTask}},
	{path: "mark failed", args: []completion{completePipeline}, pathArg: -1, flags: map[string]completion{"task": completeTask}},
	{path: "audit", pathArg: -1, flags: map[string]completion{"pipeline": completePipeline}},
	{path: "pause", args: []completion{completePipeline}, pathArg: -1},
	{path: "unpause", args: []completion{completePipeline}, pathArg: -1},
	{path: "watermark show", args: []completion{completePipeline}, pathArg: -1},
	{path: "watermark set", args: []completion{completePipeline}, pathArg: -1},
	{path: "backfill plan", args: []completion{completePipeline}, pathArg: -1,
		flags: map[string]completion{"task": completeTask}, fixed: map[string][]string{"reprocess": reprocessModes}},
	{path: "backfill apply", args: []completion{completePipeline}, pathArg: -1,
		flags: map[string]completion{"task": completeTask, "resume": completeBackfill}, fixed: map[string][]string{"reprocess": reprocessModes}},
	{path: "backfill status", args: []completion{completeBackfill}, pathArg: -1},
	{path: "backfill cancel", args: []completion{completeBackfill}, pathArg: -1},
	{path: "backfill pause", args: []completion{completeBackfill}, pathArg: -1},
	{path: "backfill unpause", args: []completion{completeBackfill}, pathArg: -1},
	{path: "backfill rollback", args: []completion{completeBackfill}, pathArg: -1},
	{path: "lake show", args: []completion{completeTable}, pathArg: -1},
	{path: "lake diff", args: []completion{completeTable}, pathArg: -1},
}

// reprocessModes are the values of --reprocess.
var reprocessModes = []string{"none", "failed", "completed"}

// addCompletions registers the completions of the commands under root.
func addCompletions(root *cobra.Command, g *globals) {
	for _, c := range completions {
		cmd, _, err := root.Find(strings.Fields(c.path))
		if err != nil || cmd.CommandPath() != "rewind "+c.path {
			panic("completion of an unknown command: rewind " + c.path)
		}
		if c.args != nil {
			args, pathArg := c.args, c.pathArg
			cmd.ValidArgsFunction = func(cmd *cobra.Command, given []string, prefix string) ([]cobra.Completion, cobra.ShellCompDirective) {
				if len(given) >= len(args) {
					return nil, cobra.ShellCompDirectiveNoFileComp
				}
				return complete(cmd.Context(), g, args[len(given)], given, pathArg, prefix)
			}
		}
		for flag, what := range c.flags {
			pathArg := c.pathArg
			mustRegister(cmd, flag, func(cmd *cobra.Command, given []string, prefix string) ([]cobra.Completion, cobra.ShellCompDirective) {
				return complete(cmd.Context(), g, what, given, pathArg, prefix)
			})
		}
		for flag, values := range c.fixed {
			mustRegister(cmd, flag, cobra.FixedCompletions(values, cobra.ShellCompDirectiveNoFileComp))
		}
	}
}

func mustRegister(cmd *cobra.Command, flag string, f cobra.CompletionFunc) {
	if err := cmd.RegisterFlagCompletionFunc(flag, f); err != nil {
		panic(err)
	}
}

// complete lists the candidates for what, starting with prefix; given are
// the positional arguments before it (args[0] is the pipeline of a task),
// given[pathArg] the workspace when there is one.
func complete(ctx context.Context, g *globals, what completion, given []string, pathArg int, prefix string) ([]cobra.Completion, cobra.ShellCompDirective) {
	if what == completeFile {
		return nil, cobra.ShellCompDirectiveDefault
	}
	if ctx == nil {
		ctx = context.Background()
	}
	if pathArg >= 0 && pathArg < len(given) {
		g.ws = given[pathArg]
	}
	var out []cobra.Completion
	add := func(name, desc string) {
		switch {
		case !strings.HasPrefix(name, prefix):
		case desc == "":
			out = append(out, name)
		default:
			out = append(out, cobra.CompletionWithDesc(name, desc))
		}
	}
	switch what {
	case completePipeline, completeTask, completeTable:
		ws, _ := dsl.Load(g.wsPath(), dsl.LoadOptions{Env: os.Environ()})
		for _, p := range ws.Pipelines {
			switch {
			case what == completePipeline:
				add(p.Name, p.Schedule)
			case what == completeTask && len(given) > 0 && p.Name == given[0]:
				for _, t := range p.Tasks {
					add(t.Name, "")
				}
			case what == completeTable:
				for _, o := range p.Outputs {
					add(o.Table, "output "+o.Name+" of "+p.Name)
				}
			}
		}
	case completeBackfill:
		for _, b := range stateBackfills(ctx, g) {
			add(b[0], b[1])
		}
	}
	return out, cobra.ShellCompDirectiveNoFileComp
}

// stateBackfills are the backfills of the state, newest first, as their
// id and a description; none without a state (none is created).
func stateBackfills(ctx context.Context, g *globals) [][2]string {
	if ok, err := g.hasState(); !ok || err != nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	st, err := openExisting(ctx, g)
	if err != nil {
		return nil
	}
	defer st.Close()
	list, err := st.ListBackfills(ctx)
	if err != nil {
		return nil
	}
	out := make([][2]string, 0, len(list))
	for _, b := range list {
		out = append(out, [2]string{b.ID, b.Pipeline + " " + b.From.Format("2006-01-02") + ".." + b.To.Format("2006-01-02") + " " + string(b.State)})
	}
	return out
}
