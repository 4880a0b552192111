package dsl

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/hcl/v2"
)

var limitSchema = &hcl.BodySchema{
	Attributes: []hcl.AttributeSchema{
		{Name: "concurrency"},
		{Name: "rate"},
	},
}

// rateUnits are the windows a rate may name by a bare unit ("60/m").
var rateUnits = map[string]time.Duration{
	"s": time.Second,
	"m": time.Minute,
	"h": time.Hour,
	"d": 24 * time.Hour,
}

// ParseRate parses a rate limit "N/UNIT": N (a whole number, at least 1)
// starts per second ("10/s"), minute ("60/m"), hour ("100/h") or day
// ("1000/d"), or per any duration ParseDuration accepts ("5/30s", "1/1h30m").
func ParseRate(s string) (n int, per time.Duration, err error) {
	num, window, ok := strings.Cut(s, "/")
	num, window = strings.TrimSpace(num), strings.TrimSpace(window)
	if !ok || num == "" || window == "" {
		return 0, 0, fmt.Errorf("invalid rate %q: write N/UNIT, like \"10/s\", \"60/m\", \"100/h\" or \"5/30s\"", s)
	}
	for _, r := range num {
		if r < '0' || r > '9' {
			return 0, 0, fmt.Errorf("invalid rate %q: %q is not a whole number of starts", s, num)
		}
	}
	count, err := strconv.ParseInt(num, 10, 64)
	if err != nil || count > math.MaxInt32 {
		return 0, 0, fmt.Errorf("invalid rate %q: %s starts is too many", s, num)
	}
	if count < 1 {
		return 0, 0, fmt.Errorf("invalid rate %q: the number of starts must be at least 1", s)
	}
	per, ok = rateUnits[window]
	if !ok {
		per, err = ParseDuration(window)
		if err != nil {
			return 0, 0, fmt.Errorf("invalid rate %q: %q is neither s, m, h, d nor a duration like 30s", s, window)
		}
		if per == 0 {
			return 0, 0, fmt.Errorf("invalid rate %q: the window must be longer than 0", s)
		}
	}
	return int(count), per, nil
}

func (l *loader) decodeLimits(blocks []*hcl.Block) {
	limits := l.ws.Limits
	for _, b := range blocks {
		name := b.Labels[0]
		if !l.checkName("limit", name, b) {
			continue
		}
		if prev := limits[name]; prev != nil {
			l.errorf(b.DefRange, "Duplicate limit", "A limit named %q was already declared at %s. Limit names must be unique.", name, prev.DeclRange)
			continue
		}
		lim := &Limit{Name: name, DeclRange: b.DefRange}
		limits[name] = lim
		content, diags := b.Body.Content(limitSchema)
		l.diags = append(l.diags, diags...)
		attrs := content.Attributes
		if attrs["concurrency"] == nil && attrs["rate"] == nil {
			l.errorf(b.DefRange, "Limit without concurrency or rate", "The limit %q sets neither concurrency nor rate: set concurrency (attempts at once), rate (starts per window, like \"60/m\") or both.", name)
		}
		if n, ok := l.intAttr(attrs["concurrency"], l.ctx, scope{}, 1, math.MaxInt32, "at least 1"); ok {
			lim.Concurrency = n
		}
		if attr := attrs["rate"]; attr != nil {
			if s, ok := l.stringAttr(attr, l.ctx, scope{}, false); ok {
				if n, per, err := ParseRate(s); err != nil {
					l.errorf(attr.Expr.Range(), "Invalid rate", "%s.", capitalize(err.Error()))
				} else {
					lim.Rate, lim.Per = n, per
				}
			}
		}
	}
}

func (l *loader) knownLimits() string {
	if len(l.ws.Limits) == 0 {
		return "No limit is declared: declare one with a limit block."
	}
	return "The declared limits are: " + strings.Join(sortedNames(l.ws.Limits), ", ") + "."
}

// decodeLimitRefs reads a task's limits: a list of references limit.NAME,
// as static traversals (not evaluated), each naming a declared limit. The
// names are returned sorted, without repeats.
func (l *loader) decodeLimitRefs(attr *hcl.Attribute) []string {
	exprs, diags := hcl.ExprList(attr.Expr)
	l.diags = append(l.diags, diags...)
	seen := map[string]bool{}
	var names []string
	for _, expr := range exprs {
		tr, diags := hcl.AbsTraversalForExpr(expr)
		if diags.HasErrors() {
			l.errorf(expr.Range(), "Invalid limits reference", "limits holds references to limit blocks, like limit.oltp.")
			continue
		}
		a, ok := hcl.TraverseAttr{}, false
		if len(tr) == 2 {
			a, ok = tr[1].(hcl.TraverseAttr)
		}
		if tr.RootName() != "limit" || !ok {
			l.errorf(tr.SourceRange(), "Invalid limits reference", "limits holds references to limit blocks, like limit.oltp.")
			continue
		}
		if l.ws.Limits[a.Name] == nil {
			l.errorf(tr.SourceRange(), "Unknown limit", "No limit named %q is declared. %s", a.Name, l.knownLimits())
			continue
		}
		if !seen[a.Name] {
			seen[a.Name] = true
			names = append(names, a.Name)
		}
	}
	sort.Strings(names)
	return names
}
