package dsl

import (
	"fmt"
	"math/big"
	"strings"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/ext/tryfunc"
	"github.com/zclconf/go-cty/cty"
	"github.com/zclconf/go-cty/cty/convert"
	"github.com/zclconf/go-cty/cty/function"
	"github.com/zclconf/go-cty/cty/function/stdlib"
)

// runAttrs are the attributes of run.* and their types.
var runAttrs = map[string]cty.Type{
	"id":                  cty.String,
	"pipeline":            cty.String,
	"ds":                  cty.String,
	"ds_nodash":           cty.String,
	"logical_date":        cty.String,
	"data_interval_start": cty.String,
	"data_interval_end":   cty.String,
	"kind":                cty.String,
	"dir":                 cty.String,
	"year":                cty.Number,
	"month":               cty.Number,
	"day":                 cty.Number,
	"weekday":             cty.String,
}

// poolAttrs are the attributes of pool.*: memory in bytes and cpus, 0 when
// the pool sets no limit.
var poolAttrs = map[string]cty.Type{
	"name":   cty.String,
	"memory": cty.Number,
	"cpus":   cty.Number,
}

// unknownObject is an object of the given attribute types whose values are
// not known yet: run.* and pool.* at load time, so that expressions over
// them are type-checked before any run exists.
func unknownObject(attrs map[string]cty.Type) cty.Value {
	vals := make(map[string]cty.Value, len(attrs))
	for name, ty := range attrs {
		vals[name] = cty.UnknownVal(ty)
	}
	return cty.ObjectVal(vals)
}

// functions are the functions available in every expression.
func functions() map[string]function.Function {
	return map[string]function.Function{
		"abs":             stdlib.AbsoluteFunc,
		"can":             tryfunc.CanFunc,
		"ceil":            stdlib.CeilFunc,
		"chomp":           stdlib.ChompFunc,
		"chunklist":       stdlib.ChunklistFunc,
		"coalesce":        stdlib.CoalesceFunc,
		"coalescelist":    stdlib.CoalesceListFunc,
		"compact":         stdlib.CompactFunc,
		"concat":          stdlib.ConcatFunc,
		"contains":        stdlib.ContainsFunc,
		"csvdecode":       stdlib.CSVDecodeFunc,
		"distinct":        stdlib.DistinctFunc,
		"element":         stdlib.ElementFunc,
		"flatten":         stdlib.FlattenFunc,
		"floor":           stdlib.FloorFunc,
		"format":          stdlib.FormatFunc,
		"formatdate":      stdlib.FormatDateFunc,
		"formatlist":      stdlib.FormatListFunc,
		"indent":          stdlib.IndentFunc,
		"index":           stdlib.IndexFunc,
		"join":            stdlib.JoinFunc,
		"jsondecode":      stdlib.JSONDecodeFunc,
		"jsonencode":      stdlib.JSONEncodeFunc,
		"keys":            stdlib.KeysFunc,
		"length":          stdlib.LengthFunc,
		"log":             stdlib.LogFunc,
		"lookup":          stdlib.LookupFunc,
		"lower":           stdlib.LowerFunc,
		"max":             stdlib.MaxFunc,
		"merge":           stdlib.MergeFunc,
		"min":             stdlib.MinFunc,
		"parseint":        stdlib.ParseIntFunc,
		"pow":             stdlib.PowFunc,
		"range":           stdlib.RangeFunc,
		"regex":           stdlib.RegexFunc,
		"regexall":        stdlib.RegexAllFunc,
		"regex_replace":   stdlib.RegexReplaceFunc,
		"replace":         stdlib.ReplaceFunc,
		"reverse":         stdlib.ReverseListFunc,
		"setintersection": stdlib.SetIntersectionFunc,
		"setproduct":      stdlib.SetProductFunc,
		"setsubtract":     stdlib.SetSubtractFunc,
		"setunion":        stdlib.SetUnionFunc,
		"signum":          stdlib.SignumFunc,
		"slice":           stdlib.SliceFunc,
		"sort":            stdlib.SortFunc,
		"split":           stdlib.SplitFunc,
		"strlen":          stdlib.StrlenFunc,
		"strrev":          stdlib.ReverseFunc,
		"substr":          stdlib.SubstrFunc,
		"timeadd":         stdlib.TimeAddFunc,
		"title":           stdlib.TitleFunc,
		"tobool":          stdlib.MakeToFunc(cty.Bool),
		"tolist":          stdlib.MakeToFunc(cty.List(cty.DynamicPseudoType)),
		"tomap":           stdlib.MakeToFunc(cty.Map(cty.DynamicPseudoType)),
		"tonumber":        stdlib.MakeToFunc(cty.Number),
		"toset":           stdlib.MakeToFunc(cty.Set(cty.DynamicPseudoType)),
		"tostring":        stdlib.MakeToFunc(cty.String),
		"trim":            stdlib.TrimFunc,
		"trimprefix":      stdlib.TrimPrefixFunc,
		"trimspace":       stdlib.TrimSpaceFunc,
		"trimsuffix":      stdlib.TrimSuffixFunc,
		"try":             tryfunc.TryFunc,
		"upper":           stdlib.UpperFunc,
		"values":          stdlib.ValuesFunc,
		"zipmap":          stdlib.ZipmapFunc,
	}
}

