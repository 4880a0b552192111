package scheduler

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sourcegraph/conc/pool"

	"github.com/rewind-dev/rewind/dsl"
	"github.com/rewind-dev/rewind/executor"
	"github.com/rewind-dev/rewind/store"
)

// Route is the pool an attempt runs in and why.
type Route struct {
	Pool string
	// Reason is "" for the task's own pool; otherwise the rule that chose
	// the pool: "hot_dates", "hot_when: <expr>", "probe: <value> > <f> x
	// median <m>", "history: ...", or the OOM escalation.
	Reason string
}

// history is what the state knows of a task instance's past attempts.
type history struct {
	attempts []store.Attempt // oldest first
	// median duration of the task's recent successful attempts (all dates).
	median time.Duration
}

// routeTask decides the pool of a task instance's next attempt. Hot dates
// are found four ways (a list, an expression, a probe, history); an attempt
// that ran out of memory sends the next one along its pool's escalation.
func routeTask(ws *dsl.Workspace, p *dsl.Pipeline, t *dsl.Task, rv dsl.RunVars, probe *probeResult, h history) Route {
	base := t.Pool
	// Escalation: follow oom_escalate_to from every pool an attempt of this
	// task instance ran out of memory in.
	if r, ok := escalated(ws, base, h); ok {
		return r
	}
	skew := t.EffectiveSkew(p)
	if skew == nil {
		return Route{Pool: base}
	}
	if r, ok := skewRoute(skew, rv, probe); ok {
		return r
	}
	if n := len(h.attempts); n > 0 && h.median > 0 {
		for i := n - 1; i >= 0; i-- {
			a := h.attempts[i]
			if a.State != store.AttemptSuccess || a.EndedAt.IsZero() {
				continue
			}
			if d := a.EndedAt.Sub(a.StartedAt); float64(d) > skew.HotFactor*float64(h.median) {
				return Route{Pool: skew.Pool, Reason: fmt.Sprintf("history: try %d ran %s, over %g x the median %s",
					a.TryNumber, d.Round(time.Millisecond), skew.HotFactor, h.median.Round(time.Millisecond))}
			}
			break
		}
	}
	return Route{Pool: base}
}

const dateOnly = "2006-01-02"

// skewRoute applies a skew block's list, expression and probe to one date.
func skewRoute(skew *dsl.Skew, rv dsl.RunVars, probe *probeResult) (Route, bool) {
	if skew.IsHotDate(rv.LogicalDate.Format(dateOnly)) {
		return Route{Pool: skew.Pool, Reason: "hot_dates"}, true
	}
	if skew.HasHotWhen() {
		if hot, err := skew.HotWhen(rv); err == nil && hot {
			return Route{Pool: skew.Pool, Reason: "hot_when: " + skew.HotWhenText}, true
		}
	}
	if probe != nil && probe.hot(rv.LogicalDate) {
		return Route{Pool: skew.Pool, Reason: probe.reason(rv.LogicalDate)}, true
	}
	return Route{}, false
}

// DateRoutes is the pool of each interval under the pipeline's skew block
// (list, expression and probe; the probe runs once per date), for tasks in
// the pipeline's default pool: what `rewind dates` and plans show.
func DateRoutes(ctx context.Context, p *dsl.Pipeline, ivs []Interval) []Route {
	base := p.DefaultPool
	if base == "" {
		base = dsl.DefaultPoolName
	}
	out := make([]Route, len(ivs))
	rvs := make([]dsl.RunVars, len(ivs))
	for i, iv := range ivs {
		rvs[i] = dsl.RunVars{
			ID: RunID(store.KindScheduled, iv.Start), Pipeline: p.Name, LogicalDate: iv.Start,
			DataIntervalStart: iv.Start, DataIntervalEnd: iv.End, Kind: string(store.KindScheduled),
		}
	}
	var probe *probeResult
	if p.Skew.HasProbe() {
		probe = runProbes(ctx, p.Skew, rvs)
	}
	for i, rv := range rvs {
		out[i] = Route{Pool: base}
		if p.Skew == nil {
			continue
		}
		if r, ok := skewRoute(p.Skew, rv, probe); ok {
			out[i] = r
		}
	}
	return out
}

