package main

import (
	"os"
	"strings"

	"github.com/hashicorp/hcl/v2"
	"golang.org/x/term"

	"github.com/rewind-dev/rewind/dsl"
)

// writeDiagnostics prints diags to g.stderr with source snippets, in colour
// and wrapped to the terminal's width only when stderr is a terminal.
func writeDiagnostics(g *globals, files map[string]*hcl.File, diags hcl.Diagnostics) {
	color := false
	var width uint
	if f, ok := osFile(g.stderr); ok && term.IsTerminal(int(f.Fd())) {
		color = true
		if w, _, err := term.GetSize(int(f.Fd())); err == nil && w > 0 {
			width = uint(w)
		}
	}
	dsl.WriteDiagnostics(g.stderr, files, diags, color, width)
}

// loadOptions turns repeated --var name=value flags into dsl.LoadOptions,
// with the process environment for REWIND_VAR_name.
func loadOptions(vars []string) (dsl.LoadOptions, error) {
	opts := dsl.LoadOptions{Vars: map[string]string{}, Env: os.Environ()}
	for _, kv := range vars {
		name, value, ok := strings.Cut(kv, "=")
		if !ok || name == "" {
			return opts, exitWith(exitUsage, "invalid --var %q: use --var name=value", kv)
		}
		opts.Vars[name] = value
	}
	return opts, nil
}

// loadWorkspace loads the workspace at path for commands that need a valid
// one: diagnostics are printed, and errors end the command with exit code 2
// (configuration error). Warnings are printed and loading goes on. From then
// on, what the command prints is scrubbed of the workspace's sensitive
// values (redactOutput).
func loadWorkspace(g *globals, path string, vars []string) (*dsl.Workspace, error) {
	opts, err := loadOptions(vars)
	if err != nil {
		return nil, err
	}
	ws, diags := dsl.Load(path, opts)
	redactOutput(g, ws)
	shown := diags[:0:0]
	for _, d := range diags {
		if !dsl.IsValidateOnly(d) {
			shown = append(shown, d)
		}
	}
	if len(shown) > 0 {
		writeDiagnostics(g, ws.Files, shown)
	}
	if diags.HasErrors() {
		return nil, &exitError{code: exitUsage}
	}
	return ws, nil
}
