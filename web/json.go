package web

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/rewind-dev/rewind/backfill"
	"github.com/rewind-dev/rewind/dsl"
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
		RunID  string     `json:"run_id"`
		Reason string     `json:"reason"`
		Tasks  []TaskJSON `json:"tasks"`
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
		ID     string             `json:"id"`
		State  string             `json:"state"`
		Phase  string             `json:"phase"`
		Detail string             `json:"detail"`
		Dates  []BackfillDateJSON `json:"dates"`
	}
	// BackfillDateJSON is a date of a BackfillStatusJSON: the state of the
	// backfill's own run of it.
	BackfillDateJSON struct {
		DS    string `json:"ds"`
		State string `json:"state"`
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

// ProbeReader reads the probe results that runs recorded (a store.Store is one).
type ProbeReader interface {
	ListProbes(ctx context.Context, p store.ListProbesParams) ([]store.ProbeResult, error)
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

// RecordedDates is Dates with the probe values that runs recorded in the
// state (`rewind dates --recorded`, GET /api/dates): it starts no process.
// A date whose probe no run measured is "not_probed" and routed by the
// skew block's list and expression alone. With limit > 0, a window of
// more than limit due intervals is a *TooManyDatesError.
func RecordedDates(ctx context.Context, st ProbeReader, p *dsl.Pipeline, win timetable.Window, limit int) ([]DateJSON, []string, error) {
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
	return datesJSON(p, ivs, routes, probe, func(t time.Time) time.Time { return measured[t.Unix()] }), warnings, nil
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
			Pool: routes[i].Pool, Reason: routes[i].Reason,
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
	out := BackfillStatusJSON{ID: b.ID, State: backfill.ShownState(b), Phase: b.Phase, Detail: b.Detail, Dates: []BackfillDateJSON{}}
	for _, r := range runs {
		if r.BackfillID == b.ID {
			out.Dates = append(out.Dates, BackfillDateJSON{DS: r.DS, State: string(r.State)})
		}
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
