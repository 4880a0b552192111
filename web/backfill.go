package web

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/rewind-dev/rewind/ops"
	"io/fs"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/rewind-dev/rewind/backfill"
	"github.com/rewind-dev/rewind/dsl"
	"github.com/rewind-dev/rewind/lake"
	"github.com/rewind-dev/rewind/scheduler"
	"github.com/rewind-dev/rewind/store"
)

// phases are a backfill's phases in the order apply runs them.
var phases = []string{backfill.PhasePause, backfill.PhaseVerify, backfill.PhaseWatermark, backfill.PhaseRun,
	backfill.PhaseValidate, backfill.PhaseCutover, backfill.PhaseRebuild, backfill.PhaseReport, backfill.PhaseDone}

// BackfillJSON is the backfill page (GET /api/backfills/ID).
type BackfillJSON struct {
	// Status is `backfill status ID --json`, as the CLI prints it.
	Status   BackfillStatusJSON  `json:"status"`
	Backfill BackfillSummaryJSON `json:"backfill"`
	Phases   []PhaseJSON         `json:"phases"`
	// Progress counts the window's dates by the state of their run.
	Progress map[string]int `json:"progress"`
	// Dates are the plan's dates with where each stands now.
	Dates []BackfillDateRowJSON `json:"dates"`
	// Plan is the plan the backfill ran, as `backfill plan --json`.
	Plan *backfill.Plan `json:"plan"`
	// Validation compares each output's branch with main per date (nil for
	// a pipeline without outputs).
	Validation *ValidationJSON `json:"validation"`
	// Report is the Markdown report (.rewind/backfills/ID.md), "" before
	// the report phase.
	Report string `json:"report"`
	// Outputs say, per output, what the branch and the tag hold now
	// (rollback and expiry).
	Outputs []OutputRefsJSON `json:"outputs"`
	// Bars are the progress of the backfill's pipeline, then of each
	// consumer it rebuilt, by where their dates stand.
	Bars []ProgressBarJSON `json:"bars"`
	// Outside are the days of the window on which the schedule has no
	// interval, in ranges, and why.
	Outside []OutsideJSON `json:"outside"`
	// Behind says, per pool, that the backfill's work waits there behind
	// scheduled and manual work (none when it does not wait).
	Behind []BehindJSON `json:"behind"`
}

// PhaseJSON is one phase of a backfill. Times (RFC 3339, UTC) are those
// apply recorded as the phase started and ended (backfill.PhaseTime); for
// a backfill applied before they were recorded, what the state shows of
// them: the backfill's creation, its runs' starts and ends, its last
// change; "" where it shows none.
type PhaseJSON struct {
	Name    string `json:"name"`
	State   string `json:"state"` // done | running | failed | cancelled | pending
	Started string `json:"started,omitempty"`
	Ended   string `json:"ended,omitempty"`
	// Skipped says why a phase that is done had nothing to do ("no
	// outputs", "no date selected"; backfill.Plan.Skipped), "" when it
	// did its work or is not done.
	Skipped string `json:"skipped,omitempty"`
}

// BackfillDateRowJSON is one date of the plan.
type BackfillDateRowJSON struct {
	DS          string `json:"ds"`
	LogicalDate string `json:"logical_date"`
	Action      string `json:"action"` // create | reprocess | skip
	Pool        string `json:"pool"`
	Reason      string `json:"reason"`
	Detector    string `json:"detector"` // what found the date hot ("" when nothing did)
	// State is the state of the backfill's own run of the date; "skip"
	// for a date the plan skips, "elsewhere" when the date's run is not
	// the backfill's (the nightly run took it back), "none" without a run.
	State string `json:"state"`
	RunID int64  `json:"run_id,omitempty"`
	// Name is how the date is named: its ds, or its logical date for a
	// sub-daily plan (backfill.Plan.DateName).
	Name string `json:"name"`
	// PlanState is the state of the date's run when the plan was made.
	PlanState string `json:"plan_state"`
	// Why says why the date did not run, or not as the backfill's
	// (already succeeded, held by another backfill, in flight, taken back,
	// not reached); "" for a date that ran.
	Why string `json:"why,omitempty"`
	// Batch is the logical date of the batch run that covers the date
	// ("" without batches).
	Batch string `json:"batch,omitempty"`
}

