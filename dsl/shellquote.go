package dsl

import (
	"fmt"
	"strings"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"
	"github.com/zclconf/go-cty/cty/convert"
)

// A string command runs under /bin/sh -c, and values interpolated into it
// come from outside the HCL files (-var, REWIND_VAR_*, for_each keys, the
// workspace's path): each one is quoted for the shell, so that it is always
// exactly one word and never code. "./convert.sh ${var.who}" with
// who = "x; rm -rf /" runs ./convert.sh with the one argument "x; rm -rf /".
// The literal text of the template is the shell script, as written. A
// sensitive value is not spliced in at all: it is rendered as
// "$REWIND_SECRET_<name>", a reference to an environment variable set for
// the process (sensitive.go), so that it never appears in argv.

// renderShell evaluates a string command's template with every
// interpolation shell-quoted, and every sensitive value rendered as a
// double-quoted reference to an environment variable collected in sec (nil:
// a sensitive value is an error). ok is false when the expression is not a
// template (a list, a reference to a string built elsewhere): it is then
// evaluated as it is.
func renderShell(expr hcl.Expression, ctx *hcl.EvalContext, sec *shellSecrets) (string, bool, hcl.Diagnostics) {
	switch e := expr.(type) {
	case *hclsyntax.TemplateWrapExpr:
		s, diags := quotedValue(e.Wrapped, ctx, sec)
		return s, true, diags
	case *hclsyntax.TemplateExpr:
		var b strings.Builder
		var diags hcl.Diagnostics
		for _, part := range e.Parts {
			s, d := templatePart(part, ctx, sec)
			diags = append(diags, d...)
			b.WriteString(s)
		}
		return b.String(), true, diags
	}
	return "", false, nil
}

// templatePart renders one part of a template: literal text as written, an
// if directive by its chosen branch (rendered by the same rules), anything
// else as one quoted word.
func templatePart(part hclsyntax.Expression, ctx *hcl.EvalContext, sec *shellSecrets) (string, hcl.Diagnostics) {
	switch p := part.(type) {
	case *hclsyntax.LiteralValueExpr:
		v, diags := p.Value(ctx)
		if v.Type() == cty.String && !v.IsNull() && !v.IsMarked() {
			return v.AsString(), diags
		}
		return quotedValue(p, ctx, sec)
	case *hclsyntax.ConditionalExpr:
		cond, diags := p.Condition.Value(ctx)
		if diags.HasErrors() {
			return "", diags
		}
		cond, err := convert.Convert(unmark(cond), cty.Bool)
		if err != nil || cond.IsNull() || !cond.IsKnown() {
			return "", append(diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: "Invalid template condition", Detail: "The condition of an if directive must be a bool.", Subject: p.Condition.Range().Ptr()})
		}
		branch := p.FalseResult
		if cond.True() {
			branch = p.TrueResult
		}
		if s, ok, d := renderShell(branch, ctx, sec); ok {
			return s, append(diags, d...)
		}
		return quotedValue(branch, ctx, sec)
	}
	return quotedValue(part, ctx, sec)
}

func quotedValue(expr hcl.Expression, ctx *hcl.EvalContext, sec *shellSecrets) (string, hcl.Diagnostics) {
	v, diags := expr.Value(ctx)
	if diags.HasErrors() {
		return "", diags
	}
	sensitive := isSensitive(v)
	sv, err := convert.Convert(unmark(v), cty.String)
	if err != nil || sv.IsNull() || !sv.IsKnown() {
		detail := fmt.Sprintf("Cannot include this value in a command: %s.", errOrNull(err))
		if sensitive {
			detail = "Cannot include this sensitive value in a command: it is not a string, a number or a bool."
		}
		return "", append(diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: "Invalid template interpolation value",
			Detail: detail, Subject: expr.Range().Ptr()})
	}
	if sensitive {
		if sec == nil {
			return "", append(diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: "Sensitive value not allowed here",
				Detail: "A sensitive value can be interpolated only into a task's string command.", Subject: expr.Range().Ptr()})
		}
		return sec.ref(expr, sv.AsString()), diags
	}
	return ShellQuote(sv.AsString()), diags
}

func errOrNull(err error) string {
	if err != nil {
		return err.Error()
	}
	return "it is null"
}

// ShellQuote returns s as one /bin/sh word: unchanged when it holds only
// characters the shell gives no meaning (letters, digits and @%+=:,./_-),
// else in single quotes, with each ' written as '\”. (A leading '-' is one
// word too: whether it is an option is the program's business.)
func ShellQuote(s string) string {
	if s == "" {
		return "''"
	}
	safe := true
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("@%+=:,./_-", r)) {
			safe = false
			break
		}
	}
	if safe {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
