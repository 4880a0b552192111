package dsl

import (
	"fmt"
	"strings"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/ext/typeexpr"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"
	"github.com/zclconf/go-cty/cty/convert"
)

// variable is one input variable: declared in a variable block, set by
// -var, then REWIND_VAR_<name>, then its default.
type variable struct {
	Name  string
	Type  cty.Type
	Value cty.Value
	// Sensitive (sensitive = true): the value is marked in var.*, never
	// shown, and reaches tasks through their environment only.
	Sensitive bool
	DeclRange hcl.Range
}

var variableSchema = &hcl.BodySchema{
	Attributes: []hcl.AttributeSchema{
		{Name: "default"},
		{Name: "type"},
		{Name: "description"},
		{Name: "sensitive"},
	},
}

// envVarPrefix is the prefix of environment variables that set input variables.
const envVarPrefix = "REWIND_VAR_"

func (l *loader) decodeVariables(blocks []*hcl.Block) {
	l.vars = map[string]*variable{}
	env := map[string]string{}
	for _, kv := range l.opts.Env {
		name, value, ok := strings.Cut(kv, "=")
		if ok && strings.HasPrefix(name, envVarPrefix) {
			env[strings.TrimPrefix(name, envVarPrefix)] = value
		}
	}
	for _, b := range blocks {
		name := b.Labels[0]
		if !l.checkName("variable", name, b) {
			continue
		}
		if prev := l.vars[name]; prev != nil {
			l.errorf(b.DefRange, "Duplicate variable", "A variable named %q was already declared at %s. Variable names must be unique.", name, prev.DeclRange)
			continue
		}
		v := &variable{Name: name, Type: cty.DynamicPseudoType, Value: cty.DynamicVal, DeclRange: b.DefRange}
		l.vars[name] = v

		content, diags := b.Body.Content(variableSchema)
		l.diags = append(l.diags, diags...)
		if attr := content.Attributes["type"]; attr != nil {
			ty, diags := typeexpr.TypeConstraint(attr.Expr)
			l.diags = append(l.diags, diags...)
			if diags.HasErrors() {
				continue
			}
			v.Type = ty
		}
		if attr := content.Attributes["description"]; attr != nil {
			l.noRefs(attr)
		}
		if attr := content.Attributes["sensitive"]; attr != nil && l.noRefs(attr) {
			raw, diags := attr.Expr.Value(nil)
			l.diags = append(l.diags, diags...)
			if !diags.HasErrors() {
				bv, err := convert.Convert(raw, cty.Bool)
				if err != nil || bv.IsNull() || !bv.IsKnown() {
					l.errorf(attr.Expr.Range(), "Invalid sensitive", "sensitive must be true or false.")
				} else {
					v.Sensitive = bv.True()
				}
			}
		}
		var def cty.Value
		hasDef := false
		if attr := content.Attributes["default"]; attr != nil {
			if !l.noRefs(attr) {
				continue
			}
			raw, diags := attr.Expr.Value(nil)
			l.diags = append(l.diags, diags...)
			if diags.HasErrors() {
				continue
			}
			cv, err := convert.Convert(raw, v.Type)
			if err != nil {
				l.errorf(attr.Expr.Range(), "Invalid default value for variable", "This default value is not compatible with the variable's type constraint: %s.", convertError(err))
				continue
			}
			def = cv
			hasDef = true
		}

		switch {
		case l.opts.Vars != nil && hasKey(l.opts.Vars, name):
			v.Value = l.parseVarValue(v, l.opts.Vars[name], "--var "+name)
		case hasKey(env, name):
			v.Value = l.parseVarValue(v, env[name], envVarPrefix+name)
		case hasDef:
			v.Value = def
		case v.Sensitive:
			l.errorf(b.DefRange, "No value for required variable", "The sensitive variable %q has no default: set it with the environment variable %s%s (--var %s=VALUE works too, but the process list shows rewind's own arguments).", name, envVarPrefix, name, name)
		default:
			l.errorf(b.DefRange, "No value for required variable", "The variable %q has no default: set it with --var %s=VALUE or the environment variable %s%s.", name, name, envVarPrefix, name)
		}
	}
	for _, name := range sortedNames(l.opts.Vars) {
		if l.vars[name] == nil {
			l.diags = append(l.diags, &hcl.Diagnostic{
				Severity: hcl.DiagError,
				Summary:  "Value for undeclared variable",
				Detail:   fmt.Sprintf("--var sets %q, but no variable %q block is declared.", name, name),
			})
		}
	}
}

func hasKey(m map[string]string, k string) bool {
	_, ok := m[k]
	return ok
}

// parseVarValue converts a value given as text: as is for string variables,
// as an HCL expression (a number, a list, a map) for the other types.
func (l *loader) parseVarValue(v *variable, raw, from string) cty.Value {
	shown := fmt.Sprintf("%q", raw)
	if v.Sensitive {
		shown = SensitiveText
	}
	if v.Type.Equals(cty.DynamicPseudoType) {
		return cty.StringVal(raw)
	}
	if v.Type.IsPrimitiveType() {
		cv, err := convert.Convert(cty.StringVal(raw), v.Type)
		if err != nil {
			l.errorf(v.DeclRange, "Invalid value for variable", "The value %s given by %s is not a valid %s.", shown, from, typeexpr.TypeString(v.Type))
			return cty.DynamicVal
		}
		return cv
	}
	expr, diags := hclsyntax.ParseExpression([]byte(raw), from, hcl.InitialPos)
	var val cty.Value
	if !diags.HasErrors() {
		val, diags = expr.Value(nil)
	}
	if diags.HasErrors() {
		l.errorf(v.DeclRange, "Invalid value for variable", "The value %s given by %s is not a valid %s: %s", shown, from, typeexpr.TypeString(v.Type), diags[0].Summary)
		return cty.DynamicVal
	}
	cv, err := convert.Convert(val, v.Type)
	if err != nil {
		l.errorf(v.DeclRange, "Invalid value for variable", "The value %s given by %s is not a valid %s: %s.", shown, from, typeexpr.TypeString(v.Type), convertError(err))
		return cty.DynamicVal
	}
	return cv
}

