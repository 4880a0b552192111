package dsl

import (
	"fmt"
	"math"
	"sort"
	"strings"

	"github.com/hashicorp/hcl/v2"
	"github.com/zclconf/go-cty/cty"
)

// ruleRows is the attribute of old and new that holds the row count of the
// date's partition; the other attributes are the sums of the numeric
// columns. A numeric column named "rows" is shadowed by the row count.
const ruleRows = "rows"

const rulesStaticReason = "A validate rule compares the new and the old version of an output for one date, once the versions are written: it may refer to old.*, new.*, var.*, local.* and each.*, not to run.* or pool.*."

// outputRule is one validate rule of an output.
type outputRule struct {
	expr hcl.Expression
	text string     // as written, on one line, for messages
	refs []ruleName // the old.* and new.* it refers to
}

// ruleName is one reference of a rule: old.NAME or new.NAME.
type ruleName struct{ root, name string }

// ruleScope is what old.* and new.* hold in the validate rules of one
// output: rows and one number per numeric column.
type ruleScope struct {
	cols      []OutputColumn    // the output's valid columns, in the order written
	types     map[string]string // their types
	columnsOK bool              // whether cols are all the output's columns
}

// attrs are the attributes of old and new and their types.
func (rs *ruleScope) attrs() map[string]cty.Type {
	attrs := map[string]cty.Type{ruleRows: cty.Number}
	for _, c := range rs.cols {
		if numericColumnTypes[c.Type] {
			attrs[c.Name] = cty.Number
		}
	}
	return attrs
}

// columns lists the numeric columns in the order written.
func (rs *ruleScope) columns() []string {
	var names []string
	for _, c := range rs.cols {
		if numericColumnTypes[c.Type] && c.Name != ruleRows {
			names = append(names, c.Name)
		}
	}
	return names
}

// names lists the attributes of old and new: rows, then the numeric
// columns in the order written.
func (rs *ruleScope) names() string {
	return strings.Join(append([]string{ruleRows}, rs.columns()...), ", ")
}

// holds is the sentence that says what old and new hold.
func (rs *ruleScope) holds(root string) string {
	cols := rs.columns()
	if len(cols) == 0 {
		return fmt.Sprintf("%s holds rows, the row count of the date's partition, only: the output has no numeric column (double, long or int) to sum.", root)
	}
	return fmt.Sprintf("%s holds rows, the row count of the date's partition, and the sum over the partition of each numeric column (double, long or int): %s.", root, strings.Join(cols, ", "))
}

// check returns why root.name is not an attribute of old and new, or "".
func (rs *ruleScope) check(root, name string) string {
	if name == ruleRows {
		return ""
	}
	t, found := rs.types[name]
	switch {
	case !found && !rs.columnsOK:
		return "" // the column may be one of those in error
	case !found:
		return fmt.Sprintf("The output has no column %q. %s", name, rs.holds(root))
	case !numericColumnTypes[t]:
		return fmt.Sprintf("The column %q has type %q, which has no sum. %s", name, t, rs.holds(root))
	}
	return ""
}

// ruleRef returns the attribute a reference to old or new names: old.NAME
// or old["NAME"], and its range; ok is false for a bare old or new.
func ruleRef(tr hcl.Traversal) (name string, r hcl.Range, ok bool) {
	if len(tr) < 2 {
		return "", hcl.Range{}, false
	}
	switch step := tr[1].(type) {
	case hcl.TraverseAttr:
		return step.Name, step.SrcRange, true
	case hcl.TraverseIndex:
		if step.Key.IsKnown() && !step.Key.IsNull() && step.Key.Type() == cty.String {
			return step.Key.AsString(), step.SrcRange, true
		}
	}
	return "", hcl.Range{}, false
}

// decodeRules reads the rules of an output's validate block: a list,
// written out, of bool expressions over old.* and new.*. sc is the output's
// scope (each.*); rs what old and new hold.
func (l *loader) decodeRules(o *Output, attr *hcl.Attribute, ctx *hcl.EvalContext, sc scope, rs *ruleScope) {
	elems, diags := hcl.ExprList(attr.Expr)
	if diags.HasErrors() {
		l.errorf(attr.Expr.Range(), "Invalid rules", "rules must be a list written out, such as [new.rows == old.rows, new.amount_usd >= 0.9 * old.amount_usd]: each element is one bool expression over old.* and new.*, checked for each date.")
		return
	}
	ruleSc := scope{each: sc.each, static: rulesStaticReason, rules: rs}
	attrs := rs.attrs()
	cols := map[string]bool{}
	for _, e := range elems {
		diags := l.checkRefs(e, ruleSc)
		l.diags = append(l.diags, diags...)
		if diags.HasErrors() {
			continue
		}
		var refs []ruleName
		known := true
		for _, tr := range e.Variables() {
			root := tr.RootName()
			if root != "old" && root != "new" {
				continue
			}
			name, _, _ := ruleRef(tr)
			refs = append(refs, ruleName{root, name})
			if _, ok := attrs[name]; !ok {
				known = false // a column in error: not type-checked
			}
		}
		obj := unknownObject(attrs)
		if !known {
			obj = cty.DynamicVal
		}
		child := ctx.NewChild()
		child.Variables = map[string]cty.Value{"old": obj, "new": obj}
		v, diags := e.Value(child)
		l.diags = append(l.diags, diags...)
		if diags.HasErrors() {
			continue
		}
		v = unmark(v)
		text := ruleText(l.ws.Files, e)
		switch ty := v.Type(); {
		case v.IsKnown() && v.IsNull():
			l.errorf(e.Range(), "Invalid rule", "A validate rule must be true or false for each date (such as new.rows == old.rows), but %s is null.", text)
			continue
		case ty.Equals(cty.DynamicPseudoType):
		case !ty.Equals(cty.Bool):
			l.errorf(e.Range(), "Invalid rule", "A validate rule must be true or false for each date (such as new.rows == old.rows), but %s is %s.", text, article(ty.FriendlyName()))
			continue
		}
		for _, ref := range refs {
			if ref.name != ruleRows {
				cols[ref.name] = true
			}
		}
		o.rules = append(o.rules, outputRule{expr: e, text: text, refs: refs})
		o.Rules = append(o.Rules, text)
	}
	for c := range cols {
		o.ruleCols = append(o.ruleCols, c)
	}
	sort.Strings(o.ruleCols)
}

