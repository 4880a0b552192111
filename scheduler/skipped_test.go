package scheduler_test

import (
	"fmt"
	"testing"

	"github.com/rewind-dev/rewind/scheduler"
)

// catchup = false passes over the due intervals before the latest; the
// summary says so once, when the latest run is created: on the first run,
// and after a gap (downtime), never for an interval already said or run.
func TestCatchupFalseSaysWhatItSkipped(t *testing.T) {
	e := newEnv(t, `
pipeline "latest_only" {
  schedule   = "@daily"
  start_date = "2025-07-01"
  catchup    = false
  task "t" { command = "true" }
}
pipeline "hourly" {
  schedule   = "@hourly"
  start_date = "2025-06-01"
  catchup    = false
  task "t" { command = "true" }
}
pipeline "all" {
  schedule   = "@daily"
  start_date = "2025-07-18"
  task "t" { command = "true" }
}
`)
	skipped := func(sum *scheduler.Summary) string {
		out := ""
		for _, s := range sum.Skipped {
			out += fmt.Sprintf("%s %d %s..%s;", s.Pipeline, s.Count, s.First.Format("2006-01-02T15"), s.Last.Format("2006-01-02T15"))
		}
		return out
	}
	steps := []struct {
		name, now string
		catchup   bool
		pipelines []string
		want      string
	}{
		{"first run: every interval since start_date but the latest", "2025-07-20T12:00:00Z", false, nil,
			"hourly 1187 2025-06-01T00..2025-07-20T10;latest_only 18 2025-07-01T00..2025-07-18T00;"},
		{"the same clock: nothing created, nothing said again", "2025-07-20T12:00:00Z", false, nil, ""},
		{"the next day: nothing passed over", "2025-07-21T00:30:00Z", false, []string{"latest_only"}, ""},
		{"after a downtime: the intervals of the gap", "2025-07-25T12:00:00Z", false, []string{"latest_only"},
			"latest_only 3 2025-07-21T00..2025-07-23T00;"},
		{"--catchup passes over nothing", "2025-07-28T12:00:00Z", true, []string{"latest_only"}, ""},
	}
	for _, s := range steps {
		sum := e.run(scheduler.Options{Now: utc(s.now), Catchup: s.catchup, Pipelines: s.pipelines})
		if got := skipped(sum); got != s.want {
			t.Errorf("%s: skipped %q; want %q", s.name, got, s.want)
		}
	}
	if n := len(e.runs("latest_only")); n != 27 {
		t.Errorf("latest_only has %d runs; want 27 (2025-07-01..2025-07-27 after --catchup)", n)
	}
}
