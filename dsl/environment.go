package dsl

import (
	"strconv"
	"strings"

	"github.com/hashicorp/hcl/v2"
)

// Environment is the workspace's environment block: which variables of
// rewind's own environment the processes it starts get, beyond the default
// pass-through set (PATH, HOME, USER, LOGNAME, SHELL, LANG, LANGUAGE, LC_*,
// TZ, TMPDIR: see package executor/procenv, which builds every process's
// environment).
//
//	environment {
//	  pass = ["AWS_*", "SPARK_HOME"]
//	}
type Environment struct {
	// Pass are the patterns: a variable name (SPARK_HOME), or a prefix
	// followed by * (AWS_*) for every name that starts with it.
	Pass      []string
	DeclRange hcl.Range // zero without an environment block
}

var environmentSchema = &hcl.BodySchema{
	Attributes: []hcl.AttributeSchema{{Name: "pass"}},
}

// decodeEnvironment reads the workspace's environment block (at most one)
// into ws.Environment. It is decoded before the blocks that render
// commands, which keep its patterns for their commands (Command.Pass).
func (l *loader) decodeEnvironment(blocks []*hcl.Block) {
	for i, b := range blocks {
		if i > 0 {
			l.errorf(b.DefRange, "Duplicate environment block", "An environment block was already declared at %s: a workspace has at most one.", blocks[0].DefRange)
			continue
		}
		l.ws.Environment.DeclRange = b.DefRange
		content, diags := b.Body.Content(environmentSchema)
		l.diags = append(l.diags, diags...)
		attr := content.Attributes["pass"]
		if attr == nil {
			continue
		}
		pats, ranges, ok := l.stringList(attr, l.ctx, scope{})
		if !ok {
			continue
		}
		for j, p := range pats {
			if msg := checkPassPattern(p); msg != "" {
				l.errorf(ranges[j], "Invalid pass pattern", "%s", msg)
				continue
			}
			l.ws.Environment.Pass = append(l.ws.Environment.Pass, p)
		}
	}
}

// checkPassPattern returns why p is not a pass pattern, or "".
func checkPassPattern(p string) string {
	const want = `A pass pattern is an environment variable's name (SPARK_HOME) or a prefix of names followed by * (AWS_*): letters, digits and underscores, not starting with a digit`
	name, _ := strings.CutSuffix(p, "*")
	switch {
	case p == "*":
		return `"*" would pass all of rewind's environment, its own configuration (REWIND_STATE, PGPASSWORD, ...) included: name the variables, or their prefixes (AWS_*).`
	case name == "":
		return want + "; this one is empty."
	case strings.Contains(name, "*"):
		return want + ", with * only at the end; not " + strconv.Quote(p) + "."
	}
	for i, r := range name {
		if !(r == '_' || r >= 'A' && r <= 'Z' || r >= 'a' && r <= 'z' || i > 0 && r >= '0' && r <= '9') {
			return want + "; not " + strconv.Quote(p) + "."
		}
	}
	return ""
}
