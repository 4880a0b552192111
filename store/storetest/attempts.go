package storetest

import (
	"fmt"
	"testing"
	"time"

	"github.com/rewind-dev/rewind/store"
)

func testHappyPath(t *testing.T, st store.Store) {
	runs := materialize(t, st, "p", store.KindScheduled, daily(time.UTC, date(2025, 7, 1), 1), "extract")
	ti := runs[0].Tasks[0]
	if err := st.AdmitRun(ctx, store.AdmitRunParams{RunID: runs[0].ID, Now: now}); err != nil {
		t.Fatal(err)
	}

	a, err := st.ClaimTask(ctx, store.ClaimTaskParams{
		TaskInstanceID: ti.ID, Pool: "large", Host: "host-a", Owner: "owner-a", Now: now,
		LogPath: "/logs/p/2025-07-01/extract.{try}.log", Reason: "hot_dates",
	})
	if err != nil {
		t.Fatal(err)
	}
	if a.ID == 0 || a.TaskInstanceID != ti.ID || a.TryNumber != 1 || a.State != store.AttemptRunning ||
		a.Pool != "large" || a.Host != "host-a" || a.PID != 0 || a.ExitCode != nil || !a.EndedAt.IsZero() {
		t.Errorf("claimed attempt = %+v", a)
	}
	if a.LogPath != "/logs/p/2025-07-01/extract.1.log" || a.Reason != "hot_dates" {
		t.Errorf("log path %q, reason %q; want {try} replaced by 1 and the reason kept", a.LogPath, a.Reason)
	}
	if a.Owner != "owner-a" || !isNonce(a.Nonce) {
		t.Errorf("owner %q, nonce %q; want owner-a and 32 hex characters", a.Owner, a.Nonce)
	}
	got := reload(t, st, ti.ID)
	if got.State != store.TaskRunning || got.TryNumber != 1 || got.Pool != "large" {
		t.Errorf("after claim: %s try %d pool %s, want running try 1 pool large", got.State, got.TryNumber, got.Pool)
	}
	if at := got.Attempts[0]; at.Owner != a.Owner || at.Nonce != a.Nonce {
		t.Errorf("stored attempt owner %q nonce %q; want %q %q", at.Owner, at.Nonce, a.Owner, a.Nonce)
	}

	started := now.Add(time.Second)
	if err := st.StartAttempt(ctx, store.StartAttemptParams{AttemptID: a.ID, PID: 31337, PIDStart: 1 << 40, Now: started}); err != nil {
		t.Fatal(err)
	}
	got = reload(t, st, ti.ID)
	if got.State != store.TaskRunning {
		t.Errorf("after start: %s, want running", got.State)
	}
	if at := got.Attempts[0]; at.PID != 31337 || at.PIDStart != 1<<40 || !at.StartedAt.Equal(started) || at.State != store.AttemptRunning {
		t.Errorf("started attempt = %+v", at)
	}

	ended := now.Add(time.Minute)
	if err := st.FinishAttempt(ctx, store.FinishAttemptParams{
		AttemptID: a.ID, State: store.AttemptSuccess, ExitCode: intp(0), PeakRSS: 64 << 20,
		TaskState: store.TaskSuccess, Now: ended,
	}); err != nil {
		t.Fatal(err)
	}
	got = reload(t, st, ti.ID)
	if got.State != store.TaskSuccess || got.Failures != 0 || got.TryNumber != 1 || !got.UpdatedAt.Equal(ended) {
		t.Errorf("after success: %+v", got)
	}
	at := got.Attempts[0]
	if at.State != store.AttemptSuccess || at.ExitCode == nil || *at.ExitCode != 0 || at.PeakRSS != 64<<20 ||
		!at.EndedAt.Equal(ended) || at.Signal != "" || at.LogPath != a.LogPath {
		t.Errorf("finished attempt = %+v", at)
	}
	if err := st.FinishRun(ctx, store.FinishRunParams{RunID: runs[0].ID, State: store.RunSuccess, Now: ended}); err != nil {
		t.Fatal(err)
	}
	if ra, err := st.RunningAttempts(ctx); err != nil || len(ra) != 0 {
		t.Errorf("RunningAttempts = %+v, %v; want none", ra, err)
	}
}

