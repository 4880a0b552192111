package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rewind-dev/rewind/store/pgtest"
)

// workspace is a directory with pipeline files where rewind runs as a
// separate process, as a user (or cron) runs it.
type workspace struct {
	t   *testing.T
	dir string
	// state is the state DSN every rewind of the workspace gets in
	// REWIND_STATE; "" is the default, the SQLite file .rewind/state.db
	// under dir.
	state string
}

func newWorkspace(t *testing.T, files map[string]string) *workspace {
	t.Helper()
	dir := t.TempDir()
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return &workspace{t: t, dir: dir}
}

func (w *workspace) command(args ...string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], args...)
	cmd.Dir = w.dir
	cmd.Env = append(os.Environ(), "REWIND_TEST_AS_MAIN=1", "REWIND_STATE="+w.state)
	return cmd
}

// backend is a kind of state a workspace can keep its runs in.
type backend struct {
	name string
	// state returns the DSN of a new, empty state ("" for the workspace's
	// own SQLite file); it skips the test when the backend is unavailable.
	state func(t *testing.T) string
}

var backends = []backend{
	{name: "sqlite", state: func(*testing.T) string { return "" }},
	{name: "postgres", state: func(t *testing.T) string { return pgtest.DSN(t) }},
}

// onBackends runs test once per backend, as the subtests "sqlite" and
// "postgres" (skipped when no PostgreSQL server is configured outside CI:
// see store/pgtest).
func onBackends(t *testing.T, test func(t *testing.T, b backend)) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) { test(t, b) })
	}
}

// workspace is a new workspace with a new, empty state of this backend.
func (b backend) workspace(t *testing.T, files map[string]string) *workspace {
	t.Helper()
	w := newWorkspace(t, files)
	w.state = b.state(t)
	return w
}

// rewind runs the CLI to completion and returns its exit code and output.
func (w *workspace) rewind(args ...string) (int, string, string) {
	w.t.Helper()
	cmd := w.command(args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode(), out.String(), errb.String()
	}
	if err != nil {
		w.t.Fatal(err)
	}
	return 0, out.String(), errb.String()
}

func (w *workspace) lines(name string) []string {
	w.t.Helper()
	f, err := os.Open(filepath.Join(w.dir, name))
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		w.t.Fatal(err)
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		out = append(out, sc.Text())
	}
	return out
}

func (w *workspace) runsJSON() []runJSON {
	w.t.Helper()
	code, out, errs := w.rewind("runs", "--json")
	if code != 0 {
		w.t.Fatalf("runs --json: exit %d: %s", code, errs)
	}
	var runs []runJSON
	if err := json.Unmarshal([]byte(out), &runs); err != nil {
		w.t.Fatalf("runs --json: %v\n%s", err, out)
	}
	return runs
}

// runsIn counts the workspace's runs in one of states.
func (w *workspace) runsIn(states ...string) int {
	w.t.Helper()
	n := 0
	for _, r := range w.runsJSON() {
		if slices.Contains(states, r.State) {
			n++
		}
	}
	return n
}

// counts tallies "event ds task" lines.
func counts(lines []string) map[string]int {
	m := map[string]int{}
	for _, l := range lines {
		m[l]++
	}
	return m
}

const markerPipeline = `
pipeline "p" {
  schedule        = "@daily"
  start_date      = "2025-07-01"
  end_date        = "2025-07-30"
  max_active_runs = 4
  task "a" {
    command = "echo \"start $REWIND_DS a\" >> events.log; sleep 0.1; echo \"end $REWIND_DS a\" >> events.log"
  }
  task "b" {
    depends_on = [task.a]
    command    = "echo \"start $REWIND_DS b\" >> events.log; sleep 0.1; echo \"end $REWIND_DS b\" >> events.log"
  }
}
`

