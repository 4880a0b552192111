package dsl

import (
	"fmt"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"
)

// literalText is the text of a literal part of a template.
func literalText(part hclsyntax.Expression) (string, bool) {
	lit, ok := part.(*hclsyntax.LiteralValueExpr)
	if !ok || lit.Val.IsMarked() || !lit.Val.IsKnown() || lit.Val.IsNull() || !lit.Val.Type().Equals(cty.String) {
		return "", false
	}
	return lit.Val.AsString(), true
}

func (l *loader) warnf(subject hcl.Range, summary, detail string, args ...any) {
	l.diags = append(l.diags, &hcl.Diagnostic{
		Severity: hcl.DiagWarning,
		Summary:  summary,
		Detail:   fmt.Sprintf(detail, args...),
		Subject:  subject.Ptr(),
	})
}
