package storetest

import (
	"errors"
	"testing"
	"time"

	"github.com/rewind-dev/rewind/store"
)

// wantErrs checks a batch call's answers item by item: nil, or the error
// each want names (ErrConflict, ErrNotFound).
func wantErrs(t *testing.T, op string, errs []error, err error, want ...error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", op, err)
	}
	if len(errs) != len(want) {
		t.Fatalf("%s: %d answers, want %d", op, len(errs), len(want))
	}
	for i := range want {
		if (want[i] == nil) != (errs[i] == nil) || (want[i] != nil && !errors.Is(errs[i], want[i])) {
			t.Errorf("%s: item %d: %v, want %v", op, i, errs[i], want[i])
		}
	}
}

// testBatchForms: AdmitRuns, StartAttempts, FinishAttempts and FinishRuns
// answer each item as its single operation would (an id listed twice is a
// conflict the second time, an unknown one not found), write the items
// their guards take and nothing of the others, and inside InTx the items
// taken stand beside a refused one.
func testBatchForms(t *testing.T, st store.Store) {
	runs := materialize(t, st, "p", store.KindScheduled, daily(time.UTC, date(2025, 7, 1), 4), "t")
	const missing = 1 << 40
	errs, err := st.AdmitRuns(ctx, []store.AdmitRunParams{
		{RunID: runs[0].ID, Now: now}, {RunID: runs[1].ID, Now: now}, {RunID: runs[0].ID, Now: now},
		{RunID: missing, Now: now}, {RunID: runs[2].ID, Now: now},
	})
	wantErrs(t, "AdmitRuns", errs, err, nil, nil, store.ErrConflict, store.ErrNotFound, nil)
	state := func() map[string]store.RunState {
		out := map[string]store.RunState{}
		for _, r := range listRuns(t, st, store.ListRunsParams{Pipelines: []string{"p"}}) {
			out[r.DS] = r.State
		}
		return out
	}
	if got := state(); got["2025-07-01"] != store.RunRunning || got["2025-07-03"] != store.RunRunning || got["2025-07-04"] != store.RunQueued {
		t.Fatalf("after AdmitRuns: %v; want the first three running, the fourth queued", got)
	}

	as := []store.Attempt{claim(t, st, runs[0].Tasks[0].ID), claim(t, st, runs[1].Tasks[0].ID), claim(t, st, runs[2].Tasks[0].ID)}
	errs, err = st.StartAttempts(ctx, []store.StartAttemptParams{
		{AttemptID: as[0].ID, PID: 10, PIDStart: 100, Now: now}, {AttemptID: as[1].ID, JobID: "77", Now: now},
		{AttemptID: as[0].ID, PID: 11, Now: now}, {AttemptID: missing, PID: 12, Now: now},
	})
	wantErrs(t, "StartAttempts", errs, err, nil, nil, store.ErrConflict, store.ErrNotFound)
	if a := reload(t, st, as[0].TaskInstanceID).Attempts[0]; a.PID != 10 || a.PIDStart != 100 {
		t.Errorf("attempt 0 after StartAttempts: pid %d start %d; want 10 100", a.PID, a.PIDStart)
	}
	if a := reload(t, st, as[1].TaskInstanceID).Attempts[0]; a.JobID != "77" || a.PID != 0 {
		t.Errorf("attempt 1 after StartAttempts: job %q pid %d; want 77 0", a.JobID, a.PID)
	}
	errs, err = st.StartAttempts(ctx, []store.StartAttemptParams{{AttemptID: as[0].ID, PID: 13, Now: now}})
	wantErrs(t, "StartAttempts again", errs, err, store.ErrConflict)

	ended, retry := now.Add(time.Minute), now.Add(time.Hour)
	errs, err = st.FinishAttempts(ctx, []store.FinishAttemptParams{
		{AttemptID: as[0].ID, State: store.AttemptSuccess, ExitCode: intp(0), TaskState: store.TaskSuccess, Now: ended},
		{AttemptID: as[1].ID, State: store.AttemptFailed, ExitCode: intp(3), Signal: "", PeakRSS: 5, TaskState: store.TaskUpForRetry,
			CountFailure: true, NextTryAt: retry, Now: ended},
		{AttemptID: missing, State: store.AttemptSuccess, TaskState: store.TaskSuccess, Now: ended},
		{AttemptID: as[0].ID, State: store.AttemptFailed, TaskState: store.TaskFailed, Now: ended},
	})
	wantErrs(t, "FinishAttempts", errs, err, nil, nil, store.ErrNotFound, store.ErrConflict)
	if ti := reload(t, st, as[0].TaskInstanceID); ti.State != store.TaskSuccess || ti.Attempts[0].State != store.AttemptSuccess ||
		!ti.UpdatedAt.Equal(ended) || !ti.Attempts[0].EndedAt.Equal(ended) {
		t.Errorf("task 0 after FinishAttempts: %+v", ti)
	}
	if ti := reload(t, st, as[1].TaskInstanceID); ti.State != store.TaskUpForRetry || ti.Failures != 1 || !ti.NextTryAt.Equal(retry) ||
		ti.Attempts[0].State != store.AttemptFailed || ti.Attempts[0].ExitCode == nil || *ti.Attempts[0].ExitCode != 3 || ti.Attempts[0].PeakRSS != 5 {
		t.Errorf("task 1 after FinishAttempts: %+v", ti)
	}
	if ti := reload(t, st, as[2].TaskInstanceID); ti.State != store.TaskRunning || ti.Attempts[0].State != store.AttemptRunning {
		t.Errorf("task 2 after FinishAttempts: %+v; want untouched", ti)
	}

	errs, err = st.FinishRuns(ctx, []store.FinishRunParams{
		{RunID: runs[0].ID, State: store.RunSuccess, Now: ended}, {RunID: runs[1].ID, State: store.RunSuccess, Now: ended},
		{RunID: runs[2].ID, State: store.RunFailed, Now: ended}, {RunID: missing, State: store.RunFailed, Now: ended},
		{RunID: runs[0].ID, State: store.RunFailed, Now: ended},
	})
	wantErrs(t, "FinishRuns", errs, err, nil, store.ErrConflict, store.ErrConflict, store.ErrNotFound, store.ErrConflict)
	if got := state(); got["2025-07-01"] != store.RunSuccess || got["2025-07-02"] != store.RunRunning || got["2025-07-03"] != store.RunRunning {
		t.Errorf("after FinishRuns: %v; want the first success, the next two running", got)
	}
	if _, err := st.FinishRuns(ctx, []store.FinishRunParams{{RunID: runs[1].ID, State: store.RunRunning, Now: ended}}); err == nil {
		t.Error("FinishRuns to running: no error")
	}

	err = st.InTx(ctx, func(tx store.Store) error {
		errs, err := tx.FinishAttempts(ctx, []store.FinishAttemptParams{
			{AttemptID: as[0].ID, State: store.AttemptFailed, TaskState: store.TaskFailed, Now: ended},
			{AttemptID: as[2].ID, State: store.AttemptSuccess, ExitCode: intp(0), TaskState: store.TaskSuccess, Now: ended},
		})
		wantErrs(t, "FinishAttempts in InTx", errs, err, store.ErrConflict, nil)
		errs, err = tx.FinishRuns(ctx, []store.FinishRunParams{{RunID: runs[2].ID, State: store.RunSuccess, Now: ended}})
		wantErrs(t, "FinishRuns in InTx", errs, err, nil)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := state(); got["2025-07-03"] != store.RunSuccess {
		t.Errorf("after InTx: %v; want the third run success", got)
	}
	if ti := reload(t, st, as[0].TaskInstanceID); ti.State != store.TaskSuccess || ti.Attempts[0].State != store.AttemptSuccess {
		t.Errorf("task 0 after the refused item: %+v; want success as before", ti)
	}
}
