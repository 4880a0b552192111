package web

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/rewind-dev/rewind/backfill"
	"github.com/rewind-dev/rewind/dsl"
	"github.com/rewind-dev/rewind/lake"
	"github.com/rewind-dev/rewind/scheduler"
	"github.com/rewind-dev/rewind/skew"
	"github.com/rewind-dev/rewind/store"
	"github.com/rewind-dev/rewind/timetable"
)

// The JSON documents the CLI prints and the view serves (contract): one
// definition, so that `GET /api/runs?pipeline=X` and `rewind runs
// --pipeline X --json` are the same bytes.
type (
	// RunJSON is one element of `runs --json`.
	RunJSON struct {
		Pipeline          string `json:"pipeline"`
		LogicalDate       string `json:"logical_date"`
		DS                string `json:"ds"`
		DataIntervalStart string `json:"data_interval_start"`
		DataIntervalEnd   string `json:"data_interval_end"`
		Kind              string `json:"kind"`
		State             string `json:"state"`
		// RunID is the run's id (REWIND_RUN_ID); Reason says why a run
		// failed when no task did (its output commit), else "".
		RunID  string `json:"run_id"`
		Reason string `json:"reason"`
		// BatchOf is the run id of the batch run that covered this run's
		// interval (a batched backfill: that run did its work); "" for a
		// run of its own.
		BatchOf string     `json:"batch_of,omitempty"`
		Tasks   []TaskJSON `json:"tasks"`
	}
	// TaskJSON is a task instance of a RunJSON.
	TaskJSON struct {
		Task      string        `json:"task"`
		State     string        `json:"state"`
		Pool      string        `json:"pool"`
		TryNumber int           `json:"try_number"`
		Attempts  []AttemptJSON `json:"attempts"`
	}
	// AttemptJSON is one attempt of a TaskJSON.
	AttemptJSON struct {
		TryNumber int     `json:"try_number"`
		Pool      string  `json:"pool"`
		Reason    string  `json:"reason"`
		State     string  `json:"state"`
		ExitCode  *int    `json:"exit_code"`
		Signal    string  `json:"signal,omitempty"`
		StartedAt string  `json:"started_at"`
		EndedAt   *string `json:"ended_at"`
		PeakRSS   int64   `json:"peak_rss_bytes"`
		LogPath   string  `json:"log_path"`
	}
	// DateJSON is one element of `dates --json`.
	DateJSON struct {
		LogicalDate       string `json:"logical_date"`
		DS                string `json:"ds"`
		DataIntervalStart string `json:"data_interval_start"`
		DataIntervalEnd   string `json:"data_interval_end"`
		Pool              string `json:"pool"`
		Reason            string `json:"reason"`
		// Detector names the detector that found the date hot
		// (hot_dates, hot_when, probe, history, oom_escalation); "" when
		// none did.
		Detector string `json:"detector"`
		// Probe is what the skew probe found for the date; only for a
		// pipeline whose skew block has a probe.
		Probe *DateProbeJSON `json:"probe,omitempty"`
	}
	// DateProbeJSON is a date's probe measurement: State is "measured"
	// (Value and Median, the median of its reference dates), "failed"
	// (Error) or "not_probed" (no run measured it yet: the view never runs
	// a probe); MeasuredAt is when, RFC 3339 in UTC ("" when not probed).
	DateProbeJSON struct {
		State      string   `json:"state"`
		Value      *float64 `json:"value"`
		Median     *float64 `json:"median"`
		Error      string   `json:"error,omitempty"`
		MeasuredAt string   `json:"measured_at,omitempty"`
	}
	// BackfillStatusJSON is `backfill status --json`.
	BackfillStatusJSON struct {
		ID     string `json:"id"`
		State  string `json:"state"`
		Phase  string `json:"phase"`
		Detail string `json:"detail"`
		// OnHold: paused by backfill pause (its apply starts nothing new).
		OnHold bool               `json:"on_hold"`
		Dates  []BackfillDateJSON `json:"dates"`
		// Phases say where each phase stands, as the web view's
		// backfill page shows them.
		Phases []PhaseJSON `json:"phases"`
		// Batch and Batches: a batched backfill's span ("1w") and how
		// many runs cover its dates (absent without batches).
		Batch   string `json:"batch,omitempty"`
		Batches int    `json:"batches,omitempty"`
	}
	// BackfillDateJSON is a date of a BackfillStatusJSON: the state of the
	// backfill's own run of it.
	BackfillDateJSON struct {
		DS    string `json:"ds"`
		State string `json:"state"`
		// LogicalDate is the run's logical date, RFC 3339 with the
		// pipeline's offset (as its plan names it): what tells apart the
		// runs of one day of a sub-daily pipeline.
		LogicalDate string `json:"logical_date"`
		// BatchOf is the run id of the batch's run that covers the date
		// (absent for a date with a run of its own).
		BatchOf string `json:"batch_of,omitempty"`
	}
	// LakeTableJSON is `lake show TABLE --json`: the table's snapshots,
	// oldest first, its refs by name and the row count of each partition
	// of main, by partition value.
	LakeTableJSON struct {
		Table      string              `json:"table"`
		Snapshots  []LakeSnapshotJSON  `json:"snapshots"`
		Refs       []LakeRefJSON       `json:"refs"`
		Partitions []LakePartitionJSON `json:"partitions"`
	}
	// LakeSnapshotJSON is one snapshot of a table: ParentID null for the
	// first, Time in UTC, RunID the run that committed it ("" for a
	// snapshot rewind did not write).
	LakeSnapshotJSON struct {
		ID        int64  `json:"id"`
		ParentID  *int64 `json:"parent_id"`
		Time      string `json:"time"`
		Operation string `json:"operation"`
		RunID     string `json:"run_id"`
	}
	// LakeRefJSON is a branch or tag of a table and its snapshot.
	LakeRefJSON struct {
		Name       string `json:"name"`
		SnapshotID int64  `json:"snapshot_id"`
	}
	// LakePartitionJSON is one partition of main and its row count.
	LakePartitionJSON struct {
		Partition string `json:"partition"`
		Rows      int64  `json:"rows"`
	}
	// RunReportJSON is `rewind run --json`: what one execution did.
	// Created counts the runs it materialized, Attempts the attempts it
	// launched or adopted; Succeeded and Failed count Runs, the runs that
	// finished, by pipeline and logical date. Interrupted says that it was
	// stopped, Unfinished how many runs it left queued or running then.
	// Paused are the selected pipelines it ran nothing of; Skipped what
	// catchup = false passed over; Waiting, Held and Stuck the runs left
	// unfinished; Warnings what it went on without.
	RunReportJSON struct {
		Created     int              `json:"created"`
		Attempts    int              `json:"attempts"`
		Succeeded   int              `json:"succeeded"`
		Failed      int              `json:"failed"`
		Interrupted bool             `json:"interrupted"`
		Unfinished  int              `json:"unfinished"`
		Runs        []RunOutcomeJSON `json:"runs"`
		Paused      []string         `json:"paused"`
		Skipped     []SkippedJSON    `json:"skipped"`
		Waiting     []WaitingJSON    `json:"waiting"`
		Held        []HeldJSON       `json:"held"`
		Stuck       []StuckJSON      `json:"stuck"`
		Warnings    []string         `json:"warnings"`
	}
	// RunOutcomeJSON is a run that finished: Reason (as in `runs --json`)
	// says why it failed when none of its tasks did, FailedTasks are its
	// tasks that did not succeed.
	RunOutcomeJSON struct {
		Pipeline        string           `json:"pipeline"`
		LogicalDate     string           `json:"logical_date"`
		DS              string           `json:"ds"`
		RunID           string           `json:"run_id"`
		Kind            string           `json:"kind"`
		State           string           `json:"state"`
		DurationSeconds float64          `json:"duration_seconds"`
		Reason          string           `json:"reason"`
		FailedTasks     []FailedTaskJSON `json:"failed_tasks"`
	}
	// FailedTaskJSON is a task of a failed run that did not succeed, with
	// its latest attempt: Outcome "exit 3", "oom", "timeout", ... ("" when
	// it never ran: upstream_failed), ExitCode null without an exit status.
	FailedTaskJSON struct {
		Task      string `json:"task"`
		State     string `json:"state"`
		Outcome   string `json:"outcome"`
		ExitCode  *int   `json:"exit_code"`
		TryNumber int    `json:"try_number"`
		Pool      string `json:"pool"`
		LogPath   string `json:"log_path"`
	}
	// SkippedJSON is what catchup = false passed over in a pipeline when
	// its latest due interval got a run: Count due intervals without a run,
	// from FirstLogicalDate to LastLogicalDate.
	SkippedJSON struct {
		Pipeline         string `json:"pipeline"`
		Count            int    `json:"count"`
		FirstLogicalDate string `json:"first_logical_date"`
		LastLogicalDate  string `json:"last_logical_date"`
	}
	// WaitingJSON is a run left waiting for a run of a pipeline it
	// consumes ("" upstream dates and state "none" when it has no run).
	WaitingJSON struct {
		Pipeline            string `json:"pipeline"`
		LogicalDate         string `json:"logical_date"`
		DS                  string `json:"ds"`
		Upstream            string `json:"upstream"`
		UpstreamLogicalDate string `json:"upstream_logical_date"`
		UpstreamDS          string `json:"upstream_ds"`
		UpstreamState       string `json:"upstream_state"`
	}
	// HeldJSON are the runs of a backfill that is not running.
	HeldJSON struct {
		Pipeline      string   `json:"pipeline"`
		BackfillID    string   `json:"backfill_id"`
		BackfillState string   `json:"backfill_state"`
		DS            []string `json:"ds"`
	}
	// StuckJSON is a run left unfinished for another reason, with its
	// unfinished tasks as "task (state)".
	StuckJSON struct {
		Pipeline        string   `json:"pipeline"`
		LogicalDate     string   `json:"logical_date"`
		DS              string   `json:"ds"`
		UnfinishedTasks []string `json:"unfinished_tasks"`
	}
	// WatermarkJSON is `watermark show --json`: the pipeline's watermark
	// (RFC 3339 with its offset) and when it last moved (UTC); both ""
	// when the pipeline has none.
	WatermarkJSON struct {
		Pipeline  string `json:"pipeline"`
		Watermark string `json:"watermark"`
		UpdatedAt string `json:"updated_at"`
	}
)

