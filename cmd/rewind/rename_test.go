package main

import (
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rewind-dev/rewind/store"
)

const salesPipeline = `
pipeline "daily_sales" {
  schedule   = "@daily"
  start_date = "2025-07-01"
  task "extract" {
    command = "echo \"$REWIND_PIPELINE extract $REWIND_DS\" | tee -a events.log"
  }
  task "load" {
    depends_on = [task.extract]
    command    = "echo \"$REWIND_PIPELINE load $REWIND_DS\" | tee -a events.log"
  }
}
`

// renameInFile renames pipeline daily_sales to daily_revenue in the
// workspace's file, as a user edits it.
func (w *workspace) renameInFile() {
	w.t.Helper()
	body := strings.Replace(salesPipeline, `pipeline "daily_sales"`, `pipeline "daily_revenue"`, 1)
	if err := os.WriteFile(filepath.Join(w.dir, "main.hcl"), []byte(body), 0o644); err != nil {
		w.t.Fatal(err)
	}
}

// A pipeline with a history, renamed in its file: rewind scheduler and
// rewind run hold the new name back and say "renamed from daily_sales?"
// with the command; rewind rename carries the history over (state, logs,
// run directories); then a catchup runs nothing again, runs --json shows
// the history under the new name, rewind logs reads it, and the next date
// runs under the new name.
func TestRenamePipelineEndToEnd(t *testing.T) {
	w := newWorkspace(t, map[string]string{"main.hcl": salesPipeline})
	code, out, errs := w.rewind("run", "--catchup", "--now", "2025-07-31T00:00:00Z")
	if code != 0 || !strings.HasPrefix(out, "PIPELINE     RUNS  SUCCESS  FAILED\ndaily_sales  30    30       0\n60 attempts in ") {
		t.Fatalf("catchup: exit %d\n%s%s", code, out, errs)
	}
	if n := len(w.lines("events.log")); n != 60 {
		t.Fatalf("%d task runs in the catchup, want 60", n)
	}
	w.renameInFile()

	// The scheduler finds daily_revenue new to the state: paused, with the hint.
	p := w.start("scheduler", "--poll", "50ms", "--grace", "1s")
	want := `level=WARN msg="new pipeline paused: renamed from daily_sales?" pipeline=daily_revenue due_runs=`
	waitFor(t, "the WARN", func() bool { return strings.Contains(p.stderr.String(), want) })
	p.term()
	for _, s := range []string{want, `rename="rewind rename daily_sales daily_revenue" unpause="rewind unpause daily_revenue"`} {
		if !strings.Contains(p.stderr.String(), s) {
			t.Errorf("scheduler log without %q:\n%s", s, p.stderr.String())
		}
	}

	// rewind run (from cron, --quiet) says it too, and runs nothing.
	code, out, errs = w.rewind("run", "--catchup", "--quiet", "--now", "2025-07-31T00:00:00Z")
	hint := "warning: pipeline daily_revenue is paused and has no run: renamed from daily_sales? 'rewind rename daily_sales daily_revenue' carries the history of daily_sales over; 'rewind unpause daily_revenue' runs daily_revenue from its start_date instead\n"
	if code != 0 || out != "" || errs != hint {
		t.Fatalf("run after the rename in the file: exit %d\nstdout %q\nstderr %q\nwant stderr %q", code, out, errs, hint)
	}
	if n := len(w.lines("events.log")); n != 60 {
		t.Fatalf("%d task runs, want the 60 of the catchup: the renamed pipeline ran", n)
	}

	code, out, errs = w.rewind("rename", "daily_sales", "daily_revenue")
	wantOut := `renamed daily_sales to daily_revenue: 30 runs, 60 task instances, 60 attempts, the watermark
moved .rewind/runs/daily_sales to .rewind/runs/daily_revenue
moved .rewind/logs/daily_sales to .rewind/logs/daily_revenue
`
	if code != 0 || out != wantOut || errs != "" {
		t.Fatalf("rename: exit %d\nstdout %q\nstderr %q\nwant stdout %q", code, out, errs, wantOut)
	}
	if w.exists(".rewind/logs/daily_sales") || w.exists(".rewind/runs/daily_sales") || !w.exists(".rewind/runs/daily_revenue/2025-07-01T000000+0000") {
		t.Error("the directories of daily_sales were not moved to daily_revenue")
	}

	// Finished work is never repeated.
	code, out, errs = w.rewind("run", "--catchup", "--now", "2025-07-31T00:00:00Z")
	if code != 0 || out != "nothing to run: every due run has finished\n" || errs != "" {
		t.Fatalf("catchup after the rename: exit %d\nstdout %q\nstderr %q", code, out, errs)
	}
	if n := len(w.lines("events.log")); n != 60 {
		t.Fatalf("%d task runs after the rename, want 60", n)
	}
	runs := w.runsJSON()
	if len(runs) != 30 {
		t.Fatalf("runs --json: %d runs, want 30", len(runs))
	}
	logs := filepath.Join(w.dir, ".rewind", "logs", "daily_revenue") + "/"
	for _, r := range runs {
		if r.Pipeline != "daily_revenue" || r.State != "success" || r.RunID != "scheduled__"+r.LogicalDate || len(r.Tasks) != 2 {
			t.Errorf("run %+v, want a successful run of daily_revenue", r)
			continue
		}
		for _, ti := range r.Tasks {
			if len(ti.Attempts) != 1 || !strings.HasPrefix(ti.Attempts[0].LogPath, logs) {
				t.Errorf("%s %s: attempts %+v, want one logged under %s", r.DS, ti.Task, ti.Attempts, logs)
			}
		}
	}
	code, out, errs = w.rewind("logs", "daily_revenue", "2025-07-02", "load")
	if code != 0 || !strings.HasPrefix(out, "daily_sales load 2025-07-02\n") {
		t.Errorf("logs after the rename: exit %d\nstdout %q\nstderr %q", code, out, errs)
	}
	if code, _, errs := w.rewind("runs", "--pipeline", "daily_sales"); code != exitUsage || !strings.Contains(errs, `unknown pipeline "daily_sales" (known: daily_revenue)`) {
		t.Errorf("runs --pipeline daily_sales: exit %d, %s", code, errs)
	}

	// The next date runs under the new name, once.
	code, out, errs = w.rewind("run", "--now", "2025-08-01T00:00:00Z")
	if code != 0 || !strings.HasPrefix(out, "PIPELINE       RUNS  SUCCESS  FAILED\ndaily_revenue  1     1        0\n2 attempts in ") {
		t.Fatalf("next date: exit %d\n%s%s", code, out, errs)
	}
	got := w.lines("events.log")
	if len(got) != 62 || got[60] != "daily_revenue extract 2025-07-31" || got[61] != "daily_revenue load 2025-07-31" {
		t.Errorf("after the next date: %d task runs, last %q", len(got), got[len(got)-2:])
	}
}

