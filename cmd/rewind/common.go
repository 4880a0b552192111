package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/rewind-dev/rewind/dsl"
	"github.com/rewind-dev/rewind/ops"
	"github.com/rewind-dev/rewind/store"
	"github.com/rewind-dev/rewind/timetable"
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

// The workspace: every command names it the same way, as its PATH
// argument (the commands that have one), --path DIR or -C DIR; default ".".
// It owns its state, <workspace>/.rewind/state.db, whatever the working
// directory.

// workspace resolves the workspace of a command from its positional PATH
// (pos, "" when the command has none or it was not given) and --path, and
// records it in g for openStore and homeDir.
func (g *globals) workspace(pos string) (string, error) {
	path := g.path
	switch {
	case pos != "" && path != "" && filepath.Clean(pos) != filepath.Clean(path):
		return "", exitWith(exitUsage, "the workspace is given twice, as %s and --path %s: give it once", pos, path)
	case pos != "":
		path = pos
	case path == "":
		path = "."
	}
	g.ws = path
	return path, nil
}

// wsPath is the workspace resolved by workspace, or --path, or ".".
func (g *globals) wsPath() string {
	switch {
	case g.ws != "":
		return g.ws
	case g.path != "":
		return g.path
	}
	return "."
}

// wsDir is the directory of the workspace: PATH itself, or the directory
// of the one .hcl file PATH names.
func (g *globals) wsDir() string {
	p := g.wsPath()
	if fi, err := os.Stat(p); err == nil && !fi.IsDir() {
		return filepath.Dir(p)
	}
	return p
}

// stateDSN is the state the command uses: --state, else $REWIND_STATE, else
// the workspace's own SQLite file. explicit says whether it was named.
func (g *globals) stateDSN() (dsn string, explicit bool, err error) {
	from, dsn := "--state", g.state
	if dsn == "" {
		from, dsn = store.EnvState, os.Getenv(store.EnvState)
	}
	if dsn == "" {
		return "sqlite:" + filepath.Join(g.wsDir(), ".rewind", "state.db"), false, nil
	}
	if store.IsPostgres(dsn) {
		return dsn, true, nil
	}
	lower := strings.ToLower(dsn)
	if !strings.HasPrefix(lower, "sqlite:") {
		shown := dsn
		if i := strings.Index(shown, "://"); i >= 0 {
			shown = shown[:i] + "://..." // may hold a password
		}
		return "", true, exitWith(exitUsage, "%s %q: want sqlite:PATH or postgres://...", from, shown)
	}
	path, _ := store.SQLitePath(dsn)
	if path == "" {
		return "", true, exitWith(exitUsage, "%s %q: sqlite: names no file (want sqlite:PATH)", from, dsn)
	}
	dir := filepath.Dir(path)
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		return "", true, exitWith(exitUsage, "%s %s: the directory %s does not exist (rewind creates the state file, not its directory)", from, dsn, dir)
	}
	return dsn, true, nil
}

// openStore opens the state of the workspace (or the one --state or
// $REWIND_STATE names), creating it if it does not exist yet: for the
// commands that write (run, pause, backfill apply, ...).
func openStore(ctx context.Context, g *globals) (store.Store, error) {
	dsn, _, err := g.stateDSN()
	if err != nil {
		return nil, err
	}
	return openDSN(ctx, dsn)
}

func openDSN(ctx context.Context, dsn string) (store.Store, error) {
	st, err := store.Open(ctx, dsn)
	if err != nil {
		if store.IsUnavailable(err) {
			return nil, exitWith(exitState, "open state: %v", err)
		}
		return nil, exitWith(exitUsage, "open state: %v", err)
	}
	return st, nil
}

// checkStateNotLost refuses to create a SQLite state beside the logs and
// run directories of an earlier one: the state was deleted or moved, and a
// new one would run every finished attempt again. newState (--new-state)
// says it is on purpose.
func (g *globals) checkStateNotLost(newState bool) error {
	dsn, _, err := g.stateDSN()
	if err != nil || newState {
		return err
	}
	path, ok := store.SQLitePath(dsn)
	if !ok {
		return nil
	}
	if _, err := os.Stat(path); !errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	dir := filepath.Dir(path)
	var found []string
	for _, sub := range []string{"logs", "runs"} {
		n := 0
		_ = filepath.WalkDir(filepath.Join(dir, sub), func(_ string, d fs.DirEntry, err error) error {
			if err == nil && !d.IsDir() {
				n++
			}
			return nil
		})
		if n > 0 {
			found = append(found, fmt.Sprintf("%d files in %s", n, filepath.Join(dir, sub)))
		}
	}
	if len(found) == 0 {
		return nil
	}
	return exitWith(exitState, "no state at %s, but %s of earlier runs: the state was deleted or moved, and a new one would run every finished attempt again. Put the state back (or point --state at it); to start a new state on purpose, pass --new-state",
		path, strings.Join(found, " and "))
}