// The states of a DateProbeJSON.
const (
	ProbeMeasured  = "measured"
	ProbeFailed    = "failed"
	ProbeNotProbed = "not_probed"
)

// RunsJSON is runs as `runs --json` prints them (never null: [] for
// none); home is the state's home directory (RunReason).
func RunsJSON(runs []store.Run, home string) []RunJSON {
	out := make([]RunJSON, 0, len(runs))
	for _, r := range runs {
		out = append(out, ToRunJSON(r, home))
	}
	return out
}

// ToRunJSON is one run as `runs --json` prints it: logical dates and
// intervals with the pipeline's offset, attempt times in UTC.
func ToRunJSON(r store.Run, home string) RunJSON {
	out := RunJSON{
		Pipeline: r.Pipeline, LogicalDate: r.LogicalDate.Format(time.RFC3339), DS: r.DS,
		DataIntervalStart: r.DataIntervalStart.Format(time.RFC3339), DataIntervalEnd: r.DataIntervalEnd.Format(time.RFC3339),
		Kind: string(r.Kind), State: string(r.State), RunID: store.RunID(r.Kind, r.LogicalDate), Reason: RunReason(r, home),
		Tasks: []TaskJSON{},
	}
	if r.BatchOf != 0 && !r.BatchStart.IsZero() {
		out.BatchOf = store.RunID(r.Kind, r.BatchStart)
	}
	for _, t := range r.Tasks {
		tj := TaskJSON{Task: t.Task, State: string(t.State), Pool: t.Pool, TryNumber: t.TryNumber, Attempts: []AttemptJSON{}}
		for _, a := range t.Attempts {
			aj := AttemptJSON{TryNumber: a.TryNumber, Pool: a.Pool, Reason: a.Reason, State: string(a.State), ExitCode: a.ExitCode,
				Signal: a.Signal, StartedAt: a.StartedAt.UTC().Format(time.RFC3339Nano), PeakRSS: a.PeakRSS, LogPath: a.LogPath}
			if !a.EndedAt.IsZero() {
				e := a.EndedAt.UTC().Format(time.RFC3339Nano)
				aj.EndedAt = &e
			}
			tj.Attempts = append(tj.Attempts, aj)
		}
		out.Tasks = append(out.Tasks, tj)
	}
	return out
}