// scope says which namespaces an expression may refer to besides var.* and
// local.*, which are valid everywhere but in variable blocks.
type scope struct {
	each bool // inside a block with for_each
	run  bool // run.* (templates evaluated per run)
	pool bool // pool.* (task templates evaluated per attempt; a pool's launcher, setup and teardown)
	// requires: a requires block's path or command, rendered per date
	// before any attempt exists, so without pool.*.
	requires bool
	// notify: a notify block's command, run once per backfill report,
	// outside any run and any pool.
	notify bool
	// output: an output's from, rendered once a run's tasks have
	// succeeded, outside any pool: run.* but not pool.*.
	output bool
	// static, when set, is why run.* and pool.* are not available: the
	// arguments of a catalog block, and those of an output block but from.
	static string
	// rules, when set, makes old.* and new.* available: an output's
	// validate rules, evaluated per date over the partition's totals.
	rules *ruleScope
	// secrets says whether the expression may hold a sensitive value
	// (default: refused).
	secrets secretUse
}

func hasAttr(attrs map[string]cty.Type, name string) bool {
	_, ok := attrs[name]
	return ok
}

func attrList(attrs map[string]cty.Type) string {
	names := sortedNames(attrs)
	return strings.Join(names, ", ")
}

// checkRefs reports every reference of expr that is not valid in sc. An
// expression with invalid references is not evaluated.
func (l *loader) checkRefs(expr hcl.Expression, sc scope) hcl.Diagnostics {
	var diags hcl.Diagnostics
	errorf := func(r hcl.Range, summary, detail string, args ...any) {
		diags = append(diags, &hcl.Diagnostic{
			Severity: hcl.DiagError,
			Summary:  summary,
			Detail:   fmt.Sprintf(detail, args...),
			Subject:  r.Ptr(),
		})
	}
	for _, tr := range expr.Variables() {
		if len(tr) == 0 {
			continue
		}
		root := tr.RootName()
		var attr string
		attrRange := tr.SourceRange()
		if len(tr) > 1 {
			if a, ok := tr[1].(hcl.TraverseAttr); ok {
				attr = a.Name
				attrRange = a.SrcRange
			}
		}
		switch root {
		case "var":
			if attr == "" {
				errorf(tr.SourceRange(), "Invalid reference", "A reference to an input variable is written var.NAME.")
			} else if l.vars[attr] == nil {
				errorf(tr.SourceRange(), "Reference to undeclared input variable", "An input variable named %q is not declared. Declare it with a variable %q block.", attr, attr)
			}
		case "local":
			if attr == "" {
				errorf(tr.SourceRange(), "Invalid reference", "A reference to a local value is written local.NAME.")
			} else if l.locals[attr] == nil {
				errorf(tr.SourceRange(), "Reference to undeclared local value", "A local value named %q is not declared in any locals block.", attr)
			}
		case "each":
			switch {
			case !sc.each:
				errorf(tr.SourceRange(), "Reference to each outside for_each", "each.key and each.value are only available in a task or pipeline block that sets for_each.")
			case attr != "key" && attr != "value":
				errorf(attrRange, "Invalid each attribute", "each has the attributes key and value only.")
			}
		case "run":
			switch {
			case sc.static != "":
				errorf(tr.SourceRange(), "run.* not available here", "%s", sc.static)
			case sc.notify:
				errorf(tr.SourceRange(), "run.* not available here", "A notify block belongs to the workspace, not to a run: its command runs once per backfill report (the report's path in $REWIND_REPORT, its text on stdin) and may not refer to run.*.")
			case !sc.run && sc.pool:
				errorf(tr.SourceRange(), "run.* not available here", "A pool's launcher, setup and teardown belong to the pool, not to a run: they may refer to pool.name, pool.memory and pool.cpus, not to run.*.")
			case !sc.run:
				errorf(tr.SourceRange(), "run.* not available here", "run.* is known only when a run exists: use it in a task's command, env and workdir, in skew hot_when and probe, in requires and in an output's from.")
			case attr == "":
				errorf(tr.SourceRange(), "Invalid reference", "A reference to a run value is written run.NAME, one of %s.", attrList(runAttrs))
			case !hasAttr(runAttrs, attr):
				errorf(attrRange, "Unknown run attribute", "run has no attribute %q. The run attributes are %s.", attr, attrList(runAttrs))
			}
		case "pool":
			switch {
			case sc.static != "":
				errorf(tr.SourceRange(), "pool.* not available here", "%s", sc.static)
			case sc.output:
				errorf(tr.SourceRange(), "pool.* not available here", "An output's from is rendered once every task of a run has succeeded, outside any pool: it may refer to run.*, not to pool.*.")
			case sc.notify:
				errorf(tr.SourceRange(), "pool.* not available here", "A notify block belongs to the workspace, not to a pool: its command may not refer to pool.*.")
			case sc.requires:
				errorf(tr.SourceRange(), "pool.* not available here", "A requires check runs for a date before any attempt is placed in a pool: its path and command may refer to run.*, not to pool.*.")
			case !sc.pool:
				errorf(tr.SourceRange(), "pool.* not available here", "pool.* is known only when an attempt is placed in a pool: use it in a task's command, env and workdir, or in a pool's launcher, setup and teardown.")
			case attr == "":
				errorf(tr.SourceRange(), "Invalid reference", "A reference to a pool value is written pool.NAME, one of %s.", attrList(poolAttrs))
			case !hasAttr(poolAttrs, attr):
				errorf(attrRange, "Unknown pool attribute", "pool has no attribute %q. The pool attributes are %s.", attr, attrList(poolAttrs))
			}
		case "task":
			errorf(tr.SourceRange(), "Task reference outside depends_on", "References to tasks (task.NAME) are only valid in depends_on.")
		case "limit":
			errorf(tr.SourceRange(), "Limit reference outside limits", "References to limits (limit.NAME) are only valid in a task's limits.")
		case "pipeline":
			errorf(tr.SourceRange(), "Pipeline reference outside consumes", "References to pipelines (pipeline.NAME) are only valid in a pipeline's consumes.")
		case "old", "new":
			if sc.rules == nil {
				errorf(tr.SourceRange(), "Unknown variable", "There is no variable named %q. Expressions may refer to var.NAME, local.NAME, each.key, each.value, run.NAME and pool.NAME; old.* and new.* exist only in an output's validate rules.", root)
				break
			}
			name, r, ok := ruleRef(tr)
			if !ok {
				errorf(tr.SourceRange(), "Invalid reference", "A reference to the %s version's totals of a date is written %s.rows or %s.COLUMN, one of %s.", root, root, root, sc.rules.names())
				break
			}
			if detail := sc.rules.check(root, name); detail != "" {
				errorf(r, "Unknown column", "%s", detail)
			}
		default:
			if sc.rules != nil {
				errorf(tr.SourceRange(), "Unknown variable", "There is no variable named %q. A validate rule may refer to old.NAME, new.NAME, var.NAME, local.NAME, each.key and each.value.", root)
				break
			}
			errorf(tr.SourceRange(), "Unknown variable", "There is no variable named %q. Expressions may refer to var.NAME, local.NAME, each.key, each.value, run.NAME and pool.NAME.", root)
		}
	}
	return diags
}

