package dsl

import (
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"
	"github.com/zclconf/go-cty/cty/convert"
)

var requiresSchema = &hcl.BodySchema{
	Attributes: []hcl.AttributeSchema{
		{Name: "path"},
		{Name: "command"},
	},
}

// decodeRequires reads the requires blocks of pipeline p. ctx and sc are
// the pipeline's (each.* of a for_each instance); path and command may
// refer to run.* as well.
func (l *loader) decodeRequires(p *Pipeline, blocks []*hcl.Block, ctx *hcl.EvalContext, sc scope) {
	byName := map[string]*Requirement{}
	dateScope := sc
	dateScope.run = true
	dateScope.requires = true
	for _, b := range blocks {
		name := b.Labels[0]
		if !l.checkName("requires", name, b) {
			continue
		}
		if prev := byName[name]; prev != nil {
			l.errorf(b.DefRange, "Duplicate requires block", "The pipeline %q already has a requires block named %q at %s. Requirement names must be unique within a pipeline.", p.Label, name, prev.DeclRange)
			continue
		}
		r := &Requirement{
			Name:      name,
			DeclRange: b.DefRange,
			ctx:       ctx,
			dir:       p.Dir,
			loc:       p.Timezone,
			pipe:      p.Name,
			pass:      l.ws.Environment.Pass,
		}
		byName[name] = r
		p.Requires = append(p.Requires, r)

		content, diags := b.Body.Content(requiresSchema)
		l.diags = append(l.diags, diags...)
		pathAttr, cmdAttr := content.Attributes["path"], content.Attributes["command"]
		switch {
		case pathAttr == nil && cmdAttr == nil:
			l.errorf(b.DefRange, "Requires block without path or command", "The requires block %q sets neither path nor command: set path (a glob that must match at least one file) or command (which must exit 0).", name)
		case pathAttr != nil && cmdAttr != nil:
			first, second := pathAttr, cmdAttr
			if second.Range.Start.Byte < first.Range.Start.Byte {
				first, second = second, first
			}
			l.errorf(second.NameRange, "Conflicting requires arguments", "The requires block %q sets both path and command (%s at %s): a requirement is a path glob or a command, not both. Keep one, or split them into two requires blocks.", name, first.Name, first.NameRange)
		}
		if pathAttr != nil {
			if l.checkRequiresPath(pathAttr, ctx, dateScope) && cmdAttr == nil {
				r.path = pathAttr.Expr
				r.text = pathText(l.ws.Files, pathAttr.Expr)
			}
		}
		if cmdAttr != nil {
			before := len(l.diags)
			v := l.eval(cmdAttr.Expr, ctx, dateScope)
			if l.checkCommandType(cmdAttr, v) && !hasErrorsSince(l.diags, before) && pathAttr == nil {
				r.command = cmdAttr.Expr
				r.text = sourceText(l.ws.Files, cmdAttr.Expr.Range())
			}
		}
	}
}

// checkRequiresPath checks a requires path at load time.
func (l *loader) checkRequiresPath(attr *hcl.Attribute, ctx *hcl.EvalContext, sc scope) bool {
	return l.checkGlob(attr, ctx, sc, "path", "must match at least one file")
}

// checkGlob checks an attribute holding a glob at load time: a string, not
// empty, and a valid pattern when it does not depend on the run (then it is
// checked for each run). It reports false after an error.
func (l *loader) checkGlob(attr *hcl.Attribute, ctx *hcl.EvalContext, sc scope, name, purpose string) bool {
	before := len(l.diags)
	v := l.eval(attr.Expr, ctx, sc)
	cv, ok := l.convert(attr, v, cty.String, true)
	if hasErrorsSince(l.diags, before) {
		return false
	}
	if !ok {
		return true
	}
	s := cv.AsString()
	if strings.TrimSpace(s) == "" {
		l.errorf(attr.Expr.Range(), "Invalid "+name, "%s must not be empty: it is a glob, relative to the directory of this file, that %s.", name, purpose)
		return false
	}
	if _, err := filepath.Match(s, ""); err != nil {
		l.errorf(attr.Expr.Range(), "Invalid "+name, "%q is not a valid glob: %s.", s, err)
		return false
	}
	return true
}

func hasErrorsSince(diags hcl.Diagnostics, n int) bool {
	return n < len(diags) && diags[n:].HasErrors()
}

