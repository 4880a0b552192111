package storetest

import (
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/rewind-dev/rewind/store"
)

func date(y int, m time.Month, d int) time.Time { return time.Date(y, m, d, 0, 0, 0, 0, time.UTC) }

// daily returns n consecutive daily run specs from start, midnight in loc.
func daily(loc *time.Location, start time.Time, n int) []store.RunSpec {
	specs := make([]store.RunSpec, n)
	for i := range specs {
		d := time.Date(start.Year(), start.Month(), start.Day()+i, 0, 0, 0, 0, loc)
		e := time.Date(start.Year(), start.Month(), start.Day()+i+1, 0, 0, 0, 0, loc)
		specs[i] = store.RunSpec{LogicalDate: d, DS: d.Format("2006-01-02"), DataIntervalStart: d, DataIntervalEnd: e}
	}
	return specs
}

func tasks(names ...string) []store.TaskSpec {
	ts := make([]store.TaskSpec, len(names))
	for i, n := range names {
		ts[i] = store.TaskSpec{Name: n, Pool: "default"}
	}
	return ts
}

// materialize creates the runs and returns the pipeline's runs with tasks.
func materialize(t *testing.T, st store.Store, pipeline string, kind store.RunKind, specs []store.RunSpec, taskNames ...string) []store.Run {
	t.Helper()
	if _, err := st.MaterializeRuns(ctx, store.MaterializeRunsParams{
		Pipeline: pipeline, Kind: kind, Runs: specs, Tasks: tasks(taskNames...), Now: now,
	}); err != nil {
		t.Fatalf("MaterializeRuns: %v", err)
	}
	return listRuns(t, st, store.ListRunsParams{Pipelines: []string{pipeline}, WithTasks: true})
}

func listRuns(t *testing.T, st store.Store, p store.ListRunsParams) []store.Run {
	t.Helper()
	runs, err := st.ListRuns(ctx, p)
	if err != nil {
		t.Fatalf("ListRuns: %v", err)
	}
	return runs
}

// task returns the task instance of a run by name.
func task(t *testing.T, r store.Run, name string) store.TaskInstance {
	t.Helper()
	for _, ti := range r.Tasks {
		if ti.Task == name {
			return ti
		}
	}
	t.Fatalf("run %s has no task %s (tasks loaded: %d)", r.DS, name, len(r.Tasks))
	return store.TaskInstance{}
}

// reload returns the current state of one task instance with its attempts.
func reload(t *testing.T, st store.Store, id int64) store.TaskInstance {
	t.Helper()
	for _, r := range listRuns(t, st, store.ListRunsParams{WithAttempts: true}) {
		for _, ti := range r.Tasks {
			if ti.ID == id {
				return ti
			}
		}
	}
	t.Fatalf("task instance %d not found", id)
	return store.TaskInstance{}
}

func claim(t *testing.T, st store.Store, id int64) store.Attempt {
	t.Helper()
	a, err := st.ClaimTask(ctx, store.ClaimTaskParams{TaskInstanceID: id, Pool: "default", Host: "host-a", Now: now})
	if err != nil {
		t.Fatalf("ClaimTask(%d): %v", id, err)
	}
	return a
}

func start(t *testing.T, st store.Store, a store.Attempt) {
	t.Helper()
	if err := st.StartAttempt(ctx, store.StartAttemptParams{AttemptID: a.ID, PID: 4242, PIDStart: 99, Now: now}); err != nil {
		t.Fatalf("StartAttempt(%d): %v", a.ID, err)
	}
}

func intp(i int) *int { return &i }

// finish records an outcome the way the scheduler does.
func finish(t *testing.T, st store.Store, a store.Attempt, outcome store.AttemptState, taskState store.TaskState) {
	t.Helper()
	p := store.FinishAttemptParams{AttemptID: a.ID, State: outcome, TaskState: taskState, Now: now.Add(time.Minute)}
	switch outcome {
	case store.AttemptSuccess:
		p.ExitCode = intp(0)
	case store.AttemptSkipped:
		p.ExitCode = intp(99)
	case store.AttemptFailed:
		p.ExitCode = intp(1)
		p.CountFailure = true
	}
	if err := st.FinishAttempt(ctx, p); err != nil {
		t.Fatalf("FinishAttempt(%d, %s): %v", a.ID, outcome, err)
	}
}

// runTask claims, starts and finishes one attempt of a task instance.
func runTask(t *testing.T, st store.Store, id int64, outcome store.AttemptState, taskState store.TaskState) store.Attempt {
	t.Helper()
	a := claim(t, st, id)
	start(t, st, a)
	finish(t, st, a, outcome, taskState)
	return a
}

func wantErr(t *testing.T, what string, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Errorf("%s: got error %v, want %v", what, err, target)
	}
}