// eval checks the references of expr against sc and evaluates it in ctx.
// On error it records the diagnostics and returns cty.DynamicVal, which
// later checks skip as unknown. A sensitive value where sc does not allow
// one (sc.secrets) is an error; the value returned is unmarked.
func (l *loader) eval(expr hcl.Expression, ctx *hcl.EvalContext, sc scope) cty.Value {
	v := l.evalMarked(expr, ctx, sc)
	if !l.checkSensitive(expr, v, sc) {
		return cty.DynamicVal
	}
	return unmark(v)
}

// evalMarked is eval, keeping the marks of the value (sensitive values).
func (l *loader) evalMarked(expr hcl.Expression, ctx *hcl.EvalContext, sc scope) cty.Value {
	if diags := l.checkRefs(expr, sc); diags.HasErrors() {
		l.diags = append(l.diags, diags...)
		return cty.DynamicVal
	}
	if sc.run || sc.pool {
		vars := map[string]cty.Value{}
		if sc.run {
			vars["run"] = unknownObject(runAttrs)
		}
		if sc.pool {
			vars["pool"] = unknownObject(poolAttrs)
		}
		ctx = ctx.NewChild()
		ctx.Variables = vars
	}
	v, diags := expr.Value(ctx)
	l.diags = append(l.diags, diags...)
	if diags.HasErrors() {
		return cty.DynamicVal
	}
	return v
}

