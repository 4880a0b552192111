// Package requires runs the requires checks of a pipeline for one date: a
// path glob that must match at least one file, or a command that must exit
// 0. It owns what a check does on the machine (the glob against the
// filesystem, the command through executor.Run with its timeout and its
// environment) and the message that says what is missing.
//
// It acts on the plain form dsl renders (dsl.RenderedRequirement: a
// pattern, or argv, a directory and the date's REWIND_* variables): it
// never reads HCL, and it reads no rewind state. Which dates are checked,
// and what a failing check stops, is the caller's.
package requires

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/rewind-dev/rewind/dsl"
	"github.com/rewind-dev/rewind/executor"
	"github.com/rewind-dev/rewind/executor/procenv"
)

// Timeout bounds the command of a requires block: a check still running
// after it fails.
const Timeout = 5 * time.Minute

// timeout is Timeout, shortened by tests.
var timeout = Timeout

// stderrLimit is how much of a failing check's stderr is kept.
const stderrLimit = 64 << 10

// Check renders the requirement for one date and runs it: nil when
// satisfied, else an error that says what is missing ("no file matches
// data/transactions/2025-07-03.csv", or "command exited 1: <first line of
// its stderr>"). A path is a glob relative to the directory of the
// pipeline's file that must match at least one file (not a directory); a
// command runs in that directory with the process environment plus the
// date's REWIND_* variables (dsl.Pipeline.DateEnv), for at most Timeout.
func Check(ctx context.Context, r *dsl.Requirement, rv dsl.RunVars) error {
	c, err := r.Render(rv)
	if err != nil {
		return err
	}
	return Run(ctx, c)
}

// Run runs a rendered requirement, as Check does.
func Run(ctx context.Context, c *dsl.RenderedRequirement) error {
	if c == nil {
		return errors.New("the requirement sets neither path nor command")
	}
	if c.Argv == nil {
		return checkPath(c)
	}
	return checkCommand(ctx, c)
}

func checkPath(c *dsl.RenderedRequirement) error {
	pattern := c.Path
	matches, err := filepath.Glob(resolve(c.Dir, pattern))
	if err != nil {
		return fmt.Errorf("path %s is not a valid glob: %w", pattern, err)
	}
	dirs := 0
	for _, m := range matches {
		info, err := os.Stat(m)
		if err != nil {
			continue
		}
		if info.IsDir() {
			dirs++
			continue
		}
		return nil
	}
	if dirs > 0 {
		return fmt.Errorf("no file matches %s (only directories do)", pattern)
	}
	return fmt.Errorf("no file matches %s", pattern)
}

// resolve is pattern relative to dir, or pattern alone when absolute.
func resolve(dir, pattern string) string {
	if filepath.IsAbs(pattern) {
		return filepath.Clean(pattern)
	}
	return filepath.Join(dir, pattern)
}

func checkCommand(ctx context.Context, c *dsl.RenderedRequirement) error {
	if ctx == nil {
		ctx = context.Background()
	}
	timeout := timeout
	o, err := executor.Run(ctx, executor.Command{
		Argv:    c.Argv,
		Dir:     c.Dir,
		Env:     procenv.Of(c.Pass, c.Env),
		Capture: stderrLimit,
		Timeout: timeout,
		Grace:   2 * time.Second,
	})
	switch {
	case err != nil:
		return fmt.Errorf("command cannot start: %w", err)
	case o.Success():
		return nil
	case o.Interrupted:
		return fmt.Errorf("command interrupted: %w", ctx.Err())
	case o.TimedOut:
		return fmt.Errorf("command did not finish within %s", timeout)
	}
	status := fmt.Sprintf("command exited %d", o.ExitCode)
	if o.Signal != "" {
		status = "command killed by " + o.Signal
	}
	if line := firstLine(string(o.Stderr)); line != "" {
		return fmt.Errorf("%s: %s", status, line)
	}
	return errors.New(status)
}

// firstLine is the first non-blank line of s, trimmed.
func firstLine(s string) string {
	for _, line := range strings.Split(s, "\n") {
		if t := strings.TrimSpace(line); t != "" {
			return t
		}
	}
	return ""
}