// A rename stopped after its transaction (killed before it moved the
// files: here the state is renamed as rename does it, and the files are
// not moved, or only the run directories): the history is all under the
// new name in the state, rewind logs cannot find the files yet, and the
// same rename run again moves them.
func TestRenameStoppedBeforeTheFiles(t *testing.T) {
	for _, movedRuns := range []bool{false, true} {
		w := newWorkspace(t, map[string]string{"main.hcl": salesPipeline})
		if code, _, errs := w.rewind("run", "--catchup", "--quiet", "--now", "2025-07-04T00:00:00Z"); code != 0 {
			t.Fatalf("catchup: exit %d: %s", code, errs)
		}
		w.renameInFile()
		home := filepath.Join(w.dir, ".rewind")
		st, err := store.Open(context.Background(), "sqlite:"+filepath.Join(home, "state.db"))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.RenamePipeline(context.Background(), store.RenamePipelineParams{From: "daily_sales", To: "daily_revenue",
			LogsFrom: filepath.Join(home, "logs", "daily_sales") + "/", LogsTo: filepath.Join(home, "logs", "daily_revenue") + "/"}); err != nil {
			t.Fatal(err)
		}
		st.Close()
		if movedRuns {
			if err := os.Rename(filepath.Join(home, "runs", "daily_sales"), filepath.Join(home, "runs", "daily_revenue")); err != nil {
				t.Fatal(err)
			}
		}
		if code, _, _ := w.rewind("logs", "daily_revenue", "2025-07-02", "load"); code == 0 {
			t.Fatal("logs found a file that is still under the old name")
		}
		code, out, errs := w.rewind("rename", "daily_sales", "daily_revenue")
		wantOut := "the history of daily_sales is under daily_revenue in the state already: moved the files an earlier rename left\n"
		if !movedRuns {
			wantOut += "moved .rewind/runs/daily_sales to .rewind/runs/daily_revenue\n"
		}
		wantOut += "moved .rewind/logs/daily_sales to .rewind/logs/daily_revenue\n"
		if code != 0 || out != wantOut || errs != "" {
			t.Fatalf("rename again (run directories moved: %v): exit %d\nstdout %q\nstderr %q\nwant %q", movedRuns, code, out, errs, wantOut)
		}
		if code, out, errs := w.rewind("logs", "daily_revenue", "2025-07-02", "load"); code != 0 || !strings.HasPrefix(out, "daily_sales load 2025-07-02\n") {
			t.Errorf("logs after the rename finished: exit %d\n%s%s", code, out, errs)
		}
		// Nothing is left to finish: a third time is refused.
		if code, _, errs := w.rewind("rename", "daily_sales", "daily_revenue"); code != exitUsage ||
			errs != "rewind: rename daily_sales to daily_revenue refused: daily_sales has no run in the state: there is no history to carry over\n" {
			t.Errorf("a third rename: exit %d, %s", code, errs)
		}
	}
}

