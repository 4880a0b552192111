package dsl

import (
	"fmt"
	"sort"
	"strings"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"
	"github.com/zclconf/go-cty/cty/convert"
	"mvdan.cc/sh/v3/syntax"
)

// A string command runs under /bin/sh -c, and the values interpolated into
// it come from outside the HCL files (-var, REWIND_VAR_*, for_each keys,
// run fields, the workspace's path). A value never becomes code, in any
// quoting context of the command's text:
//
//   - the template's literal text is the script, as written; it is parsed
//     as a POSIX shell script (mvdan.cc/sh), with a placeholder parameter
//     expansion standing for each interpolation, so that rewind knows the
//     context each value stands in;
//   - a value made only of characters the shell gives no meaning (letters,
//     digits and @%+:,./_-, not a reserved word) is written in place: it
//     reads the same in every context;
//   - any other value is not written into the text at all: the process gets
//     it in an environment variable, REWIND_ARG_<n> (n = 1, 2, ... in the
//     order of the template; REWIND_SECRET_<...> for a sensitive value),
//     and the text holds a reference to it, written for its context: "${V}"
//     in a bare word, ${V} inside "..." and in a here-document whose
//     delimiter is not quoted, '"${V}"' inside '...' (the quotes are closed
//     and reopened around it), ${V} in a comment. The shell expands a
//     reference once and never parses the value, so the process receives
//     it byte for byte;
//   - a context where the shell would not expand a reference, or would
//     evaluate the value, is refused at load time, at the interpolation's
//     file:line:col: a quoted here-document (<<'EOF'), a here-document's
//     delimiter, arithmetic $((...)), the word of the script's own ${x...}
//     expansions, and text after a backslash.

// ArgEnvPrefix prefixes the environment variables that carry interpolated
// values to a string command: REWIND_ARG_1 for the first one that is not
// written in place.
const ArgEnvPrefix = "REWIND_ARG_"

// shellSegment is a piece of a string command's template: literal text, or
// an interpolated value.
type shellSegment struct {
	isLit     bool
	lit       string
	expr      hcl.Expression // the interpolation
	value     string         // its value (render time only)
	sensitive bool
}

// shellContext is where an interpolation stands in the command's text.
type shellContext int

const (
	ctxWord    shellContext = iota // a bare word (or part of one): "${V}"
	ctxDouble                      // inside "...": ${V}
	ctxHeredoc                     // in an unquoted here-document: ${V}
	ctxSingle                      // inside '...': '"${V}"'
	ctxComment                     // in a comment: ${V}
)

// shellRefusal is a context where no value can be placed safely.
type shellRefusal struct {
	seg    int // the segment refused, or -1 for a parse error
	offset int // the parse error's byte offset in the script
	msg    string
}

// renderShellTemplate renders a string command's template for one
// evaluation: the script, and the environment variables it refers to. ok
// is false when expr is not a template (a reference to a string built
// elsewhere): it is then evaluated as it is. sec collects the variables;
// sensitive values are allowed only when sec.allowSensitive.
func renderShellTemplate(expr hcl.Expression, ctx *hcl.EvalContext, sec *shellSecrets) (string, bool, hcl.Diagnostics) {
	segs, ok, diags := evalSegments(expr, ctx, sec)
	if !ok || diags.HasErrors() {
		return "", ok, diags
	}
	script, placeholders := placeholderScript(segs)
	places, ref := analyzeShell(script, placeholders)
	if ref != nil {
		return "", true, append(diags, refusalDiag(ref, segs, expr))
	}
	var b strings.Builder
	last := 0
	order := make([]int, 0, len(places))
	for i := range places {
		order = append(order, i)
	}
	sort.Slice(order, func(a, c int) bool { return places[order[a]].start < places[order[c]].start })
	for _, i := range order {
		p := places[i]
		b.WriteString(script[last:p.start])
		b.WriteString(sec.place(segs[p.seg], p.ctx))
		last = p.end
	}
	b.WriteString(script[last:])
	return b.String(), true, diags
}

