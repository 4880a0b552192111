package scheduler

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/rewind-dev/rewind/store"
)

// FailedRun is a run that failed, with what failed in it: what `rewind run`
// prints for it (also with --quiet) and `rewind scheduler` logs at WARN.
type FailedRun struct {
	Pipeline    string
	LogicalDate time.Time
	RunID       string
	Kind        string
	Tasks       []FailedTask
	// CommitError is why the run failed when none of its tasks did: the
	// error of its output commit.
	CommitError string
}

// FailedTask is a task instance of a failed run that did not succeed, with
// its latest attempt.
type FailedTask struct {
	Task  string
	State string // the task instance's state: failed, upstream_failed, ...
	// Outcome is the latest attempt's: "exit 3", "oom", "timeout",
	// "signal killed", "lost"; "" when the task never ran (upstream_failed).
	Outcome string
	// ExitCode is the latest attempt's exit status (nil when it has none:
	// killed by a signal, lost, never ran).
	ExitCode *int
	Try      int
	Pool     string
	LogPath  string
}

// FailedRuns reads from st what failed in the failed runs of sum, at most
// most of them (oldest first; most < 0: all).
func FailedRuns(ctx context.Context, st store.Store, sum *Summary, most int) ([]FailedRun, error) {
	if sum == nil {
		return nil, nil
	}
	var out []FailedRun
	for _, r := range sum.Finished {
		if r.State != store.RunFailed {
			continue
		}
		if len(out) == most {
			break
		}
		fr := FailedRun{Pipeline: r.Pipeline, LogicalDate: r.LogicalDate}
		runs, err := st.ListRuns(ctx, store.ListRunsParams{Pipelines: []string{r.Pipeline}, From: r.LogicalDate, To: r.LogicalDate, WithTasks: true, WithAttempts: true})
		if err != nil {
			return out, err
		}
		for _, run := range runs {
			fr.Kind, fr.RunID = string(run.Kind), store.RunID(run.Kind, run.LogicalDate)
			for _, ft := range failedTasks(run) {
				fr.Tasks = append(fr.Tasks, ft)
			}
		}
		if len(fr.Tasks) == 0 {
			fr.CommitError = strings.Join(r.FailedTasks, ", ") // the output's commit failed: its error
		}
		out = append(out, fr)
	}
	return out, nil
}

// failedTasks are the task instances of run (read with its tasks and
// attempts) that did not succeed, each with its latest attempt.
func failedTasks(run store.Run) []FailedTask {
	var out []FailedTask
	for _, ti := range run.Tasks {
		if ti.State == store.TaskSuccess || ti.State == store.TaskSkipped {
			continue
		}
		ft := FailedTask{Task: ti.Task, State: string(ti.State), Try: ti.TryNumber, Pool: ti.Pool}
		if n := len(ti.Attempts); n > 0 {
			a := ti.Attempts[n-1]
			ft.Outcome, ft.Pool, ft.LogPath, ft.ExitCode = Outcome(a), a.Pool, a.LogPath, a.ExitCode
		}
		out = append(out, ft)
	}
	return out
}

// Outcome says how an attempt ended, in a few words: "exit 3", "oom",
// "timeout", "signal killed", "lost", "interrupted".
func Outcome(a store.Attempt) string {
	switch {
	case a.State == store.AttemptOOM:
		return "oom"
	case a.Signal == "timeout":
		return "timeout"
	case a.State == store.AttemptLost || a.State == store.AttemptInterrupted || a.State == store.AttemptRunning:
		return string(a.State)
	case a.ExitCode != nil:
		return fmt.Sprintf("exit %d", *a.ExitCode)
	case a.Signal != "":
		return "signal " + a.Signal
	}
	return string(a.State)
}

// Line is the failed run on one line: "daily 2025-07-01T00:00:00Z:
// extract (exit 3, try 2, pool default), load (upstream_failed)".
func (f FailedRun) Line() string {
	return f.Pipeline + " " + f.LogicalDate.Format(time.RFC3339) + ": " + f.TasksText()
}

// TasksText is what failed: "extract (exit 3, try 2, pool default), load
// (upstream_failed)"; the commit's error for a run whose output commit
// failed.
func (f FailedRun) TasksText() string {
	if len(f.Tasks) == 0 {
		return f.CommitError
	}
	parts := make([]string, 0, len(f.Tasks))
	for _, t := range f.Tasks {
		if t.Outcome == "" {
			parts = append(parts, t.Task+" ("+t.State+")")
			continue
		}
		parts = append(parts, fmt.Sprintf("%s (%s, try %d, pool %s)", t.Task, t.Outcome, t.Try, t.Pool))
	}
	return strings.Join(parts, ", ")
}
