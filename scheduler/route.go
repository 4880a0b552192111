package scheduler

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sourcegraph/conc/pool"

	"github.com/rewind-dev/rewind/dsl"
	"github.com/rewind-dev/rewind/executor"
	"github.com/rewind-dev/rewind/store"
	"github.com/rewind-dev/rewind/timetable"
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
	if msg := probe.failure(rv.LogicalDate); msg != "" {
		return probeFailed(base, msg)
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

// probeFailed is the reason of a date whose probe failed: it runs on its
// own pool, and the attempt says why the probe did not count.
func probeFailed(base string, msg string) Route {
	return Route{Pool: base, Reason: "probe failed, not treated as hot: " + msg}
}

// DateRoutes is the pool of each interval under the pipeline's skew block
// (list, expression and probe; the probe runs once per date), for tasks in
// the pipeline's default pool: what `rewind dates` and plans show.
func DateRoutes(ctx context.Context, p *dsl.Pipeline, ivs []timetable.Interval) []Route {
	routes, _ := DateRoutesChecked(ctx, p, ivs)
	return routes
}

// DateRoutesChecked is DateRoutes that also returns the probe failures of
// the intervals (a probe that failed or printed no number), one message
// per date naming it: a date whose probe failed is not hot.
func DateRoutesChecked(ctx context.Context, p *dsl.Pipeline, ivs []timetable.Interval) ([]Route, []string) {
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
		probe = runProbes(ctx, p, p.Skew, rvs)
	}
	var failures []string
	for i, rv := range rvs {
		out[i] = Route{Pool: base}
		if p.Skew == nil {
			continue
		}
		if r, ok := skewRoute(p.Skew, rv, probe); ok {
			out[i] = r
		} else if msg := probe.failure(rv.LogicalDate); msg != "" {
			out[i] = probeFailed(base, msg)
		}
		if msg := probe.failure(rv.LogicalDate); msg != "" {
			failures = append(failures, msg)
		}
	}
	return out, failures
}

// ErrProbe is wrapped by PlanRoutes when a probe of a date of the plan
// failed: a plan would route the date on a guess.
var ErrProbe = errors.New("skew probe failed")

