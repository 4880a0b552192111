package dsl

import (
	"fmt"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/zclconf/go-cty/cty"
	"github.com/zclconf/go-cty/cty/convert"
)

// runValue is run.* for one run, with dates in loc.
func runValue(rv RunVars, pipeline string, loc *time.Location) cty.Value {
	if loc == nil {
		loc = time.UTC
	}
	if rv.Pipeline != "" {
		pipeline = rv.Pipeline
	}
	ld := rv.LogicalDate.In(loc)
	return cty.ObjectVal(map[string]cty.Value{
		"id":                  cty.StringVal(rv.ID),
		"pipeline":            cty.StringVal(pipeline),
		"ds":                  cty.StringVal(ld.Format(dateOnly)),
		"ds_nodash":           cty.StringVal(ld.Format("20060102")),
		"logical_date":        cty.StringVal(ld.Format(time.RFC3339)),
		"data_interval_start": cty.StringVal(rv.DataIntervalStart.In(loc).Format(time.RFC3339)),
		"data_interval_end":   cty.StringVal(rv.DataIntervalEnd.In(loc).Format(time.RFC3339)),
		"kind":                cty.StringVal(rv.Kind),
		"dir":                 cty.StringVal(rv.Dir),
		"year":                cty.NumberIntVal(int64(ld.Year())),
		"month":               cty.NumberIntVal(int64(ld.Month())),
		"day":                 cty.NumberIntVal(int64(ld.Day())),
		"weekday":             cty.StringVal(ld.Weekday().String()),
	})
}

func poolValue(pv PoolVars) cty.Value {
	return cty.ObjectVal(map[string]cty.Value{
		"name":   cty.StringVal(pv.Name),
		"memory": cty.NumberIntVal(pv.Memory),
		"cpus":   cty.NumberIntVal(int64(pv.CPUs)),
	})
}

func runContext(parent *hcl.EvalContext, run cty.Value, pool *cty.Value) *hcl.EvalContext {
	if parent == nil {
		parent = &hcl.EvalContext{Functions: functions()}
	}
	ctx := parent.NewChild()
	ctx.Variables = map[string]cty.Value{"run": run}
	if pool != nil {
		ctx.Variables["pool"] = *pool
	}
	return ctx
}

// Render evaluates the task's command, env and workdir for one attempt: a
// string command becomes ["/bin/sh", "-c", command], a list is argv as is.
// A sensitive value interpolated into a string command is rendered as a
// reference to an environment variable ("${REWIND_SECRET_token}") that Env
// sets; Env also holds REWIND_SECRET_<name> for every sensitive variable.
// Errors never hold a sensitive value.
func (t *Task) Render(rv RunVars, pv PoolVars) (*Command, error) {
	cmd, err := t.render(rv, pv)
	return cmd, t.secrets.redactErr(err)
}

func (t *Task) render(rv RunVars, pv PoolVars) (*Command, error) {
	if t.command == nil {
		return nil, fmt.Errorf("task %s has no command", t.Name)
	}
	pool := poolValue(pv)
	ctx := runContext(t.ctx, runValue(rv, t.Pipeline, t.loc), &pool)
	sec := &shellSecrets{allowSensitive: true}
	argv, v, err := renderCommand(t.command, ctx, sec)
	if err != nil {
		if _, ok := err.(hcl.Diagnostics); ok {
			return nil, fmt.Errorf("task %s: command: %w", t.Name, err)
		}
		return nil, fmt.Errorf("task %s: %w", t.Name, err)
	}
	if v.Type() != cty.String && isSensitive(v) {
		// Refused at load time; never into argv.
		return nil, fmt.Errorf("task %s: command: a sensitive value can only be interpolated into a string command", t.Name)
	}
	cmd := &Command{Argv: argv, Env: map[string]string{}, Dir: t.Workdir, Pass: t.pass}
	if t.env != nil {
		ev, diags := t.env.Value(ctx)
		if diags.HasErrors() {
			return nil, fmt.Errorf("task %s: env: %w", t.Name, diags)
		}
		if cmd.Env, err = envMap(unmark(ev)); err != nil {
			return nil, fmt.Errorf("task %s: %w", t.Name, err)
		}
	}
	cmd.Env = t.secrets.addEnv(cmd.Env)
	for k, val := range sec.env {
		cmd.Env[k] = val
	}
	if t.workdir != nil {
		wv, diags := t.workdir.Value(ctx)
		if diags.HasErrors() {
			return nil, fmt.Errorf("task %s: workdir: %w", t.Name, diags)
		}
		if isSensitive(wv) {
			return nil, fmt.Errorf("task %s: workdir: a sensitive value cannot be used here", t.Name)
		}
		sv, err := convert.Convert(unmark(wv), cty.String)
		if err != nil || sv.IsNull() || !sv.IsKnown() {
			return nil, fmt.Errorf("task %s: workdir must be a string", t.Name)
		}
		cmd.Dir = resolveDir(t.dir, sv.AsString())
	}
	return cmd, nil
}