// RunReason says why a run failed when none of its tasks did: its output
// commit, with the engine's last word on it (from home's output error
// log); "" for any other run.
func RunReason(r store.Run, home string) string {
	if r.State != store.RunFailed || len(r.Tasks) == 0 {
		return ""
	}
	for _, t := range r.Tasks {
		if t.State != store.TaskSuccess && t.State != store.TaskSkipped {
			return ""
		}
	}
	reason := "output commit failed"
	if b, err := os.ReadFile(scheduler.OutputErrorLog(home, r.Pipeline, r.LogicalDate)); err == nil {
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		last := lines[len(lines)-1]
		if _, msg, ok := strings.Cut(last, " "); ok { // "<RFC 3339> <error>"
			reason += ": " + msg
		}
	}
	return reason
}

// MaxDates is the most due intervals one request of the view may name
// (GET /api/dates): a larger window is a 400, so that no request makes the
// view enumerate an unbounded number of dates.
const MaxDates = 1000

// TooManyDatesError is the error of a window holding more than the limit
// of due intervals.
type TooManyDatesError struct{ Limit int }

func (e *TooManyDatesError) Error() string {
	return fmt.Sprintf("the window holds more than %d due intervals: name a smaller one with start= and end=", e.Limit)
}

// RecordReader reads what runs recorded: probe results, runs with their
// attempts and the durations of tasks (a store.Store is one).
type RecordReader interface {
	ListProbes(ctx context.Context, p store.ListProbesParams) ([]store.ProbeResult, error)
	ListRuns(ctx context.Context, p store.ListRunsParams) ([]store.Run, error)
	TaskDurations(ctx context.Context, p store.TaskDurationsParams) (map[string][]time.Duration, error)
}