func testClaimConflict(t *testing.T, st store.Store) {
	runs := materialize(t, st, "p", store.KindScheduled, daily(time.UTC, date(2025, 7, 1), 1), "t")
	id := runs[0].Tasks[0].ID
	a := claim(t, st, id)
	_, err := st.ClaimTask(ctx, store.ClaimTaskParams{TaskInstanceID: id, Now: now})
	wantErr(t, "claim of a claimed task", err, store.ErrConflict)
	start(t, st, a)
	_, err = st.ClaimTask(ctx, store.ClaimTaskParams{TaskInstanceID: id, Now: now})
	wantErr(t, "claim of a running task", err, store.ErrConflict)
	finish(t, st, a, store.AttemptSuccess, store.TaskSuccess)
	_, err = st.ClaimTask(ctx, store.ClaimTaskParams{TaskInstanceID: id, Now: now})
	wantErr(t, "claim of a successful task", err, store.ErrConflict)
	_, err = st.ClaimTask(ctx, store.ClaimTaskParams{TaskInstanceID: 987654, Now: now})
	wantErr(t, "claim of an unknown task", err, store.ErrNotFound)
	if got := reload(t, st, id); got.TryNumber != 1 || len(got.Attempts) != 1 {
		t.Errorf("refused claims changed the task: try %d, %d attempts", got.TryNumber, len(got.Attempts))
	}
	// An empty pool keeps the task instance's pool.
	other := materialize(t, st, "q", store.KindScheduled, daily(time.UTC, date(2025, 7, 1), 1), "t")
	b, err := st.ClaimTask(ctx, store.ClaimTaskParams{TaskInstanceID: other[0].Tasks[0].ID, Now: now})
	if err != nil || b.Pool != "default" {
		t.Errorf("claim without pool = %+v, %v; want pool default", b, err)
	}
}

func testUniqueAttemptPerTry(t *testing.T, st store.Store) {
	runs := materialize(t, st, "p", store.KindScheduled, daily(time.UTC, date(2025, 7, 1), 1), "t")
	id := runs[0].Tasks[0].ID
	seen := map[int64]bool{}
	for try := 1; try <= 3; try++ {
		a := claim(t, st, id)
		if a.TryNumber != try {
			t.Errorf("claim %d got try %d", try, a.TryNumber)
		}
		if seen[a.ID] {
			t.Errorf("attempt id %d reused", a.ID)
		}
		seen[a.ID] = true
		start(t, st, a)
		finish(t, st, a, store.AttemptFailed, store.TaskUpForRetry)
	}
	got := reload(t, st, id)
	if len(got.Attempts) != 3 {
		t.Fatalf("%d attempts, want 3", len(got.Attempts))
	}
	for i, a := range got.Attempts {
		if a.TryNumber != i+1 {
			t.Errorf("attempt %d has try %d", i, a.TryNumber)
		}
	}
	// A clear keeps counting tries: the next attempt is try 4, not a second try 1.
	if _, err := st.ClearTasks(ctx, store.ClearTasksParams{Pipeline: "p", From: date(2025, 7, 1), To: date(2025, 7, 1), Now: now}); err != nil {
		t.Fatal(err)
	}
	if a := claim(t, st, id); a.TryNumber != 4 {
		t.Errorf("claim after clear got try %d, want 4", a.TryNumber)
	}
}

