package main

import (
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"
)

// thousandPipeline: 1,000 hourly runs of one task at concurrency 8, as
// bench/forms.sh runs them, each attempt appending to a ledger as it starts
// and as it ends.
const thousandPipeline = `
pool "default" { slots = 8 }
pipeline "p" {
  schedule        = "@hourly"
  start_date      = "2025-01-01"
  max_active_runs = 8
  task "t" {
    command = "echo \"start $REWIND_LOGICAL_DATE $REWIND_TRY_NUMBER\" >> ledger.log; echo \"end $REWIND_LOGICAL_DATE $REWIND_TRY_NUMBER\" >> ledger.log"
  }
}
`

// thousandNow is 1,000 hourly intervals after the start date.
const thousandNow = "2025-02-11T16:00:00Z"

// kill -9 of a rewind in the middle of a 1,000-attempt catchup, then a
// second rewind finishes it: every attempt that ran has its exit status
// recorded, none that started runs again (the ledger), and nothing is left
// running.
func TestKill9MidThousandAttemptCatchup(t *testing.T) {
	onBackends(t, testKill9MidThousandAttemptCatchup)
}

func testKill9MidThousandAttemptCatchup(t *testing.T, b backend) {
	w := b.workspace(t, map[string]string{"main.hcl": thousandPipeline})
	cmd := w.command("run", "--catchup", "--quiet", "--now", thousandNow)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Killed once about 300 attempts have started.
	for deadline := time.Now().Add(2 * time.Minute); len(w.lines("ledger.log")) < 600; {
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			t.Fatal("fewer than 300 attempts started in 2 minutes")
		}
		time.Sleep(2 * time.Millisecond)
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	_ = cmd.Wait()
	killedAt := len(w.lines("ledger.log"))
	code, _, errs := w.rewind("run", "--catchup", "--quiet", "--now", thousandNow)
	if code != 0 {
		t.Fatalf("catchup after kill -9: exit %d: %s", code, errs)
	}

	c := counts(w.lines("ledger.log"))
	started := map[string]bool{} // "<logical date> <try>"
	for line, n := range c {
		ev, key, _ := strings.Cut(line, " ")
		if n != 1 {
			t.Errorf("%q is in the ledger %d times; want once", line, n)
		}
		if ev == "start" {
			started[key] = true
		}
	}
	runs := w.runsJSON()
	if len(runs) != 1000 {
		t.Fatalf("%d runs; want 1000", len(runs))
	}
	attempts, lost := 0, 0
	for _, r := range runs {
		if r.State != "success" {
			t.Errorf("run %s is %s", r.LogicalDate, r.State)
		}
		ranOnce := 0
		for _, ti := range r.Tasks {
			for _, a := range ti.Attempts {
				attempts++
				key := fmt.Sprintf("%s %d", r.LogicalDate, a.TryNumber)
				switch {
				case a.State == "running" || a.EndedAt == nil:
					t.Errorf("run %s try %d is left %s", r.LogicalDate, a.TryNumber, a.State)
				case a.ExitCode != nil && a.State == "success":
					ranOnce++
					if !started[key] {
						t.Errorf("run %s try %d succeeded without running", r.LogicalDate, a.TryNumber)
					}
				case started[key]:
					// It ran: its status must not be lost.
					t.Errorf("run %s try %d ran, yet is recorded %s with exit code %v", r.LogicalDate, a.TryNumber, a.State, a.ExitCode)
				default:
					lost++ // claimed, never started: it runs again
				}
			}
		}
		if ranOnce != 1 {
			t.Errorf("run %s has %d successful attempts; want 1", r.LogicalDate, ranOnce)
		}
	}
	t.Logf("killed with %d ledger lines; %d attempts in all, %d claimed and never started", killedAt, attempts, lost)
	if len(c) != 2*attempts-2*lost {
		t.Errorf("%d ledger lines for %d attempts that ran", len(c), attempts-lost)
	}
}
