package web

import (
	"fmt"
	"net/http"
	"time"

	"github.com/rewind-dev/rewind/dsl"
	"github.com/rewind-dev/rewind/store"
)

// A run's Gantt chart: one lane per attempt (a task's tries one under the
// other), grouped by the execution that ran them (the run's kind; for a
// backfill's run, the attempts from before the backfill took the date
// apart from the backfill's own), on the wall clock from the first
// attempt's start to the last one's end (now for a running attempt), with
// clock times on the axis in the pipeline's timezone. Drawn on the server
// as SVG: no script needed.
const (
	ganttLabel    = 200.0 // width of the lane names
	ganttWidth    = 1000.0
	ganttRowH     = 24.0
	ganttTop      = 34.0
	ganttSectionH = 22.0
)

type ganttChart struct {
	Pipeline string
	Run      store.Run
	RunKey   string
	// At names the run as the grid does (its ds, or its logical date-time
	// for a sub-daily pipeline).
	At       string
	Rows     []ganttRow
	Sections []ganttSection
	Bars     []ganttBar
	Ticks    []ganttTick
	// Zone names the timezone of the axis's times.
	Zone   string
	Span   time.Duration
	Height float64
	Width  float64
	Label  float64
	Empty  bool
}

type ganttRow struct {
	Task string
	Try  int
	Y    float64
}

// ganttSection is a group of lanes: the attempts of one execution.
type ganttSection struct {
	Kind  string // scheduled | manual | backfill | earlier
	Title string
	Y     float64
}

type ganttBar struct {
	Task, Pool, State, Reason string
	Try                       int
	Kind                      string
	X, Y, W, H                float64
	Duration                  time.Duration
	Running                   bool
}

type ganttTick struct {
	X     float64
	Label string
	// Day is set where the date changes along the axis.
	Day string
}

// gantt draws run r's chart; took is when its backfill took the run
// (zero when it is not a backfill's, or unknown), loc the timezone of the
// axis.
func gantt(def *dsl.Pipeline, r store.Run, took time.Time, loc *time.Location, now time.Time) ganttChart {
	g := ganttChart{Pipeline: r.Pipeline, Run: r, RunKey: store.RunID(r.Kind, r.LogicalDate), Width: ganttWidth, Label: ganttLabel, At: r.DS}
	order := map[string]int{}
	if def != nil {
		for i, t := range def.Tasks {
			order[t.Name] = i
		}
	}
	tasks := append([]store.TaskInstance(nil), r.Tasks...)
	for i := 0; i < len(tasks); i++ { // insertion sort: a handful of tasks
		for j := i; j > 0 && less(order, tasks[j].Task, tasks[j-1].Task); j-- {
			tasks[j], tasks[j-1] = tasks[j-1], tasks[j]
		}
	}
	var t0, t1 time.Time
	for _, t := range tasks {
		for _, a := range t.Attempts {
			end := a.EndedAt
			if end.IsZero() {
				end = now
			}
			if t0.IsZero() || a.StartedAt.Before(t0) {
				t0 = a.StartedAt
			}
			if end.After(t1) {
				t1 = end
			}
		}
	}
	g.Span = t1.Sub(t0)
	span := float64(g.Span)
	if span <= 0 {
		span = float64(time.Second)
	}
	plot := ganttWidth - ganttLabel - 14
	// The executions: the attempts from before the backfill took the run
	// first, then the run's own kind.
	type lane struct {
		task store.TaskInstance
		a    store.Attempt
	}
	own := string(r.Kind)
	sections := map[string][]lane{}
	for _, t := range tasks {
		for _, a := range t.Attempts {
			kind := own
			if !took.IsZero() && a.StartedAt.Before(took) {
				kind = "earlier"
			}
			sections[kind] = append(sections[kind], lane{t, a})
		}
	}
	y := ganttTop
	for _, kind := range []string{"earlier", own} {
		ls := sections[kind]
		if len(ls) == 0 {
			continue
		}
		title := kind + " run"
		switch {
		case kind == "earlier":
			title = "before backfill " + r.BackfillID + " took the date (its earlier runs)"
		case r.BackfillID != "":
			title = "backfill " + r.BackfillID
		}
		g.Sections = append(g.Sections, ganttSection{Kind: kind, Title: title, Y: y})
		y += ganttSectionH
		for _, l := range ls {
			a := l.a
			end, running := a.EndedAt, a.EndedAt.IsZero()
			if running {
				end = now
			}
			g.Rows = append(g.Rows, ganttRow{Task: l.task.Task, Try: a.TryNumber, Y: y})
			x := ganttLabel + plot*float64(a.StartedAt.Sub(t0))/span
			w := max(plot*float64(end.Sub(a.StartedAt))/span, 2)
			g.Bars = append(g.Bars, ganttBar{Task: l.task.Task, Pool: a.Pool, State: string(a.State), Reason: a.Reason, Try: a.TryNumber, Kind: kind,
				X: x, Y: y + 3, W: w, H: ganttRowH - 6, Duration: end.Sub(a.StartedAt), Running: running})
			y += ganttRowH
		}
	}
	g.Empty = len(g.Bars) == 0
	g.Height = max(y, ganttTop+ganttRowH) + 10
	if loc == nil {
		loc = time.UTC
	}
	g.Zone = loc.String()
	if !g.Empty {
		g.Zone = t0.In(loc).Format("MST")
		if loc.String() != g.Zone {
			g.Zone = loc.String() + ", " + g.Zone
		}
		g.Ticks = axisTicks(t0, t1, loc, ganttLabel, plot)
	}
	return g
}