// states summarizes runs as "ds:runstate:extract,load" lines.
func states(runs []store.Run) []string {
	var out []string
	for _, r := range runs {
		s := r.DS[5:] + ":" + string(r.State) + ":"
		for i, ti := range r.Tasks {
			if i > 0 {
				s += ","
			}
			s += string(ti.State)
		}
		out = append(out, s)
	}
	return out
}

// finishRuns admits runs[i] and, for success or failed, first settles its
// task instances that could still run (success, or failed), then finishes
// it; queued leaves it alone. runs must carry their tasks.
func finishRuns(t *testing.T, st store.Store, runs []store.Run, states ...store.RunState) {
	t.Helper()
	for i, s := range states {
		if s == store.RunQueued {
			continue
		}
		if err := st.AdmitRun(ctx, store.AdmitRunParams{RunID: runs[i].ID, Now: now}); err != nil {
			t.Fatal(err)
		}
		if s == store.RunRunning {
			continue
		}
		to := store.TaskSuccess
		if s == store.RunFailed {
			to = store.TaskFailed
		}
		setTasks(t, st, runs[i], to)
		if err := st.FinishRun(ctx, store.FinishRunParams{RunID: runs[i].ID, State: s, Now: now}); err != nil {
			t.Fatal(err)
		}
	}
}

// setTasks moves the task instances of r that could still run (scheduled,
// queued, up_for_retry) to state to, as the scheduler would decide.
func setTasks(t *testing.T, st store.Store, r store.Run, to store.TaskState) {
	t.Helper()
	var ids []int64
	for _, ti := range r.Tasks {
		ids = append(ids, ti.ID)
	}
	if _, err := st.SetTaskStates(ctx, store.SetTaskStatesParams{
		IDs: ids, From: []store.TaskState{store.TaskScheduled, store.TaskQueued, store.TaskUpForRetry}, To: to, Now: now,
	}); err != nil {
		t.Fatal(err)
	}
}

func advance(t *testing.T, st store.Store, pipeline string) (store.Watermark, error) {
	t.Helper()
	return st.AdvanceWatermark(ctx, store.AdvanceWatermarkParams{Pipeline: pipeline, Now: now})
}

func acquire(t *testing.T, st store.Store, holder, stale string, at time.Time) (store.Lease, bool) {
	t.Helper()
	l, held, err := st.AcquireLease(ctx, store.AcquireLeaseParams{
		Name: "scheduler", Holder: holder, Host: "host-a", PID: len(holder), PIDStart: 7,
		TTL: 30 * time.Second, Now: at, Stale: stale,
	})
	if err != nil {
		t.Fatalf("AcquireLease(%s): %v", holder, err)
	}
	return l, held
}

// isNonce reports whether s is 32 lower-case hex characters.
func isNonce(s string) bool {
	_, err := hex.DecodeString(s)
	return len(s) == 32 && err == nil && s == strings.ToLower(s)
}

func upsert(t *testing.T, st store.Store, name, hash string) store.Pipeline {
	t.Helper()
	p, err := st.UpsertPipeline(ctx, store.UpsertPipelineParams{Name: name, Hash: hash, Now: now})
	if err != nil {
		t.Fatalf("UpsertPipeline(%s): %v", name, err)
	}
	return p
}

func getPipeline(t *testing.T, st store.Store, name string) store.Pipeline {
	t.Helper()
	p, err := st.GetPipeline(ctx, name)
	if err != nil {
		t.Fatalf("GetPipeline(%s): %v", name, err)
	}
	return p
}

// materializeBackfill creates backfill runs of a backfill and returns the
// pipeline's runs with tasks.
func materializeBackfill(t *testing.T, st store.Store, pipeline, backfill string, specs []store.RunSpec, taskNames ...string) []store.Run {
	t.Helper()
	if _, err := st.MaterializeRuns(ctx, store.MaterializeRunsParams{
		Pipeline: pipeline, Kind: store.KindBackfill, BackfillID: backfill, Runs: specs, Tasks: tasks(taskNames...), Now: now,
	}); err != nil {
		t.Fatalf("MaterializeRuns(backfill %s): %v", backfill, err)
	}
	return listRuns(t, st, store.ListRunsParams{Pipelines: []string{pipeline}, WithTasks: true})
}

func enqueue(t *testing.T, st store.Store, at time.Time, items ...store.EnqueueItem) int {
	t.Helper()
	n, err := st.EnqueueTasks(ctx, store.EnqueueTasksParams{Items: items, Now: at})
	if err != nil {
		t.Fatalf("EnqueueTasks: %v", err)
	}
	return n
}

