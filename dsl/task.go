package dsl

import (
	"errors"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/zclconf/go-cty/cty"
	"github.com/zclconf/go-cty/cty/convert"
)

// DefaultRetryDelay is the wait between attempts when retry_delay is unset,
// as Airflow's.
const DefaultRetryDelay = 5 * time.Minute

var taskSchema = &hcl.BodySchema{
	Attributes: []hcl.AttributeSchema{
		{Name: "command"},
		{Name: "depends_on"},
		{Name: "retries"},
		{Name: "retry_delay"},
		{Name: "retry_exponential_backoff"},
		{Name: "timeout"},
		{Name: "pool"},
		{Name: "depends_on_past"},
		{Name: "env"},
		{Name: "workdir"},
		{Name: "for_each"},
		{Name: "limits"},
		{Name: "skew_history"},
	},
	Blocks: []hcl.BlockHeaderSchema{
		{Type: "skew"},
	},
}

// depRef is one reference of depends_on, before it is resolved to tasks.
// depRef is a reference to a block by label, or to one for_each instance
// of it (byKey: root.label["key"]): depends_on and consumes hold them.
type depRef struct {
	label string
	key   string
	byKey bool
	rng   hcl.Range
}

type taskDecl struct {
	task  *Task
	multi bool
	refs  []depRef
}

func (l *loader) decodeTasks(p *Pipeline, pb *hcl.Block, blocks []*hcl.Block, pctx *hcl.EvalContext, psc scope) {
	var decls []*taskDecl
	byName := map[string]*taskDecl{}
	byLabel := map[string][]*taskDecl{}
	labelMulti := map[string]bool{}
	labelRange := map[string]hcl.Range{}
	for _, b := range blocks {
		label := b.Labels[0]
		if !l.checkName("task", label, b) {
			continue
		}
		if prev, dup := labelRange[label]; dup {
			l.errorf(b.DefRange, "Duplicate task", "A task named %q was already declared at %s. Task names must be unique within a pipeline.", label, prev)
			continue
		}
		labelRange[label] = b.DefRange
		content, diags := b.Body.Content(taskSchema)
		l.diags = append(l.diags, diags...)
		forEach := content.Attributes["for_each"]
		labelMulti[label] = forEach != nil
		sc := psc
		if forEach != nil {
			sc.each = true
		}
		for _, inst := range l.expand(label, forEach, pctx, psc) {
			d := l.decodeTask(p, b, content, inst, sc)
			if prev := byName[d.task.Name]; prev != nil {
				l.errorf(b.DefRange, "Duplicate task", "A task named %q was already declared at %s. Task names must be unique within a pipeline.", d.task.Name, prev.task.DeclRange)
				continue
			}
			d.multi = forEach != nil
			byName[d.task.Name] = d
			byLabel[label] = append(byLabel[label], d)
			decls = append(decls, d)
		}
	}
	if len(decls) == 0 {
		if len(blocks) == 0 {
			l.errorf(pb.DefRange, "Pipeline without tasks", "The pipeline %q declares no task blocks: a pipeline needs at least one task.", p.Name)
		} else if !l.diags.HasErrors() {
			l.errorf(pb.DefRange, "Pipeline without tasks", "The task blocks of pipeline %q generate no tasks (every for_each is empty).", p.Name)
		}
		return
	}

	// Resolve depends_on.
	for _, d := range decls {
		seen := map[string]bool{}
		add := func(name string, r hcl.Range) {
			if !seen[name] {
				seen[name] = true
				d.task.DependsOn = append(d.task.DependsOn, name)
				d.task.depRanges[name] = r
			}
		}
		for _, ref := range d.refs {
			switch {
			case ref.byKey:
				if _, declared := labelMulti[ref.label]; !declared {
					l.errorf(ref.rng, "Reference to undeclared task", "No task named %q is declared in pipeline %q.", ref.label, p.Name)
				} else if !labelMulti[ref.label] {
					l.errorf(ref.rng, "Invalid depends_on reference", "The task %q has no for_each: refer to it as task.%s, without a key.", ref.label, ref.label)
				} else if target := byName[instanceName(ref.label, ref.key)]; target != nil && target.task.Label == ref.label {
					add(target.task.Name, ref.rng)
				} else {
					l.errorf(ref.rng, "Reference to undeclared task", "The for_each of task %q has no key %q.", ref.label, ref.key)
				}
			case len(byLabel[ref.label]) > 0 || labelMulti[ref.label]:
				for _, target := range byLabel[ref.label] {
					add(target.task.Name, ref.rng)
				}
			case byName[ref.label] != nil:
				add(ref.label, ref.rng)
			default:
				if _, declared := labelRange[ref.label]; !declared {
					l.errorf(ref.rng, "Reference to undeclared task", "No task named %q is declared in pipeline %q. %s", ref.label, p.Name, knownTasks(byName))
				}
			}
		}
		sort.Strings(d.task.DependsOn)
	}

	tasks := make([]*Task, 0, len(decls))
	for _, d := range decls {
		tasks = append(tasks, d.task)
	}
	p.Tasks = l.toposort(p, tasks)
}