// Dates is `dates --json` of pipeline p over win: every due interval with
// the pool its skew block routes it to. The probe, if the pipeline's skew
// block has one, runs once per date (as `rewind dates` runs it); its
// failures are returned (`rewind dates` prints them as warnings).
func Dates(ctx context.Context, p *dsl.Pipeline, win timetable.Window) ([]DateJSON, []string, error) {
	ivs, err := intervals(p, win, 0)
	if err != nil {
		return nil, nil, err
	}
	rvs := skew.IntervalVars(p, ivs)
	var probe *skew.Probes
	if p.Skew.HasProbe() {
		probe = skew.Measure(ctx, p, p.Skew, rvs)
	}
	at := time.Now()
	routes, warnings := skew.RoutesWith(p, rvs, probe)
	return datesJSON(p, ivs, routes, probe, func(time.Time) time.Time { return at }), warnings, nil
}

// RecordedDates is Dates with what runs recorded in the state (`rewind
// dates --recorded`, GET /api/dates): the probe values, and for a date
// that has a run, the history of its tasks' attempts (an OOM escalation,
// a try over history_min_duration and hot_factor x the task's median), as
// a backfill plan routes it. It starts no process. A date whose probe no
// run measured is "not_probed" and routed by the skew block's list and
// expression alone. With limit > 0, a window of more than limit due
// intervals is a *TooManyDatesError.
func RecordedDates(ctx context.Context, st RecordReader, ws *dsl.Workspace, p *dsl.Pipeline, win timetable.Window, limit int) ([]DateJSON, []string, error) {
	ivs, err := intervals(p, win, limit)
	if err != nil {
		return nil, nil, err
	}
	rvs := skew.IntervalVars(p, ivs)
	var probe *skew.Probes
	measured := map[int64]time.Time{}
	if p.Skew.HasProbe() && len(ivs) > 0 {
		rows, err := st.ListProbes(ctx, store.ListProbesParams{Pipeline: p.Name, From: ivs[0].Start, To: ivs[len(ivs)-1].Start, Limit: len(ivs)})
		if err != nil {
			return nil, nil, err
		}
		for _, r := range rows {
			measured[r.LogicalDate.Unix()] = r.MeasuredAt
		}
		probe = skew.Recorded(p.Skew, rows)
	}
	routes, warnings := skew.RoutesWith(p, rvs, probe)
	if err := historyRoutes(ctx, st, ws, p, ivs, probe, routes); err != nil {
		return nil, nil, err
	}
	return datesJSON(p, ivs, routes, probe, func(t time.Time) time.Time { return measured[t.Unix()] }), warnings, nil
}

