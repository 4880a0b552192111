package dsl

import (
	"fmt"
	"net/url"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/hashicorp/hcl/v2"
)

var notifySchema = &hcl.BodySchema{
	Attributes: []hcl.AttributeSchema{
		{Name: "command"},
		{Name: "webhook"},
		{Name: "on"},
		{Name: "timeout"},
	},
}

// DefaultNotifyTimeout bounds a notify block's command and webhook when it
// sets no timeout.
const DefaultNotifyTimeout = time.Minute

// The events a notify block can get (its on attribute).
const (
	// EventRunFailed: a scheduled or manual run of a pipeline that names
	// the block failed.
	EventRunFailed = "run_failed"
	// EventDeadlineMissed: a run of a pipeline that names the block had
	// not succeeded by its deadline (or did not exist then).
	EventDeadlineMissed = "deadline_missed"
	// EventBackfillReport: a backfill ended; its report (every block that
	// asks for it, whichever pipeline).
	EventBackfillReport = "backfill_report"
)

// NotifyEvents are the events a notify block's on may name.
var NotifyEvents = []string{EventBackfillReport, EventDeadlineMissed, EventRunFailed}

// Wants reports whether the block gets event (without On, the default:
// backfill_report only).
func (n *Notify) Wants(event string) bool {
	if n.On == nil {
		return event == EventBackfillReport
	}
	return slices.Contains(n.On, event)
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
		n.On = []string{EventBackfillReport}
		n.Timeout = DefaultNotifyTimeout
		if attr := attrs["timeout"]; attr != nil {
			if d, ok := l.durationAttr(attr, l.ctx, sc); ok {
				if d < time.Second {
					l.errorf(attr.Expr.Range(), "Invalid timeout", "A notify block's timeout must be at least 1s (e.g. \"30s\"); leave it out for %s.", DefaultNotifyTimeout)
				} else {
					n.Timeout = d
				}
			}
		}
		if attr := attrs["on"]; attr != nil {
			n.On = l.decodeEvents(attr, sc)
		}
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

// decodeEvents reads a notify block's on: a non-empty list of known event
// names, each at most once.
func (l *loader) decodeEvents(attr *hcl.Attribute, sc scope) []string {
	list, ranges, ok := l.stringList(attr, l.ctx, sc)
	if !ok {
		return nil
	}
	if len(list) == 0 {
		l.errorf(attr.Expr.Range(), "Invalid on", "on must name at least one event: %s.", strings.Join(NotifyEvents, ", "))
		return nil
	}
	var out []string
	for i, e := range list {
		rng := attr.Expr.Range()
		if i < len(ranges) {
			rng = ranges[i]
		}
		switch {
		case !slices.Contains(NotifyEvents, e):
			l.errorf(rng, "Unknown notify event", "%q is not an event a notify block can get: on takes %s.", e, strings.Join(NotifyEvents, ", "))
		case slices.Contains(out, e):
			l.errorf(rng, "Repeated notify event", "on names %q twice.", e)
		default:
			out = append(out, e)
		}
	}
	sort.Strings(out)
	return out
}

// resolveNotify turns every pipeline's notify references into
// Pipeline.Notify, once the notify blocks are known.
func (l *loader) resolveNotify() {
	byName := map[string]*Notify{}
	var names []string
	for _, n := range l.ws.Notifies {
		byName[n.Name] = n
		names = append(names, n.Name)
	}
	for _, p := range l.ws.Pipelines {
		for _, ref := range p.notifyRefs {
			n := byName[ref.label]
			switch {
			case ref.byKey:
				l.errorf(ref.rng, "Invalid notify reference", "notify holds references to notify blocks, like notify.oncall, without a key.")
			case n == nil:
				known := "No notify block is declared."
				if len(names) > 0 {
					known = "The declared notify blocks are: " + strings.Join(names, ", ") + "."
				}
				l.errorf(ref.rng, "Unknown notify block", "No notify block named %q is declared. %s", ref.label, known)
			case !slices.Contains(p.Notify, n.Name):
				p.Notify = append(p.Notify, n.Name)
			}
		}
		sort.Strings(p.Notify)
	}
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

// HasCommand reports whether the block sets a command.
func (n *Notify) HasCommand() bool { return n != nil && n.command != nil }

// Notify returns the notify block called name, or nil.
func (w *Workspace) Notify(name string) *Notify {
	for _, n := range w.Notifies {
		if n.Name == name {
			return n
		}
	}
	return nil
}
