package dsl

import (
	"fmt"
	"sort"
	"strings"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"
	"github.com/zclconf/go-cty/cty/convert"
	ctyjson "github.com/zclconf/go-cty/cty/json"
)

// Sensitive variables, as Terraform's: `variable "token" { sensitive = true }`.
//
// The value of a sensitive variable is marked (cty marks) in var.*, so that
// every value derived from it (a local, a template, a function's result)
// carries the mark too. A marked value may be used only where rewind can keep
// it out of what it shows and stores:
//
//   - a task's string command: each interpolation of a sensitive value is
//     rendered as a reference to an environment variable of the attempt,
//     REWIND_SECRET_<name> for ${var.<name>}, REWIND_SECRET_<n> (n = 1, 2,
//     ... in the order of the template) for a derived value, written for
//     the context it stands in (shellrender.go). The value is in the
//     attempt's environment, never in its argv, so ps does not show it;
//   - a task's env block (the environment is not argv either);
//   - a notify block's webhook (every error names only its scheme and host).
//
// A list command (argv) with a sensitive element is refused at load time:
// argv is public on the machine. So is a sensitive value anywhere else
// (names, dates, paths, for_each, pools, requires, outputs, ...), where it
// would become text that rewind prints or stores.
//
// Every attempt, pool setup and teardown, and notify command also gets
// REWIND_SECRET_<name> for each sensitive variable whose name is a valid
// environment variable name, so that a task with a list command reads its
// secret from the environment.
//
// As a second line of defence, text that rewind prints or stores
// (diagnostics, rendering errors, backfill plans and reports, the CLI's
// output) is scrubbed of the plain text of every sensitive value
// (Workspace.Redact), shown as SensitiveText instead.

// SensitiveText is shown in place of a sensitive value.
const SensitiveText = "(sensitive value)"

// SecretEnvPrefix prefixes the environment variables that carry sensitive
// values to the commands rewind runs: REWIND_SECRET_token for var.token.
const SecretEnvPrefix = "REWIND_SECRET_"

// minRedactLen: shorter sensitive values are not scrubbed from text (a
// secret "a" would mangle every word); marks keep them out of text anyway.
const minRedactLen = 4

type mark string

// markSensitive marks the values of sensitive variables and what derives
// from them.
const markSensitive = mark("sensitive")

// isSensitive reports whether v, or any value inside it, is sensitive.
func isSensitive(v cty.Value) bool {
	return v.HasMarkDeep(markSensitive)
}

// secrets are the sensitive values of a workspace.
type secrets struct {
	texts []string          // plain texts to scrub, longest first
	env   map[string]string // REWIND_SECRET_<name> -> value, for every command rewind runs
}

// redact replaces every sensitive text in s by SensitiveText.
func (s *secrets) redact(text string) string {
	if s == nil {
		return text
	}
	for _, t := range s.texts {
		if strings.Contains(text, t) {
			text = strings.ReplaceAll(text, t, SensitiveText)
		}
	}
	return text
}

func (s *secrets) redactErr(err error) error {
	if s == nil || err == nil {
		return err
	}
	msg := err.Error()
	if red := s.redact(msg); red != msg {
		return &redactedError{msg: red, err: err}
	}
	return err
}

// redactedError is an error whose text had sensitive values: errors.Is and
// errors.As still see the original.
type redactedError struct {
	msg string
	err error
}

func (e *redactedError) Error() string { return e.msg }
func (e *redactedError) Unwrap() error { return e.err }

// addEnv copies the secrets' environment into env (which wins over what env
// held: a task's env block cannot hide a REWIND_SECRET_ variable).
func (s *secrets) addEnv(env map[string]string) map[string]string {
	if s == nil || len(s.env) == 0 {
		return env
	}
	if env == nil {
		env = map[string]string{}
	}
	for k, v := range s.env {
		env[k] = v
	}
	return env
}

