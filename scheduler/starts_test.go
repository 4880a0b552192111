package scheduler_test

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/rewind-dev/rewind/scheduler"
	"github.com/rewind-dev/rewind/store"
)

// An attempt that runs long has its pid in the state while it runs: with
// no other attempt ending, the loop records the start before it waits.
func TestStartRecordedWhileItRuns(t *testing.T) {
	e := newEnv(t, `
pipeline "long" {
  schedule   = "@daily"
  start_date = "2025-01-01"
  task "w" { command = "while [ ! -e release ]; do sleep 0.05; done" }
}
`)
	done := make(chan *scheduler.Summary, 1)
	go func() { done <- e.run(scheduler.Options{Now: utc("2025-01-02T00:00:00Z")}) }()
	var got store.RunningAttempt
	deadline := time.Now().Add(30 * time.Second)
	for got.PID == 0 {
		if time.Now().After(deadline) {
			e.touch("release")
			t.Fatalf("no pid recorded for the running attempt after 30 s: %+v", got)
		}
		time.Sleep(20 * time.Millisecond)
		ras, err := e.st.RunningAttempts(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if len(ras) == 1 {
			got = ras[0]
		}
	}
	if err := syscall.Kill(got.PID, 0); err != nil || got.PIDStart == 0 || got.StartedAt.IsZero() {
		t.Errorf("the recorded process: pid %d (%v), start %d, started at %v", got.PID, err, got.PIDStart, got.StartedAt)
	}
	e.touch("release")
	if sum := <-done; sum.Failed() || len(sum.Finished) != 1 {
		t.Fatalf("summary %+v", sum)
	}
}

// Attempts that end as fast as they start have their pids recorded too:
// the pass that records an end records the starts before it.
func TestStartsRecordedWithTheirEnds(t *testing.T) {
	e := newEnv(t, `
pool "default" { slots = 4 }
pipeline "short" {
  schedule        = "@hourly"
  start_date      = "2025-01-01"
  max_active_runs = 4
  task "a" { command = ["true"] }
  task "b" {
    command    = "exit 0"
    depends_on = [task.a]
  }
}
`)
	sum := e.run(scheduler.Options{Now: utc("2025-01-02T00:00:00Z")})
	if sum.Failed() || len(sum.Finished) != 24 {
		t.Fatalf("summary %+v", sum)
	}
	n := 0
	for _, r := range e.runs("short") {
		for _, ti := range r.Tasks {
			for _, a := range ti.Attempts {
				n++
				// (no pid start time here: a process that exits before
				// its start time is read from /proc has none)
				if a.PID == 0 || a.StartedAt.IsZero() || a.StartedAt.After(a.EndedAt) {
					t.Errorf("%s %s try %d: pid %d, started %v, ended %v", r.DS, ti.Task, a.TryNumber, a.PID, a.StartedAt, a.EndedAt)
				}
			}
		}
	}
	if n != 48 {
		t.Errorf("%d attempts, want 48", n)
	}
}
