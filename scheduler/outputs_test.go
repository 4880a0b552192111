package scheduler_test

import (
	"context"
	"database/sql"
	"errors"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rewind-dev/rewind/backfill"
	"github.com/rewind-dev/rewind/lake"
	"github.com/rewind-dev/rewind/lease"
	"github.com/rewind-dev/rewind/scheduler"
	"github.com/rewind-dev/rewind/store"
)

// The revenue pipeline writes one CSV per day; the amount depends on a
// factor file, so a "fix" can change it between runs.
const revenueHCL = `
catalog "local" {
  uri       = ".rewind/catalog.db"
  warehouse = ".rewind/warehouse"
}
pipeline "revenue" {
  schedule        = "@daily"
  start_date      = "2025-07-01"
  max_active_runs = 4
  task "compute" {
    command = "awk -v ds=$REWIND_DS -v f=$(cat factor) 'BEGIN { print \"ds,currency,amount_usd\"; print ds \",EUR,\" 100*f; print ds \",USD,\" 50*f }' > $REWIND_RUN_DIR/revenue.csv"
  }
  output "revenue" {
    table     = "analytics.fct_daily_revenue"
    from      = "${run.dir}/revenue.csv"
    columns   = { ds = "date", currency = "string", amount_usd = "double" }
    partition = "ds"
    validate {
      max_change = { amount_usd = 0.05 }
    }
  }
}
`

func (e *env) stats(ref string) map[string]lake.PartitionStat {
	e.t.Helper()
	lakes := scheduler.NewLakes(e.ws)
	defer lakes.Close()
	lk, err := lakes.Get(context.Background(), "local")
	if err != nil {
		e.t.Fatal(err)
	}
	st, err := lk.PartitionStats(context.Background(), "analytics.fct_daily_revenue", ref, []string{"amount_usd"})
	if err != nil {
		e.t.Fatal(err)
	}
	return st
}

func (e *env) setFactor(f string) {
	e.t.Helper()
	if err := os.WriteFile(filepath.Join(e.dir, "factor"), []byte(f), 0o644); err != nil {
		e.t.Fatal(err)
	}
}

// Runs commit their files to main, one partition per date; running a date
// again replaces its rows. A backfill writes a branch, validates it against
// main, cuts over atomically with a tag, and can be rolled back.
func TestOutputsWriteAuditPublish(t *testing.T) {
	e := newEnv(t, revenueHCL)
	e.setFactor("1")
	now := utc("2025-07-04T00:00:00Z")
	if sum := e.run(scheduler.Options{Now: now}); sum.Failed() || len(sum.Finished) != 3 {
		t.Fatalf("summary %+v", sum)
	}
	main := e.stats("main")
	if len(main) != 3 || main["2025-07-02"].Rows != 2 || main["2025-07-02"].Sums["amount_usd"] != 150 {
		t.Fatalf("main after three runs: %+v", main)
	}
	// Running a date again leaves one copy of its rows.
	ctx := context.Background()
	if _, err := e.st.ClearTasks(ctx, store.ClearTasksParams{Pipeline: "revenue", From: utc("2025-07-02T00:00:00Z"), To: utc("2025-07-02T00:00:00Z")}); err != nil {
		t.Fatal(err)
	}
	e.run(scheduler.Options{Now: now})
	if got := e.stats("main")["2025-07-02"]; got.Rows != 2 {
		t.Fatalf("after a re-run: %d rows; want 2", got.Rows)
	}

	// A fix changes every amount by 4%: within max_change.
	e.setFactor("1.04")
	plan := e.plan(backfill.PlanParams{Pipeline: "revenue", Start: utc("2025-07-01T00:00:00Z"), End: utc("2025-07-03T00:00:00Z"), Reprocess: "completed", Now: now})
	var mainDuringValidate map[string]lake.PartitionStat
	res, err := e.apply(backfill.ApplyOptions{Plan: plan, Now: now, OnPhase: func(id, phase string) {
		if phase == backfill.PhaseValidate {
			mainDuringValidate = e.stats("main")
		}
	}})
	if err != nil || res.State != store.BackfillSuccess {
		t.Fatalf("apply: %v", err)
	}
	if mainDuringValidate["2025-07-01"].Sums["amount_usd"] != 150 {
		t.Errorf("main changed before the cutover: %+v", mainDuringValidate)
	}
	after := e.stats("main")
	for _, ds := range []string{"2025-07-01", "2025-07-02", "2025-07-03"} {
		if got := after[ds].Sums["amount_usd"]; math.Abs(got-156) > 1e-9 || after[ds].Rows != 2 {
			t.Errorf("%s after cutover: %d rows, sum %g; want 2 rows, 156", ds, after[ds].Rows, got)
		}
	}
	if len(res.Corrections) != 3 || res.Corrections[0].Old != 150 || math.Abs(res.Corrections[0].New-156) > 1e-9 {
		t.Errorf("corrections %+v", res.Corrections)
	}
	if tag := e.stats(backfill.TagName(res.ID)); tag["2025-07-01"].Sums["amount_usd"] != 150 {
		t.Errorf("the tag does not hold the old main: %+v", tag)
	}
	report, _ := os.ReadFile(res.ReportPath)
	if !strings.Contains(string(report), "| revenue | 2025-07-01 | 2 -> 2 | amount_usd | 150.00 | 156.00 | 4.00% | 0.05 |") {
		t.Errorf("report lacks the corrections:\n%s", report)
	}

	// Rollback moves main back to the tag.
	if err := e.rollback(res.ID, now); err != nil {
		t.Fatal(err)
	}
	if got := e.stats("main")["2025-07-03"].Sums["amount_usd"]; got != 150 {
		t.Errorf("after rollback: %g; want 150", got)
	}
}

