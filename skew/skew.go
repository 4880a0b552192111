// Package skew decides which pool each date of a pipeline runs in: the
// pipeline's skew block (an explicit list of hot dates, an HCL expression
// over run.*, a probe command's measured size against the median of its
// window), the history of a task instance's attempts (a date whose last
// successful try ran far longer than its peers, and at least the block's
// history_min_duration: a try of milliseconds is never hot by history; off
// with history = false, or for one task with skew_history = false), and
// the escalation of a pool whose attempt ran out of memory. Every decision
// carries the detector that made it (Route.Detector) and its reason, which
// plans, rewind dates and the web view show. It runs probe commands through package
// executor and memoizes them per command; it never writes the state and
// never starts an attempt.
package skew

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sourcegraph/conc/pool"

	"github.com/rewind-dev/rewind/dsl"
	"github.com/rewind-dev/rewind/executor"
	"github.com/rewind-dev/rewind/executor/procenv"
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
	// Detector is the detector that found the date hot, one of the
	// Detector* names; "" when no detector did (the task's own pool, or a
	// probe that failed).
	Detector string
}

// The detectors that route a date to a larger pool (Route.Detector): the
// four ways a skew block finds a hot date, and the OOM escalation of a
// pool.
const (
	DetectorHotDates = "hot_dates" // the explicit list
	DetectorHotWhen  = "hot_when"  // the expression over run.*
	DetectorProbe    = "probe"     // the measured size against its window's median
	DetectorHistory  = "history"   // the last successful try against the task's median
	DetectorOOM      = "oom_escalation"
)

// History is what the state knows of a task instance's past attempts.
type History struct {
	Attempts []store.Attempt // oldest first
	// Median is the duration of the task's recent successful attempts (all dates).
	Median time.Duration
}

// Task decides the pool of a task instance's next attempt. Hot dates
// are found four ways (a list, an expression, a probe, history); an attempt
// that ran out of memory sends the next one along its pool's escalation.
func Task(ws *dsl.Workspace, p *dsl.Pipeline, t *dsl.Task, rv dsl.RunVars, probe *Probes, h History) Route {
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
	if HistoryOn(skew, t) {
		if r, ok := historyRoute(skew, h); ok {
			return r
		}
	}
	if msg := probe.failure(rv.LogicalDate); msg != "" {
		return probeFailed(base, msg)
	}
	return Route{Pool: base}
}

// RunRoute is the route that the history of run r's tasks gives its date
// (rv: its run.*), as the engine routes their next attempts: the first task
// of def whose attempts send it to another pool, by an OOM escalation or
// by the history detector, with "task NAME: " before the reason; ok is
// false when no task's history does. medians are the durations of each
// task's recent successful attempts (store.TaskDurations); probe (nil:
// none) is the measurements of the pipeline's skew block.
func RunRoute(ws *dsl.Workspace, def *dsl.Pipeline, r store.Run, rv dsl.RunVars, probe *Probes, medians map[string][]time.Duration) (Route, bool) {
	tis := map[string]store.TaskInstance{}
	for _, ti := range r.Tasks {
		tis[ti.Task] = ti
	}
	for _, t := range def.Tasks {
		ti, ok := tis[t.Name]
		if !ok || len(ti.Attempts) == 0 {
			continue
		}
		var pr *Probes
		if t.EffectiveSkew(def) == def.Skew {
			pr = probe
		}
		rt := Task(ws, def, t, rv, pr, History{Attempts: ti.Attempts, Median: MedianDuration(medians[t.Name])})
		if rt.Detector == DetectorOOM || rt.Detector == DetectorHistory {
			rt.Reason = "task " + t.Name + ": " + rt.Reason
			return rt, true
		}
	}
	return Route{}, false
}

// HistoryOn reports whether the history detector routes task t under skew
// block sk: the task's skew_history when set, else the block's history.
func HistoryOn(sk *dsl.Skew, t *dsl.Task) bool {
	if t != nil && t.SkewHistory != nil {
		return *t.SkewHistory
	}
	return sk != nil && sk.History
}

// historyRoute is the history detector: the task instance's last
// successful try is hot when it ran at least the block's
// history_min_duration and longer than hot_factor x the task's median.
// A shorter try is never hot: milliseconds against milliseconds are
// noise, not skew.
func historyRoute(sk *dsl.Skew, h History) (Route, bool) {
	if h.Median <= 0 {
		return Route{}, false
	}
	for i := len(h.Attempts) - 1; i >= 0; i-- {
		a := h.Attempts[i]
		if a.State != store.AttemptSuccess || a.EndedAt.IsZero() {
			continue
		}
		d := a.EndedAt.Sub(a.StartedAt)
		if d < sk.HistoryMinDuration || float64(d) <= sk.HotFactor*float64(h.Median) {
			return Route{}, false
		}
		return Route{Pool: sk.Pool, Detector: DetectorHistory,
			Reason: fmt.Sprintf("history: try %d ran %s, over %g x the median %s (history_min_duration %s)",
				a.TryNumber, d.Round(time.Millisecond), sk.HotFactor, h.Median.Round(time.Millisecond), sk.HistoryMinDuration)}, true
	}
	return Route{}, false
}