// Without a scheduler, the first rewind run after the rename in the file
// holds the pipeline back (new to the state: paused) and says so on
// stderr; rewind unpause is the other way out: it runs the new name from
// its start_date, and then nothing looks renamed any more.
func TestRunHoldsBackARenamedPipeline(t *testing.T) {
	w := newWorkspace(t, map[string]string{"main.hcl": salesPipeline})
	if code, _, errs := w.rewind("run", "--catchup", "--quiet", "--now", "2025-07-04T00:00:00Z"); code != 0 {
		t.Fatalf("catchup: exit %d: %s", code, errs)
	}
	w.renameInFile()
	code, out, errs := w.rewind("run", "--now", "2025-07-04T00:00:00Z")
	hint := "warning: pipeline daily_revenue is new to the state, so paused: renamed from daily_sales? 'rewind rename daily_sales daily_revenue' carries the history of daily_sales over; 'rewind unpause daily_revenue' runs daily_revenue from its start_date instead\n"
	wantOut := "pipeline daily_revenue is paused: nothing run (rewind unpause daily_revenue)\nnothing to run: every due run has finished\n"
	if code != 0 || out != wantOut || !strings.HasSuffix(errs, hint) {
		t.Fatalf("run: exit %d\nstdout %q\nstderr %q\nwant stdout %q, stderr ending %q", code, out, errs, wantOut, hint)
	}
	if code, out, errs := w.rewind("unpause", "daily_revenue"); code != 0 || out != "daily_revenue: unpaused\n" {
		t.Fatalf("unpause: exit %d: %s%s", code, out, errs)
	}
	code, out, errs = w.rewind("run", "--now", "2025-07-04T00:00:00Z")
	if code != 0 || !strings.HasPrefix(out, "PIPELINE       RUNS  SUCCESS  FAILED\ndaily_revenue  3     3        0\n") || strings.Contains(errs, "renamed") {
		t.Fatalf("run after unpause: exit %d\n%s%s", code, out, errs)
	}
	if got := counts(w.lines("events.log")); len(got) != 12 || got["daily_revenue load 2025-07-03"] != 1 || got["daily_sales load 2025-07-03"] != 1 {
		t.Errorf("events %v: want each date once under each name", got)
	}
}