// HasHotWhen reports whether the skew block sets hot_when.
func (s *Skew) HasHotWhen() bool { return s != nil && s.hotWhen != nil }

// HasProbe reports whether the skew block sets probe.
func (s *Skew) HasProbe() bool { return s != nil && s.probe != nil }

// HotWhen evaluates hot_when for one run; false when it is unset.
func (s *Skew) HotWhen(rv RunVars) (bool, error) {
	if s == nil || s.hotWhen == nil {
		return false, nil
	}
	v, diags := s.hotWhen.Value(runContext(s.ctx, runValue(rv, s.pipeline, s.loc), nil))
	if diags.HasErrors() {
		return false, fmt.Errorf("hot_when: %w", diags)
	}
	bv, err := convert.Convert(unmark(v), cty.Bool)
	if err != nil || bv.IsNull() || !bv.IsKnown() {
		return false, fmt.Errorf("hot_when must be true or false")
	}
	return bv.True(), nil
}

// ProbeCommand renders the probe command for one run, in the pipeline's
// directory; nil when the skew block sets no probe.
func (s *Skew) ProbeCommand(rv RunVars) (*Command, error) {
	if s == nil || s.probe == nil {
		return nil, nil
	}
	sec := &shellSecrets{}
	argv, _, err := renderCommand(s.probe, runContext(s.ctx, runValue(rv, s.pipeline, s.loc), nil), sec)
	if err != nil {
		return nil, fmt.Errorf("probe: %w", err)
	}
	return &Command{Argv: argv, Env: sec.envOrEmpty(), Dir: s.dir, Pass: s.pass}, nil
}

// Vars are the values of pool.* for an attempt in this pool.
func (p *Pool) Vars() PoolVars {
	if p == nil {
		return PoolVars{}
	}
	return PoolVars{Name: p.Name, Memory: p.Memory, CPUs: p.CPUs}
}

// poolContext is the evaluation context of the pool's own templates:
// functions, var.*, local.* and pool.* from p.Vars().
func (p *Pool) poolContext() *hcl.EvalContext {
	parent := p.poolCtx
	if parent == nil {
		parent = &hcl.EvalContext{Functions: functions()}
	}
	ctx := parent.NewChild()
	ctx.Variables = map[string]cty.Value{"pool": poolValue(p.Vars())}
	return ctx
}

// Launcher renders the pool's launcher, the argv prefix every attempt in
// the pool is started with; nil when the pool sets none.
func (p *Pool) Launcher() ([]string, error) {
	if p == nil || p.launcher == nil {
		return nil, nil
	}
	v, diags := p.launcher.Value(p.poolContext())
	if diags.HasErrors() {
		return nil, fmt.Errorf("pool %s: launcher: %w", p.Name, diags)
	}
	v = unmark(v)
	ty := v.Type()
	if !ty.IsTupleType() && !ty.IsListType() {
		return nil, fmt.Errorf("pool %s: launcher must be a list of strings", p.Name)
	}
	argv, err := commandArgv(v)
	if err != nil {
		return nil, fmt.Errorf("pool %s: launcher: %w", p.Name, err)
	}
	return argv, nil
}

// SetupCommand renders the pool's setup command, run before the first
// attempt that needs the pool, in the directory of the file that declares
// the pool; nil when the pool sets none.
func (p *Pool) SetupCommand() (*Command, error) {
	if p == nil {
		return nil, nil
	}
	return p.renderCommand("setup", p.setup)
}

// TeardownCommand renders the pool's teardown command, run once the pool
// has been idle for IdleTimeout after its setup, in the directory of the
// file that declares the pool; nil when the pool sets none.
func (p *Pool) TeardownCommand() (*Command, error) {
	if p == nil {
		return nil, nil
	}
	return p.renderCommand("teardown", p.teardown)
}

func (p *Pool) renderCommand(name string, expr hcl.Expression) (*Command, error) {
	if expr == nil {
		return nil, nil
	}
	sec := &shellSecrets{}
	argv, _, err := renderCommand(expr, p.poolContext(), sec)
	if err != nil {
		return nil, fmt.Errorf("pool %s: %s: %w", p.Name, name, err)
	}
	return &Command{Argv: argv, Env: p.secrets.addEnv(sec.envOrEmpty()), Dir: p.dir, Pass: p.pass}, nil
}

// EffectiveSkew is the skew block that applies to the task in pipeline p:
// the task's own, else the pipeline's; nil when neither has one.
func (t *Task) EffectiveSkew(p *Pipeline) *Skew {
	if t != nil && t.Skew != nil {
		return t.Skew
	}
	if p == nil {
		return nil
	}
	return p.Skew
}

// IsHotDate reports whether hot_dates lists ds (YYYY-MM-DD).
func (s *Skew) IsHotDate(ds string) bool {
	if s == nil {
		return false
	}
	for _, d := range s.HotDates {
		if d == ds {
			return true
		}
	}
	return false
}
