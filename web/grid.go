package web

import (
	"cmp"
	"context"
	"encoding/json"
	"github.com/rewind-dev/rewind/ops"
	"html"
	"html/template"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/rewind-dev/rewind/dsl"
	"github.com/rewind-dev/rewind/store"
)

// GridJSON is the grid of one pipeline (GET /api/grid?pipeline=NAME):
// runs as columns, oldest first (newest on the right), tasks as rows.
// It is what the grid page polls while a catchup runs: compact, one cell
// per task instance; the attempts of a cell come from /api/runs.
type GridJSON struct {
	Pipeline string `json:"pipeline"`
	// Tasks are the rows: the workspace's task order (every task after
	// its upstreams), then tasks only the state knows.
	Tasks []string `json:"tasks"`
	// Runs are the columns.
	Runs []GridRunJSON `json:"runs"`
	// Active: some run is queued or running (the page polls faster).
	Active bool `json:"active"`
	// Counts are the runs by state: every run of the pipeline, not only
	// those of the page.
	Counts map[string]int `json:"counts"`
	// Timezone is the pipeline's; SubDaily says that its runs are named by
	// their logical date-time in it (HH:MM), not by their day.
	Timezone string `json:"timezone"`
	SubDaily bool   `json:"sub_daily"`
	// Total counts the runs of the pipeline; Limit is the most runs a
	// page holds (limit=, default DefaultGridRuns). Older is the before=
	// of the page before this one, Newer the after= of the page after it
	// ("" when there is none: the first runs, the latest ones).
	Total int    `json:"total"`
	Limit int    `json:"limit"`
	Older string `json:"older"`
	Newer string `json:"newer"`
}

// GridRunJSON is one column of the grid.
type GridRunJSON struct {
	ID          int64  `json:"id"`
	LogicalDate string `json:"logical_date"`
	DS          string `json:"ds"`
	Kind        string `json:"kind"`
	State       string `json:"state"`
	// Pool and Reason mark a hot date: the pool a rule routed one of its
	// tasks to, and the rule (hot_dates, hot_when: ..., probe: ...,
	// history: ..., an OOM escalation). Empty for an ordinary date.
	Pool   string `json:"pool,omitempty"`
	Reason string `json:"reason,omitempty"`
	// Cells, one per task of GridJSON.Tasks (state "" where the run has
	// no such task).
	Cells []GridCellJSON `json:"cells"`
	// At names the run for people: its ds, or for a sub-daily pipeline
	// its logical date-time in the pipeline's timezone ("2025-03-04 13:00
	// CET"). Label is what its column header shows: the ds, or HH:MM, with
	// Day the day where the day changes (the first column of the page and
	// of each day; "" elsewhere and for a daily pipeline).
	At    string `json:"at"`
	Label string `json:"label"`
	Day   string `json:"day,omitempty"`
	// Seconds is how long the run has run: from its admission to its end
	// (now, while it runs); 0 before it starts.
	Seconds float64 `json:"duration_seconds"`
	// BackfillID is the backfill a backfill run belongs to.
	BackfillID string `json:"backfill_id,omitempty"`
	// BatchOf is the run id of the batch run that covers this run (as in
	// `runs --json`), BatchRun that run's id: the covered run did no work
	// of its own, it ended with its batch.
	BatchOf  string `json:"batch_of,omitempty"`
	BatchRun int64  `json:"batch_run,omitempty"`
}

// GridCellJSON is one task instance.
type GridCellJSON struct {
	State  string `json:"state"`
	Pool   string `json:"pool,omitempty"`
	Try    int    `json:"try,omitempty"`
	Reason string `json:"reason,omitempty"`
}

// Grid reads the grid of a pipeline from the state: its latest
// DefaultGridRuns runs (GridPage).
func Grid(ctx context.Context, st Reader, def *dsl.Pipeline, name string) (GridJSON, error) {
	return GridPage(ctx, st, def, name, GridWindow{}, time.Now())
}

func gridOf(def *dsl.Pipeline, name string, runs []store.Run) GridJSON {
	g := GridJSON{Pipeline: name, Tasks: []string{}, Runs: make([]GridRunJSON, 0, len(runs)), Counts: map[string]int{}, Timezone: "UTC"}
	row := map[string]int{}
	if def != nil {
		for _, t := range def.Tasks {
			row[t.Name] = len(g.Tasks)
			g.Tasks = append(g.Tasks, t.Name)
		}
	}
	var extra []string
	for _, r := range runs {
		for _, t := range r.Tasks {
			if _, ok := row[t.Task]; !ok {
				row[t.Task] = -1
				extra = append(extra, t.Task)
			}
		}
	}
	slices.Sort(extra)
	for _, t := range extra {
		row[t] = len(g.Tasks)
		g.Tasks = append(g.Tasks, t)
	}
	for _, r := range runs {
		gr := GridRunJSON{ID: r.ID, LogicalDate: r.LogicalDate.Format(time.RFC3339), DS: r.DS, Kind: string(r.Kind), State: string(r.State),
			Cells: make([]GridCellJSON, len(g.Tasks))}
		for _, t := range r.Tasks {
			c := GridCellJSON{State: string(t.State), Pool: t.Pool, Try: t.TryNumber, Reason: t.Reason}
			gr.Cells[row[t.Task]] = c
			if t.Reason != "" && gr.Reason == "" {
				gr.Pool, gr.Reason = t.Pool, t.Reason
			}
		}
		if r.State == store.RunQueued || r.State == store.RunRunning {
			g.Active = true
		}
		g.Counts[string(r.State)]++
		g.Runs = append(g.Runs, gr)
	}
	return g
}