// ValidationJSON is the validation table: old (main before the cutover,
// or the pre_backfill tag after it) against new (the backfill's branch).
type ValidationJSON struct {
	Old   string          `json:"old"`
	New   string          `json:"new"`
	Rows  []CorrectionRow `json:"rows"`
	Error string          `json:"error,omitempty"`
	// Failing counts the rows over their rules.
	Failing int `json:"failing"`
}

// CorrectionRow is what the backfill changes in one date of one output.
type CorrectionRow struct {
	Output  string  `json:"output"`
	DS      string  `json:"ds"`
	OldRows int64   `json:"old_rows"`
	NewRows int64   `json:"new_rows"`
	Column  string  `json:"column"`
	Old     float64 `json:"old"`
	New     float64 `json:"new"`
	// Change is |new - old| / |old|; null when old is 0 and new is not.
	Change      *float64 `json:"change"`
	Limit       float64  `json:"max_change"`
	Violates    bool     `json:"violates"`
	FailedRules []string `json:"failed_rules,omitempty"`
}

// OutputRefsJSON is an output's branch and tag for the backfill.
type OutputRefsJSON struct {
	Output    string `json:"output"`
	Table     string `json:"table"`
	Branch    string `json:"branch"`
	BranchSet bool   `json:"branch_exists"`
	Tag       string `json:"tag"`
	TagSet    bool   `json:"tag_exists"`
	Retention string `json:"retention"`
	Error     string `json:"error,omitempty"`
}

func (s *Server) backfillStatus(ctx context.Context, id string) (store.Backfill, []store.Run, error) {
	b, err := s.o.State.GetBackfill(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return b, nil, errorf(http.StatusNotFound, "no backfill %q", id)
	}
	if err != nil {
		return b, nil, err
	}
	runs, err := s.o.State.ListRuns(ctx, store.ListRunsParams{Pipelines: []string{b.Pipeline}, From: b.From, To: b.To})
	return b, runs, err
}

