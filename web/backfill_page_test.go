package web_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/rewind-dev/rewind/backfill"
	"github.com/rewind-dev/rewind/scheduler"
	"github.com/rewind-dev/rewind/store"
	"github.com/rewind-dev/rewind/web"
)

// mixedHCL: a daily pipeline from 2025-07-01 whose task fails on
// 2025-07-05 and 2025-07-08.
const mixedHCL = `
pipeline "mixed" {
  schedule   = "@daily"
  start_date = "2025-07-01"
  task "compute" {
    command = "case $REWIND_DS in 2025-07-05|2025-07-08) echo no data >&2; exit 1;; esac; echo ok"
  }
}
`

// mixedBackfill: the nightly ran 2025-07-01 .. 07-03; a backfill of
// 2025-06-29 .. 07-10 with reprocess none skips those three, runs the
// seven others, of which two fail; the two days before start_date are
// outside the schedule.
func mixedBackfill(t *testing.T) (*env, string, time.Time, time.Time) {
	e := newEnv(t, mixedHCL)
	e.run(scheduler.Options{Now: utc("2025-07-04T00:00:00Z")})
	now := utc("2025-07-11T00:00:00Z")
	plan := e.plan(backfill.PlanParams{Pipeline: "mixed", Start: utc("2025-06-29T00:00:00Z"), End: utc("2025-07-10T00:00:00Z"), Reprocess: "none", Now: now})
	began := time.Now().Truncate(time.Second)
	res, err := e.apply(backfill.ApplyOptions{Plan: plan, Now: now})
	if !errors.Is(err, backfill.ErrUnfinished) || res.State != store.BackfillFailed {
		t.Fatalf("apply: %v, %s; want it failed by two dates", err, res.State)
	}
	return e, res.ID, began, time.Now()
}

// The backfill page and its JSON: a progress bar with the dates counted
// and their share, the ledger with why a date did not run, the days
// outside the schedule, and each phase with the times apply recorded.
func TestBackfillProgressAndPhaseTimes(t *testing.T) {
	e, id, began, ended := mixedBackfill(t)
	srv := e.server("")
	_, body := get(t, srv, "/api/backfills/"+id)
	var b web.BackfillJSON
	if err := json.Unmarshal([]byte(body), &b); err != nil {
		t.Fatal(err)
	}
	if len(b.Bars) != 1 {
		t.Fatalf("bars %+v", b.Bars)
	}
	bar := b.Bars[0]
	got := fmt.Sprintf("%s %s: %d targeted, %d succeeded, %d failed, %d in progress, %d pending, %d skipped; %v", bar.Pipeline, bar.Role,
		bar.Targeted, bar.Succeeded, bar.Failed, bar.InProgress, bar.Pending, bar.Skipped, bar.Percent)
	want := "mixed backfill: 10 targeted, 5 succeeded, 2 failed, 0 in progress, 0 pending, 3 skipped; " +
		"map[elsewhere:0 failed:20 in_progress:0 pending:0 skipped:30 succeeded:50]"
	if got != want {
		t.Errorf("bar\n %s\nwant\n %s", got, want)
	}
	why := map[string]string{}
	for _, d := range b.Dates {
		why[d.DS] = d.State + ": " + d.Why
	}
	for ds, w := range map[string]string{
		"2025-07-01": "skip: already succeeded (reprocess none)",
		"2025-07-04": "success: ",
		"2025-07-05": "failed: ",
	} {
		if why[ds] != w {
			t.Errorf("%s: %q; want %q", ds, why[ds], w)
		}
	}
	if len(b.Outside) != 1 || b.Outside[0] != (web.OutsideJSON{From: "2025-06-29", To: "2025-06-30", Days: 2, Reason: "before start_date 2025-07-01"}) {
		t.Errorf("outside %+v", b.Outside)
	}

	// Every phase apply reached has the times it recorded, in order,
	// within the apply; those it did not reach have none.
	prev := began
	for _, p := range b.Phases {
		if p.State == "pending" {
			if p.Started != "" || p.Ended != "" {
				t.Errorf("%s pending with times %+v", p.Name, p)
			}
			continue
		}
		s, err1 := time.Parse(time.RFC3339, p.Started)
		f, err2 := time.Parse(time.RFC3339, p.Ended)
		if err1 != nil || err2 != nil || s.Before(prev) || f.Before(s) || f.After(ended) {
			t.Errorf("%s (%s): started %q ended %q; want in order within %s .. %s", p.Name, p.State, p.Started, p.Ended, began.Format(time.RFC3339), ended.Format(time.RFC3339))
		}
		prev = s
	}
	states := ""
	for _, p := range b.Phases {
		states += p.Name + "=" + p.State + " "
	}
	if !strings.HasPrefix(states, "pause=done verify=done reset_watermarks=done run=done validate=failed cutover=pending") {
		t.Errorf("phases %s", states)
	}

	// The page: the bar's legend says each count and share; the heatmap
	// has a square per date and a hollow one per day outside the
	// schedule; the ledger is there, folded.
	_, page := get(t, srv, "/backfills/"+id)
	for _, want := range []string{
		`<span class="targeted">10 targeted</span>`,
		`5 succeeded (50.0%)</span>`, `2 failed (20.0%)</span>`, `0 in progress (0.0%)</span>`, `3 skipped (30.0%)</span>`,
		`<details id="ledger">`, "already succeeded (reprocess none)", "2025-06-29 .. 2025-06-30 (2 days): before start_date 2025-07-01",
	} {
		if !strings.Contains(page, want) {
			t.Errorf("the page lacks %q", want)
		}
	}
	if n := strings.Count(page, `<rect class="hd s-`); n != 10 {
		t.Errorf("%d date squares; want 10", n)
	}
	if n := strings.Count(page, `<rect class="hd outside"`); n != 2 {
		t.Errorf("%d outside squares; want 2", n)
	}
	// `backfill status --json` carries the same phase times.
	out, errOut, code := cli(t, e.dir, e.state, "backfill", "status", id, "--json")
	var st web.BackfillStatusJSON
	if code != 0 || json.Unmarshal([]byte(out), &st) != nil {
		t.Fatalf("backfill status: %d %s", code, errOut)
	}
	for i, p := range st.Phases {
		if p != b.Phases[i] {
			t.Errorf("status phase %+v; the page's %+v", p, b.Phases[i])
		}
	}
}