// A failing validation rule blocks the cutover: main is unchanged, the
// branch kept, and apply fails.
func TestOutputsValidationBlocksCutover(t *testing.T) {
	e := newEnv(t, revenueHCL)
	e.setFactor("1")
	now := utc("2025-07-03T00:00:00Z")
	e.run(scheduler.Options{Now: now})
	e.setFactor("2") // a 100% change: over max_change = 0.05
	plan := e.plan(backfill.PlanParams{Pipeline: "revenue", Start: utc("2025-07-01T00:00:00Z"), End: utc("2025-07-02T00:00:00Z"), Reprocess: "completed", Now: now})
	res, err := e.apply(backfill.ApplyOptions{Plan: plan, Now: now})
	if !errors.Is(err, backfill.ErrValidation) || res.State != store.BackfillFailed {
		t.Fatalf("apply: %v (%s); want a validation failure", err, res.State)
	}
	if got := e.stats("main")["2025-07-01"].Sums["amount_usd"]; got != 150 {
		t.Errorf("main changed: %g", got)
	}
	if got := e.stats(scheduler.BranchName(res.ID))["2025-07-01"].Sums["amount_usd"]; got != 300 {
		t.Errorf("the branch holds %g; want 300", got)
	}
}

// A commit to main between the backfill's branch write and its cutover (the
// nightly run of a date outside the window) does not stop the cutover: the
// window holds the backfill's data, the nightly date keeps its own, and a
// rollback restores the window and keeps the nightly date.
func TestCutoverKeepsConcurrentCommit(t *testing.T) {
	e := newEnv(t, revenueHCL)
	e.setFactor("1")
	now := utc("2025-07-03T00:00:00Z")
	e.run(scheduler.Options{Now: now})
	e.setFactor("1.01")
	plan := e.plan(backfill.PlanParams{Pipeline: "revenue", Start: utc("2025-07-01T00:00:00Z"), End: utc("2025-07-01T00:00:00Z"), Reprocess: "completed", Now: now})
	res, err := e.apply(backfill.ApplyOptions{Plan: plan, Now: now, OnPhase: func(id, phase string) {
		if phase != backfill.PhaseCutover {
			return
		}
		// The nightly run of 2025-07-03 commits to main right now.
		dir := filepath.Join(e.dir, "concurrent")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		file := filepath.Join(dir, "revenue.csv")
		if err := os.WriteFile(file, []byte("ds,currency,amount_usd\n2025-07-03,EUR,7\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		lakes := scheduler.NewLakes(e.ws)
		defer lakes.Close()
		lk, err := lakes.Get(context.Background(), "local")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := lk.ReplacePartition(context.Background(), scheduler.LakeOutput(e.ws.Pipeline("revenue").Output("revenue")), "main", "2025-07-03", []string{file}, nil); err != nil {
			t.Fatal(err)
		}
	}})
	if err != nil || res.State != store.BackfillSuccess {
		t.Fatalf("apply: %v (%s); want the cutover to succeed over the nightly commit", err, res.State)
	}
	main := e.stats("main")
	if main["2025-07-03"].Sums["amount_usd"] != 7 || math.Abs(main["2025-07-01"].Sums["amount_usd"]-151.5) > 1e-9 {
		t.Errorf("main %+v; want the nightly commit kept (7) and the backfill's window (151.5)", main)
	}
	if err := e.rollback(res.ID, now); err != nil {
		t.Fatal(err)
	}
	main = e.stats("main")
	if main["2025-07-03"].Sums["amount_usd"] != 7 || main["2025-07-01"].Sums["amount_usd"] != 150 {
		t.Errorf("after rollback main %+v; want the window restored (150) and the nightly date kept (7)", main)
	}
}

// A validate rule over old.* / new.* blocks the cutover when false.
func TestOutputsRuleBlocksCutover(t *testing.T) {
	e := newEnv(t, strings.Replace(revenueHCL, "max_change = { amount_usd = 0.05 }",
		"max_change = { amount_usd = 0.05 }\n      rules      = [new.rows == old.rows, new.amount_usd <= old.amount_usd]", 1))
	e.setFactor("1")
	now := utc("2025-07-03T00:00:00Z")
	e.run(scheduler.Options{Now: now})
	e.setFactor("1.01") // within max_change, but the second rule forbids any increase
	plan := e.plan(backfill.PlanParams{Pipeline: "revenue", Start: utc("2025-07-01T00:00:00Z"), End: utc("2025-07-01T00:00:00Z"), Reprocess: "completed", Now: now})
	res, err := e.apply(backfill.ApplyOptions{Plan: plan, Now: now})
	if !errors.Is(err, backfill.ErrValidation) || !strings.Contains(err.Error(), "rule new.amount_usd <= old.amount_usd is false") || strings.Contains(err.Error(), "new.rows == old.rows") {
		t.Fatalf("apply: %v; want only the amount rule to fail", err)
	}
	if got := e.stats("main")["2025-07-01"].Sums["amount_usd"]; got != 150 {
		t.Errorf("main changed: %g", got)
	}
	// --resume --force cuts over anyway.
	res, err = e.apply(backfill.ApplyOptions{ResumeID: res.ID, Force: true, Now: now})
	if err != nil || res.State != store.BackfillSuccess {
		t.Fatalf("resume --force: %v (%s)", err, res.State)
	}
	if got := e.stats("main")["2025-07-01"].Sums["amount_usd"]; math.Abs(got-151.5) > 1e-9 {
		t.Errorf("main after a forced cutover: %g; want 151.5", got)
	}
}

// The catalog is locked by another writer for longer than its busy
// timeout (30 s) when a run commits: the commit fails with "database is
// locked", is tried again with backoff, and lands once the lock is gone.
// The run succeeds, and its date has one snapshot with its commit key.
func TestOutputCommitRetriesATransientFailure(t *testing.T) {
	e := newEnv(t, revenueHCL)
	e.setFactor("1")
	if sum := e.run(scheduler.Options{Now: utc("2025-07-02T00:00:00Z")}); sum.Failed() {
		t.Fatalf("first run: %+v", sum)
	}
	released := e.lockCatalog(32 * time.Second)
	sum := e.run(scheduler.Options{Now: utc("2025-07-03T00:00:00Z")})
	<-released
	if sum.Failed() || len(sum.Finished) != 1 || sum.Finished[0].State != store.RunSuccess {
		t.Fatalf("the run whose commit met a locked catalog: %+v", sum)
	}
	if got := e.stats("main")["2025-07-02"]; got.Rows != 2 {
		t.Fatalf("2025-07-02 on main: %+v", got)
	}
	if keys := e.commitKeys(); len(keys) != 2 {
		t.Errorf("snapshots by commit key %v, want one per run", keys)
	}
}

// lockCatalog holds the local catalog's SQLite file locked (BEGIN
// EXCLUSIVE: writers wait, past its 30 s busy timeout they fail) for d;
// the channel is closed once it is let go.
func (e *env) lockCatalog(d time.Duration) <-chan struct{} {
	e.t.Helper()
	db, err := sql.Open("sqlite3", filepath.Join(e.dir, ".rewind", "catalog.db"))
	if err != nil {
		e.t.Fatal(err)
	}
	conn, err := db.Conn(context.Background())
	if err != nil {
		e.t.Fatal(err)
	}
	if _, err := conn.ExecContext(context.Background(), "BEGIN EXCLUSIVE"); err != nil {
		e.t.Fatal(err)
	}
	released := make(chan struct{})
	go func() {
		defer close(released)
		time.Sleep(d)
		_, _ = conn.ExecContext(context.Background(), "COMMIT")
		conn.Close()
		db.Close()
	}()
	return released
}

// commitKeys counts the revenue table's snapshots by commit key.
func (e *env) commitKeys() map[string]int {
	e.t.Helper()
	lakes := scheduler.NewLakes(e.ws)
	defer lakes.Close()
	lk, err := lakes.Get(context.Background(), "local")
	if err != nil {
		e.t.Fatal(err)
	}
	snaps, err := lk.Snapshots(context.Background(), "analytics.fct_daily_revenue")
	if err != nil {
		e.t.Fatal(err)
	}
	keys := map[string]int{}
	for _, s := range snaps {
		keys[s.Summary[scheduler.CommitKeyProperty]]++
	}
	return keys
}

// An execution cut off from its state (its lease renewals fail) while its
// output commit waits to be tried again steps down at half the TTL and
// commits nothing more: the rewind that takes the lease over once it has
// expired owns the outbox entry now. Once the catalog is free, the table
// has no snapshot of that run; the next execution commits it, once.
func TestOutputCommitStopsWithTheLease(t *testing.T) {
	e := newEnv(t, revenueHCL)
	e.setFactor("1")
	if sum := e.run(scheduler.Options{Now: utc("2025-07-02T00:00:00Z")}); sum.Failed() {
		t.Fatalf("first run: %+v", sum)
	}
	released := e.lockCatalog(34 * time.Second)
	log := &lockedBuffer{}
	holder := lease.Self()
	holder.TTL = 3 * time.Second
	cut := &atomic.Bool{}
	done := make(chan error, 1)
	go func() {
		_, err := scheduler.Run(context.Background(), scheduler.Options{
			Store: &cutLease{Store: e.st, cut: cut}, Workspace: e.ws, Home: e.home, Now: utc("2025-07-03T00:00:00Z"),
			Holder: &holder, Log: slog.New(slog.NewTextHandler(log, nil)),
		})
		done <- err
	}()
	deadline := time.Now().Add(2 * time.Minute)
	for !strings.Contains(log.String(), "trying again") {
		if time.Now().After(deadline) {
			t.Fatalf("the commit was never tried again:\n%s", log.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	cut.Store(true)
	// Another rewind takes the lease once it has expired.
	for {
		_, ok, err := e.st.AcquireLease(context.Background(), store.AcquireLeaseParams{Name: lease.Execution, Holder: "next", Host: "elsewhere", PID: 1, TTL: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "lease") {
			t.Fatalf("the execution that lost its lease: %v", err)
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("the execution that lost its lease did not stop")
	}
	<-released
	time.Sleep(2 * time.Second) // a commit still under way would land now
	if keys := e.commitKeys(); len(keys) != 1 {
		t.Fatalf("snapshots by commit key %v: the fenced-out execution committed", keys)
	}
	if err := e.st.ReleaseLease(context.Background(), store.ReleaseLeaseParams{Name: lease.Execution, Holder: "next"}); err != nil {
		t.Fatal(err)
	}
	if sum := e.run(scheduler.Options{Now: utc("2025-07-03T00:00:00Z")}); sum.Failed() {
		t.Fatalf("the next execution: %+v", sum)
	}
	if keys := e.commitKeys(); len(keys) != 2 {
		t.Errorf("snapshots by commit key %v, want one per run", keys)
	}
	if got := e.stats("main")["2025-07-02"]; got.Rows != 2 {
		t.Fatalf("2025-07-02 on main: %+v", got)
	}
}

// cutLease is a store whose lease renewals and heartbeats fail once cut is
// set: a rewind cut off from its state, while others reach it.
type cutLease struct {
	store.Store
	cut *atomic.Bool
}

var errCut = errors.New("test: cut off from the state")

func (c *cutLease) RenewLease(ctx context.Context, p store.RenewLeaseParams) error {
	if c.cut.Load() {
		return errCut
	}
	return c.Store.RenewLease(ctx, p)
}

func (c *cutLease) Heartbeat(ctx context.Context, p store.HeartbeatParams) error {
	if c.cut.Load() {
		return errCut
	}
	return c.Store.Heartbeat(ctx, p)
}

// A run with two outputs whose second one cannot be committed (its files
// are missing: no retry can help) fails at once, and says which output
// failed and which one landed before it.
func TestTwoOutputsSayWhichLanded(t *testing.T) {
	e := newEnv(t, `
pipeline "revenue" {
  schedule   = "@daily"
  start_date = "2025-07-01"
  task "compute" {
    command = "printf 'ds,amount_usd\n%s,1\n' $REWIND_DS > $REWIND_RUN_DIR/a.csv"
  }
  output "first" {
    table     = "analytics.first"
    from      = "${run.dir}/a.csv"
    columns   = { ds = "date", amount_usd = "double" }
    partition = "ds"
  }
  output "second" {
    table     = "analytics.second"
    from      = "${run.dir}/missing-*.csv"
    columns   = { ds = "date", amount_usd = "double" }
    partition = "ds"
  }
}
`)
	sum := e.run(scheduler.Options{Now: utc("2025-07-02T00:00:00Z")})
	if len(sum.Finished) != 1 || sum.Finished[0].State != store.RunFailed {
		t.Fatalf("summary %+v", sum)
	}
	msg := strings.Join(sum.Finished[0].FailedTasks, "; ")
	if !strings.Contains(msg, "output second") || !strings.Contains(msg, "committed before it: first") {
		t.Fatalf("the failure says %q; want it to name the output that failed and the one that landed", msg)
	}
}