// evalSegments flattens a template into segments, taking the chosen branch
// of each if directive and evaluating each interpolation.
func evalSegments(expr hcl.Expression, ctx *hcl.EvalContext, sec *shellSecrets) ([]shellSegment, bool, hcl.Diagnostics) {
	var parts []hclsyntax.Expression
	switch e := expr.(type) {
	case *hclsyntax.TemplateWrapExpr:
		parts = []hclsyntax.Expression{e.Wrapped}
	case *hclsyntax.TemplateExpr:
		parts = e.Parts
	default:
		return nil, false, nil
	}
	var segs []shellSegment
	var diags hcl.Diagnostics
	for _, part := range parts {
		if lit, ok := literalText(part); ok {
			segs = append(segs, shellSegment{isLit: true, lit: lit})
			continue
		}
		if c, ok := part.(*hclsyntax.ConditionalExpr); ok {
			cond, d := c.Condition.Value(ctx)
			diags = append(diags, d...)
			if d.HasErrors() {
				continue
			}
			cv, err := convert.Convert(unmark(cond), cty.Bool)
			if err != nil || cv.IsNull() || !cv.IsKnown() {
				diags = append(diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: "Invalid template condition", Detail: "The condition of an if directive must be a bool.", Subject: c.Condition.Range().Ptr()})
				continue
			}
			branch := c.FalseResult
			if cv.True() {
				branch = c.TrueResult
			}
			if sub, ok, d := evalSegments(branch, ctx, sec); ok {
				segs = append(segs, sub...)
				diags = append(diags, d...)
				continue
			}
			part = branch
		}
		seg, d := evalValue(part, ctx, sec)
		diags = append(diags, d...)
		segs = append(segs, seg)
	}
	return segs, true, diags
}

// evalValue evaluates one interpolation to a string.
func evalValue(expr hcl.Expression, ctx *hcl.EvalContext, sec *shellSecrets) (shellSegment, hcl.Diagnostics) {
	seg := shellSegment{expr: expr}
	v, diags := expr.Value(ctx)
	if diags.HasErrors() {
		return seg, diags
	}
	seg.sensitive = isSensitive(v)
	sv, err := convert.Convert(unmark(v), cty.String)
	if err != nil || sv.IsNull() || !sv.IsKnown() {
		detail := fmt.Sprintf("Cannot include this value in a command: %s.", errOrNull(err))
		if seg.sensitive {
			detail = "Cannot include this sensitive value in a command: it is not a string, a number or a bool."
		}
		return seg, append(diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: "Invalid template interpolation value",
			Detail: detail, Subject: expr.Range().Ptr()})
	}
	if seg.sensitive && (sec == nil || !sec.allowSensitive) {
		return seg, append(diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: "Sensitive value not allowed here",
			Detail: "A sensitive value can be interpolated only into a task's string command.", Subject: expr.Range().Ptr()})
	}
	seg.value = sv.AsString()
	return seg, diags
}

func errOrNull(err error) string {
	if err != nil {
		return err.Error()
	}
	return "it is null"
}

// placeholderScript is the script with each interpolation replaced by a
// parameter expansion that the literal text does not hold: ${__rewind_1},
// ${__rewind_2}, ... (placeholders[i] is the name for segment i, "" for
// literal text).
func placeholderScript(segs []shellSegment) (string, []string) {
	prefix := "__rewind_"
	for {
		clash := false
		for _, s := range segs {
			if s.isLit && strings.Contains(s.lit, prefix) {
				clash = true
				break
			}
		}
		if !clash {
			break
		}
		prefix = "_" + prefix
	}
	var b strings.Builder
	names := make([]string, len(segs))
	for i, s := range segs {
		if s.isLit {
			b.WriteString(s.lit)
			continue
		}
		names[i] = fmt.Sprintf("%s%d", prefix, i)
		b.WriteString("${" + names[i] + "}")
	}
	return b.String(), names
}

// shellPlace is where an interpolation's placeholder stands in the script.
type shellPlace struct {
	seg        int
	start, end int // byte offsets of the placeholder's text
	ctx        shellContext
}