// A running backfill whose queued work waits in a pool where scheduled
// work runs says so.
func TestBackfillWaitsBehindScheduled(t *testing.T) {
	e := newEnv(t, `
pool "etl" {
  slots                  = 2
  reserved_for_scheduled = 1
}
pipeline "p" {
  schedule     = "@daily"
  start_date   = "2025-07-01"
  default_pool = "etl"
  task "t" { command = "true" }
}
`)
	ctx := context.Background()
	now := time.Now()
	day := func(d int) store.RunSpec {
		at := time.Date(2025, 7, d, 0, 0, 0, 0, time.UTC)
		return store.RunSpec{LogicalDate: at, DS: at.Format(time.DateOnly), DataIntervalStart: at, DataIntervalEnd: at.AddDate(0, 0, 1)}
	}
	if _, err := e.st.UpsertPipeline(ctx, store.UpsertPipelineParams{Name: "p", Hash: "h", Now: now}); err != nil {
		t.Fatal(err)
	}
	plan, _ := json.Marshal(backfill.Plan{Pipeline: "p", Start: "2025-07-01", End: "2025-07-02", Reprocess: "none", Selected: 2,
		Dates: []backfill.PlanDate{{LogicalDate: "2025-07-01T00:00:00Z", DS: "2025-07-01", State: "none", Action: "create", Pool: "etl"},
			{LogicalDate: "2025-07-02T00:00:00Z", DS: "2025-07-02", State: "none", Action: "create", Pool: "etl"}}})
	if err := e.st.CreateBackfill(ctx, store.Backfill{ID: "p_bf", Pipeline: "p", From: day(1).LogicalDate, To: day(2).LogicalDate, Reprocess: "none",
		State: store.BackfillRunning, Phase: backfill.PhaseRun, Plan: string(plan), CreatedAt: now}); err != nil {
		t.Fatal(err)
	}
	tasks := []store.TaskSpec{{Name: "t", Pool: "etl"}}
	if _, err := e.st.MaterializeRuns(ctx, store.MaterializeRunsParams{Pipeline: "p", Kind: store.KindBackfill, BackfillID: "p_bf", Runs: []store.RunSpec{day(1), day(2)}, Tasks: tasks, Now: now}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.st.MaterializeRuns(ctx, store.MaterializeRunsParams{Pipeline: "p", Kind: store.KindScheduled, Runs: []store.RunSpec{day(3)}, Tasks: tasks, Now: now}); err != nil {
		t.Fatal(err)
	}
	runs, err := e.st.ListRuns(ctx, store.ListRunsParams{Pipelines: []string{"p"}, WithTasks: true})
	if err != nil {
		t.Fatal(err)
	}
	var queued []int64
	for _, r := range runs[:2] {
		queued = append(queued, r.Tasks[0].ID)
	}
	if _, err := e.st.SetTaskStates(ctx, store.SetTaskStatesParams{IDs: queued, From: []store.TaskState{store.TaskScheduled}, To: store.TaskQueued, Now: now}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.st.ClaimTask(ctx, store.ClaimTaskParams{TaskInstanceID: runs[2].Tasks[0].ID, Pool: "etl", Host: "h", Now: now}); err != nil {
		t.Fatal(err)
	}
	srv := e.server("")
	_, body := get(t, srv, "/api/backfills/p_bf")
	var b web.BackfillJSON
	if err := json.Unmarshal([]byte(body), &b); err != nil {
		t.Fatal(err)
	}
	if len(b.Behind) != 1 || b.Behind[0] != (web.BehindJSON{Pool: "etl", Queued: 2, Running: 0, Scheduled: 1, Slots: 2, Reserved: 1}) {
		t.Errorf("behind %+v", b.Behind)
	}
	_, page := get(t, srv, "/backfills/p_bf")
	if !strings.Contains(page, "Backfill runs wait behind scheduled ones.") || !strings.Contains(page, "1 of its 2 slots are reserved for scheduled runs") {
		t.Error("the page does not say that the backfill waits behind scheduled runs")
	}
	// Once the scheduled run's attempt is gone, nothing is said.
	if _, err := e.st.SetTaskStates(ctx, store.SetTaskStatesParams{IDs: queued, From: []store.TaskState{store.TaskQueued}, To: store.TaskScheduled, Now: now}); err != nil {
		t.Fatal(err)
	}
	_, page = get(t, srv, "/backfills/p_bf")
	if strings.Contains(page, "wait behind scheduled") {
		t.Error("the notice stays when no backfill work is queued")
	}
}
