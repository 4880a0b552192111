package web

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/rewind-dev/rewind/backfill"
	"github.com/rewind-dev/rewind/ops"
	"github.com/rewind-dev/rewind/skew"
	"github.com/rewind-dev/rewind/store"
	"github.com/rewind-dev/rewind/timetable"
)

// The backfill form of a pipeline: its fields are `backfill plan`'s
// flags. "plan" shows the plan as `backfill plan` computes it
// (backfill.Compute) and changes nothing; "apply" computes it again, as
// `backfill apply` does, records it and runs it in this process, then
// sends the browser to the backfill's page.

// formData is the backfill form page: the fields as given, the pipeline's
// tasks, and the plan once asked for.
type formData struct {
	Pipeline      string
	Tasks         []string
	Start, End    string
	Reprocess     string
	Reverse       bool
	MaxActiveRuns string
	Batch         string
	NoBatch       bool
	Selected      map[string]bool // the tasks re-run
	Downstream    bool            // with them, the tasks downstream
	IncludePaused bool
	Plan          *backfill.Plan
	SubDaily      bool // the plan names dates by date-time
}

func (s *Server) backfillForm(w http.ResponseWriter, r *http.Request) {
	def, err := s.pipeline(r.PathValue("name"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	d := formData{Pipeline: def.Name, Reprocess: backfill.ReprocessNone, Selected: map[string]bool{}}
	for _, t := range def.Tasks {
		d.Tasks = append(d.Tasks, t.Name)
	}
	s.page(w, r, http.StatusOK, "backfill_form.html", "Backfill "+def.Name, d)
}

// formRequest reads the form as the flags of `backfill plan`.
func formRequest(r *http.Request, d *formData) (backfill.Request, error) {
	f := r.PostForm
	d.Start, d.End, d.Reprocess = f.Get("start"), f.Get("end"), f.Get("reprocess")
	d.Reverse, d.NoBatch, d.Downstream, d.IncludePaused = f.Get("reverse") == "true", f.Get("no_batch") == "true", f.Get("downstream") == "true", f.Get("include_paused") == "true"
	d.MaxActiveRuns, d.Batch = strings.TrimSpace(f.Get("max_active_runs")), strings.TrimSpace(f.Get("batch"))
	q := backfill.Request{Pipeline: d.Pipeline, Start: d.Start, End: d.End, Reprocess: d.Reprocess, Reverse: d.Reverse,
		Batch: d.Batch, NoBatch: d.NoBatch, TaskDownstream: d.Downstream}
	for _, t := range f["task"] {
		if t != "" {
			q.Tasks = append(q.Tasks, t)
			d.Selected[t] = true
		}
	}
	if d.MaxActiveRuns != "" {
		n, err := strconv.Atoi(d.MaxActiveRuns)
		if err != nil {
			return q, &ops.Error{Kind: ops.Usage, Msg: fmt.Sprintf("--max-active-runs %q: want a number of runs, 1 or more", d.MaxActiveRuns)}
		}
		q.MaxActiveRuns, q.MaxActiveRunsSet = n, true
	}
	return q, nil
}

// plan is the plan of the form, as `backfill plan` computes it, with its
// errors as the CLI words them.
func (s *Server) plan(ctx context.Context, q backfill.Request) (*backfill.Plan, error) {
	pp, err := q.Params(s.o.Workspace)
	if err != nil {
		return nil, err
	}
	plan, err := backfill.Compute(ctx, s.o.Write, pp)
	var routes *backfill.RoutesError
	switch {
	case errors.As(err, &routes) && errors.Is(err, skew.ErrProbe):
		return nil, &ops.Error{Kind: ops.Usage, Msg: fmt.Sprintf("%v (fix the probe, or remove it from the skew block, before planning)", routes.Err)}
	case errors.As(err, &routes):
		return nil, routes.Err
	case err != nil && !store.IsUnavailable(err):
		return nil, &ops.Error{Kind: ops.Usage, Msg: err.Error()}
	}
	return plan, err
}

// actBackfillForm answers the form: step "plan" shows the plan, step
// "apply" starts the backfill and goes to its page.
func (s *Server) actBackfillForm(w http.ResponseWriter, r *http.Request, a actor) {
	def, err := s.pipeline(r.PathValue("name"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	d := formData{Pipeline: def.Name, Selected: map[string]bool{}}
	for _, t := range def.Tasks {
		d.Tasks = append(d.Tasks, t.Name)
	}
	q, err := formRequest(r, &d)
	if err == nil {
		err = q.Check()
	}
	fail := func(err error) { s.fail(w, r, &httpError{code: actionStatus(err), msg: err.Error()}) }
	switch r.PostForm.Get("step") {
	case "plan":
		if err != nil {
			fail(err)
			return
		}
		if d.Plan, err = s.plan(r.Context(), q); err != nil {
			fail(err)
			return
		}
		for i := 1; i < len(d.Plan.Dates); i++ {
			d.SubDaily = d.SubDaily || d.Plan.Dates[i].DS == d.Plan.Dates[i-1].DS
		}
		s.page(w, r, http.StatusOK, "backfill_form.html", "Backfill "+def.Name, d)
	case "apply":
		args := map[string]any{"start": d.Start, "end": d.End, "reprocess": q.Reprocess}
		e := ops.Entry{Action: "backfill.apply", Pipeline: def.Name, Args: args}
		var id string
		if err == nil {
			err = s.busy(r.Context(), "")
		}
		if err == nil {
			err = s.probe(r.Context())
		}
		var plan *backfill.Plan
		if err == nil {
			plan, err = s.plan(r.Context(), q)
		}
		if err == nil {
			args["reprocess"] = plan.Reprocess
			now, _ := timetable.ParseNow(q.Now)
			id, err = s.startJob(r.Context(), "apply", "", a, e, func(ctx context.Context, j *job, begin func(string)) (string, error) {
				o := s.applyOptions(j, begin)
				o.Plan, o.Now, o.IncludePaused = plan, now, d.IncludePaused
				return applyResult(backfill.ApplyBackfill(ctx, o))
			})
		}
		if err != nil {
			e.Err = err
			s.audit(r.Context(), a, e)
			fail(err)
			return
		}
		http.Redirect(w, r, "/backfills/"+id, http.StatusSeeOther)
	default:
		s.fail(w, r, errorf(http.StatusBadRequest, "step %q: want plan or apply", r.PostForm.Get("step")))
	}
}

// apiAudit is `rewind audit [--pipeline P] --json`.
func (s *Server) apiAudit(w http.ResponseWriter, r *http.Request) {
	name := r.URL.Query().Get("pipeline")
	if name != "" {
		if err := s.knownPipeline(r.Context(), name); err != nil {
			s.fail(w, r, err)
			return
		}
	}
	list, err := ops.Audit(r.Context(), s.o.State, name, "", 0)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.sendJSON(w, r, list)
}

// auditOf is the latest audit entries of a pipeline or of a backfill,
// for its page.
func (s *Server) auditOf(ctx context.Context, pipeline, target string) []ops.AuditJSON {
	list, err := ops.Audit(ctx, s.o.State, pipeline, target, 50)
	if err != nil {
		s.o.Log.Error("audit", "err", err)
	}
	return list
}

// pausedOf says whether the state has the pipeline paused.
func (s *Server) pausedOf(ctx context.Context, name string) bool {
	ps, err := s.o.State.ListPipelines(ctx)
	if err != nil {
		return false
	}
	for _, p := range ps {
		if p.Name == name {
			return p.Paused
		}
	}
	return false
}