// historyRoutes sets the route of each date of ivs that has a run whose
// tasks' history sends it to another pool (skew.RunRoute).
func historyRoutes(ctx context.Context, st RecordReader, ws *dsl.Workspace, p *dsl.Pipeline, ivs []timetable.Interval, probe *skew.Probes, routes []skew.Route) error {
	if len(ivs) == 0 {
		return nil
	}
	runs, err := st.ListRuns(ctx, store.ListRunsParams{Pipelines: []string{p.Name}, From: ivs[0].Start, To: ivs[len(ivs)-1].Start, WithTasks: true, WithAttempts: true})
	if err != nil || len(runs) == 0 {
		return err
	}
	byDate := map[int64]store.Run{}
	for _, r := range runs {
		byDate[r.LogicalDate.Unix()] = r
	}
	medians, err := st.TaskDurations(ctx, store.TaskDurationsParams{Pipeline: p.Name, Limit: 500})
	if err != nil {
		return err
	}
	for i, iv := range ivs {
		r, ok := byDate[iv.Start.Unix()]
		if !ok {
			continue
		}
		rv := dsl.RunVars{ID: store.RunID(r.Kind, iv.Start), Pipeline: p.Name, LogicalDate: iv.Start,
			DataIntervalStart: iv.Start, DataIntervalEnd: iv.End, Kind: string(r.Kind)}
		if rt, ok := skew.RunRoute(ws, p, r, rv, probe, medians); ok {
			routes[i] = rt
		}
	}
	return nil
}

// intervals are the due intervals of p within win; more than limit (> 0)
// is a *TooManyDatesError, found without enumerating past it.
func intervals(p *dsl.Pipeline, win timetable.Window, limit int) ([]timetable.Interval, error) {
	tt, err := timetable.New(p.Schedule, p.Timezone)
	if err != nil {
		return nil, fmt.Errorf("pipeline %s: %w", p.Name, err)
	}
	var ivs []timetable.Interval
	for iv := range tt.Intervals(win) {
		if limit > 0 && len(ivs) == limit {
			return nil, &TooManyDatesError{Limit: limit}
		}
		ivs = append(ivs, iv)
	}
	return ivs, nil
}

// datesJSON is the JSON of the dates ivs, routed by routes, with what the
// probe (nil: none) found for each and when (measuredAt of the logical
// date; zero: never).
func datesJSON(p *dsl.Pipeline, ivs []timetable.Interval, routes []skew.Route, probe *skew.Probes, measuredAt func(time.Time) time.Time) []DateJSON {
	out := make([]DateJSON, len(ivs))
	for i, iv := range ivs {
		out[i] = DateJSON{
			LogicalDate: iv.Start.Format(time.RFC3339), DS: iv.DS(),
			DataIntervalStart: iv.Start.Format(time.RFC3339), DataIntervalEnd: iv.End.Format(time.RFC3339),
			Pool: routes[i].Pool, Reason: routes[i].Reason, Detector: routes[i].Detector,
		}
		if !p.Skew.HasProbe() {
			continue
		}
		pj := &DateProbeJSON{State: ProbeNotProbed}
		if v, m, msg, ok := probe.Measurement(iv.Start); ok {
			pj.MeasuredAt = measuredAt(iv.Start).UTC().Format(time.RFC3339)
			if msg != "" {
				pj.State, pj.Error = ProbeFailed, msg
			} else {
				pj.State, pj.Value, pj.Median = ProbeMeasured, &v, &m
			}
		}
		out[i].Probe = pj
	}
	return out
}

