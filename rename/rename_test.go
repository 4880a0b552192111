package rename_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rewind-dev/rewind/dsl"
	"github.com/rewind-dev/rewind/rename"
	"github.com/rewind-dev/rewind/store"
)

var ctx = context.Background()

// setup is a workspace declaring pipeline "new" and a state where "old"
// has two runs of its task, one of them run (its log and run directory on
// disk).
func setup(t *testing.T) (rename.Options, store.Store, []store.Run) {
	t.Helper()
	dir := t.TempDir()
	hcl := "pipeline \"new\" {\n  schedule = \"@daily\"\n  start_date = \"2025-07-01\"\n  task \"t\" { command = \"true\" }\n}\n"
	if err := os.WriteFile(filepath.Join(dir, "main.hcl"), []byte(hcl), 0o644); err != nil {
		t.Fatal(err)
	}
	ws, diags := dsl.Load(dir, dsl.LoadOptions{})
	if diags.HasErrors() {
		t.Fatal(diags.Error())
	}
	home := filepath.Join(dir, ".rewind")
	st, err := store.Open(ctx, "sqlite:"+filepath.Join(home, "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	now := time.Now()
	if _, err := st.UpsertPipeline(ctx, store.UpsertPipelineParams{Name: "old", Hash: "h", Now: now}); err != nil {
		t.Fatal(err)
	}
	var specs []store.RunSpec
	for d := range 2 {
		day := time.Date(2025, 7, 1+d, 0, 0, 0, 0, time.UTC)
		specs = append(specs, store.RunSpec{LogicalDate: day, DS: day.Format("2006-01-02"), DataIntervalStart: day, DataIntervalEnd: day.AddDate(0, 0, 1)})
	}
	if _, err := st.MaterializeRuns(ctx, store.MaterializeRunsParams{Pipeline: "old", Kind: store.KindScheduled, Runs: specs,
		Tasks: []store.TaskSpec{{Name: "t", Pool: "default"}}, Now: now}); err != nil {
		t.Fatal(err)
	}
	runs, err := st.ListRuns(ctx, store.ListRunsParams{Pipelines: []string{"old"}, WithTasks: true})
	if err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(home, "logs", "old", "t", "2025-07-01.{try}.log")
	if _, err := st.EnqueueTasks(ctx, store.EnqueueTasksParams{Items: []store.EnqueueItem{{TaskInstanceID: runs[0].Tasks[0].ID, LogPath: logPath}}, Now: now}); err != nil {
		t.Fatal(err)
	}
	claimed, err := st.ClaimReady(ctx, store.ClaimReadyParams{Pools: []store.PoolCapacity{{Name: "default", Slots: 1}}, Limit: 1, Now: now})
	if err != nil || len(claimed) != 1 {
		t.Fatalf("ClaimReady = %v, %v", claimed, err)
	}
	for _, f := range []string{claimed[0].LogPath, filepath.Join(home, "runs", "old", "2025-07-01", "out.csv")} {
		if err := os.MkdirAll(filepath.Dir(f), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(f, []byte("old\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return rename.Options{Store: st, Workspace: ws, Home: home, From: "old", To: "new"}, st, runs
}

func refusal(t *testing.T, err error, busy bool, says string) {
	t.Helper()
	var r *rename.Refusal
	if !errors.As(err, &r) || r.Busy != busy || !strings.Contains(r.Msg, says) {
		t.Fatalf("err = %v, want a refusal (busy %v) saying %q", err, busy, says)
	}
}

// An attempt of the old name still running is another rewind's: refused
// (busy) until it has ended; a running backfill that involves either name
// is refused until it ends.
func TestRenameRefusesWhileSomethingRuns(t *testing.T) {
	o, st, runs := setup(t)
	_, err := rename.Pipeline(ctx, o)
	refusal(t, err, true, "old has 1 attempt still running, left by a rewind that stopped: 'rewind run' settles them")
	a, err := st.FindAttempt(ctx, store.FindAttemptParams{Pipeline: "old", DS: "2025-07-01", Task: "t"})
	if err != nil {
		t.Fatal(err)
	}
	zero := 0
	if err := st.FinishAttempt(ctx, store.FinishAttemptParams{AttemptID: a.ID, State: store.AttemptSuccess, ExitCode: &zero, TaskState: store.TaskSuccess, Now: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if err := st.CreateBackfill(ctx, store.Backfill{ID: "up_1", Pipeline: "up", From: runs[0].LogicalDate, To: runs[1].LogicalDate,
		Reprocess: "none", Paused: []string{"old"}, CreatedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	_, err = rename.Pipeline(ctx, o)
	refusal(t, err, false, "backfill up_1 of up is running, or stopped midway: let it finish, or cancel it (rewind backfill cancel up_1), then rename")
	if got, _ := st.LatestTasks(ctx, "old"); len(got) != 1 {
		t.Fatalf("a refused rename moved the runs: LatestTasks(old) = %v", got)
	}
}

// A rename moves the state and the files and rewrites the plans that name
// the old name. A directory of the new name with files in it is refused;
// one with empty directories only is merged into, file by file.
func TestRenameMovesStatePlansAndFiles(t *testing.T) {
	o, st, runs := setup(t)
	a, err := st.FindAttempt(ctx, store.FindAttemptParams{Pipeline: "old", DS: "2025-07-01", Task: "t"})
	if err != nil {
		t.Fatal(err)
	}
	zero := 0
	if err := st.FinishAttempt(ctx, store.FinishAttemptParams{AttemptID: a.ID, State: store.AttemptSuccess, ExitCode: &zero, TaskState: store.TaskSuccess, Now: time.Now()}); err != nil {
		t.Fatal(err)
	}
	plan := `{"pipeline":"up","paused":false,"include_paused":false,"outputs":false,"tasks":null,"start":"2025-07-01","end":"2025-07-02","reprocess":"none","reverse":false,"max_active_runs":0,"dates":null,"selected":0,"parallel":0,"waves":0,"run_seconds":0,"estimate_seconds":0,"requires":null,"watermarks":null,"downstream":["old"]}`
	if err := st.CreateBackfill(ctx, store.Backfill{ID: "up_1", Pipeline: "up", From: runs[0].LogicalDate, To: runs[1].LogicalDate,
		Reprocess: "none", State: store.BackfillSuccess, Paused: []string{"old"}, Plan: plan, CreatedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	// Directories of the new name: empty ones, and a file.
	if err := os.MkdirAll(filepath.Join(o.Home, "logs", "new", "t"), 0o700); err != nil {
		t.Fatal(err)
	}
	both := filepath.Join(o.Home, "runs", "new", "2025-07-01", "out.csv")
	if err := os.MkdirAll(filepath.Dir(both), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(both, []byte("new\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	o.Home, _ = filepath.Rel(mustWD(t), o.Home) // as the CLI may give it: relative
	res, err := rename.Pipeline(ctx, o)
	if err == nil {
		t.Fatal("a rename onto a run directory with files went through")
	}
	refusal(t, err, false, "holds 1 file of an earlier pipeline named new")
	if err := os.Remove(both); err != nil {
		t.Fatal(err)
	}
	res, err = rename.Pipeline(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	if res.Runs != 2 || res.Plans != 1 || res.Consumers != 1 || len(res.Moved) != 2 || res.Finished {
		t.Errorf("result %+v", res)
	}
	b, err := st.GetBackfill(ctx, "up_1")
	if err != nil || !strings.Contains(b.Plan, `"downstream":["new"]`) || strings.Join(b.Paused, ",") != "new" {
		t.Errorf("backfill up_1 = %+v, %v", b, err)
	}
	a, err = st.FindAttempt(ctx, store.FindAttemptParams{Pipeline: "new", DS: "2025-07-01", Task: "t"})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(a.LogPath); err != nil || string(got) != "old\n" {
		t.Errorf("the log at its new path %s: %q, %v", a.LogPath, got, err)
	}
	if !strings.Contains(a.LogPath, filepath.Join(".rewind", "logs", "new", "t")) || !filepath.IsAbs(a.LogPath) {
		t.Errorf("log path %s", a.LogPath)
	}
	for _, gone := range []string{"logs", "runs"} {
		if _, err := os.Lstat(filepath.Join(o.Home, gone, "old")); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s/old is still there: %v", gone, err)
		}
	}
}

func mustWD(t *testing.T) string {
	t.Helper()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	return wd
}
