package dsl

import (
	"fmt"
	"net/url"
	"sort"
	"strings"

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
		n := &Notify{Name: name, DeclRange: b.DefRange, ctx: l.ctx, dir: fileDir(b.DefRange), secrets: l.ws.secrets, pass: l.ws.Environment.Pass}
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
			// A webhook's URL often carries a token: it may come from a
			// sensitive variable, and rewind shows only its scheme and
			// host (RedactURL).
			hookScope := sc
			hookScope.secrets = secretsAllowed
			if s, ok := l.stringAttr(attr, l.ctx, hookScope, true); ok {
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
// The message shows only the URL's scheme and host (RedactURL): its path
// and query often carry a token.
func checkWebhook(s string) string {
	const want = "webhook must be an absolute http or https URL, such as \"https://hooks.example.com/rewind\" or \"http://127.0.0.1:8080/hook\""
	shown := RedactURL(s)
	u, err := url.Parse(s)
	switch {
	case err != nil:
		return fmt.Sprintf("%s: %s does not parse (%s).", want, shown, redactQuoted(unwrapURLError(err).Error()))
	case u.Scheme == "":
		return fmt.Sprintf("%s; this one has no scheme: it must start with http:// or https://.", want)
	case u.Scheme != "http" && u.Scheme != "https":
		return fmt.Sprintf("%s, not a URL of scheme %q (%s).", want, u.Scheme, shown)
	case u.Host == "" || u.Hostname() == "":
		return fmt.Sprintf("%s: %s names no host.", want, shown)
	case u.Opaque != "":
		return fmt.Sprintf("%s, not %s.", want, shown)
	}
	return ""
}

// RedactedMarker replaces what RedactURL hides of a URL.
const RedactedMarker = "…(redacted)"

// RedactURL is a URL as rewind shows it in errors, logs and diagnostics:
// its scheme and host (port included), then RedactedMarker in place of
// whatever else it has (user info, path, query, fragment), which often
// carries a token: "https://hooks.example/T0KEN?x=1" is shown as
// "https://hooks.example/…(redacted)". A URL that does not parse keeps
// what looks like its scheme and host; without those, only the marker.
func RedactURL(raw string) string {
	u, err := url.Parse(raw)
	if err == nil && u.Scheme != "" && u.Host != "" && u.Opaque == "" {
		if u.User == nil && (u.Path == "" || u.Path == "/") && u.RawQuery == "" && !u.ForceQuery && u.Fragment == "" {
			return u.Scheme + "://" + u.Host + "/"
		}
		return u.Scheme + "://" + u.Host + "/" + RedactedMarker
	}
	scheme, rest, ok := strings.Cut(raw, "://")
	if !ok || !validScheme(scheme) {
		return RedactedMarker
	}
	host := rest
	if i := strings.IndexAny(host, "/?#"); i >= 0 {
		host = host[:i]
	}
	if i := strings.LastIndex(host, "@"); i >= 0 {
		host = host[i+1:]
	}
	return strings.ToLower(scheme) + "://" + host + "/" + RedactedMarker
}

func validScheme(s string) bool {
	if s == "" {
		return false
	}
	for i, r := range s {
		letter := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z'
		if !letter && (i == 0 || !(r >= '0' && r <= '9' || r == '+' || r == '-' || r == '.')) {
			return false
		}
	}
	return true
}

// redactQuoted replaces the quoted parts of a url.Parse error ("invalid
// URL escape \"%zz\"") by a marker: they may come from the path.
func redactQuoted(s string) string {
	var b strings.Builder
	for {
		i := strings.IndexByte(s, '"')
		if i < 0 {
			break
		}
		j := strings.IndexByte(s[i+1:], '"')
		if j < 0 {
			break
		}
		b.WriteString(s[:i])
		b.WriteString(`"…"`)
		s = s[i+1+j+1:]
	}
	b.WriteString(s)
	return b.String()
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
	sec := &shellSecrets{}
	argv, _, err := renderCommand(n.command, ctx, sec)
	if err != nil {
		return nil, fmt.Errorf("notify %s: command: %w", n.Name, err)
	}
	return &Command{Argv: argv, Env: n.secrets.addEnv(sec.envOrEmpty()), Dir: n.dir, Pass: n.pass}, nil
}