// BackfillStatus is `backfill status --json` of b, given the runs of its
// pipeline in its window (ListRuns From b.From To b.To): the dates are
// those whose run is the backfill's own.
func BackfillStatus(b store.Backfill, runs []store.Run) BackfillStatusJSON {
	out := BackfillStatusJSON{ID: b.ID, State: backfill.ShownState(b), Phase: b.Phase, Detail: b.Detail, OnHold: b.OnHold, Dates: []BackfillDateJSON{},
		Phases: backfillPhases(b, runs)}
	// The plan's logical dates carry the pipeline's offset.
	logical := map[int64]string{}
	var plan backfill.Plan
	if b.Plan != "" && json.Unmarshal([]byte(b.Plan), &plan) == nil {
		for _, d := range plan.Dates {
			if at, err := time.Parse(time.RFC3339, d.LogicalDate); err == nil {
				logical[at.Unix()] = d.LogicalDate
			}
		}
	}
	for _, r := range runs {
		if r.BackfillID == b.ID {
			ld, ok := logical[r.LogicalDate.Unix()]
			if !ok {
				ld = r.LogicalDate.Format(time.RFC3339)
			}
			d := BackfillDateJSON{DS: r.DS, State: string(r.State), LogicalDate: ld}
			if r.BatchOf != 0 && !r.BatchStart.IsZero() {
				d.BatchOf = store.RunID(r.Kind, r.BatchStart)
			}
			out.Dates = append(out.Dates, d)
		}
	}
	if plan.Batch != "" {
		out.Batch, out.Batches = plan.Batch, len(plan.Batches)
	}
	return out
}

