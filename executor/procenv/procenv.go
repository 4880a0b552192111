// Package procenv builds the environment of every process rewind starts
// for a workspace: task attempts (local processes and Slurm jobs), skew
// probes, requires commands, notify commands, and pools' setup and
// teardown. It owns the allowlist: such a process gets the variables rewind
// sets for it (the task-environment contract, the command's own env: its
// env block and the REWIND_SECRET_* / REWIND_ARG_* variables its command
// refers to), plus the variables of rewind's own environment whose names
// are in the pass-through set: Default, extended by the workspace's
// environment { pass = [...] } block.
//
// It never passes anything else of rewind's environment: rewind's own
// configuration (REWIND_STATE, a DSN that may hold a password;
// REWIND_UI_TOKEN; REWIND_HOST; the PG* variables of the PostgreSQL client;
// REWIND_VAR_*, the workspace's variables, sensitive ones included) reaches
// a process only when the workspace names it. It never reads HCL and never
// starts a process.
package procenv

import (
	"os"
	"sort"
	"strings"
)

// Default is the pass-through set: the variables of rewind's environment
// that every process gets as they are, what a shell, a locale-aware tool or
// an interpreter expects to find. A pattern ending in * matches every name
// that starts with what comes before it.
var Default = []string{
	"PATH", "HOME", "USER", "LOGNAME", "SHELL",
	"LANG", "LANGUAGE", "LC_*", "TZ", "TMPDIR",
}

// Match reports whether name matches pattern: the name itself, or, for a
// pattern PREFIX*, any name that starts with PREFIX.
func Match(pattern, name string) bool {
	if prefix, ok := strings.CutSuffix(pattern, "*"); ok {
		return strings.HasPrefix(name, prefix)
	}
	return pattern == name
}

// Passes reports whether rewind passes its own variable name to the
// processes it starts: name is in Default or matches one of pass (the
// workspace's patterns).
func Passes(name string, pass []string) bool {
	for _, p := range Default {
		if Match(p, name) {
			return true
		}
	}
	for _, p := range pass {
		if Match(p, name) {
			return true
		}
	}
	return false
}

// Build is the environment of a process, as NAME=VALUE entries sorted by
// name, each name once: the variables of from (rewind's own environment,
// as os.Environ() gives it) that Passes with pass, then the entries of
// each set in order; a later entry wins over an earlier one of the same
// name, so that what rewind sets wins over what it passes through.
func Build(from []string, pass []string, set ...[]string) []string {
	vals := map[string]string{}
	for _, kv := range from {
		k, v, ok := strings.Cut(kv, "=")
		if ok && k != "" && Passes(k, pass) {
			vals[k] = v
		}
	}
	for _, s := range set {
		for _, kv := range s {
			if k, v, ok := strings.Cut(kv, "="); ok && k != "" {
				vals[k] = v
			}
		}
	}
	names := make([]string, 0, len(vals))
	for k := range vals {
		names = append(names, k)
	}
	sort.Strings(names)
	out := make([]string, len(names))
	for i, k := range names {
		out[i] = k + "=" + vals[k]
	}
	return out
}

// Of is Build from rewind's own environment (os.Environ()).
func Of(pass []string, set ...[]string) []string {
	return Build(os.Environ(), pass, set...)
}

// Pairs is m as NAME=VALUE entries, sorted by name.
func Pairs(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k, v := range m {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}