// pathText is a path expression as written, without the quotes of a plain
// quoted template: data/${run.ds}.csv for "data/${run.ds}.csv".
func pathText(files map[string]*hcl.File, expr hcl.Expression) string {
	text := sourceText(files, expr.Range())
	if _, ok := expr.(*hclsyntax.TemplateExpr); ok && len(text) >= 2 && text[0] == '"' && text[len(text)-1] == '"' {
		return text[1 : len(text)-1]
	}
	return text
}

// Describe is the requirement as written in the file, for plans: "path
// data/transactions/${run.ds}.csv" or "command [...]".
func (r *Requirement) Describe() string {
	switch {
	case r == nil:
		return ""
	case r.path != nil:
		return "path " + r.text
	case r.command != nil:
		return "command " + r.text
	}
	return ""
}

// RenderedRequirement is a requires block rendered for one date: plain
// data, no HCL, for the package that runs the check. A path requirement
// has Path and no Argv; a command requirement has Argv.
type RenderedRequirement struct {
	Name string
	// Path is the glob as rendered (data/transactions/2025-07-03.csv),
	// relative to Dir unless absolute: it must match at least one file
	// (not a directory).
	Path string
	// Argv is the command, run in Dir: it must exit 0. A string command
	// is ["/bin/sh", "-c", command].
	Argv []string
	// Dir is the directory of the pipeline's file.
	Dir string
	// Env is the date's REWIND_* variables (Pipeline.DateEnv), as
	// NAME=VALUE entries, for the command's environment.
	Env []string
	// Pass are the workspace's environment.pass patterns (Command.Pass).
	Pass []string
}

// Render evaluates the requirement's path or command for one date. It
// starts nothing and looks at no file: an error says only that the
// template cannot be evaluated.
func (r *Requirement) Render(rv RunVars) (*RenderedRequirement, error) {
	if r == nil || (r.path == nil && r.command == nil) {
		return nil, errors.New("the requirement sets neither path nor command")
	}
	evalCtx := runContext(r.ctx, runValue(rv, r.pipe, r.loc), nil)
	out := &RenderedRequirement{Name: r.Name, Dir: r.dir, Env: dateEnv(rv, r.pipe, r.loc), Pass: r.pass}
	if r.path != nil {
		v, diags := r.path.Value(evalCtx)
		if diags.HasErrors() {
			return nil, fmt.Errorf("path: %w", diags)
		}
		sv, err := convert.Convert(unmark(v), cty.String)
		if err != nil || sv.IsNull() || !sv.IsKnown() {
			return nil, errors.New("path must be a string")
		}
		out.Path = sv.AsString()
		return out, nil
	}
	sec := &shellSecrets{}
	argv, _, err := renderCommand(r.command, evalCtx, sec)
	if err != nil {
		return nil, fmt.Errorf("command: %w", err)
	}
	out.Argv = argv
	for _, k := range slices.Sorted(maps.Keys(sec.env)) {
		out.Env = append(out.Env, k+"="+sec.env[k])
	}
	return out, nil
}

// DateEnv is the environment that describes one date of the pipeline to a
// requires command: REWIND_PIPELINE, REWIND_DS, REWIND_DS_NODASH,
// REWIND_LOGICAL_DATE, REWIND_DATA_INTERVAL_START and
// REWIND_DATA_INTERVAL_END, as NAME=VALUE entries, with the dates in the
// pipeline's timezone (RFC 3339 for the times). rv.Pipeline, when set,
// replaces the pipeline's name.
func (p *Pipeline) DateEnv(rv RunVars) []string {
	if p == nil {
		return dateEnv(rv, "", nil)
	}
	return dateEnv(rv, p.Name, p.Timezone)
}

func dateEnv(rv RunVars, pipeline string, loc *time.Location) []string {
	if loc == nil {
		loc = time.UTC
	}
	if rv.Pipeline != "" {
		pipeline = rv.Pipeline
	}
	ld := rv.LogicalDate.In(loc)
	return []string{
		"REWIND_PIPELINE=" + pipeline,
		"REWIND_DS=" + ld.Format(dateOnly),
		"REWIND_DS_NODASH=" + ld.Format("20060102"),
		"REWIND_LOGICAL_DATE=" + ld.Format(time.RFC3339),
		"REWIND_DATA_INTERVAL_START=" + rv.DataIntervalStart.In(loc).Format(time.RFC3339),
		"REWIND_DATA_INTERVAL_END=" + rv.DataIntervalEnd.In(loc).Format(time.RFC3339),
	}
}