func (s *Server) grid(ctx context.Context, name string, win GridWindow) (GridJSON, error) {
	if err := s.knownPipeline(ctx, name); err != nil {
		return GridJSON{}, err
	}
	return GridPage(ctx, s.o.State, s.o.Workspace.Pipeline(name), name, win, s.o.Now())
}

func (s *Server) apiGrid(w http.ResponseWriter, r *http.Request) {
	name := r.URL.Query().Get("pipeline")
	if name == "" {
		s.fail(w, r, errorf(http.StatusBadRequest, "pipeline= is required"))
		return
	}
	win, err := gridWindow(r.URL.Query())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	g, err := s.grid(r.Context(), name, win)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	// Compact: a live page polls it every second.
	b, err := json.Marshal(s.o.Workspace.Redacted(g))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.send(w, r, http.StatusOK, "application/json", append(b, '\n'))
}

func (s *Server) gridPage(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	win, err := gridWindow(r.URL.Query())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	g, err := s.grid(r.Context(), name, win)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.page(w, r, http.StatusOK, "grid.html", name, gridPageData{GridView: newGridView(g, win), Audit: s.auditOf(r.Context(), name, ""), Paused: s.pausedOf(r.Context(), name)})
}

// gridPageData is the grid page: a page of the grid, the pipeline's audit
// trail and whether it is paused (its pause or unpause action).
type gridPageData struct {
	GridView
	Audit  []ops.AuditJSON
	Paused bool
}