func knownTasks(byName map[string]*taskDecl) string {
	return "The tasks are: " + strings.Join(sortedNames(byName), ", ") + "."
}

func (l *loader) decodeTask(p *Pipeline, b *hcl.Block, content *hcl.BodyContent, inst instance, sc scope) *taskDecl {
	t := &Task{
		Name:       inst.name,
		Label:      b.Labels[0],
		Key:        inst.key,
		Pipeline:   p.Name,
		RetryDelay: DefaultRetryDelay,
		Pool:       DefaultPoolName,
		DeclRange:  b.DefRange,
		dir:        fileDir(b.DefRange),
		loc:        p.Timezone,
		ctx:        inst.ctx,
		depRanges:  map[string]hcl.Range{},
		secrets:    l.ws.secrets,
		pass:       l.ws.Environment.Pass,
	}
	t.Workdir = t.dir
	if p.DefaultPool != "" {
		t.Pool = p.DefaultPool
	}
	d := &taskDecl{task: t}
	attrs := content.Attributes
	ctx := inst.ctx
	runScope := sc
	runScope.run = true
	runScope.pool = true

	if attr := attrs["command"]; attr == nil {
		l.errorf(b.DefRange, "Missing required argument", "The task %q has no command: set a string (run with /bin/sh -c) or a list of strings (run as argv).", t.Name)
	} else {
		t.command = attr.Expr
		t.CommandText = sourceText(l.ws.Files, attr.Expr.Range())
		cmdScope := runScope
		cmdScope.secrets = secretsCommand
		v := l.eval(attr.Expr, ctx, cmdScope)
		l.checkCommandType(attr, v)
	}
	if attr := attrs["env"]; attr != nil {
		envScope := runScope
		envScope.secrets = secretsAllowed
		v := l.eval(attr.Expr, ctx, envScope)
		if !v.IsKnown() || !v.IsNull() {
			if _, err := convert.Convert(v, cty.Map(cty.String)); err != nil {
				l.errorf(attr.Expr.Range(), "Incorrect attribute value type", "Inappropriate value for attribute \"env\": %s.", convertError(err))
			} else {
				t.env = attr.Expr
			}
		}
	}
	if attr := attrs["workdir"]; attr != nil {
		v := l.eval(attr.Expr, ctx, runScope)
		if cv, ok := l.convert(attr, v, cty.String, false); ok {
			t.Workdir = resolveDir(t.dir, cv.AsString())
			t.workdir = attr.Expr
			l.checkWorkdir(attr, t.Workdir)
		} else if !v.IsWhollyKnown() {
			t.workdir = attr.Expr
		}
	}
	if n, ok := l.intAttr(attrs["retries"], ctx, sc, 0, math.MaxInt32, "0 or more"); ok {
		t.Retries = n
	}
	if d, ok := l.durationAttr(attrs["retry_delay"], ctx, sc); ok {
		t.RetryDelay = d
	}
	if v, ok := l.boolAttr(attrs["retry_exponential_backoff"], ctx, sc); ok {
		t.RetryExponentialBackoff = v
	}
	if attr := attrs["timeout"]; attr != nil {
		if d, ok := l.durationAttr(attr, ctx, sc); ok {
			if d == 0 {
				l.errorf(attr.Expr.Range(), "Invalid timeout", "timeout must be more than 0; leave it out for no timeout.")
			} else {
				t.Timeout = d
			}
		}
	}
	if attr := attrs["pool"]; attr != nil {
		if s, ok := l.stringAttr(attr, ctx, sc, false); ok {
			if l.ws.Pools[s] == nil {
				l.errorf(attr.Expr.Range(), "Unknown pool", "No pool named %q is declared. %s", s, l.knownPools())
			} else {
				t.Pool = s
			}
		}
	}
	if v, ok := l.boolAttr(attrs["depends_on_past"], ctx, sc); ok {
		t.DependsOnPast = v
	}
	if attr := attrs["depends_on"]; attr != nil {
		d.refs = l.decodeDependsOn(attr)
	}
	if attr := attrs["limits"]; attr != nil {
		t.Limits = l.decodeLimitRefs(attr)
	}
	var skewBlock *hcl.Block
	for _, blk := range content.Blocks {
		if blk.Type != "skew" {
			continue
		}
		if skewBlock != nil {
			l.errorf(blk.DefRange, "Duplicate skew block", "The task %q already has a skew block at %s; a task has at most one.", t.Label, skewBlock.DefRange)
			continue
		}
		skewBlock = blk
	}
	if skewBlock != nil {
		t.Skew = l.decodeSkew(skewBlock, p, ctx, sc)
	}
	if attr := attrs["skew_history"]; attr != nil {
		if v, ok := l.boolAttr(attr, ctx, sc); ok {
			t.SkewHistory = &v
		}
		if t.EffectiveSkew(p) == nil {
			l.errorf(attr.Expr.Range(), "skew_history without a skew block", "skew_history turns the history detector of a skew block on or off for the task %q, and neither the task nor its pipeline has a skew block.", t.Label)
		}
	}
	return d
}

