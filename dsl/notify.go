package dsl

import (
	"fmt"
	"net/url"
	"sort"

	"github.com/hashicorp/hcl/v2"
)

var notifySchema = &hcl.BodySchema{
	Attributes: []hcl.AttributeSchema{
		{Name: "command"},
		{Name: "webhook"},
	},
}

// decodeNotifies reads the workspace's notify blocks into ws.Notifies,
// sorted by name.
func (l *loader) decodeNotifies(blocks []*hcl.Block) {
	byName := map[string]*Notify{}
	sc := scope{notify: true}
	for _, b := range blocks {
		name := b.Labels[0]
		if !l.checkName("notify", name, b) {
			continue
		}
		if prev := byName[name]; prev != nil {
			l.errorf(b.DefRange, "Duplicate notify block", "A notify block named %q was already declared at %s. Notify names must be unique.", name, prev.DeclRange)
			continue
		}
		n := &Notify{Name: name, DeclRange: b.DefRange, ctx: l.ctx, dir: fileDir(b.DefRange)}
		byName[name] = n
		l.ws.Notifies = append(l.ws.Notifies, n)

		content, diags := b.Body.Content(notifySchema)
		l.diags = append(l.diags, diags...)
		attrs := content.Attributes
		if attrs["command"] == nil && attrs["webhook"] == nil {
			l.errorf(b.DefRange, "Notify without command or webhook", "The notify block %q sets neither command nor webhook: set command (run with the report's path in $REWIND_REPORT and its text on stdin), webhook (an http or https URL that receives the report as a JSON POST) or both.", name)
		}
		if attr := attrs["command"]; attr != nil {
			before := len(l.diags)
			v := l.eval(attr.Expr, l.ctx, sc)
			if l.checkCommandType(attr, v) && !hasErrorsSince(l.diags, before) {
				n.command = attr.Expr
			}
		}
		if attr := attrs["webhook"]; attr != nil {
			if s, ok := l.stringAttr(attr, l.ctx, sc, true); ok {
				if msg := checkWebhook(s); msg != "" {
					l.errorf(attr.Expr.Range(), "Invalid webhook", "%s", msg)
				} else {
					n.Webhook = s
				}
			}
		}
	}
	sort.Slice(l.ws.Notifies, func(i, j int) bool { return l.ws.Notifies[i].Name < l.ws.Notifies[j].Name })
}

// checkWebhook returns why s is not an absolute http or https URL, or "".
func checkWebhook(s string) string {
	const want = "webhook must be an absolute http or https URL, such as \"https://hooks.example.com/rewind\" or \"http://127.0.0.1:8080/hook\""
	u, err := url.Parse(s)
	switch {
	case err != nil:
		return fmt.Sprintf("%s: %q does not parse (%s).", want, s, unwrapURLError(err))
	case !u.IsAbs() || (u.Scheme != "http" && u.Scheme != "https"):
		return fmt.Sprintf("%s, not %q.", want, s)
	case u.Host == "" || u.Hostname() == "":
		return fmt.Sprintf("%s: %q names no host.", want, s)
	case u.Opaque != "":
		return fmt.Sprintf("%s, not %q.", want, s)
	}
	return ""
}

// unwrapURLError drops the "parse URL:" prefix of a url.Parse error.
func unwrapURLError(err error) error {
	if ue, ok := err.(*url.Error); ok {
		return ue.Err
	}
	return err
}

// Command renders the notify block's command, run in the directory of the
// file that declares the block; nil when the block sets no command.
func (n *Notify) Command() (*Command, error) {
	if n == nil || n.command == nil {
		return nil, nil
	}
	ctx := n.ctx
	if ctx == nil {
		ctx = &hcl.EvalContext{Functions: functions()}
	}
	v, diags := n.command.Value(ctx)
	if diags.HasErrors() {
		return nil, fmt.Errorf("notify %s: command: %w", n.Name, diags)
	}
	argv, err := commandArgv(unmark(v))
	if err != nil {
		return nil, fmt.Errorf("notify %s: %w", n.Name, err)
	}
	return &Command{Argv: argv, Env: map[string]string{}, Dir: n.dir}, nil
}