func testRetryPath(t *testing.T, st store.Store) {
	runs := materialize(t, st, "p", store.KindScheduled, daily(time.UTC, date(2025, 7, 1), 1), "t")
	id := runs[0].Tasks[0].ID
	retryAt := now.Add(30 * time.Second)
	for try := 1; try <= 2; try++ {
		a := claim(t, st, id)
		start(t, st, a)
		if err := st.FinishAttempt(ctx, store.FinishAttemptParams{
			AttemptID: a.ID, State: store.AttemptFailed, ExitCode: intp(2), TaskState: store.TaskUpForRetry,
			CountFailure: true, NextTryAt: retryAt, Now: now,
		}); err != nil {
			t.Fatal(err)
		}
		got := reload(t, st, id)
		if got.State != store.TaskUpForRetry || got.Failures != try || !got.NextTryAt.Equal(retryAt) {
			t.Errorf("after failure %d: %s failures %d next %v", try, got.State, got.Failures, got.NextTryAt)
		}
	}
	a := claim(t, st, id)
	if got := reload(t, st, id); !got.NextTryAt.IsZero() {
		t.Errorf("claim kept NextTryAt %v", got.NextTryAt)
	}
	start(t, st, a)
	if err := st.FinishAttempt(ctx, store.FinishAttemptParams{
		AttemptID: a.ID, State: store.AttemptFailed, Signal: "killed", TaskState: store.TaskFailed, CountFailure: true, Now: now,
	}); err != nil {
		t.Fatal(err)
	}
	got := reload(t, st, id)
	if got.State != store.TaskFailed || got.Failures != 3 || got.TryNumber != 3 || len(got.Attempts) != 3 {
		t.Errorf("after last failure: %s failures %d try %d attempts %d", got.State, got.Failures, got.TryNumber, len(got.Attempts))
	}
	last := got.Attempts[2]
	if last.ExitCode != nil || last.Signal != "killed" || last.State != store.AttemptFailed {
		t.Errorf("killed attempt = exit %v signal %q state %s", last.ExitCode, last.Signal, last.State)
	}
	if c := got.Attempts[0].ExitCode; c == nil || *c != 2 {
		t.Errorf("first attempt exit code = %v, want 2", c)
	}
}

func testInterruptedLost(t *testing.T, st store.Store) {
	runs := materialize(t, st, "p", store.KindScheduled, daily(time.UTC, date(2025, 7, 1), 1), "t")
	id := runs[0].Tasks[0].ID
	runTask(t, st, id, store.AttemptInterrupted, store.TaskScheduled)
	if got := reload(t, st, id); got.State != store.TaskScheduled || got.Failures != 0 || got.TryNumber != 1 {
		t.Errorf("after interrupted: %s failures %d try %d", got.State, got.Failures, got.TryNumber)
	}
	a := claim(t, st, id) // lost before it even started
	finish(t, st, a, store.AttemptLost, store.TaskScheduled)
	got := reload(t, st, id)
	if got.State != store.TaskScheduled || got.Failures != 0 || got.TryNumber != 2 {
		t.Errorf("after lost: %s failures %d try %d", got.State, got.Failures, got.TryNumber)
	}
	if got.Attempts[0].State != store.AttemptInterrupted || got.Attempts[1].State != store.AttemptLost {
		t.Errorf("attempt states %s, %s", got.Attempts[0].State, got.Attempts[1].State)
	}
	if a := claim(t, st, id); a.TryNumber != 3 {
		t.Errorf("claim after lost got try %d, want 3", a.TryNumber)
	}
}