// value evaluates attr and converts it to ty. ok is false when the value is
// missing, unknown or wrong; a null value is an error only when required.
func (l *loader) value(attr *hcl.Attribute, ctx *hcl.EvalContext, sc scope, ty cty.Type, required bool) (cty.Value, bool) {
	if attr == nil {
		return cty.NilVal, false
	}
	v := l.eval(attr.Expr, ctx, sc)
	return l.convert(attr, v, ty, required)
}

func (l *loader) convert(attr *hcl.Attribute, v cty.Value, ty cty.Type, required bool) (cty.Value, bool) {
	if v.IsNull() {
		if required {
			l.errorf(attr.Expr.Range(), "Missing value", "The argument %q is required and must not be null.", attr.Name)
		}
		return cty.NilVal, false
	}
	cv, err := convert.Convert(v, ty)
	if err != nil {
		l.errorf(attr.Expr.Range(), "Incorrect attribute value type", "Inappropriate value for attribute %q: %s.", attr.Name, convertError(err))
		return cty.NilVal, false
	}
	if !cv.IsWhollyKnown() {
		return cty.NilVal, false
	}
	if cv.IsNull() {
		return cty.NilVal, false
	}
	return cv, true
}

func convertError(err error) string {
	if pe, ok := err.(cty.PathError); ok && len(pe.Path) > 0 {
		var b strings.Builder
		for _, step := range pe.Path {
			switch s := step.(type) {
			case cty.IndexStep:
				if !s.Key.IsKnown() || s.Key.IsNull() {
					continue
				}
				switch s.Key.Type() {
				case cty.String:
					fmt.Fprintf(&b, "[%q]", s.Key.AsString())
				case cty.Number:
					fmt.Fprintf(&b, "[%s]", s.Key.AsBigFloat().Text('f', -1))
				}
			case cty.GetAttrStep:
				fmt.Fprintf(&b, ".%s", s.Name)
			}
		}
		if b.Len() > 0 {
			return fmt.Sprintf("element %s: %s", strings.TrimPrefix(b.String(), "."), pe.Error())
		}
	}
	return err.Error()
}

func (l *loader) stringAttr(attr *hcl.Attribute, ctx *hcl.EvalContext, sc scope, required bool) (string, bool) {
	v, ok := l.value(attr, ctx, sc, cty.String, required)
	if !ok {
		return "", false
	}
	return v.AsString(), true
}