// kill -9 of rewind rename in the middle of its transaction, on
// PostgreSQL: a trigger makes the update of the watermark (after the runs
// have moved) wait for an advisory lock the test holds, the test kills the
// process there, then lets the server go on. The server rolls the
// transaction back: every run is still under the old name, the files were
// not touched, and the rename run again goes through.
func TestRenameKilledInItsTransaction(t *testing.T) {
	w := backends[1].workspace(t, map[string]string{"main.hcl": salesPipeline})
	if code, _, errs := w.rewind("run", "--catchup", "--quiet", "--now", "2025-07-04T00:00:00Z"); code != 0 {
		t.Fatalf("catchup: exit %d: %s", code, errs)
	}
	w.renameInFile()
	db, err := sql.Open("pgx", w.state)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	for _, q := range []string{
		"CREATE FUNCTION hold() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN PERFORM pg_advisory_xact_lock(4242); RETURN NEW; END $$",
		"CREATE TRIGGER hold BEFORE UPDATE ON watermarks FOR EACH ROW EXECUTE FUNCTION hold()",
	} {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	holder, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	if _, err := holder.ExecContext(ctx, "SELECT pg_advisory_lock(4242)"); err != nil {
		t.Fatal(err)
	}
	p := w.start("rename", "daily_sales", "daily_revenue")
	waitFor(t, "the rename to wait in its transaction", func() bool {
		var n int
		return db.QueryRow("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted").Scan(&n) == nil && n == 1
	})
	var moved int
	if err := db.QueryRow("SELECT count(*) FROM runs WHERE pipeline = 'daily_revenue'").Scan(&moved); err != nil || moved != 0 {
		t.Fatalf("runs under the new name seen before the commit: %d, %v", moved, err)
	}
	p.kill9()
	if _, err := holder.ExecContext(ctx, "SELECT pg_advisory_unlock(4242)"); err != nil {
		t.Fatal(err)
	}
	// The killed transaction has ended once nothing holds the runs for
	// writing (the host agent that run started reads the state on).
	waitFor(t, "the killed rename's transaction to end", func() bool {
		var n int
		return db.QueryRow(`SELECT count(*) FROM pg_locks l JOIN pg_class c ON c.oid = l.relation
			WHERE c.relname = 'runs' AND l.mode = 'RowExclusiveLock'`).Scan(&n) == nil && n == 0
	})
	runs := w.runsJSON()
	if len(runs) != 3 {
		t.Fatalf("%d runs after the kill, want 3", len(runs))
	}
	for _, r := range runs {
		if r.Pipeline != "daily_sales" {
			t.Errorf("run %s is under %s after the kill: the transaction was not rolled back", r.DS, r.Pipeline)
		}
	}
	if !w.exists(".rewind/logs/daily_sales") || w.exists(".rewind/logs/daily_revenue") {
		t.Error("the killed rename moved files")
	}
	if _, err := db.Exec("DROP TRIGGER hold ON watermarks"); err != nil {
		t.Fatal(err)
	}
	if code, out, errs := w.rewind("rename", "daily_sales", "daily_revenue"); code != 0 || !strings.HasPrefix(out, "renamed daily_sales to daily_revenue: 3 runs") {
		t.Fatalf("rename after the kill: exit %d\n%s%s", code, out, errs)
	}
	for _, r := range w.runsJSON() {
		if r.Pipeline != "daily_revenue" {
			t.Errorf("run %s is under %s after the rename", r.DS, r.Pipeline)
		}
	}
}