// ruleText is a rule as written, on one line.
func ruleText(files map[string]*hcl.File, e hcl.Expression) string {
	text := sourceText(files, e.Range())
	if strings.ContainsAny(text, "\r\n") {
		text = strings.Join(strings.Fields(text), " ")
	}
	return text
}

// article puts "a" or "an" before a type name.
func article(s string) string {
	if s != "" && strings.ContainsRune("aeiou", rune(s[0])) {
		return "an " + s
	}
	return "a " + s
}

// RuleColumns are the numeric columns the rules refer to (sorted), so that
// the caller fetches their sums.
func (o *Output) RuleColumns() []string {
	if o == nil || len(o.ruleCols) == 0 {
		return nil
	}
	return append([]string(nil), o.ruleCols...)
}

// CheckRules evaluates the rules for one date; it returns the source text of
// every rule that is false (or whose evaluation fails: then "text: error").
// old and new hold "rows", the row count of the date's partition in each
// version, and the sum of each of RuleColumns; a version without the date
// has rows 0 and sums 0, which the caller passes as such. A value a rule
// needs that is missing or NaN fails the rule.
func (o *Output) CheckRules(old, new map[string]float64) []string {
	if o == nil {
		return nil
	}
	var failed []string
	for _, r := range o.rules {
		ok, err := o.checkRule(r, old, new)
		switch {
		case err != nil:
			failed = append(failed, r.text+": "+err.Error())
		case !ok:
			failed = append(failed, r.text)
		}
	}
	return failed
}

// checkRule evaluates one rule; a panic of the evaluation is an error.
func (o *Output) checkRule(r outputRule, old, new map[string]float64) (ok bool, err error) {
	defer func() {
		if p := recover(); p != nil {
			ok, err = false, fmt.Errorf("%v", p)
		}
	}()
	given := map[string]map[string]float64{"old": old, "new": new}
	for _, ref := range r.refs {
		f, found := given[ref.root][ref.name]
		switch {
		case !found:
			return false, fmt.Errorf("no value for %s.%s", ref.root, ref.name)
		case math.IsNaN(f):
			return false, fmt.Errorf("%s.%s is NaN", ref.root, ref.name)
		}
	}
	parent := o.ctx
	if parent == nil {
		parent = &hcl.EvalContext{Functions: functions()}
	}
	ctx := parent.NewChild()
	ctx.Variables = map[string]cty.Value{"old": o.ruleObject(old), "new": o.ruleObject(new)}
	v, diags := r.expr.Value(ctx)
	if diags.HasErrors() {
		return false, diagsError(diags)
	}
	v = unmark(v)
	switch {
	case !v.IsKnown():
		return false, fmt.Errorf("the rule's value is not known")
	case v.IsNull():
		return false, fmt.Errorf("the rule is null")
	case !v.Type().Equals(cty.Bool):
		return false, fmt.Errorf("the rule is %s, not a bool", article(v.Type().FriendlyName()))
	}
	return v.True(), nil
}

// ruleObject is old or new for one date: rows and the sums of the numeric
// columns, unknown when not given (no rule needs them: checkRule checks
// the references first).
func (o *Output) ruleObject(m map[string]float64) cty.Value {
	vals := map[string]cty.Value{}
	set := func(name string) {
		if f, ok := m[name]; ok && !math.IsNaN(f) {
			vals[name] = cty.NumberFloatVal(f)
		} else {
			vals[name] = cty.UnknownVal(cty.Number)
		}
	}
	for _, c := range o.Columns {
		if numericColumnTypes[c.Type] {
			set(c.Name)
		}
	}
	set(ruleRows)
	return cty.ObjectVal(vals)
}

// diagsError is the first error of diags as an error, its detail without
// the position (the rule's text says which rule).
func diagsError(diags hcl.Diagnostics) error {
	for _, d := range diags {
		if d.Severity != hcl.DiagError {
			continue
		}
		if d.Detail != "" {
			return fmt.Errorf("%s", strings.TrimSuffix(strings.TrimPrefix(d.Detail, "Error during operation: "), "."))
		}
		return fmt.Errorf("%s", d.Summary)
	}
	return fmt.Errorf("%s", diags.Error())
}
