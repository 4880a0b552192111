package store

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
)

// The queries that run once per pipeline or per pass must search indexes,
// never scan the attempts or task instances of the whole state: with 10,000
// pipelines, `rewind run` with nothing due reads each pipeline's history.
func TestSQLiteQueryPlans(t *testing.T) {
	ctx := context.Background()
	s, err := openSQLite(ctx, filepath.Join(t.TempDir(), "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	claim := func(p ClaimReadyParams) (string, []any) {
		a := args{"default", 8, 4}
		return claimCandidatesSQL(&sqliteDialect, &a, p, "$1", "$2", "$3"), a
	}
	claimScheduled, scheduledArgs := claim(ClaimReadyParams{})
	claimBackfill, backfillArgs := claim(ClaimReadyParams{BackfillID: "bf"})
	claimNewest, newestArgs := claim(ClaimReadyParams{BackfillID: "bf", ReverseBackfill: true})
	cases := []struct {
		name  string
		query string
		args  []any
		want  string // the step that reads attempts
	}{
		// A claim reads its pool's queued task instances in claim order
		// from an index, as many as it may take: never every queued one,
		// sorted (no TEMP B-TREE, checked below).
		{"ClaimScheduled", claimScheduled, scheduledArgs, "SEARCH ti USING INDEX task_instances_claim (pool=? AND claim_backfill=?)"},
		{"ClaimBackfill", claimBackfill, backfillArgs, "SEARCH ti USING INDEX task_instances_claim (pool=? AND claim_backfill=?)"},
		{"ClaimBackfillNewestFirst", claimNewest, newestArgs, "SEARCH ti USING INDEX task_instances_claim_newest (pool=?)"},
		// Searching attempts by state alone would read every successful
		// attempt of the state: it must come from the pipeline's task instances.
		{"TaskDurations", taskDurationsSQL(&sqliteDialect), []any{"p", 10, 5}, "SEARCH a USING COVERING INDEX attempts_task_state (task_instance_id=?"},
		{"RunningAttempts", runningAttemptsSQL, nil, "SCAN a USING INDEX attempts_running"},
		{"FinishRun", finishRunSQL, []any{"success", 1, 1}, "SEARCH runs USING INTEGER PRIMARY KEY"},
		// Every FinishRun ends the runs its run covers: found by the
		// partial index, never by a scan of every run.
		{"FinishCoveredTasks", finishCoveredTasksSQL, []any{1, 1}, "SEARCH runs USING INDEX runs_batch_of (batch_of=?)"},
		{"FinishCoveredRuns", finishCoveredRunsSQL, []any{1, "success", 1}, "SEARCH runs USING INDEX runs_batch_of (batch_of=?)"},
		// The watermark seeks the first run of each open state, then the
		// run before the earliest of them: never a pipeline's successes.
		{"AdvanceWatermark", advanceWatermarkSQL, []any{"p"}, "SEARCH runs USING COVERING INDEX runs_pipeline_state ((pipeline,state,logical_unix)>(?,?,?))"},
	}
	for _, c := range cases {
		rows, err := s.r.QueryContext(ctx, "EXPLAIN QUERY PLAN "+sqliteDialect.rebind(c.query), c.args...)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		var plan []string
		for rows.Next() {
			var id, parent, unused int
			var detail string
			if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
				t.Fatal(err)
			}
			plan = append(plan, detail)
		}
		rows.Close()
		if !strings.Contains(strings.Join(plan, "\n"), c.want) {
			t.Errorf("%s: plan has no %q:\n%s", c.name, c.want, strings.Join(plan, "\n"))
		}
		if strings.HasPrefix(c.name, "Claim") && strings.Contains(strings.Join(plan, "\n"), "TEMP B-TREE") {
			t.Errorf("%s sorts its candidates:\n%s", c.name, strings.Join(plan, "\n"))
		}
		for _, step := range plan {
			for _, table := range []string{"attempts", "task_instances", "runs", " a", " ti", " r"} {
				if strings.HasPrefix(step, "SCAN") && strings.HasSuffix(step, table) {
					t.Errorf("%s scans %s:\n%s", c.name, strings.TrimSpace(table), strings.Join(plan, "\n"))
				}
			}
			if strings.Contains(step, "SCAN") && strings.Contains(step, "INDEX") && !strings.Contains(step, "attempts_running") {
				t.Errorf("%s scans a whole index:\n%s", c.name, strings.Join(plan, "\n"))
			}
		}
	}
}
