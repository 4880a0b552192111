package web

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

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

// Dates is `dates --json` of pipeline p over win: every due interval with
// the pool its skew block routes it to (a probe, if the pipeline has one,
// runs once per date, as `rewind dates` runs it), and the probe failures
// (`rewind dates` prints them as warnings).
func Dates(ctx context.Context, p *dsl.Pipeline, win timetable.Window) ([]DateJSON, []string, error) {
	tt, err := timetable.New(p.Schedule, p.Timezone)
	if err != nil {
		return nil, nil, fmt.Errorf("pipeline %s: %w", p.Name, err)
	}
	var ivs []timetable.Interval
	for iv := range tt.Intervals(win) {
		ivs = append(ivs, iv)
	}
	routes, warnings := skew.DateRoutesChecked(ctx, p, ivs)
	out := make([]DateJSON, len(ivs))
	for i, iv := range ivs {
		out[i] = DateJSON{
			LogicalDate: iv.Start.Format(time.RFC3339), DS: iv.DS(),
			DataIntervalStart: iv.Start.Format(time.RFC3339), DataIntervalEnd: iv.End.Format(time.RFC3339),
			Pool: routes[i].Pool, Reason: routes[i].Reason,
		}
	}
	return out, warnings, nil
}

// BackfillStatus is `backfill status --json` of b, given the runs of its
// pipeline in its window (ListRuns From b.From To b.To): the dates are
// those whose run is the backfill's own.
func BackfillStatus(b store.Backfill, runs []store.Run) BackfillStatusJSON {
	out := BackfillStatusJSON{ID: b.ID, State: string(b.State), Phase: b.Phase, Detail: b.Detail, Dates: []BackfillDateJSON{}}
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
