package store_test

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rewind-dev/rewind/store"
	"github.com/rewind-dev/rewind/store/pgtest"
)

// renameTables are the tables a rename writes, in no particular order.
var renameTables = []string{"backfills", "task_instances", "attempts", "pipelines", "runs", "watermarks", "probe_results",
	"notifications", "deadline_checks", "epoch"}

// A rename that fails at any of its statements (triggers make the
// database refuse each table's writes in turn: the state failing after N
// statements) leaves everything under the old name, row for row; once
// nothing refuses, everything is under the new name, row for row. On both
// backends.
func TestRenamePipelineAllOrNothing(t *testing.T) {
	for _, b := range []struct {
		name, driver string
		dsn          func(t *testing.T) (state, raw string)
		// trigger makes the database refuse every write to table; drop
		// takes that back.
		trigger, drop func(table string) []string
	}{
		{"sqlite", "sqlite3", func(t *testing.T) (string, string) {
			path := filepath.Join(t.TempDir(), "state.db")
			return "sqlite:" + path, path
		}, func(table string) []string {
			var qs []string
			for _, ev := range []string{"INSERT", "UPDATE", "DELETE"} {
				qs = append(qs, "CREATE TRIGGER fault_"+ev+" BEFORE "+ev+" ON "+table+" BEGIN SELECT RAISE(ABORT, 'injected fault'); END")
			}
			return qs
		}, func(table string) []string {
			return []string{"DROP TRIGGER fault_INSERT", "DROP TRIGGER fault_UPDATE", "DROP TRIGGER fault_DELETE"}
		}},
		{"postgres", "pgx", func(t *testing.T) (string, string) {
			dsn := pgtest.DSN(t)
			return dsn, dsn
		}, func(table string) []string {
			return []string{
				"CREATE OR REPLACE FUNCTION fault() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'injected fault'; END $$",
				"CREATE TRIGGER fault BEFORE INSERT OR UPDATE OR DELETE ON " + table + " FOR EACH ROW EXECUTE FUNCTION fault()",
			}
		}, func(table string) []string {
			return []string{"DROP TRIGGER fault ON " + table}
		}},
	} {
		t.Run(b.name, func(t *testing.T) {
			ctx := context.Background()
			dsn, rawDSN := b.dsn(t)
			st := openState(t, dsn)
			defer st.Close()
			raw := rawState(t, b.driver, rawDSN)
			renameHistory(t, st, "sales_v1")
			before := dumpState(t, raw)
			p := store.RenamePipelineParams{From: "sales_v1", To: "sales_v2",
				LogsFrom: "/ws/.rewind/logs/sales_v1/", LogsTo: "/ws/.rewind/logs/sales_v2/",
				Plans: []store.PlanRewrite{{ID: "bf-1", Old: `{"pipeline":"sales_v1"}`, New: `{"pipeline":"sales_v2"}`}}, Now: time.Now()}
			for _, table := range renameTables {
				for _, q := range b.trigger(table) {
					if _, err := raw.Exec(q); err != nil {
						t.Fatalf("%s: %v", q, err)
					}
				}
				_, err := st.RenamePipeline(ctx, p)
				if err == nil || !strings.Contains(err.Error(), "injected fault") {
					t.Fatalf("rename with %s refusing its update = %v, want the injected fault", table, err)
				}
				if after := dumpState(t, raw); after != before {
					t.Fatalf("a rename that failed at %s changed the state:\n%s\nwas\n%s", table, after, before)
				}
				for _, q := range b.drop(table) {
					if _, err := raw.Exec(q); err != nil {
						t.Fatalf("%s: %v", q, err)
					}
				}
			}
			if _, err := st.RenamePipeline(ctx, p); err != nil {
				t.Fatalf("rename: %v", err)
			}
			want := strings.ReplaceAll(withoutEpoch(before), "sales_v1", "sales_v2")
			if got := withoutEpoch(dumpState(t, raw)); got != want {
				t.Fatalf("after the rename:\n%s\nwant every row of sales_v1 under sales_v2:\n%s", got, want)
			}
			if strings.Contains(dumpState(t, raw), "sales_v1") {
				t.Fatal("sales_v1 is left somewhere in the state")
			}
		})
	}
}

