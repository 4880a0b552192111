package dsl

import "github.com/hashicorp/hcl/v2"

// Diagnostic is one diagnostic as `rewind validate --json` prints it. File,
// Line and Column (1-based) are where its subject starts, EndLine and
// EndColumn where it ends; "" and 0 for a diagnostic about no place in a
// file (a workspace without *.hcl files).
type Diagnostic struct {
	File      string `json:"file"`
	Line      int    `json:"line"`
	Column    int    `json:"column"`
	EndLine   int    `json:"end_line"`
	EndColumn int    `json:"end_column"`
	Severity  string `json:"severity"` // error | warning
	Summary   string `json:"summary"`
	Detail    string `json:"detail"`
}

// Diagnostics are diags as plain values, in their order, never nil; at most
// MaxDiagnostics of them, as WriteDiagnostics prints them, and how many
// more there are.
func Diagnostics(diags hcl.Diagnostics) (out []Diagnostic, more int) {
	out = []Diagnostic{}
	for _, d := range diags {
		if d == nil {
			continue
		}
		if len(out) == MaxDiagnostics {
			more++
			continue
		}
		x := Diagnostic{Severity: "error", Summary: d.Summary, Detail: d.Detail}
		if d.Severity == hcl.DiagWarning {
			x.Severity = "warning"
		}
		if s := d.Subject; s != nil {
			x.File, x.Line, x.Column, x.EndLine, x.EndColumn = s.Filename, s.Start.Line, s.Start.Column, s.End.Line, s.End.Column
		}
		out = append(out, x)
	}
	return out, more
}
