package web

import (
	"context"
	"errors"
	"net/http"
	"sort"
	"time"

	"github.com/rewind-dev/rewind/dsl"
	"github.com/rewind-dev/rewind/store"
	"github.com/rewind-dev/rewind/timetable"
)

// PipelineJSON is one pipeline of the pipelines page (GET /api/pipelines).
type PipelineJSON struct {
	Name     string `json:"name"`
	Schedule string `json:"schedule"`
	Timezone string `json:"timezone"`
	// InWorkspace is false for a pipeline the state knows and the
	// workspace no longer declares.
	InWorkspace bool `json:"in_workspace"`
	Paused      bool `json:"paused"`
	// NextDue is the next interval to become due (nil: none, end_date passed).
	NextDue *IntervalJSON `json:"next_due"`
	// LastRun is the run with the latest logical date (nil: no run).
	LastRun *RunSummaryJSON `json:"last_run"`
	// LastFailure is the failed run with the latest logical date (nil:
	// none failed).
	LastFailure *RunSummaryJSON `json:"last_failure"`
	// Watermark: every run up to this logical date has succeeded ("" none).
	Watermark string         `json:"watermark"`
	Runs      map[string]int `json:"runs"` // by run state
	Tasks     int            `json:"tasks"`
}

// IntervalJSON is a data interval and when it becomes due.
type IntervalJSON struct {
	DS          string `json:"ds"`
	LogicalDate string `json:"logical_date"`
	DueAt       string `json:"due_at"`
}

// RunSummaryJSON is a run without its tasks.
type RunSummaryJSON struct {
	ID          int64  `json:"id"`
	DS          string `json:"ds"`
	LogicalDate string `json:"logical_date"`
	Kind        string `json:"kind"`
	State       string `json:"state"`
}

// BackfillSummaryJSON is one backfill of the list (GET /api/backfills).
type BackfillSummaryJSON struct {
	ID         string `json:"id"`
	Pipeline   string `json:"pipeline"`
	Start      string `json:"start"`
	End        string `json:"end"`
	Reprocess  string `json:"reprocess"`
	State      string `json:"state"`
	Phase      string `json:"phase"`
	OnHold     bool   `json:"on_hold"`
	RolledBack bool   `json:"rolled_back"`
	CreatedAt  string `json:"created_at"`
	UpdatedAt  string `json:"updated_at"`
}

func (s *Server) pipelines(ctx context.Context) ([]PipelineJSON, error) {
	return Pipelines(ctx, s.o.Workspace, s.o.State, s.o.Now())
}

// PipelineReader reads what the pipelines page shows of the state (a
// store.Store is one).
type PipelineReader interface {
	ListPipelines(ctx context.Context) ([]store.Pipeline, error)
	ListRuns(ctx context.Context, p store.ListRunsParams) ([]store.Run, error)
	CountRuns(ctx context.Context, p store.CountRunsParams) ([]store.RunCount, error)
	GetWatermark(ctx context.Context, pipeline string) (store.Watermark, error)
}