// analyzeShell parses the placeholder script as POSIX sh and finds the
// context of each placeholder, or the first one that no context allows.
func analyzeShell(script string, names []string) ([]shellPlace, *shellRefusal) {
	segOf := map[string]int{}
	for i, n := range names {
		if n != "" {
			segOf[n] = i
		}
	}
	if len(segOf) == 0 {
		return nil, nil // nothing to place: the text is the script
	}
	prefix := names[firstName(names)]
	prefix = prefix[:strings.LastIndexByte(prefix, '_')+1]
	f, err := syntax.NewParser(syntax.Variant(syntax.LangPOSIX), syntax.KeepComments(true)).Parse(strings.NewReader(script), "")
	if err != nil {
		off := 0
		msg := err.Error()
		if pe, ok := err.(syntax.ParseError); ok {
			off, msg = int(pe.Pos.Offset()), pe.Text
		} else if pe, ok := err.(syntax.LangError); ok {
			off, msg = int(pe.Pos.Offset()), pe.Error()
		}
		return nil, &shellRefusal{seg: -1, offset: off, msg: "The command is not a valid POSIX shell script (/bin/sh): " + strings.ReplaceAll(msg, prefix, "interpolation_") + "."}
	}
	var places []shellPlace
	found := map[int]bool{}
	var refusal *shellRefusal
	refuse := func(seg int, msg string) {
		if refusal == nil {
			refusal = &shellRefusal{seg: seg, msg: msg}
		}
	}
	// occurrences reports each placeholder inside text that starts at
	// byte offset base of the script.
	occurrences := func(text string, base int, each func(seg, start, end int)) {
		for i := 0; ; {
			j := strings.Index(text[i:], "${"+prefix)
			if j < 0 {
				return
			}
			j += i
			k := strings.IndexByte(text[j:], '}')
			if k < 0 {
				return
			}
			name := text[j+2 : j+k]
			if seg, ok := segOf[name]; ok {
				each(seg, base+j, base+j+k+1)
			}
			i = j + k + 1
		}
	}
	var stack []syntax.Node
	syntax.Walk(f, func(n syntax.Node) bool {
		if n == nil {
			stack = stack[:len(stack)-1]
			return true
		}
		switch n := n.(type) {
		case *syntax.ParamExp:
			if n.Param != nil && !n.Short {
				if seg, ok := segOf[n.Param.Value]; ok {
					found[seg] = true
					ctx, msg := paramContext(stack, n)
					if msg != "" {
						refuse(seg, msg)
					} else {
						places = append(places, shellPlace{seg: seg, start: int(n.Pos().Offset()), end: int(n.End().Offset()), ctx: ctx})
					}
				}
			}
		case *syntax.SglQuoted:
			occurrences(n.Value, int(n.Left.Offset())+1, func(seg, start, end int) {
				found[seg] = true
				places = append(places, shellPlace{seg: seg, start: start, end: end, ctx: ctxSingle})
			})
		case *syntax.Comment:
			occurrences(n.Text, int(n.Hash.Offset())+1, func(seg, start, end int) {
				found[seg] = true
				places = append(places, shellPlace{seg: seg, start: start, end: end, ctx: ctxComment})
			})
		case *syntax.Lit:
			occurrences(n.Value, int(n.Pos().Offset()), func(seg, _, _ int) {
				found[seg] = true
				refuse(seg, litRefusal(stack, n))
			})
		}
		stack = append(stack, n)
		return true
	})
	if refusal != nil {
		return nil, refusal
	}
	for seg := range segOf {
		if !found[segOf[seg]] {
			return nil, &shellRefusal{seg: segOf[seg], msg: "The shell would not expand a value here (the interpolation is not a word, a quoted string, a here-document or a comment of the script)."}
		}
	}
	// A placeholder the parser split (in a comment, the same text twice)
	// is placed once per occurrence; drop exact duplicates.
	sort.Slice(places, func(a, b int) bool { return places[a].start < places[b].start })
	out := places[:0]
	for _, p := range places {
		if len(out) > 0 && out[len(out)-1].start == p.start {
			continue
		}
		out = append(out, p)
	}
	return out, nil
}

