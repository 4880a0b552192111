package web_test

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/rewind-dev/rewind/backfill"
	"github.com/rewind-dev/rewind/scheduler"
)

// A run's Gantt chart: one lane per try, the attempts from before a
// backfill took the date apart from the backfill's, and an axis of clock
// times.
func TestGanttTriesAndKinds(t *testing.T) {
	e := newEnv(t, `
pipeline "p" {
  schedule   = "@daily"
  timezone   = "Europe/Rome"
  start_date = "2025-07-01"
  task "extract" {
    command     = "f=tried_$REWIND_DS; if [ ! -e $f ]; then touch $f; exit 1; fi; echo ok"
    retries     = 1
    retry_delay = "0s"
  }
  task "load" {
    depends_on = [task.extract]
    command    = "true"
  }
}
`)
	now := utc("2025-07-02T00:00:00Z")
	e.run(scheduler.Options{Now: now})
	plan := e.plan(backfill.PlanParams{Pipeline: "p", Start: utc("2025-06-30T22:00:00Z"), End: utc("2025-06-30T22:00:00Z"), Reprocess: "completed", Now: now})
	res, err := e.apply(backfill.ApplyOptions{Plan: plan, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	srv := e.server("")
	var g struct {
		Runs []struct {
			ID int64 `json:"id"`
		} `json:"runs"`
	}
	_, body := get(t, srv, "/api/grid?pipeline=p")
	if err := jsonUnmarshal(body, &g); err != nil || len(g.Runs) != 1 {
		t.Fatalf("grid: %v %s", err, body)
	}
	_, page := get(t, srv, fmt.Sprintf("/pipelines/p/runs/%d", g.Runs[0].ID))
	sections := regexp.MustCompile(`<text class="sectionlabel k-(\w+)"[^>]*>[^<]*</text>`).FindAllStringSubmatch(page, -1)
	var kinds []string
	for _, s := range sections {
		kinds = append(kinds, s[1])
	}
	if strings.Join(kinds, ",") != "earlier,backfill" {
		t.Errorf("sections %v; want the earlier run's attempts, then the backfill's", kinds)
	}
	if !strings.Contains(page, "before backfill "+res.ID+" took the date") || !strings.Contains(page, "backfill "+res.ID+"</text>") {
		t.Errorf("the sections do not name the backfill %s", res.ID)
	}
	lanes := regexp.MustCompile(`<text class="tasklabel"[^>]*>(\w+) <tspan class="try">try (\d+)</tspan></text>`).FindAllStringSubmatch(page, -1)
	var got []string
	for _, l := range lanes {
		got = append(got, l[1]+" "+l[2])
	}
	// The scheduled run: extract failed, retried, then load; the
	// backfill's: extract and load again.
	if want := "extract 1,extract 2,load 1,extract 3,load 2"; strings.Join(got, ",") != want {
		t.Errorf("lanes %v; want %s", got, want)
	}
	if n := strings.Count(page, `<rect class="bar `); n != 5 {
		t.Errorf("%d bars; want one per attempt, 5", n)
	}
	ticks := regexp.MustCompile(`<text class="ticklabel"[^>]*>([^<]*)</text>`).FindAllStringSubmatch(page, -1)
	if len(ticks) < 2 || len(ticks) > 9 {
		t.Fatalf("%d ticks", len(ticks))
	}
	for _, tk := range ticks {
		if !regexp.MustCompile(`^\d\d:\d\d(:\d\d(\.\d+)?)?$`).MatchString(tk[1]) {
			t.Errorf("tick %q is not a clock time", tk[1])
		}
	}
	if !regexp.MustCompile(`<text class="zone" x="4" y="14">Europe/Rome, CES?T</text>`).MatchString(page) || !strings.Contains(page, `<text class="tickday"`) {
		t.Error("the axis does not say its timezone and day")
	}
}

func jsonUnmarshal(s string, v any) error { return json.Unmarshal([]byte(s), v) }