// apiRuns is `rewind runs --json` (pipeline= filters as --pipeline does;
// run=ID keeps one run of that pipeline).
func (s *Server) apiRuns(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	ctx := r.Context()
	p := store.ListRunsParams{WithTasks: true, WithAttempts: true}
	name := q.Get("pipeline")
	if name != "" {
		if err := s.knownPipeline(ctx, name); err != nil {
			s.fail(w, r, err)
			return
		}
		p.Pipelines = []string{name}
	}
	var runs []store.Run
	var err error
	if id := q.Get("run"); id != "" {
		if name == "" {
			s.fail(w, r, errorf(http.StatusBadRequest, "run= goes with pipeline="))
			return
		}
		var run store.Run
		run, err = s.run(ctx, name, id)
		runs = []store.Run{run}
	} else {
		runs, err = s.o.State.ListRuns(ctx, p)
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.sendJSON(w, r, RunsJSON(runs, s.o.Home))
}

// run reads one run of a pipeline by id, with its tasks and attempts.
func (s *Server) run(ctx context.Context, pipeline, idText string) (store.Run, error) {
	id, err := strconv.ParseInt(idText, 10, 64)
	if err != nil || id <= 0 {
		return store.Run{}, errorf(http.StatusBadRequest, "run id %q: want a number", idText)
	}
	// By id: one run read, however long the pipeline's history.
	one, err := s.o.State.ListRuns(ctx, store.ListRunsParams{Pipelines: []string{pipeline}, IDs: []int64{id}, WithTasks: true, WithAttempts: true})
	if err != nil {
		return store.Run{}, err
	}
	if len(one) == 1 && one[0].ID == id {
		return one[0], nil
	}
	return store.Run{}, errorf(http.StatusNotFound, "pipeline %s has no run %d", pipeline, id)
}

// CellJSON is one cell of the grid with its attempts (GET
// /api/cell?pipeline=NAME&run=ID&task=TASK): what the page shows when a
// cell is clicked. Each attempt's log is at its Log URL, by attempt id.
type CellJSON struct {
	Pipeline    string            `json:"pipeline"`
	RunID       int64             `json:"run_id"`
	DS          string            `json:"ds"`
	LogicalDate string            `json:"logical_date"`
	Kind        string            `json:"kind"`
	RunState    string            `json:"run_state"`
	Task        string            `json:"task"`
	State       string            `json:"state"`
	Pool        string            `json:"pool"`
	TryNumber   int               `json:"try_number"`
	Reason      string            `json:"reason"`
	Attempts    []CellAttemptJSON `json:"attempts"`
	Gantt       string            `json:"gantt"`
	// At names the run as the grid does: its ds, or its logical
	// date-time in the pipeline's timezone for a sub-daily pipeline.
	At string `json:"at"`
	// BatchOf is the run id of the batch run that covers the run ("" when
	// it ran on its own).
	BatchOf string `json:"batch_of,omitempty"`
}

// CellAttemptJSON is an attempt of a cell.
type CellAttemptJSON struct {
	ID        int64   `json:"id"`
	TryNumber int     `json:"try_number"`
	Pool      string  `json:"pool"`
	Reason    string  `json:"reason"`
	State     string  `json:"state"`
	ExitCode  *int    `json:"exit_code"`
	Signal    string  `json:"signal,omitempty"`
	StartedAt string  `json:"started_at"`
	EndedAt   *string `json:"ended_at"`
	// Seconds is how long it ran (so far, for a running attempt).
	Seconds float64 `json:"duration_seconds"`
	PeakRSS int64   `json:"peak_rss_bytes"`
	Log     string  `json:"log"`
}

func (s *Server) apiCell(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	name, task := q.Get("pipeline"), q.Get("task")
	if name == "" || q.Get("run") == "" || task == "" {
		s.fail(w, r, errorf(http.StatusBadRequest, "pipeline=, run= and task= are required"))
		return
	}
	if err := s.knownPipeline(r.Context(), name); err != nil {
		s.fail(w, r, err)
		return
	}
	run, err := s.run(r.Context(), name, q.Get("run"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	i := slices.IndexFunc(run.Tasks, func(t store.TaskInstance) bool { return t.Task == task })
	if i < 0 {
		s.fail(w, r, errorf(http.StatusNotFound, "run %d of %s has no task %q", run.ID, name, task))
		return
	}
	t := run.Tasks[i]
	now := s.o.Now()
	c := CellJSON{Pipeline: name, RunID: run.ID, DS: run.DS, LogicalDate: run.LogicalDate.Format(time.RFC3339), Kind: string(run.Kind),
		RunState: string(run.State), Task: t.Task, State: string(t.State), Pool: t.Pool, TryNumber: t.TryNumber, Reason: t.Reason,
		Attempts: []CellAttemptJSON{}, Gantt: "/pipelines/" + url.PathEscape(name) + "/runs/" + strconv.FormatInt(run.ID, 10)}
	c.At, c.BatchOf = s.runName(name, run), ToRunJSON(run, "").BatchOf
	for _, a := range t.Attempts {
		ca := CellAttemptJSON{ID: a.ID, TryNumber: a.TryNumber, Pool: a.Pool, Reason: a.Reason, State: string(a.State), ExitCode: a.ExitCode,
			Signal: a.Signal, StartedAt: a.StartedAt.UTC().Format(time.RFC3339Nano), PeakRSS: a.PeakRSS,
			Log: "/api/attempts/" + strconv.FormatInt(a.ID, 10) + "/log?" + url.Values{"pipeline": {name}, "run": {strconv.FormatInt(run.ID, 10)}}.Encode()}
		end := now
		if !a.EndedAt.IsZero() {
			e := a.EndedAt.UTC().Format(time.RFC3339Nano)
			ca.EndedAt, end = &e, a.EndedAt
		}
		ca.Seconds = max(end.Sub(a.StartedAt).Seconds(), 0)
		c.Attempts = append(c.Attempts, ca)
	}
	s.sendJSON(w, r, c)
}

// gridBody renders the rows of the grid: 7,300 cells for a year of 20
// tasks, written here rather than by the template engine (five times
// faster), every value escaped for its attribute or text.
func gridBody(g GridJSON) template.HTML {
	var b strings.Builder
	b.Grow(len(g.Tasks) * len(g.Runs) * 96)
	for i, task := range g.Tasks {
		et := html.EscapeString(task)
		b.WriteString(`<tr data-task="`)
		b.WriteString(et)
		b.WriteString(`"><th class="task">`)
		b.WriteString(et)
		b.WriteString(`</th>`)
		for _, r := range g.Runs {
			c := r.Cells[i]
			b.WriteString(`<td class="c s-`)
			b.WriteString(html.EscapeString(cmp.Or(c.State, "none")))
			if c.Reason != "" {
				b.WriteString(` hot`)
			}
			if c.Try > 1 {
				b.WriteString(` retry`)
			}
			if r.BatchOf != "" {
				b.WriteString(` covered`)
			}
			b.WriteByte('"')
			if c.Reason != "" {
				b.WriteString(` data-pool="`)
				b.WriteString(html.EscapeString(c.Pool))
				b.WriteByte('"')
			}
			b.WriteString(` title="`)
			b.WriteString(html.EscapeString(cellTitle(task, cmp.Or(r.At, r.DS), c) + coveredNote(r)))
			b.WriteString(`">`)
			if c.Reason != "" {
				b.WriteString(`<span class="mark">`)
				b.WriteString(html.EscapeString(initial(c.Pool)))
				b.WriteString(`</span>`)
			}
			b.WriteString("</td>")
		}
		b.WriteString("</tr>\n")
	}
	return template.HTML(b.String())
}

// cellTitle is a cell's tooltip: task, date, state, pool, try, reason.
func cellTitle(task, ds string, c GridCellJSON) string {
	t := task + " " + ds + ": " + orDash(c.State)
	if c.Pool != "" {
		t += ", pool " + c.Pool
	}
	if c.Try > 1 {
		t += ", try " + strconv.Itoa(c.Try)
	}
	if c.Reason != "" {
		t += " (" + c.Reason + ")"
	}
	return t
}

func initial(s string) string {
	if s == "" {
		return ""
	}
	return strings.ToUpper(s[:1])
}