func testAttemptGuards(t *testing.T, st store.Store) {
	runs := materialize(t, st, "p", store.KindScheduled, daily(time.UTC, date(2025, 7, 1), 1), "t")
	id := runs[0].Tasks[0].ID
	a := claim(t, st, id)
	start(t, st, a)
	wantErr(t, "StartAttempt twice", st.StartAttempt(ctx, store.StartAttemptParams{AttemptID: a.ID, PID: 1, Now: now}), store.ErrConflict)
	finish(t, st, a, store.AttemptSuccess, store.TaskSuccess)
	wantErr(t, "FinishAttempt twice", st.FinishAttempt(ctx, store.FinishAttemptParams{
		AttemptID: a.ID, State: store.AttemptFailed, TaskState: store.TaskFailed, CountFailure: true, Now: now,
	}), store.ErrConflict)
	wantErr(t, "StartAttempt after finish", st.StartAttempt(ctx, store.StartAttemptParams{AttemptID: a.ID, PID: 1, Now: now}), store.ErrConflict)
	wantErr(t, "StartAttempt(unknown)", st.StartAttempt(ctx, store.StartAttemptParams{AttemptID: 987654, Now: now}), store.ErrNotFound)
	wantErr(t, "FinishAttempt(unknown)", st.FinishAttempt(ctx, store.FinishAttemptParams{
		AttemptID: 987654, State: store.AttemptSuccess, TaskState: store.TaskSuccess, Now: now,
	}), store.ErrNotFound)
	if got := reload(t, st, id); got.State != store.TaskSuccess || got.Failures != 0 || got.Attempts[0].State != store.AttemptSuccess {
		t.Errorf("refused transitions changed the task: %+v", got)
	}
	if err := st.FinishAttempt(ctx, store.FinishAttemptParams{AttemptID: a.ID, State: store.AttemptRunning, TaskState: store.TaskSuccess, Now: now}); err == nil {
		t.Errorf("FinishAttempt with outcome running succeeded")
	}
}

func testSetTaskStates(t *testing.T, st store.Store) {
	runs := materialize(t, st, "p", store.KindScheduled, daily(time.UTC, date(2025, 7, 1), 1), "a", "b", "c")
	r := runs[0]
	runTask(t, st, task(t, r, "a").ID, store.AttemptFailed, store.TaskFailed)
	runTask(t, st, task(t, r, "b").ID, store.AttemptSuccess, store.TaskSuccess)
	ids := []int64{task(t, r, "a").ID, task(t, r, "b").ID, task(t, r, "c").ID, 987654}
	n, err := st.SetTaskStates(ctx, store.SetTaskStatesParams{
		IDs: ids, From: []store.TaskState{store.TaskScheduled, store.TaskUpForRetry}, To: store.TaskUpstreamFailed, Now: now,
	})
	if err != nil || n != 1 {
		t.Fatalf("SetTaskStates = %d, %v; want 1", n, err)
	}
	want := map[string]store.TaskState{"a": store.TaskFailed, "b": store.TaskSuccess, "c": store.TaskUpstreamFailed}
	for _, ti := range listRuns(t, st, store.ListRunsParams{WithTasks: true})[0].Tasks {
		if ti.State != want[ti.Task] {
			t.Errorf("task %s is %s, want %s", ti.Task, ti.State, want[ti.Task])
		}
	}
	if n, err := st.SetTaskStates(ctx, store.SetTaskStatesParams{IDs: nil, From: []store.TaskState{store.TaskScheduled}, To: store.TaskSkipped, Now: now}); err != nil || n != 0 {
		t.Errorf("SetTaskStates(no ids) = %d, %v", n, err)
	}
	if _, err := st.SetTaskStates(ctx, store.SetTaskStatesParams{IDs: ids, From: []store.TaskState{store.TaskFailed}, To: "bogus", Now: now}); err == nil {
		t.Errorf("SetTaskStates to an unknown state succeeded")
	}
}

func testRunningAttempts(t *testing.T, st store.Store) {
	runs := materialize(t, st, "p", store.KindScheduled, daily(time.UTC, date(2025, 7, 1), 2), "extract", "load")
	a := claim(t, st, task(t, runs[0], "extract").ID)
	start(t, st, a)
	b := claim(t, st, task(t, runs[1], "load").ID) // claimed, process not started yet
	runTask(t, st, task(t, runs[1], "extract").ID, store.AttemptSuccess, store.TaskSuccess)

	ra, err := st.RunningAttempts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(ra) != 2 {
		t.Fatalf("RunningAttempts = %d, want 2", len(ra))
	}
	if ra[0].ID != a.ID || ra[0].Pipeline != "p" || ra[0].RunID != runs[0].ID || ra[0].Task != "extract" ||
		ra[0].PID != 4242 || ra[0].PIDStart != 99 || ra[0].Host != "host-a" {
		t.Errorf("first running attempt = %+v", ra[0])
	}
	if ra[1].ID != b.ID || ra[1].RunID != runs[1].ID || ra[1].Task != "load" || ra[1].PID != 0 {
		t.Errorf("second running attempt = %+v", ra[1])
	}
	finish(t, st, a, store.AttemptLost, store.TaskScheduled)
	if ra, err := st.RunningAttempts(ctx); err != nil || len(ra) != 1 {
		t.Errorf("after lost: %d running, %v; want 1", len(ra), err)
	}
}