// Redact returns s with the plain text of every sensitive value of the
// workspace replaced by SensitiveText. Use it on text about to be printed or
// stored that may hold what a command printed or an error said.
func (w *Workspace) Redact(s string) string {
	if w == nil {
		return s
	}
	return w.secrets.redact(s)
}

// RedactError is err with its text redacted (Redact); errors.Is and
// errors.As still see the original error.
func (w *Workspace) RedactError(err error) error {
	if w == nil {
		return err
	}
	return w.secrets.redactErr(err)
}

// HasSecrets reports whether the workspace has sensitive values to redact.
func (w *Workspace) HasSecrets() bool {
	return w != nil && w.secrets != nil && len(w.secrets.texts) > 0
}

// secretText is v as the text a command receives: a string as is, a number
// or bool in its canonical form, anything else as JSON.
func secretText(v cty.Value) (string, bool) {
	v = unmark(v)
	if !v.IsWhollyKnown() || v.IsNull() {
		return "", false
	}
	if v.Type().IsPrimitiveType() {
		sv, err := convert.Convert(v, cty.String)
		if err != nil {
			return "", false
		}
		return sv.AsString(), true
	}
	js, err := ctyjson.Marshal(v, v.Type())
	if err != nil {
		return "", false
	}
	return string(js), true
}

// leafTexts appends the texts of v's primitive values, and of v itself.
func leafTexts(v cty.Value, out []string) []string {
	v = unmark(v)
	if !v.IsWhollyKnown() || v.IsNull() {
		return out
	}
	if s, ok := secretText(v); ok {
		out = append(out, s)
	}
	if v.Type().IsPrimitiveType() {
		return out
	}
	if v.CanIterateElements() {
		for it := v.ElementIterator(); it.Next(); {
			k, ev := it.Element()
			if k.Type() == cty.String {
				out = append(out, k.AsString())
			}
			out = leafTexts(ev, out)
		}
	}
	return out
}

// collectSecrets gathers the sensitive values of the variables and locals.
func (l *loader) collectSecrets() *secrets {
	s := &secrets{env: map[string]string{}}
	var texts []string
	for _, name := range sortedNames(l.vars) {
		v := l.vars[name]
		if !v.Sensitive {
			continue
		}
		texts = leafTexts(v.Value, texts)
		if envName.MatchString(name) {
			if t, ok := secretText(v.Value); ok {
				s.env[SecretEnvPrefix+name] = t
			}
		}
	}
	for _, name := range sortedNames(l.locals) {
		if lv := l.locals[name]; isSensitive(lv.Value) {
			_, pvm := lv.Value.UnmarkDeepWithPaths()
			for _, pm := range pvm {
				if _, ok := pm.Marks[markSensitive]; !ok {
					continue
				}
				if sub, err := pm.Path.Apply(unmark(lv.Value)); err == nil {
					texts = leafTexts(sub, texts)
				}
			}
		}
	}
	seen := map[string]bool{}
	for _, t := range texts {
		if len(t) >= minRedactLen && !seen[t] {
			seen[t] = true
			s.texts = append(s.texts, t)
		}
	}
	// Longest first: a secret that contains another is replaced whole.
	sort.Slice(s.texts, func(i, j int) bool {
		if len(s.texts[i]) != len(s.texts[j]) {
			return len(s.texts[i]) > len(s.texts[j])
		}
		return s.texts[i] < s.texts[j]
	})
	return s
}

// redactDiagnostics scrubs the summary and detail of every diagnostic (a
// function's error may quote its argument: tonumber(var.token)).
func (s *secrets) redactDiagnostics(diags hcl.Diagnostics) {
	if s == nil || len(s.texts) == 0 {
		return
	}
	for _, d := range diags {
		if d == nil {
			continue
		}
		d.Summary = s.redact(d.Summary)
		d.Detail = s.redact(d.Detail)
	}
}

// secretUse says whether, and how, an expression may hold a sensitive value.
type secretUse int

const (
	secretsRefused secretUse = iota // anywhere that becomes text: names, paths, dates...
	secretsCommand                  // a task's command: the string form only
	secretsAllowed                  // a task's env, a notify webhook
)

