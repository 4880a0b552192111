package dsl

import (
	"math"
	"strings"

	"github.com/hashicorp/hcl/v2"
)

var poolSchema = &hcl.BodySchema{
	Attributes: []hcl.AttributeSchema{
		{Name: "slots"},
		{Name: "memory"},
		{Name: "cpus"},
		{Name: "escalate_to"},
	},
}

// poolDecl is what decodePools keeps for the checks that need source ranges.
type poolDecl struct {
	escalateRange hcl.Range
}

func (l *loader) decodePools(blocks []*hcl.Block) {
	pools := l.ws.Pools
	decls := map[string]poolDecl{}
	for _, b := range blocks {
		name := b.Labels[0]
		if !l.checkName("pool", name, b) {
			continue
		}
		if prev := pools[name]; prev != nil {
			l.errorf(b.DefRange, "Duplicate pool", "A pool named %q was already declared at %s. Pool names must be unique.", name, prev.DeclRange)
			continue
		}
		p := &Pool{Name: name, Slots: DefaultPoolSlots, DeclRange: b.DefRange}
		pools[name] = p
		content, diags := b.Body.Content(poolSchema)
		l.diags = append(l.diags, diags...)
		if n, ok := l.intAttr(content.Attributes["slots"], l.ctx, scope{}, 1, math.MaxInt32, "at least 1"); ok {
			p.Slots = n
		}
		if attr := content.Attributes["memory"]; attr != nil {
			if s, ok := l.stringAttr(attr, l.ctx, scope{}, false); ok {
				size, err := ParseSize(s)
				switch {
				case err != nil:
					l.errorf(attr.Expr.Range(), "Invalid memory size", "%s.", capitalize(err.Error()))
				case size <= 0:
					l.errorf(attr.Expr.Range(), "Invalid memory size", "memory must be more than 0 bytes; leave it out for no limit.")
				default:
					p.Memory = size
				}
			}
		}
		if n, ok := l.intAttr(content.Attributes["cpus"], l.ctx, scope{}, 1, math.MaxInt32, "at least 1"); ok {
			p.CPUs = n
		}
		if attr := content.Attributes["escalate_to"]; attr != nil {
			if s, ok := l.stringAttr(attr, l.ctx, scope{}, false); ok {
				p.EscalateTo = s
				decls[name] = poolDecl{escalateRange: attr.Expr.Range()}
			}
		}
	}
	if pools[DefaultPoolName] == nil {
		pools[DefaultPoolName] = &Pool{Name: DefaultPoolName, Slots: DefaultPoolSlots}
	}

	for _, name := range sortedNames(decls) {
		p := pools[name]
		r := decls[name].escalateRange
		switch {
		case p.EscalateTo == name:
			l.errorf(r, "Invalid escalate_to", "Pool %q cannot escalate to itself.", name)
			p.EscalateTo = ""
		case pools[p.EscalateTo] == nil:
			l.errorf(r, "Unknown pool", "No pool named %q is declared. %s", p.EscalateTo, l.knownPools())
			p.EscalateTo = ""
		}
	}
	reported := map[string]bool{}
	for _, name := range sortedNames(decls) {
		if reported[name] {
			continue
		}
		cycle := findCycle(name, func(n string) []string {
			if to := pools[n].EscalateTo; to != "" {
				return []string{to}
			}
			return nil
		})
		if cycle == nil {
			continue
		}
		for _, n := range cycle {
			reported[n] = true
		}
		l.errorf(decls[cycle[0]].escalateRange, "Pool escalation cycle", "Pools escalate to each other in a cycle: %s. An attempt killed for memory must end on a pool that escalates no further.", joinCycle("", cycle))
	}
}

func (l *loader) knownPools() string {
	return "The declared pools are: " + strings.Join(sortedNames(l.ws.Pools), ", ") + "."
}

func capitalize(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}