func testFindAttempt(t *testing.T, st store.Store) {
	runs := materialize(t, st, "p", store.KindScheduled, daily(time.UTC, date(2025, 7, 1), 2), "t")
	id := runs[1].Tasks[0].ID
	first := runTask(t, st, id, store.AttemptFailed, store.TaskUpForRetry)
	second := runTask(t, st, id, store.AttemptSuccess, store.TaskSuccess)
	find := func(try int) (store.Attempt, error) {
		return st.FindAttempt(ctx, store.FindAttemptParams{Pipeline: "p", DS: "2025-07-02", Task: "t", TryNumber: try})
	}
	if a, err := find(0); err != nil || a.ID != second.ID {
		t.Errorf("latest = %+v, %v; want attempt %d", a, err, second.ID)
	}
	if a, err := find(1); err != nil || a.ID != first.ID || a.State != store.AttemptFailed {
		t.Errorf("try 1 = %+v, %v; want attempt %d", a, err, first.ID)
	}
	_, err := find(3)
	wantErr(t, "try 3", err, store.ErrNotFound)
	for _, p := range []store.FindAttemptParams{
		{Pipeline: "p", DS: "2025-07-01", Task: "t"}, // task never ran
		{Pipeline: "p", DS: "2025-07-03", Task: "t"},
		{Pipeline: "p", DS: "2025-07-02", Task: "other"},
		{Pipeline: "other", DS: "2025-07-02", Task: "t"},
	} {
		_, err := st.FindAttempt(ctx, p)
		wantErr(t, fmt.Sprintf("FindAttempt(%+v)", p), err, store.ErrNotFound)
	}
}

// TaskDurations reports the latest successful attempts' durations per task.
func testTaskDurations(t *testing.T, st store.Store) {
	runs := materialize(t, st, "p", store.KindScheduled, daily(time.UTC, date(2025, 7, 1), 3), "a", "b")
	for i, r := range runs {
		for _, ti := range r.Tasks {
			att, err := st.ClaimTask(ctx, store.ClaimTaskParams{TaskInstanceID: ti.ID, Now: now})
			if err != nil {
				t.Fatal(err)
			}
			if err := st.StartAttempt(ctx, store.StartAttemptParams{AttemptID: att.ID, PID: 1, Now: now}); err != nil {
				t.Fatal(err)
			}
			state, task := store.AttemptSuccess, store.TaskSuccess
			if ti.Task == "b" && i == 2 {
				state, task = store.AttemptFailed, store.TaskFailed
			}
			if err := st.FinishAttempt(ctx, store.FinishAttemptParams{AttemptID: att.ID, State: state, TaskState: task,
				Now: now.Add(time.Duration(i+1) * time.Minute)}); err != nil {
				t.Fatal(err)
			}
		}
	}
	got, err := st.TaskDurations(ctx, store.TaskDurationsParams{Pipeline: "p", Limit: 2})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]time.Duration{"a": {3 * time.Minute, 2 * time.Minute}, "b": {2 * time.Minute, time.Minute}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("TaskDurations = %v; want %v (newest first, successes only, at most 2)", got, want)
	}
}

