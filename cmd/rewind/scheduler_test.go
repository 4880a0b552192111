package main

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// rewind scheduler catches up at start, reloads on SIGHUP, and on SIGTERM
// stops (the running attempt gets the grace period and is recorded as
// interrupted) and exits 0.
func TestSchedulerCommand(t *testing.T) {
	t.Parallel()
	w := newWorkspace(t, map[string]string{
		"main.hcl": `
pipeline "p" {
  schedule   = "@daily"
  start_date = "2025-07-01"
  end_date   = "2025-07-03"
  task "t" {
    command = "echo $REWIND_DS >> days.log"
  }
}
`,
	})
	p := w.start("scheduler", "--poll", "50ms", "--grace", "1s")
	waitFor(t, "the catchup of 3 days", func() bool { return len(w.lines("days.log")) == 3 })

	// A new pipeline, loaded on SIGHUP, starts a task that runs until stopped.
	body := `
pipeline "long" {
  schedule   = "@daily"
  start_date = "2025-07-01"
  end_date   = "2025-07-01"
  task "sleep" {
    command = "echo started >> long.log; sleep 60"
  }
}
`
	if err := os.WriteFile(filepath.Join(w.dir, "long.hcl"), []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	p.signal(syscall.SIGHUP)
	waitFor(t, "the new pipeline's task", func() bool { return len(w.lines("long.log")) == 1 })
	if !strings.Contains(p.stderr.String(), "msg=reloaded") {
		t.Fatalf("no reload logged:\n%s", p.stderr.String())
	}

	p.term()
	if !strings.Contains(p.stderr.String(), "scheduler stopped") {
		t.Fatalf("stderr:\n%s", p.stderr.String())
	}
	ti := findTask(t, w.runsJSON(), "2025-07-01", "sleep")
	if len(ti.Attempts) != 1 || ti.Attempts[0].State != "interrupted" {
		t.Fatalf("attempts %+v, want one interrupted", ti.Attempts)
	}
}

// A workspace that does not load: exit 2 with the diagnostics.
func TestSchedulerCommandBroken(t *testing.T) {
	t.Parallel()
	w := newWorkspace(t, map[string]string{"main.hcl": "pipeline \"p\" {\n  bogus = 1\n}\n"})
	code, _, stderr := w.rewind("scheduler")
	if code != exitUsage || !strings.Contains(stderr, "main.hcl:2") {
		t.Fatalf("exit %d, stderr:\n%s", code, stderr)
	}
	code, _, stderr = w.rewind("scheduler", "--lease-ttl", "100ms")
	if code != exitUsage || !strings.Contains(stderr, "--lease-ttl 100ms: want a duration of 1s or more") {
		t.Fatalf("--lease-ttl 100ms: exit %d, stderr:\n%s", code, stderr)
	}
	// A grace at or above 0.4 x the TTL: a scheduler that lost its lease
	// could not have stopped its attempts before a standby takes over.
	for _, args := range [][]string{{"--grace", "1m"}, {"--lease-ttl", "3s", "--grace", "2s"}, {"--lease-ttl", "10s", "--grace", "4s"}} {
		code, _, stderr = w.rewind(append([]string{"scheduler"}, args...)...)
		if code != exitUsage || !strings.Contains(stderr, "the grace must be under 0.4 x the lease TTL") {
			t.Fatalf("%v: exit %d, stderr:\n%s", args, code, stderr)
		}
	}
}

// rewind scheduler logs a failed run at WARN, with what failed in it, so
// that a log alert can page someone.
func TestSchedulerLogsFailedRun(t *testing.T) {
	t.Parallel()
	w := newWorkspace(t, map[string]string{
		"main.hcl": `
pipeline "p" {
  schedule   = "@hourly"
  start_date = "2025-07-01T00:00:00Z"
  end_date   = "2025-07-01T01:00:00Z"
  task "boom" {
    command = "test $REWIND_LOGICAL_DATE != 2025-07-01T01:00:00Z || exit 4"
  }
  task "after" {
    depends_on = [task.boom]
    command    = "true"
  }
}
`,
	})
	p := w.start("scheduler", "--poll", "50ms", "--grace", "1s")
	want := `level=WARN msg="run failed" pipeline=p logical_date=2025-07-01T01:00:00Z run_id=scheduled__2025-07-01T01:00:00Z kind=scheduled tasks="after (upstream_failed), boom (exit 4, try 1, pool default)"`
	waitFor(t, "the failed run logged at WARN", func() bool { return strings.Contains(p.stderr.String(), want) })
	p.term()
	if n := strings.Count(p.stderr.String(), `msg="run failed"`); n != 1 {
		t.Errorf("%d run failed lines, want 1:\n%s", n, p.stderr.String())
	}
}

// A pipeline new to the state whose catchup would create more runs than
// --pause-new-over starts paused in rewind scheduler, with a WARN naming
// the count and the unpause command; a small one runs at once.
func TestSchedulerPausesNewPipelineWithHistory(t *testing.T) {
	t.Parallel()
	w := newWorkspace(t, map[string]string{
		"main.hcl": `
pipeline "big" {
  schedule   = "@hourly"
  start_date = "2025-07-01T00:00:00Z"
  end_date   = "2025-07-02T00:00:00Z"
  task "t" {
    command = "echo big >> big.log"
  }
}
pipeline "small" {
  schedule   = "@daily"
  start_date = "2025-07-01"
  end_date   = "2025-07-03"
  task "t" {
    command = "echo small >> small.log"
  }
}
`,
	})
	p := w.start("scheduler", "--poll", "50ms", "--grace", "1s")
	waitFor(t, "the small pipeline's catchup", func() bool { return len(w.lines("small.log")) == 3 })
	want := `level=WARN msg="new pipeline paused: its catchup would create many runs" pipeline=big due_runs=25 over=24 unpause="rewind unpause big"`
	waitFor(t, "the WARN", func() bool { return strings.Contains(p.stderr.String(), want) })
	if n := len(w.lines("big.log")); n != 0 {
		t.Fatalf("the paused pipeline ran %d times", n)
	}
	if out, err := w.command("unpause", "big").CombinedOutput(); err != nil {
		t.Fatalf("unpause: %v\n%s", err, out)
	}
	waitFor(t, "the big pipeline's catchup after unpause", func() bool { return len(w.lines("big.log")) == 25 })
	p.term()
	if n := strings.Count(p.stderr.String(), "new pipeline paused"); n != 1 {
		t.Errorf("%d WARN lines, want 1 (a known pipeline is not paused again):\n%s", n, p.stderr.String())
	}
}
