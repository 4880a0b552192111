package main

import (
	"context"
	"errors"
	"io"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/rewind-dev/rewind/dsl"
	"github.com/rewind-dev/rewind/store"
)

// workspaceFlags are the flags of commands that read pipeline files.
type workspaceFlags struct {
	vars []string
}

func (w *workspaceFlags) add(c *cobra.Command) {
	c.Flags().StringArrayVar(&w.vars, "var", nil, "set a variable: -var name=value (repeatable; also REWIND_VAR_name)")
}

// load reads the workspace at path; a configuration error prints the
// diagnostics and ends the command with exit code 2.
func (w *workspaceFlags) load(g *globals, path string) (*dsl.Workspace, error) {
	return loadWorkspace(g, path, w.vars)
}

// isTerminal reports whether w is a terminal (a live progress bar, colour).
func isTerminal(w any) bool {
	ww, ok := w.(io.Writer)
	if !ok {
		return false
	}
	f, ok := osFile(ww)
	return ok && term.IsTerminal(int(f.Fd()))
}

// openStore opens the state named by --state, $REWIND_STATE or the default.
func openStore(ctx context.Context, g *globals) (store.Store, error) {
	st, err := store.Open(ctx, store.DSNFromEnv(g.state))
	if err != nil {
		if store.IsUnavailable(err) {
			return nil, exitWith(exitState, "open state: %v", err)
		}
		return nil, exitWith(exitUsage, "open state: %v", err)
	}
	return st, nil
}

// stateError is err with the exit code it calls for: 4 when the state
// could not be read or written, 3 when another rewind took the state's
// lease, else fallback.
func stateError(err error, fallback int) error {
	switch {
	case store.IsUnavailable(err):
		return exitWith(exitState, "%v", err)
	case errors.Is(err, store.ErrFenced):
		return exitWith(exitLeaseBusy, "%v", err)
	}
	return exitWith(fallback, "%v", err)
}

// homeDir is where runs/ and logs/ live: beside a SQLite state file, else
// .rewind under the working directory.
func homeDir(g *globals) string {
	if path, ok := store.SQLitePath(store.DSNFromEnv(g.state)); ok {
		return filepath.Dir(path)
	}
	return ".rewind"
}

// parseNow reads --now (RFC 3339, or a date meaning UTC midnight).
func parseNow(s string) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t, nil
	}
	if t, err := time.Parse("2006-01-02", s); err == nil {
		return t, nil
	}
	return time.Time{}, exitWith(exitUsage, "--now %q: want RFC 3339 (2025-07-01T00:00:00Z) or YYYY-MM-DD", s)
}

// parseDate reads a --start/--end date: YYYY-MM-DD (midnight in loc) or RFC 3339.
func parseDate(flag, s string, loc *time.Location) (time.Time, error) {
	if t, err := time.ParseInLocation("2006-01-02", s, loc); err == nil {
		return t, nil
	}
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t.In(loc), nil
	}
	return time.Time{}, exitWith(exitUsage, "%s %q: want YYYY-MM-DD or RFC 3339", flag, s)
}

func pathArg(args []string) string {
	if len(args) > 0 {
		return args[0]
	}
	return "."
}