// An attempt's outcome moves its task instance only on its own try, and a
// task instance moved on meanwhile does not take a pid.
func testAttemptOnlyOnItsTry(t *testing.T, st store.Store) {
	runs := materialize(t, st, "p", store.KindScheduled, daily(time.UTC, date(2025, 7, 1), 1), "t")
	id := runs[0].Tasks[0].ID
	enqueueRuns(t, st, "default", runs...)
	first := claimReady(t, st, store.ClaimReadyParams{Pools: []store.PoolCapacity{{Name: "default", Slots: 1}}, Limit: 1})
	if len(first) != 1 {
		t.Fatalf("claimed %d", len(first))
	}
	a := first[0].Attempt
	start(t, st, a)
	if ti := reload(t, st, id); ti.State != store.TaskRunning || ti.Attempts[0].PID != 4242 {
		t.Errorf("after StartAttempt: %s pid %d; want running, 4242", ti.State, ti.Attempts[0].PID)
	}
	wantErr(t, "StartAttempt twice", st.StartAttempt(ctx, store.StartAttemptParams{AttemptID: a.ID, PID: 1, Now: now}), store.ErrConflict)
	// The scheduler gives the task instance up (recovery) and queues it again.
	if n, err := st.SetTaskStates(ctx, store.SetTaskStatesParams{IDs: []int64{id}, From: []store.TaskState{store.TaskRunning},
		To: store.TaskScheduled, Now: now}); err != nil || n != 1 {
		t.Fatalf("SetTaskStates = %d, %v", n, err)
	}
	enqueueRuns(t, st, "default", runs...)
	// The old process reports: its attempt gets the outcome, the task stays queued.
	succeed(t, st, a)
	if ti := reload(t, st, id); ti.State != store.TaskQueued || ti.Attempts[0].State != store.AttemptSuccess {
		t.Errorf("late outcome: task %s attempt %s; want queued, success", ti.State, ti.Attempts[0].State)
	}
	second := claimReady(t, st, store.ClaimReadyParams{Pools: []store.PoolCapacity{{Name: "default", Slots: 1}}, Limit: 1})
	if len(second) != 1 || second[0].TryNumber != 2 {
		t.Fatalf("second claim = %+v, want try 2", second)
	}
	b := second[0].Attempt
	// The task instance moves on before the process starts: no pid for it.
	if _, err := st.SetTaskStates(ctx, store.SetTaskStatesParams{IDs: []int64{id}, From: []store.TaskState{store.TaskRunning},
		To: store.TaskUpstreamFailed, Now: now}); err != nil {
		t.Fatal(err)
	}
	wantErr(t, "StartAttempt of a task instance moved on", st.StartAttempt(ctx, store.StartAttemptParams{AttemptID: b.ID, PID: 7, Now: now}), store.ErrConflict)
	finish(t, st, b, store.AttemptInterrupted, store.TaskScheduled)
	if ti := reload(t, st, id); ti.State != store.TaskUpstreamFailed || ti.Attempts[1].PID != 0 || ti.Attempts[1].State != store.AttemptInterrupted {
		t.Errorf("after: task %s, attempt pid %d state %s", ti.State, ti.Attempts[1].PID, ti.Attempts[1].State)
	}
}

func testTaskDurationsOtherPipeline(t *testing.T, st store.Store) {
	for _, name := range []string{"p", "q"} {
		runs := materialize(t, st, name, store.KindScheduled, daily(time.UTC, date(2025, 7, 1), 2), "a")
		for i, r := range runs {
			a := claim(t, st, r.Tasks[0].ID)
			d := time.Duration(i+1) * time.Minute
			if name == "q" {
				d *= 10
			}
			if err := st.FinishAttempt(ctx, store.FinishAttemptParams{AttemptID: a.ID, State: store.AttemptSuccess, TaskState: store.TaskSuccess, Now: now.Add(d)}); err != nil {
				t.Fatal(err)
			}
		}
	}
	got, err := st.TaskDurations(ctx, store.TaskDurationsParams{Pipeline: "p", Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string][]time.Duration{"a": {2 * time.Minute, time.Minute}}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("TaskDurations(p) = %v; want %v", got, want)
	}
	if got, err := st.TaskDurations(ctx, store.TaskDurationsParams{Pipeline: "nope"}); err != nil || len(got) != 0 {
		t.Errorf("TaskDurations(nope) = %v, %v", got, err)
	}
}