func (l *loader) boolAttr(attr *hcl.Attribute, ctx *hcl.EvalContext, sc scope) (bool, bool) {
	v, ok := l.value(attr, ctx, sc, cty.Bool, false)
	if !ok {
		return false, false
	}
	return v.True(), true
}

func (l *loader) numberAttr(attr *hcl.Attribute, ctx *hcl.EvalContext, sc scope) (*big.Float, bool) {
	v, ok := l.value(attr, ctx, sc, cty.Number, false)
	if !ok {
		return nil, false
	}
	return v.AsBigFloat(), true
}

// intAttr evaluates a whole number within [min, max].
func (l *loader) intAttr(attr *hcl.Attribute, ctx *hcl.EvalContext, sc scope, min, max int64, rule string) (int, bool) {
	f, ok := l.numberAttr(attr, ctx, sc)
	if !ok {
		return 0, false
	}
	if !f.IsInt() {
		l.errorf(attr.Expr.Range(), "Invalid "+attr.Name, "%s must be a whole number, not %s.", attr.Name, f.Text('g', -1))
		return 0, false
	}
	if f.IsInf() || f.Cmp(big.NewFloat(float64(min))) < 0 || f.Cmp(big.NewFloat(float64(max))) > 0 {
		l.errorf(attr.Expr.Range(), "Invalid "+attr.Name, "%s must be %s, not %s.", attr.Name, rule, f.Text('g', -1))
		return 0, false
	}
	n, _ := f.Int64()
	return int(n), true
}

// stringList evaluates a list of strings, returning each element with the
// range of its expression when the attribute is written as a list literal.
func (l *loader) stringList(attr *hcl.Attribute, ctx *hcl.EvalContext, sc scope) ([]string, []hcl.Range, bool) {
	v, ok := l.value(attr, ctx, sc, cty.List(cty.String), false)
	if !ok {
		return nil, nil, false
	}
	elems, _ := hcl.ExprList(attr.Expr)
	var out []string
	var ranges []hcl.Range
	for i, ev := range v.AsValueSlice() {
		if ev.IsNull() {
			l.errorf(attr.Expr.Range(), "Invalid "+attr.Name, "Element %d of %s is null.", i, attr.Name)
			return nil, nil, false
		}
		out = append(out, ev.AsString())
		r := attr.Expr.Range()
		if len(elems) == v.LengthInt() {
			r = elems[i].Range()
		}
		ranges = append(ranges, r)
	}
	return out, ranges, true
}

func (l *loader) stringMap(attr *hcl.Attribute, ctx *hcl.EvalContext, sc scope) (map[string]string, bool) {
	v, ok := l.value(attr, ctx, sc, cty.Map(cty.String), false)
	if !ok {
		return nil, false
	}
	out := map[string]string{}
	for k, ev := range v.AsValueMap() {
		if ev.IsNull() {
			l.errorf(attr.Expr.Range(), "Invalid "+attr.Name, "The value of %q in %s is null.", k, attr.Name)
			return nil, false
		}
		out[k] = ev.AsString()
	}
	return out, true
}

// checkCommandType checks that v, the load-time value of a command
// expression, is a string or a non-empty list of strings; it reports false
// after an error.
func (l *loader) checkCommandType(attr *hcl.Attribute, v cty.Value) bool {
	ty := v.Type()
	switch {
	case ty.Equals(cty.String):
		if v.IsKnown() && v.IsNull() {
			l.errorf(attr.Expr.Range(), "Invalid "+attr.Name, "%s must not be null.", attr.Name)
			return false
		}
		if v.IsKnown() && strings.TrimSpace(v.AsString()) == "" {
			l.errorf(attr.Expr.Range(), "Invalid "+attr.Name, "%s must not be empty.", attr.Name)
			return false
		}
		return l.checkShellTemplate(attr.Expr)
	case ty.IsTupleType() || ty.IsListType():
		return l.checkArgvList(attr, v, "its first element is the program to run")
	case ty.Equals(cty.DynamicPseudoType):
		return true
	default:
		l.errorf(attr.Expr.Range(), "Incorrect attribute value type", "%s must be a string (run with /bin/sh -c) or a list of strings (run as argv), not %s.", attr.Name, ty.FriendlyName())
		return false
	}
}

