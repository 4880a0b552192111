package web

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/rewind-dev/rewind/dsl"
	"github.com/rewind-dev/rewind/store"
	"github.com/rewind-dev/rewind/timetable"
)

// A grid is read a page at a time: ten years of an hourly pipeline are
// 87,600 runs, and a page (its latest DefaultGridRuns by default) costs
// what it holds, whatever the history behind it.
const (
	// DefaultGridRuns is how many runs a page of the grid holds without
	// limit=: its latest ones.
	DefaultGridRuns = 100
	// MaxGridRuns is the largest limit= (a year of a daily pipeline and
	// more): a larger one is a 400.
	MaxGridRuns = 1000
)

// GridWindow is the page of a grid a request asks for: the latest Limit
// runs (0: DefaultGridRuns) before Before, or the first Limit runs after
// After (at most one of the two; neither: the latest runs).
type GridWindow struct {
	Limit         int
	Before, After time.Time
}

// gridWindow reads limit=, before= and after= (logical dates, RFC 3339).
func gridWindow(q url.Values) (GridWindow, error) {
	var w GridWindow
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > MaxGridRuns {
			return w, errorf(http.StatusBadRequest, "limit=%s: want a number of runs from 1 to %d", v, MaxGridRuns)
		}
		w.Limit = n
	}
	for _, f := range []struct {
		name string
		to   *time.Time
	}{{"before", &w.Before}, {"after", &w.After}} {
		v := q.Get(f.name)
		if v == "" {
			continue
		}
		t, err := time.Parse(time.RFC3339, unescapePlus(v))
		if err != nil {
			return w, errorf(http.StatusBadRequest, "%s=%s: want a logical date, RFC 3339 (2025-03-04T13:00:00+01:00)", f.name, v)
		}
		*f.to = t
	}
	if !w.Before.IsZero() && !w.After.IsZero() {
		return w, errorf(http.StatusBadRequest, "before= and after= name one page each: give one of them")
	}
	return w, nil
}

// query is the window as query parameters to append to a URL that has
// some already ("&before=...&limit=..."; "" for the latest page).
func (w GridWindow) query() string {
	v := url.Values{}
	if !w.Before.IsZero() {
		v.Set("before", w.Before.Format(time.RFC3339))
	}
	if !w.After.IsZero() {
		v.Set("after", w.After.Format(time.RFC3339))
	}
	if w.Limit > 0 {
		v.Set("limit", strconv.Itoa(w.Limit))
	}
	if len(v) == 0 {
		return ""
	}
	return "&" + v.Encode()
}

// GridPage reads one page of the grid of a pipeline (GET /api/grid): the
// page's runs with their task instances (one ListRuns bounded by the
// page), the pipeline's runs counted by state (one GROUP BY), and whether
// there are runs before and after the page. now is the clock of the
// durations of running runs. An after= page that would reach the latest
// run is the latest page.
func GridPage(ctx context.Context, st Reader, def *dsl.Pipeline, name string, win GridWindow, now time.Time) (GridJSON, error) {
	limit := cmp.Or(win.Limit, DefaultGridRuns)
	p := store.ListRunsParams{Pipelines: []string{name}, WithTasks: true, Limit: limit + 1, Last: true}
	if !win.After.IsZero() {
		p.From, p.Last = win.After.Add(time.Nanosecond), false
	} else if !win.Before.IsZero() {
		p.To = win.Before.Add(-time.Nanosecond)
	}
	runs, err := st.ListRuns(ctx, p)
	if err != nil {
		return GridJSON{}, err
	}
	more := len(runs) > limit
	if !p.Last && !more {
		return GridPage(ctx, st, def, name, GridWindow{Limit: win.Limit}, now)
	}
	if more {
		if p.Last {
			runs = runs[1:]
		} else {
			runs = runs[:limit]
		}
	}
	g := gridOf(def, name, runs)
	g.Limit = limit
	if len(runs) > 0 {
		first, last := runs[0].LogicalDate, runs[len(runs)-1].LogicalDate
		older, newer := p.Last && more, !p.Last && more
		if !p.Last {
			if older, err = anyRun(ctx, st, store.ListRunsParams{Pipelines: []string{name}, To: first.Add(-time.Nanosecond), Limit: 1, Last: true}); err != nil {
				return GridJSON{}, err
			}
		} else if !win.Before.IsZero() {
			if newer, err = anyRun(ctx, st, store.ListRunsParams{Pipelines: []string{name}, From: last.Add(time.Nanosecond), Limit: 1}); err != nil {
				return GridJSON{}, err
			}
		}
		if older {
			g.Older = first.Format(time.RFC3339)
		}
		if newer {
			g.Newer = last.Format(time.RFC3339)
		}
	}
	counts, err := st.CountRuns(ctx, store.CountRunsParams{Pipelines: []string{name}})
	if err != nil {
		return GridJSON{}, err
	}
	g.Counts, g.Active = map[string]int{}, false
	for _, c := range counts {
		g.Counts[string(c.State)] += c.Count
		g.Total += c.Count
		if c.State == store.RunQueued || c.State == store.RunRunning {
			g.Active = true
		}
	}
	loc := time.UTC
	if def != nil {
		loc = def.Timezone
		g.Timezone = loc.String()
	} else if len(runs) > 0 {
		loc = runs[0].LogicalDate.Location()
		g.Timezone = runs[0].LogicalDate.Format("-07:00")
	}
	g.SubDaily = subDaily(def, runs)
	for i := range g.Runs {
		nameRun(&g.Runs[i], runs[i], loc, g.SubDaily, i == 0 || runs[i].DS != runs[i-1].DS, now)
	}
	return g, nil
}