// TaskDurations looks at the pipeline's latest TaskDurationsRuns(Limit)
// runs by logical date, not at its whole history: its cost is bounded.
func testTaskDurationsLatestRuns(t *testing.T, st store.Store) {
	const limit = 1
	n := store.TaskDurationsRuns(limit) + 2
	runs := materialize(t, st, "p", store.KindScheduled, daily(time.UTC, date(2025, 7, 1), n), "a")
	for i, r := range runs {
		a := claim(t, st, r.Tasks[0].ID)
		state, task := store.AttemptFailed, store.TaskFailed
		if i < 2 || i == n-1 {
			state, task = store.AttemptSuccess, store.TaskSuccess // the two oldest, and the newest
		}
		if err := st.FinishAttempt(ctx, store.FinishAttemptParams{AttemptID: a.ID, State: state, TaskState: task, Now: now.Add(time.Duration(i+1) * time.Minute)}); err != nil {
			t.Fatal(err)
		}
	}
	got, err := st.TaskDurations(ctx, store.TaskDurationsParams{Pipeline: "p", Limit: limit})
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string][]time.Duration{"a": {time.Duration(n) * time.Minute}}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("TaskDurations = %v; want %v (the newest success only)", got, want)
	}
	// With a larger limit, the older runs are looked at too.
	got, err = st.TaskDurations(ctx, store.TaskDurationsParams{Pipeline: "p", Limit: 5})
	if err != nil || len(got["a"]) != 3 {
		t.Errorf("TaskDurations(limit 5) = %v, %v; want the 3 successes", got, err)
	}
}

// An attempt submitted to Slurm records its job id in place of a pid: read
// back with the attempt (runs, running attempts), started once only.
func testSlurmJobID(t *testing.T, st store.Store) {
	runs := materialize(t, st, "p", store.KindScheduled, daily(time.UTC, date(2025, 7, 1), 2), "t")
	enqueueRuns(t, st, "default", runs...)
	got := claimReady(t, st, store.ClaimReadyParams{Pools: []store.PoolCapacity{{Name: "default", Slots: 2}}, Limit: 2})
	if len(got) != 2 {
		t.Fatalf("claimed %d", len(got))
	}
	slurm, local := got[0].Attempt, got[1].Attempt
	if slurm.JobID != "" {
		t.Errorf("a claimed attempt has job id %q", slurm.JobID)
	}
	if err := st.StartAttempt(ctx, store.StartAttemptParams{AttemptID: slurm.ID, JobID: "4711", Now: now}); err != nil {
		t.Fatalf("StartAttempt with a job id: %v", err)
	}
	start(t, st, local)
	wantErr(t, "StartAttempt of a submitted attempt again", st.StartAttempt(ctx, store.StartAttemptParams{AttemptID: slurm.ID, JobID: "4712", Now: now}), store.ErrConflict)
	wantErr(t, "StartAttempt of a submitted attempt with a pid", st.StartAttempt(ctx, store.StartAttemptParams{AttemptID: slurm.ID, PID: 5, Now: now}), store.ErrConflict)
	jobs := map[int64]string{}
	for _, ra := range runningAttempts(t, st) {
		jobs[ra.ID] = ra.JobID
	}
	if len(jobs) != 2 || jobs[slurm.ID] != "4711" || jobs[local.ID] != "" {
		t.Errorf("running attempts' job ids = %v, want %d: 4711 and %d: none", jobs, slurm.ID, local.ID)
	}
	if ti := reload(t, st, slurm.TaskInstanceID); len(ti.Attempts) != 1 || ti.Attempts[0].JobID != "4711" || ti.Attempts[0].PID != 0 {
		t.Errorf("attempt read back: %+v", ti.Attempts)
	}
	succeed(t, st, slurm)
	if ti := reload(t, st, slurm.TaskInstanceID); ti.Attempts[0].JobID != "4711" || ti.Attempts[0].State != store.AttemptSuccess {
		t.Errorf("finished attempt: %+v", ti.Attempts[0])
	}
}