// checkOnce asserts that every task of the 30 dates started and ended exactly once.
func checkOnce(t *testing.T, w *workspace) {
	t.Helper()
	c := counts(w.lines("events.log"))
	for d := 1; d <= 30; d++ {
		ds := time.Date(2025, 7, d, 0, 0, 0, 0, time.UTC).Format("2006-01-02")
		for _, task := range []string{"a", "b"} {
			for _, ev := range []string{"start", "end"} {
				if n := c[ev+" "+ds+" "+task]; n != 1 {
					t.Errorf("%s %s %s happened %d times; want once", ev, ds, task, n)
				}
			}
		}
	}
	for _, r := range w.runsJSON() {
		if r.State != "success" {
			t.Errorf("run %s is %s", r.DS, r.State)
		}
	}
	if w.state != "" && w.exists(".rewind/state.db") {
		t.Errorf("the state is %s, yet rewind wrote .rewind/state.db", w.state)
	}
}

// kill -9 of rewind at a random moment of a catchup, then a new catchup:
// every run succeeds and no attempt that had started runs a second time
// (the ones in flight are adopted, not re-run).
func TestKill9ThenCatchup(t *testing.T) { onBackends(t, testKill9ThenCatchup) }

func testKill9ThenCatchup(t *testing.T, b backend) {
	for i := range 5 {
		w := b.workspace(t, map[string]string{"main.hcl": markerPipeline})
		cmd := w.command("run", "--catchup", "--quiet", "--now", "2025-08-01T00:00:00Z")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		delay := time.Duration(rand.IntN(1500)) * time.Millisecond
		time.Sleep(delay)
		_ = cmd.Process.Signal(syscall.SIGKILL)
		_ = cmd.Wait()
		t.Logf("round %d: killed after %s with %d events", i, delay, len(w.lines("events.log")))
		code, _, errs := w.rewind("run", "--catchup", "--quiet", "--now", "2025-08-01T00:00:00Z")
		if code != 0 {
			t.Fatalf("catchup after kill -9: exit %d: %s", code, errs)
		}
		checkOnce(t, w)
	}
}

// Two `rewind run --catchup` at the same moment on one state, as cron
// overlapping itself: with --wait both succeed and every attempt runs once;
// without it the second exits at once with code 3.
func TestConcurrentRuns(t *testing.T) { onBackends(t, testConcurrentRuns) }

func testConcurrentRuns(t *testing.T, b backend) {
	w := b.workspace(t, map[string]string{"main.hcl": markerPipeline})
	var wg sync.WaitGroup
	codes := make([]int, 2)
	for i := range 2 {
		wg.Go(func() {
			codes[i], _, _ = w.rewind("run", "--catchup", "--quiet", "--wait", "--now", "2025-08-01T00:00:00Z")
		})
	}
	wg.Wait()
	if codes[0] != 0 || codes[1] != 0 {
		t.Fatalf("exit codes %v; want 0 0", codes)
	}
	checkOnce(t, w)

	w2 := b.workspace(t, map[string]string{"main.hcl": markerPipeline})
	first := w2.command("run", "--catchup", "--quiet", "--now", "2025-08-01T00:00:00Z")
	if err := first.Start(); err != nil {
		t.Fatal(err)
	}
	// Wait until the first holds the lease (it has started a task).
	for deadline := time.Now().Add(10 * time.Second); len(w2.lines("events.log")) == 0; {
		if time.Now().After(deadline) {
			t.Fatal("the first rewind started no task")
		}
		time.Sleep(20 * time.Millisecond)
	}
	code, _, errs := w2.rewind("run", "--catchup", "--quiet", "--now", "2025-08-01T00:00:00Z")
	if code != exitLeaseBusy || !strings.Contains(errs, "another rewind") {
		t.Errorf("second rewind: exit %d, stderr %q; want exit 3 naming the other rewind", code, errs)
	}
	if err := first.Wait(); err != nil {
		t.Fatalf("first rewind: %v", err)
	}
	checkOnce(t, w2)
}