func firstName(names []string) int {
	for i, n := range names {
		if n != "" {
			return i
		}
	}
	return -1
}

// paramContext is the context of a placeholder expansion, from its
// ancestors (nearest last), or why none is safe.
func paramContext(stack []syntax.Node, p *syntax.ParamExp) (shellContext, string) {
	for i := len(stack) - 1; i >= 0; i-- {
		switch a := stack[i].(type) {
		case *syntax.DblQuoted:
			return ctxDouble, ""
		case *syntax.CmdSubst, *syntax.Stmt, *syntax.File:
			return ctxWord, ""
		case *syntax.ParamExp:
			return 0, "The interpolation is inside a ${...} expansion of the command's own text, where the shell may take the value as a pattern. Set a shell variable from it first (v=${...}) and use $v in the expansion."
		case *syntax.ArithmExp, *syntax.ArithmCmd, *syntax.BinaryArithm, *syntax.UnaryArithm, *syntax.ParenArithm:
			return 0, "The interpolation is inside arithmetic $((...)), where the shell would evaluate the value as an expression. Compute the number in HCL, or pass it through a shell variable and check it first."
		case *syntax.Redirect:
			if a.Hdoc != nil && a.Hdoc.Pos().Offset() <= p.Pos().Offset() && p.End().Offset() <= a.Hdoc.End().Offset() {
				return ctxHeredoc, ""
			}
			if a.Op == syntax.Hdoc || a.Op == syntax.DashHdoc {
				return 0, "The interpolation is in a here-document's delimiter, which the shell does not expand."
			}
		}
	}
	return ctxWord, ""
}

// litRefusal says why a placeholder that the parser read as literal text
// cannot hold a value.
func litRefusal(stack []syntax.Node, l *syntax.Lit) string {
	for i := len(stack) - 1; i >= 0; i-- {
		if r, ok := stack[i].(*syntax.Redirect); ok && r.Hdoc != nil && r.Hdoc.Pos().Offset() <= l.Pos().Offset() && l.End().Offset() <= r.Hdoc.End().Offset() {
			return "The interpolation is in a here-document whose delimiter is quoted (<<'EOF'), where the shell expands nothing: the value would have to be written into the script's text. Unquote the delimiter (<<EOF): rewind then passes the value so that the shell expands it as data."
		}
	}
	return "The shell takes the text here literally (after a backslash, or as a name the shell does not expand), so the value would be written into the script's text. Remove the backslash, or move the interpolation to a word or a quoted string."
}

// refusalDiag is the diagnostic for a refused context: at the
// interpolation, or at the whole command for a script that does not parse.
func refusalDiag(r *shellRefusal, segs []shellSegment, expr hcl.Expression) *hcl.Diagnostic {
	subject := expr.Range()
	summary := "Invalid shell command"
	if r.seg >= 0 {
		summary = "Interpolation in an unsafe place of a command"
		if segs[r.seg].expr != nil {
			subject = segs[r.seg].expr.Range()
		}
	}
	return &hcl.Diagnostic{Severity: hcl.DiagError, Summary: summary, Detail: r.msg, Subject: subject.Ptr()}
}

// maxShellVariants bounds the combinations of if directives that the load
// time check tries; beyond it, a template is checked when it is rendered.
const maxShellVariants = 64

// segmentVariants flattens a template into its possible segment lists, one
// per combination of if-directive branches (at most maxShellVariants).
func segmentVariants(expr hcl.Expression) ([][]shellSegment, bool) {
	var parts []hclsyntax.Expression
	switch e := expr.(type) {
	case *hclsyntax.TemplateWrapExpr:
		parts = []hclsyntax.Expression{e.Wrapped}
	case *hclsyntax.TemplateExpr:
		parts = e.Parts
	default:
		return nil, false
	}
	out := [][]shellSegment{nil}
	for _, part := range parts {
		var alts [][]shellSegment
		if lit, ok := literalText(part); ok {
			alts = [][]shellSegment{{{isLit: true, lit: lit}}}
		} else if c, ok := part.(*hclsyntax.ConditionalExpr); ok {
			for _, branch := range []hclsyntax.Expression{c.TrueResult, c.FalseResult} {
				if sub, ok := segmentVariants(branch); ok {
					alts = append(alts, sub...)
				} else {
					alts = append(alts, []shellSegment{{expr: branch}})
				}
			}
		} else {
			alts = [][]shellSegment{{{expr: part}}}
		}
		var next [][]shellSegment
		for _, prefix := range out {
			for _, alt := range alts {
				if len(next) == maxShellVariants {
					break
				}
				v := append(append([]shellSegment(nil), prefix...), alt...)
				next = append(next, v)
			}
		}
		out = next
	}
	return out, true
}

