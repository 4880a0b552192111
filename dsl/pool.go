package dsl

import (
	"math"
	"strings"
	"time"

	"github.com/hashicorp/hcl/v2"
)

// DefaultIdleTimeout is how long a pool that ran its setup stays idle
// before its teardown runs, when idle_timeout is unset.
const DefaultIdleTimeout = 5 * time.Minute

var poolSchema = &hcl.BodySchema{
	Attributes: []hcl.AttributeSchema{
		{Name: "slots"},
		{Name: "memory"},
		{Name: "cpus"},
		{Name: "oom_escalate_to"},
		{Name: "reserved_for_scheduled"},
		{Name: "idle_timeout"},
		{Name: "launcher"},
		{Name: "setup"},
		{Name: "teardown"},
		{Name: "executor"},
		{Name: "partition"},
		// escalate_to is the former name of oom_escalate_to: it is in the
		// schema only to report the new name.
		{Name: "escalate_to"},
	},
}

// poolDecl is what decodePools keeps for the checks that need source ranges.
type poolDecl struct {
	escalateRange hcl.Range
}

// The executors of a pool (its executor attribute).
const (
	ExecutorLocal = "local" // local processes (the default)
	ExecutorSlurm = "slurm" // Slurm batch jobs, in the pool's partition
)

// Slurm reports whether the pool's attempts run as Slurm jobs.
func (p *Pool) Slurm() bool { return p != nil && p.Executor == ExecutorSlurm }

// newPool is a pool with the defaults of every optional attribute.
func newPool(name string) *Pool {
	return &Pool{Name: name, Slots: DefaultPoolSlots, IdleTimeout: DefaultIdleTimeout, Executor: ExecutorLocal}
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
		p := newPool(name)
		p.DeclRange = b.DefRange
		p.poolCtx = l.ctx
		p.dir = fileDir(b.DefRange)
		p.secrets = l.ws.secrets
		p.pass = l.ws.Environment.Pass
		pools[name] = p
		content, diags := b.Body.Content(poolSchema)
		l.diags = append(l.diags, diags...)
		attrs := content.Attributes
		slotsKnown := attrs["slots"] == nil
		if n, ok := l.intAttr(attrs["slots"], l.ctx, scope{}, 1, math.MaxInt32, "at least 1"); ok {
			p.Slots = n
			slotsKnown = true
		}
		if attr := attrs["memory"]; attr != nil {
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
		if n, ok := l.intAttr(attrs["cpus"], l.ctx, scope{}, 1, math.MaxInt32, "at least 1"); ok {
			p.CPUs = n
		}
		if attr := attrs["escalate_to"]; attr != nil {
			l.errorf(attr.NameRange, "Unsupported argument", "escalate_to was renamed oom_escalate_to: the pool an attempt killed for memory is retried on.")
		}
		if attr := attrs["oom_escalate_to"]; attr != nil {
			if s, ok := l.stringAttr(attr, l.ctx, scope{}, false); ok {
				p.EscalateTo = s
				decls[name] = poolDecl{escalateRange: attr.Expr.Range()}
			}
		}
		if attr := attrs["reserved_for_scheduled"]; attr != nil {
			if n, ok := l.intAttr(attr, l.ctx, scope{}, 0, math.MaxInt32, "0 or more"); ok {
				switch {
				case !slotsKnown:
				case n >= p.Slots:
					l.errorf(attr.Expr.Range(), "Invalid reserved_for_scheduled", "reserved_for_scheduled (%d) must be less than the pool's slots (%d): at least one slot must remain for backfill runs.", n, p.Slots)
				default:
					p.ReservedForScheduled = n
				}
			}
		}
		if attr := attrs["idle_timeout"]; attr != nil {
			if d, ok := l.durationAttr(attr, l.ctx, scope{}); ok {
				if d == 0 {
					l.errorf(attr.Expr.Range(), "Invalid idle_timeout", "idle_timeout must be more than 0: it is how long the pool stays idle before its teardown runs.")
				} else {
					p.IdleTimeout = d
				}
			}
		}
		l.decodeExecutor(p, attrs)
		poolScope := scope{pool: true}
		if attr := attrs["launcher"]; attr != nil {
			v := l.eval(attr.Expr, l.ctx, poolScope)
			if !v.IsKnown() || !v.IsNull() {
				if l.checkLauncherType(attr, v) {
					p.launcher = attr.Expr
				}
			}
		}
		for _, cmd := range []struct {
			name string
			expr *hcl.Expression
		}{{"setup", &p.setup}, {"teardown", &p.teardown}} {
			attr := attrs[cmd.name]
			if attr == nil {
				continue
			}
			v := l.eval(attr.Expr, l.ctx, poolScope)
			if !v.IsKnown() || !v.IsNull() {
				if l.checkCommandType(attr, v) {
					*cmd.expr = attr.Expr
				}
			}
		}
	}
	if pools[DefaultPoolName] == nil {
		pools[DefaultPoolName] = newPool(DefaultPoolName)
	}

	for _, name := range sortedNames(decls) {
		p := pools[name]
		r := decls[name].escalateRange
		switch {
		case p.EscalateTo == name:
			l.errorf(r, "Invalid oom_escalate_to", "Pool %q cannot escalate to itself.", name)
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

// decodeExecutor reads executor and partition: executor is "local" (the
// default) or "slurm"; a partition names a Slurm partition, so it is only
// for a Slurm pool.
func (l *loader) decodeExecutor(p *Pool, attrs hcl.Attributes) {
	if attr := attrs["executor"]; attr != nil {
		if s, ok := l.stringAttr(attr, l.ctx, scope{}, false); ok {
			switch s {
			case ExecutorLocal, ExecutorSlurm:
				p.Executor = s
			default:
				l.errorf(attr.Expr.Range(), "Invalid executor", "executor must be %q (local processes, the default) or %q (Slurm batch jobs), not %q.", ExecutorLocal, ExecutorSlurm, s)
			}
		}
	}
	if attr := attrs["partition"]; attr != nil {
		if s, ok := l.stringAttr(attr, l.ctx, scope{}, false); ok {
			switch {
			case p.Executor != ExecutorSlurm:
				l.errorf(attr.NameRange, "Partition without Slurm", "partition names a Slurm partition: it is only for a pool with executor = %q.", ExecutorSlurm)
			case s == "" || strings.ContainsAny(s, " \t\n,="):
				l.errorf(attr.Expr.Range(), "Invalid partition", "partition must be one Slurm partition name, not %q.", s)
			default:
				p.Partition = s
			}
		}
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