// RunReport is `rewind run --json` of the summary sum, with failed, what
// failed in its failed runs (scheduler.FailedRuns: a failed run it does not
// name has no failed_tasks). Runs are by pipeline and logical date; no
// list is null.
func RunReport(sum *scheduler.Summary, failed []scheduler.FailedRun) RunReportJSON {
	out := RunReportJSON{
		Created: sum.Created, Attempts: sum.Attempts, Interrupted: sum.Interrupted, Unfinished: sum.Unfinished,
		Runs: []RunOutcomeJSON{}, Paused: append([]string{}, sum.Paused...), Skipped: []SkippedJSON{},
		Waiting: []WaitingJSON{}, Held: []HeldJSON{}, Stuck: []StuckJSON{}, Warnings: append([]string{}, sum.Warnings...),
	}
	slices.Sort(out.Paused)
	type key struct {
		pipeline string
		unix     int64
	}
	byRun := map[key]scheduler.FailedRun{}
	for _, f := range failed {
		byRun[key{f.Pipeline, f.LogicalDate.Unix()}] = f
	}
	finished := slices.Clone(sum.Finished)
	slices.SortStableFunc(finished, func(a, b scheduler.RunResult) int {
		if c := strings.Compare(a.Pipeline, b.Pipeline); c != 0 {
			return c
		}
		return a.LogicalDate.Compare(b.LogicalDate)
	})
	for _, r := range finished {
		rj := RunOutcomeJSON{
			Pipeline: r.Pipeline, LogicalDate: r.LogicalDate.Format(time.RFC3339), DS: r.DS,
			RunID: store.RunID(r.Kind, r.LogicalDate), Kind: string(r.Kind), State: string(r.State),
			DurationSeconds: math.Round(r.Duration.Seconds()*1000) / 1000, FailedTasks: []FailedTaskJSON{},
		}
		if r.State == store.RunSuccess {
			out.Succeeded++
		} else {
			out.Failed++
		}
		f := byRun[key{r.Pipeline, r.LogicalDate.Unix()}]
		if f.CommitError != "" {
			rj.Reason = "output commit failed: " + f.CommitError
		}
		for _, t := range f.Tasks {
			rj.FailedTasks = append(rj.FailedTasks, FailedTaskJSON{Task: t.Task, State: t.State, Outcome: t.Outcome,
				ExitCode: t.ExitCode, TryNumber: t.Try, Pool: t.Pool, LogPath: t.LogPath})
		}
		out.Runs = append(out.Runs, rj)
	}
	for _, sk := range sum.Skipped {
		out.Skipped = append(out.Skipped, SkippedJSON{Pipeline: sk.Pipeline, Count: sk.Count,
			FirstLogicalDate: sk.First.Format(time.RFC3339), LastLogicalDate: sk.Last.Format(time.RFC3339)})
	}
	for _, w := range sum.Waiting {
		wj := WaitingJSON{Pipeline: w.Pipeline, LogicalDate: w.LogicalDate.Format(time.RFC3339), DS: w.DS,
			Upstream: w.Upstream, UpstreamDS: w.UpstreamDS, UpstreamState: w.UpstreamState}
		if !w.UpstreamLogicalDate.IsZero() {
			wj.UpstreamLogicalDate = w.UpstreamLogicalDate.Format(time.RFC3339)
		}
		out.Waiting = append(out.Waiting, wj)
	}
	for _, h := range sum.Held {
		out.Held = append(out.Held, HeldJSON{Pipeline: h.Pipeline, BackfillID: h.BackfillID, BackfillState: h.BackfillState, DS: append([]string{}, h.DS...)})
	}
	for _, st := range sum.Stuck {
		out.Stuck = append(out.Stuck, StuckJSON{Pipeline: st.Pipeline, LogicalDate: st.LogicalDate.Format(time.RFC3339), DS: st.DS,
			UnfinishedTasks: append([]string{}, st.Waiting...)})
	}
	return out
}

// LakeTable is `lake show TABLE --json` of what package lake says of it.
func LakeTable(table string, snaps []lake.SnapshotInfo, refs map[string]int64, stats map[string]lake.PartitionStat) LakeTableJSON {
	out := LakeTableJSON{Table: table, Snapshots: []LakeSnapshotJSON{}, Refs: []LakeRefJSON{}, Partitions: []LakePartitionJSON{}}
	for _, sn := range snaps {
		sj := LakeSnapshotJSON{ID: sn.ID, Time: sn.Time.UTC().Format(time.RFC3339Nano), Operation: sn.Operation, RunID: sn.Summary["rewind.run-id"]}
		if sn.ParentID != 0 {
			sj.ParentID = &sn.ParentID
		}
		out.Snapshots = append(out.Snapshots, sj)
	}
	for _, name := range slices.Sorted(maps.Keys(refs)) {
		out.Refs = append(out.Refs, LakeRefJSON{Name: name, SnapshotID: refs[name]})
	}
	for _, p := range slices.Sorted(maps.Keys(stats)) {
		out.Partitions = append(out.Partitions, LakePartitionJSON{Partition: p, Rows: stats[p].Rows})
	}
	return out
}

// Watermark is `watermark show --json` of the pipeline's watermark wm; a
// zero wm is none.
func Watermark(pipeline string, wm store.Watermark) WatermarkJSON {
	out := WatermarkJSON{Pipeline: pipeline}
	if !wm.LogicalDate.IsZero() {
		out.Watermark = wm.LogicalDate.Format(time.RFC3339)
		out.UpdatedAt = wm.UpdatedAt.UTC().Format(time.RFC3339)
	}
	return out
}

// EncodeJSON writes v the way every `--json` of the CLI does: indented by
// two spaces, HTML characters as they are, one trailing newline.
func EncodeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}
