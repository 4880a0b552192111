package scheduler_test

import (
	"context"
	"strings"
	"testing"

	"github.com/rewind-dev/rewind/scheduler"
	"github.com/rewind-dev/rewind/store"
)

const waitingHCL = `
pipeline "orders" {
  schedule   = "@daily"
  start_date = "2025-07-01"
  task "load" {
    command = "case $REWIND_DS in 2025-07-0[1-4]) exit 1;; esac"
  }
}
pipeline "kpis" {
  schedule        = "@daily"
  start_date      = "2025-07-01"
  max_active_runs = 4
  consumes        = [pipeline.orders]
  task "compute" { command = "true" }
}
`

func countRuns(runs []store.Run, state store.RunState) int {
	n := 0
	for _, r := range runs {
		if r.State == state {
			n++
		}
	}
	return n
}

// A consumer whose upstream failed on its first 4 dates, with
// max_active_runs = 4: the waiting runs hold no slot, every other date
// runs, and the summary names the upstream run each waits for.
func TestWaitingRunsHoldNoSlot(t *testing.T) {
	e := newEnv(t, waitingHCL)
	sum := e.run(scheduler.Options{Now: utc("2025-07-11T00:00:00Z")})
	kpis := e.runs("kpis")
	if got := countRuns(kpis, store.RunSuccess); got != 6 {
		t.Errorf("%d kpis runs succeeded; want 6", got)
	}
	if got := countRuns(kpis, store.RunQueued); got != 4 {
		t.Errorf("%d kpis runs queued; want the 4 waiting ones", got)
	}
	if !sum.Incomplete() || len(sum.Waiting) != 4 {
		t.Fatalf("summary: incomplete %v, waiting %+v; want 4 waiting runs", sum.Incomplete(), sum.Waiting)
	}
	for i, w := range sum.Waiting {
		ds := "2025-07-0" + string(rune('1'+i))
		if w.Pipeline != "kpis" || w.DS != ds || w.Upstream != "orders" || w.UpstreamDS != ds || w.UpstreamState != "failed" {
			t.Errorf("waiting %d: %+v; want kpis %s waiting for orders %s (failed)", i, w, ds, ds)
		}
	}
	if len(sum.Stuck) != 0 || len(sum.Held) != 0 {
		t.Errorf("stuck %+v, held %+v; want none", sum.Stuck, sum.Held)
	}
}

// Runs admitted before their producers were checked (by an older rewind)
// and waiting with no task started free their slots too.
func TestAdmittedWaitingRunsFreeTheirSlots(t *testing.T) {
	e := newEnv(t, waitingHCL)
	ctx := context.Background()
	e.run(scheduler.Options{Now: utc("2025-07-11T00:00:00Z")})
	for _, r := range e.runs("kpis") {
		if r.State == store.RunQueued {
			if err := e.st.AdmitRun(ctx, store.AdmitRunParams{RunID: r.ID, Now: utc("2025-07-11T00:00:00Z")}); err != nil {
				t.Fatal(err)
			}
		}
	}
	sum := e.run(scheduler.Options{Now: utc("2025-07-15T00:00:00Z")})
	kpis := e.runs("kpis")
	if got := countRuns(kpis, store.RunSuccess); got != 10 {
		t.Errorf("%d kpis runs succeeded; want 10: the 4 admitted waiting runs held the slots", got)
	}
	if len(sum.Waiting) != 4 {
		t.Errorf("waiting %+v; want the 4 runs of 2025-07-01..04", sum.Waiting)
	}
}

// A date run alone (the nightly run of a catchup = false pipeline) is
// compared with the dates within probe_window of it, not with itself.
func TestProbeWindowRoutesOneDate(t *testing.T) {
	e := newEnv(t, `
pool "large" { slots = 2 }
pipeline "events" {
  schedule   = "@daily"
  start_date = "2025-11-01"
  catchup    = false
  skew {
    probe        = ["sh", "-c", "if [ $0 = 2025-11-28 ]; then echo 5000; else echo 100; fi", run.ds]
    probe_window = "7d"
    pool         = "large"
  }
  task "load" { command = "true" }
}
`)
	sum := e.run(scheduler.Options{Now: utc("2025-11-29T00:00:00Z")})
	if len(sum.Finished) != 1 {
		t.Fatalf("finished %+v; want the one latest date", sum.Finished)
	}
	a := e.attempts("events", "2025-11-28", "load")[0]
	if a.Pool != "large" || a.Reason != "probe: 5000 > 3 x median 100" {
		t.Errorf("attempt on %q, reason %q; want large, probe: 5000 > 3 x median 100", a.Pool, a.Reason)
	}
}

// A probe that fails is a warning naming the date, and the attempt's
// reason says why the date ran on its own pool.
func TestProbeFailureIsAWarning(t *testing.T) {
	e := newEnv(t, `
pool "large" { slots = 2 }
pipeline "events" {
  schedule   = "@daily"
  start_date = "2025-11-27"
  skew {
    probe = ["sh", "-c", "if [ $0 = 2025-11-28 ]; then echo gone >&2; exit 3; fi; echo 100", run.ds]
    pool  = "large"
  }
  task "load" { command = "true" }
}
`)
	var warned []string
	sum := e.run(scheduler.Options{Now: utc("2025-11-29T00:00:00Z"), OnWarning: func(m string) { warned = append(warned, m) }})
	if len(sum.Warnings) != 1 || len(warned) != 1 || !strings.Contains(sum.Warnings[0], "probe of 2025-11-28 exited 3: gone") {
		t.Fatalf("warnings %q (called with %q); want one naming 2025-11-28 and the probe's stderr", sum.Warnings, warned)
	}
	a := e.attempts("events", "2025-11-28", "load")[0]
	if a.Pool != "default" || !strings.HasPrefix(a.Reason, "probe failed, not treated as hot: probe of 2025-11-28 exited 3: gone") {
		t.Errorf("attempt on %q, reason %q", a.Pool, a.Reason)
	}
}