// DateOnly is the layout of a ds.
const DateOnly = "2006-01-02"

// skewRoute applies a skew block's list, expression and probe to one date.
func skewRoute(skew *dsl.Skew, rv dsl.RunVars, probe *Probes) (Route, bool) {
	if skew.IsHotDate(rv.LogicalDate.Format(DateOnly)) {
		return Route{Pool: skew.Pool, Reason: "hot_dates", Detector: DetectorHotDates}, true
	}
	if skew.HasHotWhen() {
		if hot, err := skew.HotWhen(rv); err == nil && hot {
			return Route{Pool: skew.Pool, Reason: "hot_when: " + skew.HotWhenText, Detector: DetectorHotWhen}, true
		}
	}
	if probe != nil && probe.hot(rv.LogicalDate) {
		return Route{Pool: skew.Pool, Reason: probe.reason(rv.LogicalDate), Detector: DetectorProbe}, true
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
	rvs := IntervalVars(p, ivs)
	var probe *Probes
	if p.Skew.HasProbe() {
		probe = Measure(ctx, p, p.Skew, rvs)
	}
	return RoutesWith(p, rvs, probe)
}

// IntervalVars are the run.* values of the scheduled runs of ivs.
func IntervalVars(p *dsl.Pipeline, ivs []timetable.Interval) []dsl.RunVars {
	rvs := make([]dsl.RunVars, len(ivs))
	for i, iv := range ivs {
		rvs[i] = dsl.RunVars{
			ID: store.RunID(store.KindScheduled, iv.Start), Pipeline: p.Name, LogicalDate: iv.Start,
			DataIntervalStart: iv.Start, DataIntervalEnd: iv.End, Kind: string(store.KindScheduled),
		}
	}
	return rvs
}

// RoutesWith routes each date of rvs by the pipeline's skew block, with
// the probe's measurements (nil: none; Measure runs the probe, Recorded
// reads what runs recorded), for tasks in the pipeline's default pool, and
// returns the probe failures of the dates.
func RoutesWith(p *dsl.Pipeline, rvs []dsl.RunVars, probe *Probes) ([]Route, []string) {
	base := pipelinePool(p)
	out := make([]Route, len(rvs))
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

// pipelinePool is the pool of a pipeline's tasks that name none.
func pipelinePool(p *dsl.Pipeline) string {
	if p.DefaultPool != "" {
		return p.DefaultPool
	}
	return dsl.DefaultPoolName
}

// ErrProbe is wrapped by a backfill plan when a probe of a date of the plan
// failed: a plan would route the date on a guess.
var ErrProbe = errors.New("skew probe failed")

// escalated follows the escalation chain from pool through every pool in
// which an attempt ran out of memory.
func escalated(ws *dsl.Workspace, pool string, h History) (Route, bool) {
	var reason string
	for steps := 0; steps < len(ws.Pools); steps++ {
		var oom *store.Attempt
		for i := range h.Attempts {
			if h.Attempts[i].State == store.AttemptOOM && h.Attempts[i].Pool == pool {
				oom = &h.Attempts[i]
			}
		}
		pl := ws.Pools[pool]
		if oom == nil || pl == nil || pl.EscalateTo == "" {
			break
		}
		reason = fmt.Sprintf("oom escalation: try %d ran out of memory in pool %s", oom.TryNumber, pool)
		pool = pl.EscalateTo
	}
	return Route{Pool: pool, Reason: reason, Detector: DetectorOOM}, reason != ""
}

// Probes holds a skew probe's measurements: of every date being run
// and of the dates of their reference sets.
type Probes struct {
	factor float64
	// medians: per date being run (logical date, unix), the median of the
	// values of its reference set, and how many dates it holds.
	medians map[int64]float64
	refs    map[int64]int
	values  map[int64]float64 // logical date (unix) -> measured size
	errs    map[int64]string
}

// Failures are the dates whose probe failed (logical date, unix) and why.
func (r *Probes) Failures() map[int64]string { return r.errs }

func (r *Probes) hot(logical time.Time) bool {
	k := logical.Unix()
	v, ok := r.values[k]
	m := r.medians[k]
	return ok && m > 0 && v > r.factor*m
}

func (r *Probes) reason(logical time.Time) string {
	k := logical.Unix()
	return fmt.Sprintf("probe: %s > %g x median %s", fmtNum(r.values[k]), r.factor, fmtNum(r.medians[k]))
}

// Measurement is what the probe found for a date being run: the value it
// printed and the median of the date's reference dates, or why it failed
// (msg); ok is false for a date it did not measure.
func (r *Probes) Measurement(logical time.Time) (value, median float64, msg string, ok bool) {
	if r == nil {
		return 0, 0, "", false
	}
	k := logical.Unix()
	if msg, failed := r.errs[k]; failed {
		return 0, 0, msg, true
	}
	v, ok := r.values[k]
	return v, r.medians[k], "", ok
}

// Results are the measurements of pr for the dates of runs, as the state
// records them (store.RecordProbes), with the route that skew block sk
// gives each date (of task t's own block, or of the pipeline's when t is
// nil), measured at at. Dates pr did not measure are left out.
func Results(p *dsl.Pipeline, t *dsl.Task, sk *dsl.Skew, runs []dsl.RunVars, pr *Probes, at time.Time) []store.ProbeResult {
	base, task := pipelinePool(p), ""
	if t != nil {
		base, task = t.Pool, t.Name
	}
	var out []store.ProbeResult
	for _, rv := range runs {
		v, m, msg, ok := pr.Measurement(rv.LogicalDate)
		if !ok {
			continue
		}
		rt := Route{Pool: base}
		if r, hot := skewRoute(sk, rv, pr); hot {
			rt = r
		} else if msg != "" {
			rt = probeFailed(base, msg)
		}
		out = append(out, store.ProbeResult{Pipeline: p.Name, Task: task, LogicalDate: rv.LogicalDate,
			Value: v, Median: m, Error: msg, Pool: rt.Pool, Reason: rt.Reason, MeasuredAt: at})
	}
	return out
}

// Recorded is the measurements of skew block sk that runs recorded (rows),
// judged with the block's current hot_factor: what routes a date without
// running its probe again.
func Recorded(sk *dsl.Skew, rows []store.ProbeResult) *Probes {
	r := &Probes{factor: sk.HotFactor, medians: map[int64]float64{}, refs: map[int64]int{}, values: map[int64]float64{}, errs: map[int64]string{}}
	for _, row := range rows {
		k := row.LogicalDate.Unix()
		if row.Error != "" {
			r.errs[k] = row.Error
			continue
		}
		r.values[k], r.medians[k] = row.Value, row.Median
	}
	return r
}

// failure is why the probe of a date being run failed ("" when it did not).
func (r *Probes) failure(logical time.Time) string {
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
	last map[*dsl.Skew]*Probes
}

type probeOut struct {
	v   float64
	err error
}

// ProbeContext returns ctx with a memo of probe measurements and the clock
// that says which reference dates are due.
func ProbeContext(ctx context.Context, now time.Time) context.Context {
	return context.WithValue(ctx, probeKey{}, &probeMemo{now: now, m: map[*dsl.Skew]map[int64]probeOut{}, last: map[*dsl.Skew]*Probes{}})
}

// Measure measures, with a skew block's probe, every date of runs and the
// dates of their reference sets: a date's value is compared with the
// median of the due dates of the pipeline within the block's probe_window
// of it (before and after, from start_date), whatever else is being run,
// so that one hot date run alone is still hot (like Spark AQE's skewed
// partition factor, over a window of the pipeline's own history). A date
// whose probe fails is not hot; its failure is kept in errs. With runs
// nil it returns the latest result of this context (memoized).
func Measure(ctx context.Context, p *dsl.Pipeline, skew *dsl.Skew, runs []dsl.RunVars) *Probes {
	memo, _ := ctx.Value(probeKey{}).(*probeMemo)
	if runs == nil && memo != nil {
		memo.mu.Lock()
		r := memo.last[skew]
		memo.mu.Unlock()
		if r != nil {
			return r
		}
	}
	res := &Probes{factor: skew.HotFactor, medians: map[int64]float64{}, refs: map[int64]int{}, values: map[int64]float64{}, errs: map[int64]string{}}
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
					ID: store.RunID(store.KindScheduled, iv.Start), Pipeline: p.Name, LogicalDate: iv.Start,
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
	day := rv.LogicalDate.Format(DateOnly)
	if h, m, s := rv.LogicalDate.Clock(); h != 0 || m != 0 || s != 0 {
		day = rv.LogicalDate.Format(time.RFC3339)
	}
	o, err := executor.Run(ctx, executor.Command{
		Argv:    c.Argv,
		Dir:     c.Dir,
		Env:     procenv.Of(c.Pass, dsl.TaskEnv(rv, dsl.PoolVars{}, "probe", 1), procenv.Pairs(c.Env)),
		Timeout: probeTimeout,
	})
	if err != nil {
		return 0, fmt.Errorf("probe of %s: %w", day, err)
	}
	if !o.Success() {
		msg := fmt.Sprintf("probe of %s %s", day, o.Describe())
		if line := LastLine(o.Stderr); line != "" {
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

// LastLine is the last non-blank line of b, trimmed.
func LastLine(b []byte) string {
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

// MedianDuration is the median of ds (the upper one of an even count).
func MedianDuration(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}