// checkLauncherType checks that v, the load-time value of a pool's
// launcher, is a non-empty list of strings; it reports false after an error.
func (l *loader) checkLauncherType(attr *hcl.Attribute, v cty.Value) bool {
	ty := v.Type()
	switch {
	case ty.IsTupleType() || ty.IsListType():
		return l.checkArgvList(attr, v, "its first element is the program that starts each attempt")
	case ty.Equals(cty.DynamicPseudoType):
		return true
	default:
		l.errorf(attr.Expr.Range(), "Incorrect attribute value type", "%s must be a list of strings, the argv prefix of every attempt of the pool (such as [\"srun\", \"--mem=${pool.memory}\"]), not %s.", attr.Name, ty.FriendlyName())
		return false
	}
}

// checkArgvList checks the load-time value of a list that becomes argv:
// not null, not empty (first says why), and every element a string or a
// number.
func (l *loader) checkArgvList(attr *hcl.Attribute, v cty.Value, first string) bool {
	if !v.IsKnown() {
		return true
	}
	if v.IsNull() {
		l.errorf(attr.Expr.Range(), "Invalid "+attr.Name, "%s must not be null.", attr.Name)
		return false
	}
	if v.LengthInt() == 0 {
		l.errorf(attr.Expr.Range(), "Invalid "+attr.Name, "%s must not be an empty list: %s.", attr.Name, first)
		return false
	}
	for i, ev := range v.AsValueSlice() {
		et := ev.Type()
		if !et.Equals(cty.DynamicPseudoType) && !et.Equals(cty.String) && !et.Equals(cty.Number) {
			l.errorf(attr.Expr.Range(), "Incorrect attribute value type", "Element %d of %s must be a string, not %s.", i, attr.Name, et.FriendlyName())
			return false
		}
		if ev.IsKnown() && ev.IsNull() {
			l.errorf(attr.Expr.Range(), "Invalid "+attr.Name, "Element %d of %s is null.", i, attr.Name)
			return false
		}
	}
	return true
}

// commandArgv turns a rendered command value into argv.
func commandArgv(v cty.Value) ([]string, error) {
	if v.IsNull() || !v.IsWhollyKnown() {
		return nil, fmt.Errorf("command is null")
	}
	ty := v.Type()
	if ty.IsTupleType() || ty.IsListType() || ty.IsSetType() {
		var argv []string
		for i, ev := range v.AsValueSlice() {
			sv, err := convert.Convert(ev, cty.String)
			if err != nil || sv.IsNull() {
				return nil, fmt.Errorf("element %d of the command is not a string", i)
			}
			argv = append(argv, sv.AsString())
		}
		if len(argv) == 0 {
			return nil, fmt.Errorf("command is an empty list")
		}
		return argv, nil
	}
	sv, err := convert.Convert(v, cty.String)
	if err != nil {
		return nil, fmt.Errorf("command must be a string or a list of strings: %w", err)
	}
	return []string{"/bin/sh", "-c", sv.AsString()}, nil
}

// envMap turns a rendered env value into a map of strings.
func envMap(v cty.Value) (map[string]string, error) {
	if v.IsNull() {
		return map[string]string{}, nil
	}
	mv, err := convert.Convert(v, cty.Map(cty.String))
	if err != nil {
		return nil, fmt.Errorf("env must be a map of strings: %w", err)
	}
	if !mv.IsWhollyKnown() {
		return nil, fmt.Errorf("env is not known")
	}
	out := map[string]string{}
	for k, ev := range mv.AsValueMap() {
		if ev.IsNull() {
			return nil, fmt.Errorf("env %s is null", k)
		}
		out[k] = ev.AsString()
	}
	return out, nil
}

// unmark drops cty marks. The only mark rewind sets is markSensitive
// (sensitive.go): check for it with isSensitive before a value becomes text.
func unmark(v cty.Value) cty.Value {
	u, _ := v.UnmarkDeep()
	return u
}