// renameHistory gives pipeline name a history in every table a rename
// writes: runs with task instances and attempts (one with an outbox row),
// a watermark, probe results, a pause flag, a notification, a deadline
// check, a backfill and a backfill of another pipeline that paused it.
func renameHistory(t *testing.T, st store.Store, name string) {
	t.Helper()
	ctx := context.Background()
	now := time.Date(2026, 1, 15, 12, 0, 0, 0, time.UTC)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	_, err := st.UpsertPipeline(ctx, store.UpsertPipelineParams{Name: name, Hash: "h", Now: now})
	must(err)
	var specs []store.RunSpec
	for d := range 3 {
		day := time.Date(2025, 7, 1+d, 0, 0, 0, 0, time.UTC)
		specs = append(specs, store.RunSpec{LogicalDate: day, DS: day.Format("2006-01-02"), DataIntervalStart: day, DataIntervalEnd: day.AddDate(0, 0, 1)})
	}
	_, err = st.MaterializeRuns(ctx, store.MaterializeRunsParams{Pipeline: name, Kind: store.KindScheduled, Runs: specs,
		Tasks: []store.TaskSpec{{Name: "extract", Pool: "default"}, {Name: "load", Pool: "default"}}, Through: specs[2].LogicalDate, Now: now})
	must(err)
	runs, err := st.ListRuns(ctx, store.ListRunsParams{Pipelines: []string{name}, WithTasks: true})
	must(err)
	var items []store.EnqueueItem
	for _, ti := range runs[0].Tasks {
		items = append(items, store.EnqueueItem{TaskInstanceID: ti.ID, LogPath: "/ws/.rewind/logs/" + name + "/" + ti.Task + "/2025-07-01.{try}.log"})
	}
	_, err = st.EnqueueTasks(ctx, store.EnqueueTasksParams{Items: items, Now: now})
	must(err)
	claimed, err := st.ClaimReady(ctx, store.ClaimReadyParams{Pools: []store.PoolCapacity{{Name: "default", Slots: 4}}, Owner: "o", Host: "h", Limit: 4, Now: now})
	must(err)
	for _, c := range claimed {
		zero := 0
		must(st.FinishAttempt(ctx, store.FinishAttemptParams{AttemptID: c.ID, State: store.AttemptSuccess, ExitCode: &zero, TaskState: store.TaskSuccess, Now: now}))
	}
	_, err = st.RequestCommit(ctx, store.RequestCommitParams{RunID: runs[0].ID, Now: now})
	must(err)
	must(st.SetWatermark(ctx, store.SetWatermarkParams{Pipeline: name, LogicalDate: specs[0].LogicalDate, Now: now}))
	must(st.RecordProbes(ctx, []store.ProbeResult{{Pipeline: name, LogicalDate: specs[1].LogicalDate, Value: 3, Median: 1, Pool: "large", MeasuredAt: now}}))
	must(st.SetPaused(ctx, store.SetPausedParams{Name: name, Paused: true, Now: now}))
	must(st.CreateBackfill(ctx, store.Backfill{ID: "bf-1", Pipeline: name, From: specs[0].LogicalDate, To: specs[1].LogicalDate,
		Reprocess: "none", State: store.BackfillSuccess, Plan: `{"pipeline":"` + name + `"}`, CreatedAt: now}))
	_, err = st.EnqueueNotifications(ctx, []store.Notification{{Key: "k1", Event: "run_failed", Notify: "oncall", Channel: "webhook",
		Pipeline: name, Payload: []byte(`{}`), CreatedAt: now}})
	must(err)
	must(st.SetDeadlineChecked(ctx, name, now))
	must(st.CreateBackfill(ctx, store.Backfill{ID: "bf-2", Pipeline: "upstream", From: specs[0].LogicalDate, To: specs[1].LogicalDate,
		Reprocess: "none", State: store.BackfillCancelled, Paused: []string{name}, CreatedAt: now}))
}

// dumpState prints every row of the tables a rename writes, and the outbox.
func dumpState(t *testing.T, db *sql.DB) string {
	t.Helper()
	var b strings.Builder
	for _, table := range append(renameTables, "outbox") {
		rows, err := db.Query("SELECT * FROM " + table + " ORDER BY 1, 2")
		if err != nil {
			t.Fatal(err)
		}
		cols, _ := rows.Columns()
		fmt.Fprintf(&b, "%s %v\n", table, cols)
		for rows.Next() {
			vals := make([]any, len(cols))
			ptrs := make([]any, len(cols))
			for i := range vals {
				ptrs[i] = &vals[i]
			}
			if err := rows.Scan(ptrs...); err != nil {
				t.Fatal(err)
			}
			for i, v := range vals {
				if bs, ok := v.([]byte); ok {
					vals[i] = string(bs)
				}
			}
			fmt.Fprintf(&b, "  %v\n", vals)
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		rows.Close()
	}
	return b.String()
}

// withoutEpoch is a dump without the epoch's row, which a rename moves on.
func withoutEpoch(dump string) string {
	var out []string
	skip := false
	for _, l := range strings.Split(dump, "\n") {
		if strings.HasPrefix(l, "epoch ") {
			skip = true
		} else if !strings.HasPrefix(l, "  ") {
			skip = false
		}
		if !skip {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