// noRefs reports references in an attribute that must be a constant.
func (l *loader) noRefs(attr *hcl.Attribute) bool {
	vars := attr.Expr.Variables()
	for _, tr := range vars {
		l.errorf(tr.SourceRange(), "Variables not allowed", "The %s of a variable must be a constant: it cannot refer to %s.", attr.Name, tr.RootName())
	}
	return len(vars) == 0
}

// varValues is var.*: the values of sensitive variables are marked, so
// that what derives from them is marked too.
func (l *loader) varValues() cty.Value {
	vals := map[string]cty.Value{}
	for name, v := range l.vars {
		vals[name] = v.Value
		if v.Sensitive {
			vals[name] = v.Value.Mark(markSensitive)
		}
	}
	return cty.ObjectVal(vals)
}

// local is one named value of a locals block.
type local struct {
	Name  string
	Expr  hcl.Expression
	Range hcl.Range
	Value cty.Value
	deps  []string
}

func (l *loader) decodeLocals(blocks []*hcl.Block) {
	l.locals = map[string]*local{}
	var order []*local
	for _, b := range blocks {
		attrs, diags := b.Body.JustAttributes()
		l.diags = append(l.diags, diags...)
		names := sortedNames(attrs)
		// Source order, so that diagnostics come out in reading order.
		sortByPos(names, func(n string) hcl.Pos { return attrs[n].NameRange.Start })
		for _, name := range names {
			attr := attrs[name]
			if prev := l.locals[name]; prev != nil {
				l.errorf(attr.NameRange, "Duplicate local value", "A local value named %q was already declared at %s. Local value names must be unique.", name, prev.Range)
				continue
			}
			lv := &local{Name: name, Expr: attr.Expr, Range: attr.NameRange, Value: cty.DynamicVal}
			l.locals[name] = lv
			order = append(order, lv)
		}
	}
	for _, lv := range order {
		seen := map[string]bool{}
		for _, tr := range lv.Expr.Variables() {
			if tr.RootName() != "local" || len(tr) < 2 {
				continue
			}
			if a, ok := tr[1].(hcl.TraverseAttr); ok && l.locals[a.Name] != nil && !seen[a.Name] {
				seen[a.Name] = true
				lv.deps = append(lv.deps, a.Name)
			}
		}
	}

	// Evaluate in dependency order; what is left over is in or behind a cycle.
	done := map[string]bool{}
	for progress := true; progress; {
		progress = false
		for _, lv := range order {
			if done[lv.Name] {
				continue
			}
			ready := true
			for _, d := range lv.deps {
				if !done[d] {
					ready = false
					break
				}
			}
			if !ready {
				continue
			}
			ctx := &hcl.EvalContext{
				Functions: functions(),
				Variables: map[string]cty.Value{"var": l.varValues(), "local": l.localValues()},
			}
			// Marks are kept: a local derived from a sensitive variable
			// is sensitive.
			lv.Value = l.evalMarked(lv.Expr, ctx, scope{})
			done[lv.Name] = true
			progress = true
		}
	}
	reported := map[string]bool{}
	for _, lv := range order {
		if done[lv.Name] || reported[lv.Name] {
			continue
		}
		cycle := findCycle(lv.Name, func(n string) []string {
			var next []string
			for _, d := range l.locals[n].deps {
				if !done[d] {
					next = append(next, d)
				}
			}
			return next
		})
		if cycle == nil {
			continue
		}
		for _, n := range cycle {
			reported[n] = true
		}
		first := l.locals[cycle[0]]
		l.errorf(first.Range, "Local value cycle", "These local values refer to each other in a cycle: %s.", joinCycle("local.", cycle))
	}
}

func (l *loader) localValues() cty.Value {
	vals := map[string]cty.Value{}
	for name, lv := range l.locals {
		vals[name] = lv.Value
	}
	return cty.ObjectVal(vals)
}

// findCycle follows next from start and returns the first cycle it finds
// (without repeating its first element), or nil. Neighbours are visited in
// the order next returns them.
func findCycle(start string, next func(string) []string) []string {
	state := map[string]int{} // 1 on the path, 2 finished
	var path []string
	var visit func(n string) []string
	visit = func(n string) []string {
		state[n] = 1
		path = append(path, n)
		for _, m := range next(n) {
			switch state[m] {
			case 1:
				for i, p := range path {
					if p == m {
						return append([]string(nil), path[i:]...)
					}
				}
			case 0:
				if c := visit(m); c != nil {
					return c
				}
			}
		}
		path = path[:len(path)-1]
		state[n] = 2
		return nil
	}
	return visit(start)
}

func joinCycle(prefix string, cycle []string) string {
	parts := make([]string, 0, len(cycle)+1)
	for _, n := range cycle {
		parts = append(parts, prefix+n)
	}
	parts = append(parts, prefix+cycle[0])
	return strings.Join(parts, " -> ")
}

func sortByPos(names []string, pos func(string) hcl.Pos) {
	for i := 1; i < len(names); i++ {
		for j := i; j > 0 && pos(names[j]).Byte < pos(names[j-1]).Byte; j-- {
			names[j], names[j-1] = names[j-1], names[j]
		}
	}
}