// escalated follows the escalation chain from pool through every pool in
// which an attempt ran out of memory.
func escalated(ws *dsl.Workspace, pool string, h history) (Route, bool) {
	var reason string
	for steps := 0; steps < len(ws.Pools); steps++ {
		var oom *store.Attempt
		for i := range h.attempts {
			if h.attempts[i].State == store.AttemptOOM && h.attempts[i].Pool == pool {
				oom = &h.attempts[i]
			}
		}
		pl := ws.Pools[pool]
		if oom == nil || pl == nil || pl.EscalateTo == "" {
			break
		}
		reason = fmt.Sprintf("oom escalation: try %d ran out of memory in pool %s", oom.TryNumber, pool)
		pool = pl.EscalateTo
	}
	return Route{Pool: pool, Reason: reason}, reason != ""
}

// probeResult holds a skew probe's measurement of every date being run.
type probeResult struct {
	factor float64
	median float64
	values map[int64]float64 // logical date (unix) -> measured size
	errs   map[int64]string
}

func (r *probeResult) hot(logical time.Time) bool {
	v, ok := r.values[logical.Unix()]
	return ok && r.median > 0 && v > r.factor*r.median
}

func (r *probeResult) reason(logical time.Time) string {
	return fmt.Sprintf("probe: %s > %g x median %s", fmtNum(r.values[logical.Unix()]), r.factor, fmtNum(r.median))
}

func fmtNum(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }

// runProbes runs a skew block's probe once per date, a few at a time, and
// takes the median of the dates' values (like Spark AQE's skewed partition
// factor). A date whose probe fails is not hot.
func runProbes(ctx context.Context, skew *dsl.Skew, runs []dsl.RunVars) *probeResult {
	res := &probeResult{factor: skew.HotFactor, values: map[int64]float64{}, errs: map[int64]string{}}
	type out struct {
		key int64
		v   float64
		err error
	}
	results := make([]out, len(runs))
	p := pool.New().WithMaxGoroutines(4)
	for i, rv := range runs {
		p.Go(func() {
			v, err := probeOne(ctx, skew, rv)
			results[i] = out{key: rv.LogicalDate.Unix(), v: v, err: err}
		})
	}
	p.Wait()
	var vals []float64
	for _, o := range results {
		if o.err != nil {
			res.errs[o.key] = o.err.Error()
			continue
		}
		res.values[o.key] = o.v
		vals = append(vals, o.v)
	}
	res.median = median(vals)
	return res
}

func probeOne(ctx context.Context, skew *dsl.Skew, rv dsl.RunVars) (float64, error) {
	c, err := skew.ProbeCommand(rv)
	if err != nil {
		return 0, err
	}
	day := rv.LogicalDate.Format(dateOnly)
	o, err := executor.Run(ctx, executor.Command{
		Argv:    c.Argv,
		Dir:     c.Dir,
		Env:     append(os.Environ(), TaskEnv(rv, dsl.PoolVars{}, "probe", 1)...),
		Timeout: probeTimeout,
	})
	if err != nil {
		return 0, fmt.Errorf("probe of %s: %w", day, err)
	}
	if !o.Success() {
		msg := fmt.Sprintf("probe of %s %s", day, o.Describe())
		if line := lastLine(o.Stderr); line != "" {
			msg += ": " + line
		}
		return 0, errors.New(msg)
	}
	fields := strings.Fields(string(o.Stdout))
	if len(fields) == 0 {
		return 0, fmt.Errorf("probe of %s printed nothing", day)
	}
	v, err := strconv.ParseFloat(fields[len(fields)-1], 64)
	if err != nil {
		return 0, fmt.Errorf("probe of %s printed %q, not a number", day, fields[len(fields)-1])
	}
	return v, nil
}

// probeTimeout bounds one run of a skew probe.
const probeTimeout = time.Minute

// lastLine is the last non-blank line of b, trimmed.
func lastLine(b []byte) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}

func median(vals []float64) float64 {
	if len(vals) == 0 {
		return 0
	}
	s := slices.Clone(vals)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func medianDuration(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}