func anyRun(ctx context.Context, st Reader, p store.ListRunsParams) (bool, error) {
	runs, err := st.ListRuns(ctx, p)
	return len(runs) > 0, err
}

// nameRun fills what a column shows of run r beside its state: its name,
// header and day, its duration, its backfill and its batch.
func nameRun(gr *GridRunJSON, r store.Run, loc *time.Location, sub, newDay bool, now time.Time) {
	at := r.LogicalDate.In(loc)
	gr.At, gr.Label = r.DS, r.DS
	if sub {
		gr.At, gr.Label = at.Format("2006-01-02 15:04 MST"), at.Format("15:04")
		if newDay {
			gr.Day = r.DS
		}
	}
	gr.BackfillID = r.BackfillID
	if r.BatchOf != 0 {
		gr.BatchRun = r.BatchOf
		if !r.BatchStart.IsZero() {
			gr.BatchOf = store.RunID(r.Kind, r.BatchStart)
		}
		return // no work of its own: its batch's run has the duration
	}
	if !r.StartedAt.IsZero() {
		end := r.EndedAt
		if end.IsZero() {
			end = now
		}
		gr.Seconds = math.Round(max(end.Sub(r.StartedAt).Seconds(), 0)*1000) / 1000
	}
}

// subDaily says whether the runs of a pipeline are told apart by their
// time of day: its schedule ticks twice on one day (the next ticks from
// its first run, or its start_date), or two runs of the page share a day.
func subDaily(def *dsl.Pipeline, runs []store.Run) bool {
	for i := 1; i < len(runs); i++ {
		if runs[i].DS == runs[i-1].DS {
			return true
		}
	}
	if def == nil {
		return false
	}
	tt, err := timetable.New(def.Schedule, def.Timezone)
	if err != nil {
		return false
	}
	from := def.StartDate
	if len(runs) > 0 {
		from = runs[0].LogicalDate
	}
	prev := ""
	t := tt.Next(from.Add(-time.Second))
	for range 8 {
		if t.IsZero() {
			break
		}
		day := t.Format(time.DateOnly)
		if day == prev {
			return true
		}
		prev, t = day, tt.Next(t)
	}
	return false
}

// coveredNote is what a column or cell of a run covered by a batch says
// of it.
func coveredNote(r GridRunJSON) string {
	if r.BatchOf == "" {
		return ""
	}
	return fmt.Sprintf(" · covered by batch run %s (run %d)", r.BatchOf, r.BatchRun)
}

// GridView is what the grid page renders: the page of the grid and its
// window, as query parameters for the page's polls.
type GridView struct {
	GridJSON
	Window string
	// MaxSeconds is the longest duration of the page's runs: the full
	// height of the duration bars.
	MaxSeconds float64
	// From and To name the page's first and last runs.
	From, To string
}

func newGridView(g GridJSON, win GridWindow) GridView {
	v := GridView{GridJSON: g, Window: win.query()}
	for _, r := range g.Runs {
		v.MaxSeconds = max(v.MaxSeconds, r.Seconds)
	}
	if n := len(g.Runs); n > 0 {
		v.From, v.To = g.Runs[0].At, g.Runs[n-1].At
	}
	return v
}

// durLevels is how many heights a duration bar has (CSS classes h0..h20).
const durLevels = 20

// durLevel is the height class of a run's duration bar: its share of the
// page's longest run, in twentieths (a run that ran at all gets one).
func durLevel(s, longest float64) int {
	if s <= 0 || longest <= 0 {
		return 0
	}
	return max(1, int(math.Ceil(s/longest*durLevels)))
}

// kindMarks are the marks of the run kinds in the grid and the Gantt
// chart (the legend explains them).
var kindMarks = map[string]string{string(store.KindScheduled): "◷", string(store.KindManual): "▶", string(store.KindBackfill): "↺"}

func kindMark(kind string) string { return kindMarks[kind] }

// runHeadTitle is a column header's tooltip: the run's name, state, kind
// and backfill, duration, its hot pool and rule, its batch.
func runHeadTitle(r GridRunJSON) string {
	t := cmp.Or(r.At, r.DS) + ": " + r.State + " (" + r.Kind
	if r.BackfillID != "" {
		t += " " + r.BackfillID
	}
	t += ")"
	if r.Seconds > 0 {
		t += ", ran " + short(time.Duration(r.Seconds*float64(time.Second)))
	}
	if r.Reason != "" {
		t += " · pool " + r.Pool + ": " + r.Reason
	}
	return t + coveredNote(r)
}

// runName names a run of a pipeline as the grid does (GridRunJSON.At).
func (s *Server) runName(pipeline string, r store.Run) string {
	def := s.o.Workspace.Pipeline(pipeline)
	loc := r.LogicalDate.Location()
	if def != nil {
		loc = def.Timezone
	}
	var gr GridRunJSON
	nameRun(&gr, r, loc, subDaily(def, []store.Run{r}), true, s.o.Now())
	return gr.At
}