// Pipelines are the pipelines of ws and of the state st, by name, as GET
// /api/pipelines serves them and `rewind list --json` prints them; st nil
// is a workspace without a state yet (nothing paused, no run). now decides
// each pipeline's next interval to become due. The runs are counted in
// the state, and each pipeline's last run and last failure read alone:
// what it costs does not grow with the history (a page polls it).
func Pipelines(ctx context.Context, ws *dsl.Workspace, st PipelineReader, now time.Time) ([]PipelineJSON, error) {
	var stored []store.Pipeline
	var countRows []store.RunCount
	if st != nil {
		var err error
		if stored, err = st.ListPipelines(ctx); err != nil {
			return nil, err
		}
		if countRows, err = st.CountRuns(ctx, store.CountRunsParams{}); err != nil {
			return nil, err
		}
	}
	byName := map[string]store.Pipeline{}
	for _, p := range stored {
		byName[p.Name] = p
	}
	counts := map[string]map[string]int{}
	for _, c := range countRows {
		if counts[c.Pipeline] == nil {
			counts[c.Pipeline] = map[string]int{}
		}
		counts[c.Pipeline][string(c.State)] += c.Count
	}
	last := func(name string, states ...store.RunState) (*RunSummaryJSON, error) {
		if st == nil || len(counts[name]) == 0 {
			return nil, nil
		}
		runs, err := st.ListRuns(ctx, store.ListRunsParams{Pipelines: []string{name}, States: states, Limit: 1, Last: true})
		if err != nil || len(runs) == 0 {
			return nil, err
		}
		r := runs[0]
		return &RunSummaryJSON{ID: r.ID, DS: r.DS, LogicalDate: r.LogicalDate.Format(time.RFC3339), Kind: string(r.Kind), State: string(r.State)}, nil
	}
	out := []PipelineJSON{}
	seen := map[string]bool{}
	for _, p := range ws.Pipelines {
		seen[p.Name] = true
		pj := PipelineJSON{Name: p.Name, Schedule: p.Schedule, Timezone: p.Timezone.String(), InWorkspace: true,
			Paused: byName[p.Name].Paused, Tasks: len(p.Tasks)}
		if tt, err := timetable.New(p.Schedule, p.Timezone); err == nil {
			if iv, ok := tt.Upcoming(timetable.Window{StartDate: p.StartDate, EndDate: p.EndDate, Now: now}); ok {
				pj.NextDue = &IntervalJSON{DS: iv.DS(), LogicalDate: iv.Start.Format(time.RFC3339), DueAt: iv.End.Format(time.RFC3339)}
			}
		}
		out = append(out, pj)
	}
	for _, p := range stored {
		if !seen[p.Name] {
			out = append(out, PipelineJSON{Name: p.Name, Paused: p.Paused})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	for i := range out {
		pj := &out[i]
		pj.Runs = counts[pj.Name]
		if pj.Runs == nil {
			pj.Runs = map[string]int{}
		}
		var err error
		if pj.LastRun, err = last(pj.Name); err != nil {
			return nil, err
		}
		if pj.LastFailure, err = last(pj.Name, store.RunFailed); err != nil {
			return nil, err
		}
		if st == nil {
			continue
		}
		wm, err := st.GetWatermark(ctx, pj.Name)
		switch {
		case err == nil && !wm.LogicalDate.IsZero():
			pj.Watermark = wm.LogicalDate.Format(time.RFC3339)
		case err != nil && !errors.Is(err, store.ErrNotFound):
			return nil, err
		}
	}
	return out, nil
}

func (s *Server) backfills(ctx context.Context) ([]BackfillSummaryJSON, error) {
	list, err := s.o.State.ListBackfills(ctx)
	if err != nil {
		return nil, err
	}
	return Backfills(list), nil
}

// Backfills are list as GET /api/backfills serves them and `rewind
// backfill list --json` prints them, in their order (never null).
func Backfills(list []store.Backfill) []BackfillSummaryJSON {
	out := make([]BackfillSummaryJSON, 0, len(list))
	for _, b := range list {
		out = append(out, backfillSummary(b))
	}
	return out
}

func backfillSummary(b store.Backfill) BackfillSummaryJSON {
	return BackfillSummaryJSON{ID: b.ID, Pipeline: b.Pipeline, Start: b.From.Format(time.RFC3339), End: b.To.Format(time.RFC3339),
		Reprocess: b.Reprocess, State: string(b.State), Phase: b.Phase, OnHold: b.OnHold, RolledBack: b.RolledBack,
		CreatedAt: b.CreatedAt.UTC().Format(time.RFC3339), UpdatedAt: b.UpdatedAt.UTC().Format(time.RFC3339)}
}

func (s *Server) apiPipelines(w http.ResponseWriter, r *http.Request) {
	ps, err := s.pipelines(r.Context())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.sendJSON(w, r, ps)
}

func (s *Server) apiBackfills(w http.ResponseWriter, r *http.Request) {
	bs, err := s.backfills(r.Context())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.sendJSON(w, r, bs)
}

func (s *Server) pipelinesPage(w http.ResponseWriter, r *http.Request) {
	ps, err := s.pipelines(r.Context())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	bs, err := s.backfills(r.Context())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	sch, err := s.schedulerState(r.Context())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.page(w, r, http.StatusOK, "pipelines.html", "Pipelines", map[string]any{"Pipelines": ps, "Backfills": bs, "Scheduler": sch})
}