// checkShellTemplate refuses, at load time, a string command's template
// with an interpolation where no value is safe (or that is not a valid
// POSIX shell script once its interpolations stand for words); it reports
// false after an error.
func (l *loader) checkShellTemplate(expr hcl.Expression) bool {
	variants, ok := segmentVariants(expr)
	if !ok {
		if refs := l.outsideRefs(expr, map[string]bool{}); len(refs) > 0 {
			l.errorf(expr.Range(), "Command built outside its template",
				"This string command is not a template written in the command attribute, and it is derived from %s: rewind would take the whole value as the script, so a value from outside the HCL files would become code. Write the template in the attribute itself (command = \"./run.sh ${%s}\"), where rewind passes each interpolated value as data, or use a list command.",
				strings.Join(refs, ", "), refs[0])
			return false
		}
		return true
	}
	before := len(l.diags)
	seen := map[string]bool{}
	for _, segs := range variants {
		script, names := placeholderScript(segs)
		if _, r := analyzeShell(script, names); r != nil {
			d := refusalDiag(r, segs, expr)
			key := d.Subject.String() + d.Detail
			if !seen[key] {
				seen[key] = true
				l.diags = append(l.diags, d)
			}
		}
	}
	return len(l.diags) == before
}

// renderCommand evaluates a command attribute for one process: a string
// template is rendered for /bin/sh -c (renderShellTemplate) and its
// references collected in sec; anything else (a list, a string built
// elsewhere) is evaluated as it is. The result is the process's argv.
func renderCommand(expr hcl.Expression, ctx *hcl.EvalContext, sec *shellSecrets) ([]string, cty.Value, error) {
	if script, ok, diags := renderShellTemplate(expr, ctx, sec); ok {
		if diags.HasErrors() {
			return nil, cty.NilVal, diags
		}
		return []string{"/bin/sh", "-c", script}, cty.StringVal(script), nil
	}
	v, diags := expr.Value(ctx)
	if diags.HasErrors() {
		return nil, cty.NilVal, diags
	}
	argv, err := commandArgv(unmark(v))
	return argv, v, err
}

// inlineSafe reports whether s reads the same in every context a value can
// stand in, so that it can be written into the script as it is: not empty,
// only letters, digits and @%+:,./_-, and not a reserved word.
func inlineSafe(s string) bool {
	if s == "" || shellReserved[s] {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("@%+:,./_-", r)) {
			return false
		}
	}
	return true
}

var shellReserved = map[string]bool{"if": true, "then": true, "else": true, "elif": true, "fi": true, "do": true, "done": true,
	"case": true, "esac": true, "while": true, "until": true, "for": true, "in": true}

// outsideRefs are the values from outside the HCL files that expr derives
// from, through locals: var.<name>, each.key, each.value, run.* and pool.*.
func (l *loader) outsideRefs(expr hcl.Expression, seen map[string]bool) []string {
	var out []string
	for _, tr := range expr.Variables() {
		root := tr.RootName()
		name := ""
		if len(tr) > 1 {
			if a, ok := tr[1].(hcl.TraverseAttr); ok {
				name = a.Name
			}
		}
		key := root + "." + name
		if seen[key] {
			continue
		}
		seen[key] = true
		switch root {
		case "var", "each", "run", "pool":
			out = append(out, key)
		case "local":
			if lv := l.locals[name]; lv != nil && lv.Expr != nil {
				out = append(out, l.outsideRefs(lv.Expr, seen)...)
			}
		}
	}
	return out
}