// PlanRoutes sets the pool and reason of every date of plan to those its
// run will use: the skew block's rules, and for a date that has a run, the
// history of its tasks' attempts (an OOM escalation, a slow date), as the
// engine routes them. A probe that fails for a date of the plan is an
// error (ErrProbe) naming the date and what the probe printed.
func PlanRoutes(ctx context.Context, st store.Store, ws *dsl.Workspace, plan *Plan) error {
	def := ws.Pipeline(plan.Pipeline)
	if def == nil || len(plan.Dates) == 0 {
		return nil
	}
	tt, err := timetable.New(def.Schedule, def.Timezone)
	if err != nil {
		return err
	}
	ivs := make([]timetable.Interval, len(plan.Dates))
	for i, d := range plan.Dates {
		start, err := time.Parse(time.RFC3339, d.LogicalDate)
		if err != nil {
			return fmt.Errorf("plan date %q: %w", d.LogicalDate, err)
		}
		start = start.In(def.Timezone)
		ivs[i] = timetable.Interval{Start: start, End: tt.Next(start)}
	}
	routes, failures := DateRoutesChecked(ctx, def, ivs)
	if len(failures) > 0 {
		return fmt.Errorf("%w: %s", ErrProbe, ws.Redact(strings.Join(failures, "; ")))
	}
	runs, err := st.ListRuns(ctx, store.ListRunsParams{Pipelines: []string{def.Name}, From: ivs[0].Start, To: ivs[len(ivs)-1].Start, WithTasks: true, WithAttempts: true})
	if err != nil {
		return err
	}
	byDate := map[int64]store.Run{}
	for _, r := range runs {
		byDate[r.LogicalDate.Unix()] = r
	}
	var medians map[string][]time.Duration
	var probe *probeResult
	if def.Skew.HasProbe() {
		probe = runProbes(ctx, def, def.Skew, nil) // memoized: no probe runs again
	}
	for i := range plan.Dates {
		plan.Dates[i].Pool, plan.Dates[i].Reason = routes[i].Pool, ws.Redact(routes[i].Reason)
		r, ok := byDate[ivs[i].Start.Unix()]
		if !ok {
			continue
		}
		if medians == nil {
			if medians, err = st.TaskDurations(ctx, store.TaskDurationsParams{Pipeline: def.Name, Limit: 500}); err != nil {
				return err
			}
		}
		tis := map[string]store.TaskInstance{}
		for _, ti := range r.Tasks {
			tis[ti.Task] = ti
		}
		rv := dsl.RunVars{ID: RunID(r.Kind, ivs[i].Start), Pipeline: def.Name, LogicalDate: ivs[i].Start,
			DataIntervalStart: ivs[i].Start, DataIntervalEnd: ivs[i].End, Kind: string(store.KindBackfill)}
		for _, t := range def.Tasks {
			ti, ok := tis[t.Name]
			if !ok || len(ti.Attempts) == 0 {
				continue
			}
			var pr *probeResult
			if t.EffectiveSkew(def) == def.Skew {
				pr = probe
			}
			rt := routeTask(ws, def, t, rv, pr, history{attempts: ti.Attempts, median: medianDuration(medians[t.Name])})
			if strings.HasPrefix(rt.Reason, "oom escalation") || strings.HasPrefix(rt.Reason, "history:") {
				plan.Dates[i].Pool, plan.Dates[i].Reason = rt.Pool, ws.Redact("task "+t.Name+": "+rt.Reason)
				break
			}
		}
	}
	return nil
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

// probeResult holds a skew probe's measurements: of every date being run
// and of the dates of their reference sets.
type probeResult struct {
	factor float64
	// medians: per date being run (logical date, unix), the median of the
	// values of its reference set, and how many dates it holds.
	medians map[int64]float64
	refs    map[int64]int
	values  map[int64]float64 // logical date (unix) -> measured size
	errs    map[int64]string
}

func (r *probeResult) hot(logical time.Time) bool {
	k := logical.Unix()
	v, ok := r.values[k]
	m := r.medians[k]
	return ok && m > 0 && v > r.factor*m
}

func (r *probeResult) reason(logical time.Time) string {
	k := logical.Unix()
	return fmt.Sprintf("probe: %s > %g x median %s", fmtNum(r.values[k]), r.factor, fmtNum(r.medians[k]))
}

// failure is why the probe of a date being run failed ("" when it did not).
func (r *probeResult) failure(logical time.Time) string {
	if r == nil {
		return ""
	}
	return r.errs[logical.Unix()]
}

func fmtNum(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }

// The probes of one command share their measurements (a plan routes its
// dates twice, the second time with the history): ProbeContext returns a
// context whose probes are run once per skew block and date, and whose
// reference dates are those due at now (zero: the wall clock).
type probeKey struct{}

type probeMemo struct {
	now time.Time
	mu  sync.Mutex
	m   map[*dsl.Skew]map[int64]probeOut
	// last is the result of the latest runProbes per skew block.
	last map[*dsl.Skew]*probeResult
}

type probeOut struct {
	v   float64
	err error
}

// ProbeContext returns ctx with a memo of probe measurements and the clock
// that says which reference dates are due.
func ProbeContext(ctx context.Context, now time.Time) context.Context {
	return context.WithValue(ctx, probeKey{}, &probeMemo{now: now, m: map[*dsl.Skew]map[int64]probeOut{}, last: map[*dsl.Skew]*probeResult{}})
}

// runProbes measures, with a skew block's probe, every date of runs and the
// dates of their reference sets: a date's value is compared with the
// median of the due dates of the pipeline within the block's probe_window
// of it (before and after, from start_date), whatever else is being run,
// so that one hot date run alone is still hot (like Spark AQE's skewed
// partition factor, over a window of the pipeline's own history). A date
// whose probe fails is not hot; its failure is kept in errs. With runs
// nil it returns the latest result of this context (memoized).
func runProbes(ctx context.Context, p *dsl.Pipeline, skew *dsl.Skew, runs []dsl.RunVars) *probeResult {
	memo, _ := ctx.Value(probeKey{}).(*probeMemo)
	if runs == nil && memo != nil {
		memo.mu.Lock()
		r := memo.last[skew]
		memo.mu.Unlock()
		if r != nil {
			return r
		}
	}
	res := &probeResult{factor: skew.HotFactor, medians: map[int64]float64{}, refs: map[int64]int{}, values: map[int64]float64{}, errs: map[int64]string{}}
	now := time.Now()
	if memo != nil && !memo.now.IsZero() {
		now = memo.now
	}
	win := skew.ProbeWindow
	if win <= 0 {
		win = dsl.DefaultProbeWindow
	}
	// Every date to measure: the dates being run and their references.
	all := map[int64]dsl.RunVars{}
	for _, rv := range runs {
		all[rv.LogicalDate.Unix()] = rv
	}
	refs := make([][]int64, len(runs))
	if tt, err := timetable.New(p.Schedule, p.Timezone); err == nil && len(runs) > 0 {
		sorted := slices.Clone(runs)
		slices.SortFunc(sorted, func(a, b dsl.RunVars) int { return a.LogicalDate.Compare(b.LogicalDate) })
		// The union of the windows, merged, enumerated once.
		var from, to time.Time
		var ivs []timetable.Interval
		flush := func() {
			for iv := range tt.Intervals(timetable.Window{StartDate: p.StartDate, EndDate: p.EndDate, From: from, To: to, Now: now}) {
				ivs = append(ivs, iv)
			}
		}
		for i, rv := range sorted {
			f, t := rv.LogicalDate.Add(-win), rv.LogicalDate.Add(win)
			if i > 0 && !f.After(to) {
				to = t
				continue
			}
			if i > 0 {
				flush()
			}
			from, to = f, t
		}
		flush()
		for _, iv := range ivs {
			if _, ok := all[iv.Start.Unix()]; !ok {
				all[iv.Start.Unix()] = dsl.RunVars{
					ID: RunID(store.KindScheduled, iv.Start), Pipeline: p.Name, LogicalDate: iv.Start,
					DataIntervalStart: iv.Start, DataIntervalEnd: iv.End, Kind: string(store.KindScheduled),
				}
			}
		}
		for i, rv := range runs {
			lo := sort.Search(len(ivs), func(j int) bool { return !ivs[j].Start.Before(rv.LogicalDate.Add(-win)) })
			for j := lo; j < len(ivs) && !ivs[j].Start.After(rv.LogicalDate.Add(win)); j++ {
				refs[i] = append(refs[i], ivs[j].Start.Unix())
			}
			if !slices.Contains(refs[i], rv.LogicalDate.Unix()) {
				refs[i] = append(refs[i], rv.LogicalDate.Unix())
			}
		}
	} else {
		for i, rv := range runs {
			refs[i] = []int64{rv.LogicalDate.Unix()}
		}
	}
	// Measure, a few at a time, what the memo does not know yet.
	keys := make([]int64, 0, len(all))
	for k := range all {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	outs := make([]probeOut, len(keys))
	var known map[int64]probeOut
	if memo != nil {
		memo.mu.Lock()
		if memo.m[skew] == nil {
			memo.m[skew] = map[int64]probeOut{}
		}
		known = maps.Clone(memo.m[skew])
		memo.mu.Unlock()
	}
	wp := pool.New().WithMaxGoroutines(4)
	for i, k := range keys {
		if o, ok := known[k]; ok {
			outs[i] = o
			continue
		}
		rv := all[k]
		wp.Go(func() {
			v, err := probeOne(ctx, skew, rv)
			outs[i] = probeOut{v: v, err: err}
		})
	}
	wp.Wait()
	if memo != nil {
		memo.mu.Lock()
		for i, k := range keys {
			memo.m[skew][k] = outs[i]
		}
		memo.mu.Unlock()
	}
	byKey := make(map[int64]probeOut, len(keys))
	for i, k := range keys {
		byKey[k] = outs[i]
	}
	for i, rv := range runs {
		k := rv.LogicalDate.Unix()
		if o := byKey[k]; o.err != nil {
			res.errs[k] = o.err.Error()
		} else {
			res.values[k] = o.v
		}
		var vals []float64
		for _, rk := range refs[i] {
			if o := byKey[rk]; o.err == nil {
				vals = append(vals, o.v)
			}
		}
		res.medians[k] = median(vals)
		res.refs[k] = len(vals)
	}
	if memo != nil {
		memo.mu.Lock()
		memo.last[skew] = res
		memo.mu.Unlock()
	}
	return res
}

func probeOne(ctx context.Context, skew *dsl.Skew, rv dsl.RunVars) (float64, error) {
	c, err := skew.ProbeCommand(rv)
	if err != nil {
		return 0, err
	}
	day := rv.LogicalDate.Format(dateOnly)
	if h, m, s := rv.LogicalDate.Clock(); h != 0 || m != 0 || s != 0 {
		day = rv.LogicalDate.Format(time.RFC3339)
	}
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
		return 0, fmt.Errorf("probe of %s printed nothing: want a number (the date's size)", day)
	}
	v, err := strconv.ParseFloat(fields[len(fields)-1], 64)
	if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
		return 0, fmt.Errorf("probe of %s printed %q, not a number (print the size as a plain number, e.g. bytes)", day, fields[len(fields)-1])
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