func (s *Server) apiBackfillStatus(w http.ResponseWriter, r *http.Request) {
	b, runs, err := s.backfillStatus(r.Context(), r.PathValue("id"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.sendJSON(w, r, BackfillStatus(b, runs))
}

func (s *Server) backfill(ctx context.Context, id string) (*BackfillJSON, error) {
	b, runs, err := s.backfillStatus(ctx, id)
	if err != nil {
		return nil, err
	}
	out := &BackfillJSON{Status: BackfillStatus(b, runs), Backfill: backfillSummary(b), Progress: map[string]int{}, Dates: []BackfillDateRowJSON{}}
	if b.Plan != "" {
		var plan backfill.Plan
		if err := json.Unmarshal([]byte(b.Plan), &plan); err == nil {
			out.Plan = &plan
		}
	}
	byTime := map[int64]store.Run{}
	for _, r := range runs {
		byTime[r.LogicalDate.Unix()] = r
	}
	var window []backfill.PlanDate
	if out.Plan != nil {
		for _, d := range out.Plan.Dates {
			row := BackfillDateRowJSON{DS: d.DS, LogicalDate: d.LogicalDate, Action: d.Action, Pool: d.Pool, Reason: d.Reason, Detector: d.Detector, State: "none",
				Name: out.Plan.DateName(d), PlanState: d.State, Batch: d.Batch}
			if d.Action == "skip" {
				row.State = "skip"
				row.Why = skipWhy(d, b, byTime)
			} else {
				window = append(window, d)
				if at, err := time.Parse(time.RFC3339, d.LogicalDate); err == nil {
					if r, ok := byTime[at.Unix()]; ok {
						row.RunID = r.ID
						row.State = string(r.State)
						if r.BackfillID != b.ID {
							row.State = "elsewhere"
						}
					}
				}
				out.Progress[row.State]++
				row.Why = runWhy(row, b, byTime)
			}
			out.Dates = append(out.Dates, row)
		}
	}
	out.Phases = out.Status.Phases
	out.Report = s.report(b.ID)
	if def := s.o.Workspace.Pipeline(b.Pipeline); def != nil && len(def.Outputs) > 0 {
		out.Validation, out.Outputs = s.validation(ctx, def, b, window)
	}
	if err := s.backfillProgress(ctx, out, b); err != nil {
		return nil, err
	}
	return out, nil
}

// backfillPhases says where each phase of backfill b stands; runs are
// the runs of its window.
func backfillPhases(b store.Backfill, runs []store.Run) []PhaseJSON {
	var runStart, runEnd time.Time
	for _, r := range runs {
		if r.BackfillID != b.ID {
			continue
		}
		if !r.StartedAt.IsZero() && (runStart.IsZero() || r.StartedAt.Before(runStart)) {
			runStart = r.StartedAt
		}
		if r.EndedAt.After(runEnd) {
			runEnd = r.EndedAt
		}
	}
	var plan *backfill.Plan
	if b.Plan != "" {
		var p backfill.Plan
		if err := json.Unmarshal([]byte(b.Plan), &p); err == nil {
			plan = &p
		}
	}
	return phaseRows(b, plan, runStart, runEnd)
}

// phaseRows says where each phase stands from the backfill's phase and
// state, and, from its plan (nil if unknown), which of those done had
// nothing to do.
func phaseRows(b store.Backfill, plan *backfill.Plan, runStart, runEnd time.Time) []PhaseJSON {
	cur := slices.Index(phases, b.Phase)
	done := b.State == store.BackfillSuccess && b.Phase == backfill.PhaseDone
	rows := make([]PhaseJSON, len(phases))
	for i, name := range phases {
		row := PhaseJSON{Name: name, State: "pending"}
		switch {
		case done || i < cur:
			row.State = "done"
		case i == cur:
			row.State = string(b.State)
			if b.State == store.BackfillSuccess {
				row.State = "done"
			}
		}
		switch {
		case i == 0:
			row.Started = stamp(b.CreatedAt)
		case name == backfill.PhaseRun && !runStart.IsZero():
			row.Started = stamp(runStart)
			if row.State == "done" {
				row.Ended = stamp(runEnd)
			}
		}
		if i == cur && !done {
			if b.State == store.BackfillRunning {
				if row.Started == "" {
					row.Started = stamp(b.UpdatedAt)
				}
			} else {
				row.Ended = stamp(b.UpdatedAt)
			}
		}
		if done && name == backfill.PhaseDone {
			row.Ended = stamp(b.UpdatedAt)
		}
		if row.State == "done" && plan != nil {
			row.Skipped = plan.Skipped(name)
		}
		if plan != nil {
			// The times apply recorded (a backfill applied before they
			// were recorded keeps those derived above).
			if t, ok := plan.PhaseTimeOf(name); ok && row.State != "pending" {
				row.Started, row.Ended = t.Started, t.Ended
				if row.Ended == "" && row.State != string(store.BackfillRunning) {
					row.Ended = stamp(b.UpdatedAt) // stopped there by a cancel, or its apply died
				}
			}
		}
		rows[i] = row
	}
	return rows
}

func stamp(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339)
}

// report reads the backfill's report, if written.
func (s *Server) report(id string) string {
	if s.o.Home == "" || id == "" || filepath.Base(id) != id || strings.HasPrefix(id, ".") {
		return ""
	}
	b, err := os.ReadFile(filepath.Join(s.o.Home, "backfills", id+".md"))
	if err != nil {
		return ""
	}
	return string(b)
}

// validation compares, per date of the window, each output's branch
// with what main had: the tag after a cutover, main before it.
func (s *Server) validation(ctx context.Context, def *dsl.Pipeline, b store.Backfill, window []backfill.PlanDate) (*ValidationJSON, []OutputRefsJSON) {
	branch, tag := scheduler.BranchName(b.ID), backfill.TagName(b.ID)
	v := &ValidationJSON{Old: lake.MainBranch, New: branch, Rows: []CorrectionRow{}}
	var refs []OutputRefsJSON
	s.lakesMu.Lock()
	defer s.lakesMu.Unlock()
	hasBranch, hasTag := true, false
	for _, o := range def.Outputs {
		or := OutputRefsJSON{Output: o.Name, Table: o.Table, Branch: branch, Tag: tag, Retention: days(o.Retention)}
		lk, err := s.lake(ctx, o.Catalog)
		if err == nil {
			var rs map[string]int64
			if rs, err = lk.Refs(ctx, o.Table); err == nil {
				_, or.BranchSet = rs[branch]
				_, or.TagSet = rs[tag]
			}
		}
		if err != nil {
			or.Error = err.Error()
		}
		hasBranch = hasBranch && or.BranchSet
		hasTag = hasTag || or.TagSet
		refs = append(refs, or)
	}
	if hasTag {
		v.Old = tag
	}
	if !hasBranch {
		v.Error = fmt.Sprintf("no branch %s: the backfill wrote nothing yet, or its branch expired", branch)
		return v, refs
	}
	cs, err := backfill.Corrections(ctx, s.lakes, def, v.Old, v.New, window)
	if err != nil {
		v.Error = err.Error()
		return v, refs
	}
	for _, c := range cs {
		row := CorrectionRow{Output: c.Output, DS: c.DS, OldRows: c.OldRows, NewRows: c.NewRows, Column: c.Column,
			Old: c.Old, New: c.New, Limit: c.Limit, Violates: c.Violates(), FailedRules: c.FailedRules}
		if !math.IsInf(c.Change, 0) && !math.IsNaN(c.Change) {
			ch := c.Change
			row.Change = &ch
		}
		if row.Violates {
			v.Failing++
		}
		v.Rows = append(v.Rows, row)
	}
	return v, refs
}

// lake opens a catalog of the workspace (under lakesMu), but a SQL
// catalog only where its file exists: the view never creates one.
func (s *Server) lake(ctx context.Context, name string) (*lake.Lake, error) {
	if name == "" {
		name = lake.DefaultCatalogName
	}
	c := s.o.Workspace.Catalogs[name]
	if c == nil {
		return nil, fmt.Errorf("unknown catalog %q", name)
	}
	if c.Type == "" || c.Type == "sql" {
		uri := c.URI
		if uri == "" {
			uri = lake.DefaultCatalogURI
		}
		if _, err := os.Stat(strings.TrimPrefix(uri, "file://")); errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("catalog %s has no file yet (%s): nothing committed", name, filepath.Base(uri))
		}
	}
	return s.lakes.Get(ctx, name)
}

func (s *Server) apiBackfill(w http.ResponseWriter, r *http.Request) {
	b, err := s.backfill(r.Context(), r.PathValue("id"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.sendJSON(w, r, b)
}

func (s *Server) backfillPage(w http.ResponseWriter, r *http.Request) {
	b, err := s.backfill(r.Context(), r.PathValue("id"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.page(w, r, http.StatusOK, "backfill.html", "Backfill "+b.Backfill.ID,
		backfillPageData{BackfillView: newBackfillView(b, s.o.Workspace.Pipeline(b.Backfill.Pipeline)), Audit: s.auditOf(r.Context(), "", b.Backfill.ID), Job: s.jobOf(b.Backfill.ID)})
}

// backfillPageData is the backfill page: the backfill as the page shows
// it, its audit trail and the job of this view that runs it (nil: none).
type backfillPageData struct {
	BackfillView
	Audit []ops.AuditJSON
	Job   *JobJSON
}

// days writes a retention the way HCL says it: "14d", else a duration.
func days(d time.Duration) string {
	if d > 0 && d%(24*time.Hour) == 0 {
		return fmt.Sprintf("%dd", d/(24*time.Hour))
	}
	return d.String()
}