// enqueueRuns queues every task instance of runs in pool.
func enqueueRuns(t *testing.T, st store.Store, pool string, runs ...store.Run) int {
	t.Helper()
	var items []store.EnqueueItem
	for _, r := range runs {
		for _, ti := range r.Tasks {
			items = append(items, store.EnqueueItem{TaskInstanceID: ti.ID, Pool: pool, LogPath: "/logs/" + r.DS + "/" + ti.Task + ".{try}.log"})
		}
	}
	return enqueue(t, st, now, items...)
}

func claimReady(t *testing.T, st store.Store, p store.ClaimReadyParams) []store.ClaimedAttempt {
	t.Helper()
	if p.Now.IsZero() {
		p.Now = now
	}
	if p.Owner == "" {
		p.Owner = "owner-a"
	}
	if p.Host == "" {
		p.Host = "host-a"
	}
	got, err := st.ClaimReady(ctx, p)
	if err != nil {
		t.Fatalf("ClaimReady: %v", err)
	}
	return got
}

// claimedNames lists claims as "ds/task" (and "bf:" for backfill runs).
func claimedNames(cs []store.ClaimedAttempt) []string {
	var out []string
	for _, c := range cs {
		name := c.LogicalDate.Format("01-02") + "/" + c.Task
		if c.Kind == store.KindBackfill {
			name = "bf:" + name
		}
		out = append(out, name)
	}
	return out
}

func succeed(t *testing.T, st store.Store, a store.Attempt) {
	t.Helper()
	if err := st.FinishAttempt(ctx, store.FinishAttemptParams{AttemptID: a.ID, State: store.AttemptSuccess, ExitCode: intp(0),
		TaskState: store.TaskSuccess, Now: now.Add(time.Minute)}); err != nil {
		t.Fatalf("FinishAttempt(%d): %v", a.ID, err)
	}
}

func usageOf(t *testing.T, st store.Store) map[string]store.UsageRow {
	t.Helper()
	rows, err := st.Usage(ctx)
	if err != nil {
		t.Fatalf("Usage: %v", err)
	}
	out := map[string]store.UsageRow{}
	for _, u := range rows {
		out[fmt.Sprintf("%s/%s/%s/%v", u.Pool, u.Pipeline, u.Task, u.Backfill)] = u
	}
	return out
}

func epoch(t *testing.T, st store.Store) int64 {
	t.Helper()
	e, err := st.Epoch(ctx)
	if err != nil {
		t.Fatalf("Epoch: %v", err)
	}
	return e
}

func runningAttempts(t *testing.T, st store.Store) []store.RunningAttempt {
	t.Helper()
	ra, err := st.RunningAttempts(ctx)
	if err != nil {
		t.Fatalf("RunningAttempts: %v", err)
	}
	return ra
}

func finishRun(t *testing.T, st store.Store, id int64, state store.RunState) {
	t.Helper()
	if err := st.AdmitRun(ctx, store.AdmitRunParams{RunID: id, Now: now}); err != nil && !errors.Is(err, store.ErrConflict) {
		t.Fatal(err)
	}
	if err := st.FinishRun(ctx, store.FinishRunParams{RunID: id, State: state, Now: now}); err != nil {
		t.Fatal(err)
	}
}

// printRuns prints runs with their task instances and attempts, exit codes
// by value.
func printRuns(runs []store.Run) string {
	var b strings.Builder
	for _, r := range runs {
		tis := r.Tasks
		r.Tasks = nil
		fmt.Fprintf(&b, "%+v\n", r)
		for _, ti := range tis {
			as := ti.Attempts
			ti.Attempts = nil
			fmt.Fprintf(&b, "  %+v\n", ti)
			for _, a := range as {
				exit := "nil"
				if a.ExitCode != nil {
					exit = fmt.Sprint(*a.ExitCode)
				}
				a.ExitCode = nil
				fmt.Fprintf(&b, "    %+v exit %s\n", a, exit)
			}
		}
	}
	return b.String()
}

// digest reads everything the writes could change.
func digest(t *testing.T, st store.Store) string {
	t.Helper()
	var b strings.Builder
	fmt.Fprintln(&b, printRuns(listRuns(t, st, store.ListRunsParams{WithAttempts: true})))
	pl, err := st.ListPipelines(ctx)
	fmt.Fprintln(&b, pl, err)
	bf, err := st.ListBackfills(ctx)
	fmt.Fprintln(&b, bf, err)
	ob, err := st.ListOutbox(ctx, nil)
	fmt.Fprintln(&b, ob, err)
	u, err := st.Usage(ctx)
	fmt.Fprintln(&b, u, err)
	wm, err := st.GetWatermark(ctx, "p")
	fmt.Fprintln(&b, wm, err)
	o, err := st.GetOwner(ctx, "o1")
	fmt.Fprintln(&b, o, err)
	fmt.Fprintln(&b, epoch(t, st))
	return b.String()
}