// sensitiveNames lists the sensitive variables and locals expr refers to,
// as var.NAME and local.NAME.
func (l *loader) sensitiveNames(expr hcl.Expression) []string {
	var out []string
	seen := map[string]bool{}
	for _, tr := range expr.Variables() {
		if len(tr) < 2 {
			continue
		}
		a, ok := tr[1].(hcl.TraverseAttr)
		if !ok {
			continue
		}
		name := tr.RootName() + "." + a.Name
		switch tr.RootName() {
		case "var":
			if v := l.vars[a.Name]; v == nil || !v.Sensitive {
				continue
			}
		case "local":
			if lv := l.locals[a.Name]; lv == nil || !isSensitive(lv.Value) {
				continue
			}
		default:
			continue
		}
		if !seen[name] {
			seen[name] = true
			out = append(out, name)
		}
	}
	return out
}

// derivedFrom names what a sensitive expression derives from, for messages.
func (l *loader) derivedFrom(expr hcl.Expression) string {
	names := l.sensitiveNames(expr)
	switch len(names) {
	case 0:
		return "a sensitive value"
	case 1:
		return names[0] + ", which is sensitive"
	}
	return strings.Join(names, ", ") + ", which are sensitive"
}

// secretHint is where a task finds the value of the sensitive variables expr
// refers to, directly or through locals: $REWIND_SECRET_<name>.
func (l *loader) secretHint(expr hcl.Expression) string {
	var envs []string
	for _, name := range l.sensitiveVars(expr, map[string]bool{}) {
		if envName.MatchString(name) {
			envs = append(envs, "$"+SecretEnvPrefix+name)
		}
	}
	if len(envs) == 0 {
		return "$" + SecretEnvPrefix + "<name>"
	}
	return strings.Join(envs, ", ")
}

// sensitiveVars names the sensitive variables expr refers to, directly or
// through locals (seen: the locals followed already).
func (l *loader) sensitiveVars(expr hcl.Expression, seen map[string]bool) []string {
	var out []string
	for _, n := range l.sensitiveNames(expr) {
		root, name, _ := strings.Cut(n, ".")
		switch {
		case root == "var" && !seen[n]:
			seen[n] = true
			out = append(out, name)
		case root == "local" && !seen[n]:
			seen[n] = true
			out = append(out, l.sensitiveVars(l.locals[name].Expr, seen)...)
		}
	}
	return out
}

// checkSensitive reports a sensitive value where sc does not allow one; it
// returns false after an error.
func (l *loader) checkSensitive(expr hcl.Expression, v cty.Value, sc scope) bool {
	if !isSensitive(v) {
		return true
	}
	switch sc.secrets {
	case secretsAllowed:
		return true
	case secretsCommand:
		return l.checkSensitiveCommand(expr, v)
	}
	l.errorf(expr.Range(), "Sensitive value not allowed here",
		"This value is derived from %s: here rewind would show or store it as text (names, dates, paths, plans, logs or the process list). A sensitive value may be used in a task's string command (it reaches the task as the environment variable %s, never in argv), in a task's env block and in a notify block's webhook; every task can also read %s from its environment.",
		l.derivedFrom(expr), l.secretHint(expr), l.secretHint(expr))
	return false
}

// checkSensitiveCommand checks a task command holding a sensitive value: a
// template string is rendered with environment references; a list (argv)
// or a string that is not a template would put the value in the process
// list.
func (l *loader) checkSensitiveCommand(expr hcl.Expression, v cty.Value) bool {
	ty := v.Type()
	if ty.IsTupleType() || ty.IsListType() {
		elems, diags := hcl.ExprList(expr)
		found := false
		if !diags.HasErrors() && !v.IsMarked() && v.IsKnown() && len(elems) == v.LengthInt() {
			for i, ev := range v.AsValueSlice() {
				if isSensitive(ev) {
					found = true
					l.argvSecret(elems[i], fmt.Sprintf("Element %d of the command", i))
				}
			}
		}
		if !found {
			l.argvSecret(expr, "The command")
		}
		return false
	}
	switch expr.(type) {
	case *hclsyntax.TemplateExpr, *hclsyntax.TemplateWrapExpr:
		return true
	}
	l.errorf(expr.Range(), "Sensitive value in a command that is not a template",
		"The command is a string built from %s outside of the command's own template: rewind runs such a string as written, so the value would be in the process list. Interpolate the sensitive value into the command's template instead (command = \"deploy --token ${var.token}\": it is rendered as \"$%stoken\", set in the task's environment), or have the task read %s.",
		l.derivedFrom(expr), SecretEnvPrefix, l.secretHint(expr))
	return false
}