// errNoState is the error of a command that needs a state where none exists.
func (g *globals) errNoState(explicit bool, path string) error {
	if explicit {
		return exitWith(exitUsage, "no rewind state at %s (run 'rewind run --state sqlite:%s' first)", path, path)
	}
	dir := g.wsDir()
	return exitWith(exitUsage, "no rewind state in %s (run 'rewind run %s' first, or pass --state)", dir, dir)
}

// hasState reports whether the SQLite state exists (always true for
// PostgreSQL).
func (g *globals) hasState() (bool, error) {
	dsn, explicit, err := g.stateDSN()
	if err != nil {
		return false, err
	}
	path, ok := store.SQLitePath(dsn)
	if !ok {
		return true, nil
	}
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		return false, nil
	} else if err != nil && !explicit {
		return false, exitWith(exitState, "state %s: %v", path, err)
	}
	return true, nil
}

// openExisting opens the state for the commands that only read (or that
// have nothing to do without one): it never creates a state, and without
// one the command ends with exit code 2.
func openExisting(ctx context.Context, g *globals) (store.Store, error) {
	dsn, explicit, err := g.stateDSN()
	if err != nil {
		return nil, err
	}
	if path, ok := store.SQLitePath(dsn); ok {
		if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
			return nil, g.errNoState(explicit, path)
		}
	}
	return openDSN(ctx, dsn)
}

// stateError is err with the exit code it calls for: 4 when the state
// could not be read or written, 3 when another rewind took the state's
// lease, else fallback.
func stateError(err error, fallback int) error {
	var ee *exitError
	switch {
	case errors.As(err, &ee):
		return err
	case store.IsUnavailable(err):
		return exitWith(exitState, "%v", err)
	case errors.Is(err, store.ErrFenced):
		return exitWith(exitLeaseBusy, "%v", err)
	}
	return exitWith(fallback, "%v", err)
}

// homeDir is where runs/ and logs/ live: beside a SQLite state file, else
// .rewind in the workspace.
func homeDir(g *globals) string {
	if dsn, _, err := g.stateDSN(); err == nil {
		if path, ok := store.SQLitePath(dsn); ok {
			return filepath.Dir(path)
		}
	}
	return filepath.Join(g.wsDir(), ".rewind")
}

// knownPipelines checks that name is a pipeline of the workspace or of the
// state (st may be nil): an unknown one is a usage error that lists the
// known names.
func knownPipeline(ctx context.Context, g *globals, st store.Store, name string) error {
	names := map[string]bool{}
	if ws, diags := dsl.Load(g.wsPath(), dsl.LoadOptions{Env: os.Environ()}); !diags.HasErrors() {
		for _, p := range ws.Pipelines {
			names[p.Name] = true
		}
	}
	if st != nil {
		sps, err := st.ListPipelines(ctx)
		if err != nil {
			return stateError(err, exitState)
		}
		for _, p := range sps {
			names[p.Name] = true
		}
	}
	if names[name] {
		return nil
	}
	if len(names) == 0 {
		return exitWith(exitUsage, "unknown pipeline %q: the workspace %s has no pipeline and no rewind state (name the workspace with --path DIR)", name, g.wsPath())
	}
	return unknownName("pipeline", name, names)
}

// unknownName is the error for a name that is not one of known.
func unknownName(what, name string, known map[string]bool, of ...string) error {
	list := make([]string, 0, len(known))
	for n := range known {
		list = append(list, n)
	}
	sort.Strings(list)
	text := "none"
	if len(list) > 0 {
		text = strings.Join(list, ", ")
	}
	if len(of) > 0 {
		what = fmt.Sprintf("%s %q %s", what, name, strings.Join(of, " "))
	} else {
		what = fmt.Sprintf("%s %q", what, name)
	}
	return exitWith(exitUsage, "unknown %s (known: %s)", what, text)
}

// parseNow reads --now (RFC 3339, or a date meaning UTC midnight; "" is
// the zero time).
func parseNow(s string) (time.Time, error) {
	t, err := timetable.ParseNow(s)
	return t, flagError(err)
}

// parseDate reads a date flag: YYYY-MM-DD (midnight in loc) or RFC 3339.
func parseDate(flag, s string, loc *time.Location) (time.Time, error) {
	t, err := timetable.ParseDate(strings.TrimPrefix(flag, "--"), s, loc)
	return t, flagError(err)
}

// parseRange checks --start and --end (either may be empty). The pipeline
// is not known yet: a date against a timestamp is ordered in UTC.
func parseRange(start, end string) (timetable.Range, error) {
	r, err := timetable.ParseRange(start, end, time.UTC)
	return r, flagError(err)
}

// flagError spells a window error of package timetable as the flags were
// given (ops.FlagError): a usage error.
func flagError(err error) error {
	if e := ops.FlagError(err); ops.KindOf(e) != 0 {
		return exitWith(exitUsage, "%v", e)
	}
	return err
}

// positive checks a numeric flag that must be at least 1 when given.
func positive(c *cobra.Command, flag string, v int, what string) error {
	if c.Flags().Changed(flag) && v < 1 {
		return exitWith(exitUsage, "--%s %d: want %s, 1 or more", flag, v, what)
	}
	return nil
}

func pathArg(args []string) string {
	if len(args) > 0 {
		return args[0]
	}
	return ""
}
