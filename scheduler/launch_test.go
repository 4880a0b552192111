package scheduler_test

import (
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rewind-dev/rewind/backfill"
	"github.com/rewind-dev/rewind/scheduler"
	"github.com/rewind-dev/rewind/store"
)

// rewind's own commands run like attempts: a probe or a notify command
// whose grandchild keeps stdout open (a daemon started in the background)
// does not hang rewind, and that grandchild is stopped with its group.

// gone reports whether the pids written, one per line, to the file are all
// gone (or zombies).
func (e *env) gone(name string) bool {
	e.t.Helper()
	pids := e.events(name)
	if len(pids) == 0 {
		e.t.Fatalf("no pid in %s", name)
	}
	for _, p := range pids {
		pid, _ := strconv.Atoi(strings.TrimSpace(p))
		if syscall.Kill(pid, 0) == nil {
			if b, err := os.ReadFile("/proc/" + p + "/stat"); err == nil && !strings.Contains(string(b), ") Z ") {
				return false
			}
		}
	}
	return true
}

func TestProbeGrandchildHoldingStdout(t *testing.T) {
	e := newEnv(t, `
pool "large" { slots = 2 }
pipeline "events" {
  schedule   = "@daily"
  start_date = "2025-11-01"
  end_date   = "2025-11-03"
  skew {
    probe      = ["sh", "-c", "sleep 1000 & echo $! >> probe.pids; if [ $0 = 2025-11-02 ]; then echo 5000; else echo 100; fi", run.ds]
    hot_factor = 3
    pool       = "large"
  }
  task "load" { command = "echo $REWIND_DS $REWIND_POOL >> pools.log" }
}
`)
	done := make(chan *scheduler.Summary, 1)
	go func() { done <- e.run(scheduler.Options{Now: utc("2025-12-01T00:00:00Z")}) }()
	select {
	case sum := <-done:
		if sum.Failed() || len(sum.Finished) != 3 {
			t.Fatalf("summary %+v", sum)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("rewind hangs on a probe whose grandchild keeps its stdout open")
	}
	if got := e.attempts("events", "2025-11-02", "load")[0].Pool; got != "large" {
		t.Errorf("the hot date went to %s; the probe's output was lost", got)
	}
	if !e.gone("probe.pids") {
		t.Error("a probe's background process outlived it")
	}
}

func TestNotifyGrandchildHoldingStdout(t *testing.T) {
	e := newEnv(t, `
pipeline "p" {
  schedule   = "@daily"
  start_date = "2025-01-01"
  task "t" { command = "true" }
}
notify "ops" {
  command = ["sh", "-c", "cat > notified.md; sleep 1000 & echo $! >> notify.pids"]
}
`)
	now := utc("2025-01-04T00:00:00Z")
	plan := e.plan(backfill.PlanParams{Pipeline: "p", Start: utc("2025-01-01T00:00:00Z"), End: utc("2025-01-03T00:00:00Z"), Now: now})
	type result struct {
		res *backfill.BackfillResult
		err error
	}
	done := make(chan result, 1)
	go func() {
		res, err := e.apply(backfill.ApplyOptions{Plan: plan, Now: now})
		done <- result{res, err}
	}()
	select {
	case r := <-done:
		if r.err != nil || r.res.State != store.BackfillSuccess {
			t.Fatalf("apply: %v", r.err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("rewind hangs on a notify command whose grandchild keeps its stdout open")
	}
	if !strings.Contains(strings.Join(e.events("notified.md"), "\n"), "# Backfill") {
		t.Error("the notify command did not get the report")
	}
	if !e.gone("notify.pids") {
		t.Error("the notify command's background process outlived it")
	}
}
