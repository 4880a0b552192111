package dsl

import (
	"fmt"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"
)

// checkQuotedInterpolations warns about interpolations that a task's
// string command puts inside quotes of its own literal text:
// "echo '${var.who}'" or "echo \"${run.ds}\"". Every interpolated value is
// quoted for the shell already (ShellQuote), so inside '...' or "..." that
// quoting is taken literally (the task receives quote characters) or splits
// the value into several words. The quote state of the literal text is
// tracked as /bin/sh does (backslash escapes outside single quotes), the
// interpolations counting as words outside of any quotes.
func (l *loader) checkQuotedInterpolations(expr hcl.Expression) {
	tmpl, ok := expr.(*hclsyntax.TemplateExpr)
	if !ok {
		return
	}
	var q byte          // the open quote: 0, '\'' or '"'
	openedLast := false // the last character of the literal text so far opened q
	for i, part := range tmpl.Parts {
		if lit, ok := literalText(part); ok {
			for j := 0; j < len(lit); j++ {
				c := lit[j]
				openedLast = false
				switch {
				case q == 0 && c == '\\', q == '"' && c == '\\':
					j++ // the next character is escaped
				case q == 0 && (c == '\'' || c == '"'):
					q = c
					openedLast = true
				case q != 0 && c == q:
					q = 0
				}
			}
			continue
		}
		if q == 0 {
			continue
		}
		src := sourceText(l.ws.Files, part.Range())
		if src == "" {
			src = "var.who"
		}
		quote := string(q)
		next, _ := literalAt(tmpl.Parts, i+1)
		if openedLast && len(next) > 0 && next[0] == q {
			l.warnf(part.Range(), "Quotes around an interpolation",
				"Values interpolated into a string command are already quoted as one word; remove the surrounding quotes: echo ${%s}, not echo %s${%s}%s. Within quotes, the quoting rewind adds is taken literally (the task receives the quote characters) or splits the value into several words.",
				src, quote, src, quote)
		} else {
			l.warnf(part.Range(), "Interpolation inside quotes",
				"Values interpolated into a string command are already quoted as one word, but this one is inside %s...%s of the command's text, where that quoting is taken literally (the task receives the quote characters) or splits the value into several words. Close the quotes before the interpolation and reopen them after it: echo %sa %s${%s}%s b%s, not echo %sa ${%s} b%s.",
				quote, quote, quote, quote, src, quote, quote, quote, src, quote)
		}
		openedLast = false
	}
}

// literalText is the text of a literal part of a template.
func literalText(part hclsyntax.Expression) (string, bool) {
	lit, ok := part.(*hclsyntax.LiteralValueExpr)
	if !ok || lit.Val.IsMarked() || !lit.Val.IsKnown() || lit.Val.IsNull() || !lit.Val.Type().Equals(cty.String) {
		return "", false
	}
	return lit.Val.AsString(), true
}

func literalAt(parts []hclsyntax.Expression, i int) (string, bool) {
	if i < 0 || i >= len(parts) {
		return "", false
	}
	return literalText(parts[i])
}

func (l *loader) warnf(subject hcl.Range, summary, detail string, args ...any) {
	l.diags = append(l.diags, &hcl.Diagnostic{
		Severity: hcl.DiagWarning,
		Summary:  summary,
		Detail:   fmt.Sprintf(detail, args...),
		Subject:  subject.Ptr(),
	})
}