// tickSteps are the steps of a time axis: the smallest that leaves room
// for its labels is taken (eight clock times, fewer with seconds).
var tickSteps = []time.Duration{
	time.Millisecond, 2 * time.Millisecond, 5 * time.Millisecond, 10 * time.Millisecond, 20 * time.Millisecond, 50 * time.Millisecond,
	100 * time.Millisecond, 200 * time.Millisecond, 500 * time.Millisecond,
	time.Second, 2 * time.Second, 5 * time.Second, 10 * time.Second, 15 * time.Second, 30 * time.Second,
	time.Minute, 2 * time.Minute, 5 * time.Minute, 10 * time.Minute, 15 * time.Minute, 30 * time.Minute,
	time.Hour, 2 * time.Hour, 3 * time.Hour, 6 * time.Hour, 12 * time.Hour, 24 * time.Hour,
}

// axisTicks are the ticks of a time axis from t0 to t1 drawn from x0 over
// width: round times in loc (a whole number of steps), labelled with the
// clock time (seconds when the step is under a minute), the date where
// it changes.
func axisTicks(t0, t1 time.Time, loc *time.Location, x0, width float64) []ganttTick {
	span := t1.Sub(t0)
	if span <= 0 {
		return []ganttTick{{X: x0, Label: t0.In(loc).Format("15:04:05"), Day: t0.In(loc).Format(time.DateOnly)}}
	}
	step := tickSteps[len(tickSteps)-1]
	for _, s := range tickSteps {
		most := time.Duration(8) // HH:MM labels; longer ones need more room
		switch {
		case s < time.Second:
			most = 5
		case s < time.Minute:
			most = 6
		}
		if span/s <= most {
			step = s
			break
		}
	}
	for step < span/8 { // a span of days: whole days
		step += 24 * time.Hour
	}
	layout := "15:04"
	switch {
	case step < 100*time.Millisecond:
		layout = "15:04:05.000"
	case step < time.Second:
		layout = "15:04:05.0"
	case step < time.Minute:
		layout = "15:04:05"
	}
	// Round in wall time: the offset of t0 added before truncating.
	_, off := t0.In(loc).Zone()
	shift := time.Duration(off) * time.Second
	first := t0.Add(shift).Truncate(step).Add(-shift)
	if first.Before(t0) {
		first = first.Add(step)
	}
	var out []ganttTick
	day := ""
	for t := first; !t.After(t1); t = t.Add(step) {
		lt := t.In(loc)
		tick := ganttTick{X: x0 + width*float64(t.Sub(t0))/float64(span), Label: lt.Format(layout)}
		if d := lt.Format(time.DateOnly); d != day {
			tick.Day, day = d, d
		}
		out = append(out, tick)
	}
	if len(out) < 2 {
		// Too short a span for two round times: its two ends.
		out = out[:0]
		for i, t := range []time.Time{t0, t1} {
			lt := t.In(loc)
			tick := ganttTick{X: x0 + width*float64(i), Label: lt.Format("15:04:05.000")}
			if i == 0 {
				tick.Day = lt.Format(time.DateOnly)
			}
			out = append(out, tick)
		}
	}
	return out
}

func less(order map[string]int, a, b string) bool {
	oa, okA := order[a]
	ob, okB := order[b]
	switch {
	case okA && okB:
		return oa < ob
	case okA != okB:
		return okA
	}
	return a < b
}

// short writes a duration for people: 850ms, 12.3s, 4m05s, 2h10m.
func short(d time.Duration) string {
	switch {
	case d < time.Second:
		return fmt.Sprintf("%dms", d.Milliseconds())
	case d < time.Minute:
		return fmt.Sprintf("%.1fs", d.Seconds())
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	}
	return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
}

func (s *Server) ganttPage(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	if err := s.knownPipeline(r.Context(), name); err != nil {
		s.fail(w, r, err)
		return
	}
	run, err := s.run(r.Context(), name, r.PathValue("id"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	var took time.Time
	if run.BackfillID != "" {
		// A backfill takes the dates of its window once it is recorded:
		// the attempts started before were another execution's.
		if b, err := s.o.State.GetBackfill(r.Context(), run.BackfillID); err == nil {
			took = b.CreatedAt
		}
	}
	def := s.o.Workspace.Pipeline(name)
	loc := run.LogicalDate.Location()
	if def != nil {
		loc = def.Timezone
	}
	g := gantt(def, run, took, loc, s.o.Now())
	g.At = s.runName(name, run)
	s.page(w, r, http.StatusOK, "gantt.html", name+" "+g.At, g)
}