// A failing task with retries = 2: three attempts, the run fails, the
// downstream task is upstream_failed, exit code 1, and `runs --json` shows
// every attempt. Then `clear --only-failed` and `run` re-run exactly the
// failed tasks.
func TestRetriesClearAndRerun(t *testing.T) {
	w := newWorkspace(t, map[string]string{
		"main.hcl": `
pipeline "p" {
  schedule   = "@daily"
  start_date = "2025-07-01"
  end_date   = "2025-07-03"
  task "extract" {
    command = "echo \"extract $REWIND_DS\" >> events.log"
  }
  task "flaky" {
    depends_on  = [task.extract]
    command     = "echo \"flaky $REWIND_DS\" >> events.log; test $REWIND_DS != 2025-07-02 || test -f fixed"
    retries     = 2
    retry_delay = "0s"
  }
  task "report" {
    depends_on = [task.flaky]
    command    = "echo \"report $REWIND_DS\" >> events.log"
  }
}
`})
	code, _, _ := w.rewind("run", "--now", "2025-08-01T00:00:00Z")
	if code != 1 {
		t.Fatalf("exit %d; want 1", code)
	}
	var bad *runJSON
	runs := w.runsJSON()
	for i := range runs {
		if runs[i].DS == "2025-07-02" {
			bad = &runs[i]
		} else if runs[i].State != "success" {
			t.Errorf("run %s is %s", runs[i].DS, runs[i].State)
		}
	}
	if bad == nil || bad.State != "failed" {
		t.Fatalf("run 2025-07-02: %+v; want failed", bad)
	}
	for _, ti := range bad.Tasks {
		switch ti.Task {
		case "flaky":
			if ti.State != "failed" || ti.TryNumber != 3 || len(ti.Attempts) != 3 {
				t.Errorf("flaky: %+v; want failed after 3 attempts", ti)
			}
			for i, a := range ti.Attempts {
				if a.TryNumber != i+1 || a.ExitCode == nil || *a.ExitCode != 1 || a.EndedAt == nil || a.Pool != "default" {
					t.Errorf("attempt %d: %+v", i+1, a)
				}
			}
		case "report":
			if ti.State != "upstream_failed" {
				t.Errorf("report: %s; want upstream_failed", ti.State)
			}
		}
	}

	if err := os.WriteFile(filepath.Join(w.dir, "fixed"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	before := counts(w.lines("events.log"))
	if code, out, errs := w.rewind("clear", "p", "--start", "2025-07-01", "--end", "2025-07-03", "--only-failed"); code != 0 || !strings.Contains(out, "cleared 2 task instances") {
		t.Fatalf("clear: exit %d: %s%s", code, out, errs)
	}
	if code, _, errs := w.rewind("run", "--now", "2025-08-01T00:00:00Z"); code != 0 {
		t.Fatalf("run after clear: exit %d: %s", code, errs)
	}
	after := counts(w.lines("events.log"))
	for k, n := range after {
		want := before[k]
		if k == "flaky 2025-07-02" || k == "report 2025-07-02" {
			want++
		}
		if n != want {
			t.Errorf("%q ran %d times after clear; want %d", k, n, want)
		}
	}
	for _, r := range w.runsJSON() {
		if r.State != "success" {
			t.Errorf("after clear: run %s is %s", r.DS, r.State)
		}
	}
}

// Ctrl-C stops launching, stops the running attempts after the grace
// period, records them as interrupted and exits 130; the next run resumes.
func TestInterruptThenResume(t *testing.T) {
	w := newWorkspace(t, map[string]string{"main.hcl": `
pipeline "p" {
  schedule        = "@daily"
  start_date      = "2025-07-01"
  end_date        = "2025-07-04"
  max_active_runs = 2
  task "slow" {
    command = "echo \"start $REWIND_DS\" >> events.log; sleep 30"
  }
}
`})
	cmd := w.command("run", "--quiet", "--grace", "200ms", "--now", "2025-08-01T00:00:00Z")
	var errb bytes.Buffer
	cmd.Stderr = &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); len(w.lines("events.log")) < 2; {
		if time.Now().After(deadline) {
			t.Fatal("no attempt started")
		}
		time.Sleep(20 * time.Millisecond)
	}
	start := time.Now()
	_ = cmd.Process.Signal(os.Interrupt)
	err := cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != exitInterrupt {
		t.Fatalf("exit: %v; want %d (stderr: %s)", err, exitInterrupt, errb.String())
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("stopping took %s", d)
	}
	interrupted := 0
	for _, r := range w.runsJSON() {
		for _, ti := range r.Tasks {
			for _, a := range ti.Attempts {
				if a.State == "interrupted" {
					interrupted++
				}
			}
		}
	}
	if interrupted != 2 {
		t.Errorf("%d interrupted attempts; want 2", interrupted)
	}
	// The resumed run finishes every date; the tasks now succeed at once.
	if err := os.WriteFile(filepath.Join(w.dir, "main.hcl"), []byte(strings.ReplaceAll(
		`pipeline "p" {
  schedule        = "@daily"
  start_date      = "2025-07-01"
  end_date        = "2025-07-04"
  max_active_runs = 2
  task "slow" { command = "echo \"start $REWIND_DS\" >> events.log" }
}`, "\t", "")), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, _, errs := w.rewind("run", "--quiet", "--now", "2025-08-01T00:00:00Z"); code != 0 {
		t.Fatalf("resume: exit %d: %s", code, errs)
	}
	for _, r := range w.runsJSON() {
		if r.State != "success" {
			t.Errorf("run %s is %s", r.DS, r.State)
		}
		for _, ti := range r.Tasks {
			last := ti.Attempts[len(ti.Attempts)-1]
			if last.State != "success" || last.TryNumber != ti.TryNumber {
				t.Errorf("%s: last attempt %+v", r.DS, last)
			}
		}
	}
}

// kill -9 during `backfill apply`, then `apply --resume ID`: the backfill
// completes and no attempt that had started runs a second time.
func TestBackfillKill9ThenResume(t *testing.T) { onBackends(t, testBackfillKill9ThenResume) }

func testBackfillKill9ThenResume(t *testing.T, b backend) {
	for i := range 3 {
		w := b.workspace(t, map[string]string{"main.hcl": markerPipeline})
		cmd := w.command("backfill", "apply", "p", "--start", "2025-07-01", "--end", "2025-07-30", "--quiet", "--now", "2025-08-01T00:00:00Z")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		delay := time.Duration(rand.IntN(1500)) * time.Millisecond
		time.Sleep(delay)
		_ = cmd.Process.Signal(syscall.SIGKILL)
		_ = cmd.Wait()
		t.Logf("round %d: killed after %s with %d events", i, delay, len(w.lines("events.log")))
		_, out, _ := w.rewind("backfill", "list")
		var id string
		for _, l := range strings.Split(out, "\n")[1:] {
			if f := strings.Fields(l); len(f) > 0 {
				id = f[0]
			}
		}
		args := []string{"backfill", "apply", "--resume", id, "--quiet", "--now", "2025-08-01T00:00:00Z"}
		if id == "" { // killed before the backfill was recorded: start it again
			args = []string{"backfill", "apply", "p", "--start", "2025-07-01", "--end", "2025-07-30", "--quiet", "--now", "2025-08-01T00:00:00Z"}
		}
		if code, _, errs := w.rewind(args...); code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, errs)
		}
		checkOnce(t, w)
		_, out, _ = w.rewind("backfill", "status")
		if !strings.Contains(out, ": success, phase done") || !strings.Contains(out, "30 success") {
			t.Errorf("status after resume: %s", out)
		}
	}
}