func (l *loader) argvSecret(expr hcl.Expression, what string) {
	ref := "${var.token}"
	if names := l.sensitiveNames(expr); len(names) > 0 {
		ref = "${" + names[0] + "}"
	}
	read := l.secretHint(expr)
	if vars := l.sensitiveVars(expr, map[string]bool{}); len(vars) == 1 && envName.MatchString(vars[0]) {
		read += " (or $" + envVarPrefix + vars[0] + ", when the value is set that way)"
	} else {
		read += " (or $" + envVarPrefix + "<name>, when the value is set that way)"
	}
	l.errorf(expr.Range(), "Sensitive value in an argv command",
		"%s is derived from %s. A list command is passed to the process as argv, which every user of the machine can read in the process list (ps). Use the string form, command = \"... %s\": rewind renders the value as a reference to an environment variable that it sets for the task, never in argv. Or have the task read %s from its environment, or set the value in the task's env block.",
		what, l.derivedFrom(expr), ref, read)
}

// shellSecrets collects the environment variables a rendered string
// command refers to: REWIND_SECRET_<...> for its sensitive values,
// REWIND_ARG_<n> for the other values that are not written in place.
type shellSecrets struct {
	env            map[string]string
	n              int // REWIND_SECRET_<n> numbers taken
	args           int // REWIND_ARG_<n> numbers taken
	allowSensitive bool
}

// place is the text that stands for a value in context ctx of the script:
// the value itself when it reads the same everywhere, else a reference to
// an environment variable that holds it.
func (s *shellSecrets) place(seg shellSegment, ctx shellContext) string {
	var name string
	switch {
	case seg.sensitive:
		name = s.secretName(seg.expr, seg.value)
	case inlineSafe(seg.value):
		return seg.value
	default:
		s.args++
		name = fmt.Sprintf("%s%d", ArgEnvPrefix, s.args)
		s.set(name, seg.value)
	}
	ref := "${" + name + "}"
	switch ctx {
	case ctxWord:
		return `"` + ref + `"`
	case ctxSingle:
		return `'"` + ref + `"'`
	}
	return ref
}

// envOrEmpty is the variables collected, never nil.
func (s *shellSecrets) envOrEmpty() map[string]string {
	if s.env == nil {
		return map[string]string{}
	}
	return s.env
}

func (s *shellSecrets) set(name, value string) {
	if s.env == nil {
		s.env = map[string]string{}
	}
	s.env[name] = value
}

// secretName names the variable of a sensitive value:
// REWIND_SECRET_<name> for ${var.<name>}, else REWIND_SECRET_<n>.
func (s *shellSecrets) secretName(expr hcl.Expression, value string) string {
	name := ""
	if st, ok := expr.(*hclsyntax.ScopeTraversalExpr); ok && len(st.Traversal) == 2 && st.Traversal.RootName() == "var" {
		if a, ok := st.Traversal[1].(hcl.TraverseAttr); ok && envName.MatchString(a.Name) {
			name = SecretEnvPrefix + a.Name
		}
	}
	if name == "" {
		for {
			s.n++
			name = fmt.Sprintf("%s%d", SecretEnvPrefix, s.n)
			if old, taken := s.env[name]; !taken || old == value {
				break
			}
		}
	}
	s.set(name, value)
	return name
}