// checkWorkdir reports a workdir known at load time (it does not depend on
// run.* or pool.*) that is not an existing directory.
func (l *loader) checkWorkdir(attr *hcl.Attribute, dir string) {
	info, err := os.Stat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		l.errorf(attr.Expr.Range(), "Missing workdir", "workdir %s does not exist: the task's working directory must exist when the task runs (a relative workdir is relative to the directory of this file).", dir)
	case err != nil:
		l.errorf(attr.Expr.Range(), "Invalid workdir", "workdir %s cannot be read: %s.", dir, unwrapPathError(err))
	case !info.IsDir():
		l.errorf(attr.Expr.Range(), "Invalid workdir", "workdir %s is not a directory.", dir)
	}
}

func unwrapPathError(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

func resolveDir(base, dir string) string {
	if filepath.IsAbs(dir) {
		return filepath.Clean(dir)
	}
	return filepath.Join(base, dir)
}

func (l *loader) durationAttr(attr *hcl.Attribute, ctx *hcl.EvalContext, sc scope) (time.Duration, bool) {
	s, ok := l.stringAttr(attr, ctx, sc, false)
	if !ok {
		return 0, false
	}
	d, err := ParseDuration(s)
	if err != nil {
		l.errorf(attr.Expr.Range(), "Invalid "+attr.Name, "%s.", capitalize(err.Error()))
		return 0, false
	}
	return d, true
}

// decodeDependsOn reads depends_on: a list of references task.NAME or
// task.NAME["KEY"], as static traversals (not evaluated).
func (l *loader) decodeDependsOn(attr *hcl.Attribute) []depRef {
	exprs, diags := hcl.ExprList(attr.Expr)
	l.diags = append(l.diags, diags...)
	return l.decodeRefs(exprs, refSyntax{root: "task", attr: "depends_on", holds: "tasks of the same pipeline", example: "task.extract", keyed: `task.load["orders"]`})
}

// refSyntax describes a list of block references: root.NAME or
// root.NAME["KEY"].
type refSyntax struct {
	root, attr, holds, example, keyed string
}

// decodeRefs reads references as static traversals (not evaluated); a
// malformed one is reported with what the attribute holds.
func (l *loader) decodeRefs(exprs []hcl.Expression, syn refSyntax) []depRef {
	var refs []depRef
	for _, expr := range exprs {
		tr, diags := hcl.AbsTraversalForExpr(expr)
		if diags.HasErrors() {
			l.errorf(expr.Range(), "Invalid "+syn.attr+" reference", "%s holds references to %s, like %s.", syn.attr, syn.holds, syn.example)
			continue
		}
		bad := func() {
			l.errorf(tr.SourceRange(), "Invalid "+syn.attr+" reference", "%s holds references to %s, like %s or %s.", syn.attr, syn.holds, syn.example, syn.keyed)
		}
		if tr.RootName() != syn.root || len(tr) < 2 || len(tr) > 3 {
			bad()
			continue
		}
		a, ok := tr[1].(hcl.TraverseAttr)
		if !ok {
			bad()
			continue
		}
		ref := depRef{label: a.Name, rng: tr.SourceRange()}
		if len(tr) == 3 {
			idx, ok := tr[2].(hcl.TraverseIndex)
			if !ok || !idx.Key.Type().Equals(cty.String) || idx.Key.IsNull() {
				bad()
				continue
			}
			ref.key = idx.Key.AsString()
			ref.byKey = true
		}
		refs = append(refs, ref)
	}
	return refs
}

// toposort orders tasks so that every task follows its dependencies, ties
// by name, and reports each dependency cycle once, naming its tasks.
func (l *loader) toposort(p *Pipeline, tasks []*Task) []*Task {
	sort.Slice(tasks, func(i, j int) bool { return tasks[i].Name < tasks[j].Name })
	byName := map[string]*Task{}
	for _, t := range tasks {
		byName[t.Name] = t
	}
	done := map[string]bool{}
	var out []*Task
	for len(out) < len(tasks) {
		var next *Task
		for _, t := range tasks {
			if done[t.Name] {
				continue
			}
			ready := true
			for _, d := range t.DependsOn {
				if !done[d] {
					ready = false
					break
				}
			}
			if ready {
				next = t
				break
			}
		}
		if next == nil {
			break
		}
		done[next.Name] = true
		out = append(out, next)
	}
	if len(out) == len(tasks) {
		return out
	}

	// The rest is in a cycle or behind one.
	reported := map[string]bool{}
	for _, t := range tasks {
		if done[t.Name] || reported[t.Name] {
			continue
		}
		cycle := findCycle(t.Name, func(n string) []string {
			var next []string
			for _, d := range byName[n].DependsOn {
				if !done[d] {
					next = append(next, d)
				}
			}
			return next
		})
		if cycle == nil {
			continue
		}
		for _, n := range cycle {
			reported[n] = true
		}
		// cycle[i] depends on cycle[i+1]: print it in running order,
		// each task before the task that depends on it.
		order := []string{cycle[0]}
		for i := len(cycle) - 1; i > 0; i-- {
			order = append(order, cycle[i])
		}
		first := byName[cycle[0]]
		dep := cycle[(1)%len(cycle)]
		l.errorf(first.depRanges[dep], "Dependency cycle", "The tasks of pipeline %q depend on each other in a cycle: %s (each must run before the next).", p.Name, joinCycle("", order))
	}
	for _, t := range tasks {
		if !done[t.Name] {
			out = append(out, t)
		}
	}
	return out
}

// sourceText is the text of r in its file, "" when unavailable.
func sourceText(files map[string]*hcl.File, r hcl.Range) string {
	f := files[r.Filename]
	if f == nil || r.Start.Byte < 0 || r.End.Byte > len(f.Bytes) || r.Start.Byte > r.End.Byte {
		return ""
	}
	return string(f.Bytes[r.Start.Byte:r.End.Byte])
}
