package web_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/rewind-dev/rewind/backfill"
	"github.com/rewind-dev/rewind/dsl"
	"github.com/rewind-dev/rewind/scheduler"
	"github.com/rewind-dev/rewind/store"
	"github.com/rewind-dev/rewind/timetable"
	"github.com/rewind-dev/rewind/web"
)

const hourlyHCL = `
pipeline "hourly" {
  schedule   = "@hourly"
  timezone   = "Europe/Rome"
  start_date = "2025-03-01"
  task "extract" { command = "true" }
  task "load" {
    depends_on = [task.extract]
    command    = "true"
  }
}
`

// materialize writes n runs of the env's pipeline, from its start_date,
// through the store as the engine writes them (queued, tasks scheduled):
// many runs without running any.
func (e *env) materialize(pipeline string, n int) []store.Run {
	e.t.Helper()
	ctx := context.Background()
	def := e.ws.Pipeline(pipeline)
	tt, err := timetable.New(def.Schedule, def.Timezone)
	if err != nil {
		e.t.Fatal(err)
	}
	var specs []store.RunSpec
	for iv := range tt.Intervals(timetable.Window{StartDate: def.StartDate, Now: time.Now()}) {
		if len(specs) == n {
			break
		}
		specs = append(specs, store.RunSpec{LogicalDate: iv.Start, DS: iv.DS(), DataIntervalStart: iv.Start, DataIntervalEnd: iv.End})
	}
	var tasks []store.TaskSpec
	for _, t := range def.Tasks {
		tasks = append(tasks, store.TaskSpec{Name: t.Name, Pool: "default"})
	}
	now := time.Now()
	if _, err := e.st.UpsertPipeline(ctx, store.UpsertPipelineParams{Name: pipeline, Hash: "h", Now: now}); err != nil {
		e.t.Fatal(err)
	}
	if _, err := e.st.MaterializeRuns(ctx, store.MaterializeRunsParams{Pipeline: pipeline, Kind: store.KindScheduled, Runs: specs, Tasks: tasks, Now: now}); err != nil {
		e.t.Fatal(err)
	}
	runs, err := e.st.ListRuns(ctx, store.ListRunsParams{Pipelines: []string{pipeline}})
	if err != nil {
		e.t.Fatal(err)
	}
	return runs
}

func gridJSON(t *testing.T, get func(string) (int, string), path string) web.GridJSON {
	t.Helper()
	code, body := get(path)
	var g web.GridJSON
	if code != 200 || json.Unmarshal([]byte(body), &g) != nil {
		t.Fatalf("%s: %d %s", path, code, body)
	}
	return g
}

// GET /api/grid reads a page of the grid: the latest 100 runs by default,
// older and newer pages by before= and after=, limit= up to 1,000; every
// run of a long history is on exactly one page of a walk back, and no
// request answers more than its limit. Counts are the pipeline's.
func TestAPIGridWindow(t *testing.T) {
	e := newEnv(t, hourlyHCL)
	all := e.materialize("hourly", 250)
	srv := e.server("")
	fetch := func(path string) (int, string) {
		res, body := get(t, srv, path)
		return res.StatusCode, body
	}

	g := gridJSON(t, fetch, "/api/grid?pipeline=hourly")
	if len(g.Runs) != 100 || g.Limit != 100 || g.Total != 250 || g.Counts["queued"] != 250 || !g.Active {
		t.Fatalf("default page: %d runs, limit %d, total %d, counts %v, active %v", len(g.Runs), g.Limit, g.Total, g.Counts, g.Active)
	}
	if g.Runs[99].ID != all[249].ID || g.Runs[0].ID != all[150].ID {
		t.Errorf("the default page is not the latest 100 runs")
	}
	if g.Older != all[150].LogicalDate.Format(time.RFC3339) || g.Newer != "" {
		t.Errorf("default page: older %q, newer %q; want the first run's logical date and none", g.Older, g.Newer)
	}
	// Sub-daily: columns named by HH:MM in the pipeline's timezone, the
	// day where it changes.
	if !g.SubDaily || g.Timezone != "Europe/Rome" {
		t.Errorf("sub_daily %v, timezone %q", g.SubDaily, g.Timezone)
	}
	hhmm := regexp.MustCompile(`^\d\d:\d\d$`)
	for i, r := range g.Runs {
		at := all[150+i].LogicalDate.In(time.FixedZone("CET", 3600))
		if !hhmm.MatchString(r.Label) || r.Label != at.Format("15:04") || r.At != at.Format("2006-01-02 15:04")+" CET" {
			t.Errorf("run %d: label %q, at %q; want %s", i, r.Label, r.At, at.Format("2006-01-02 15:04 MST"))
		}
		if wantDay := i == 0 || r.Label == "00:00"; (r.Day != "") != wantDay || wantDay && r.Day != r.DS {
			t.Errorf("run %d (%s): day %q", i, r.At, r.Day)
		}
	}

	// Walk back: three pages, every run once, in order.
	var walked []int64
	path := "/api/grid?pipeline=hourly"
	pages := 0
	for {
		p := gridJSON(t, fetch, path)
		pages++
		if len(p.Runs) > 100 {
			t.Fatalf("%s: %d runs; limit 100", path, len(p.Runs))
		}
		var ids []int64
		for _, r := range p.Runs {
			ids = append(ids, r.ID)
		}
		walked = append(ids, walked...)
		if pages > 1 && p.Newer != p.Runs[len(p.Runs)-1].LogicalDate {
			t.Errorf("%s: newer %q; want its last run %s", path, p.Newer, p.Runs[len(p.Runs)-1].LogicalDate)
		}
		if p.Older == "" {
			break
		}
		// The + of the offset as a browser that does not escape it sends it.
		path = "/api/grid?pipeline=hourly&before=" + p.Older
	}
	if pages != 3 || len(walked) != 250 {
		t.Fatalf("%d pages, %d runs; want 3 pages of the 250 runs", pages, len(walked))
	}
	for i, id := range walked {
		if id != all[i].ID {
			t.Fatalf("run %d of the walk is %d; want %d", i, id, all[i].ID)
		}
	}

	// Forward from the oldest page: after= the last run of a page; a page
	// that would reach the latest run is the latest page.
	oldest := gridJSON(t, fetch, "/api/grid?pipeline=hourly&limit=40&before="+url.QueryEscape(all[40].LogicalDate.Format(time.RFC3339)))
	if len(oldest.Runs) != 40 || oldest.Older != "" || oldest.Runs[0].ID != all[0].ID || oldest.Newer != all[39].LogicalDate.Format(time.RFC3339) {
		t.Fatalf("oldest page: %d runs from %d, older %q, newer %q", len(oldest.Runs), oldest.Runs[0].ID, oldest.Older, oldest.Newer)
	}
	next := gridJSON(t, fetch, "/api/grid?pipeline=hourly&limit=40&after="+url.QueryEscape(oldest.Newer))
	if len(next.Runs) != 40 || next.Runs[0].ID != all[40].ID || next.Older != all[40].LogicalDate.Format(time.RFC3339) || next.Newer == "" {
		t.Errorf("the page after the oldest: %d runs from %d, older %q, newer %q", len(next.Runs), next.Runs[0].ID, next.Older, next.Newer)
	}
	end := gridJSON(t, fetch, "/api/grid?pipeline=hourly&limit=40&after="+url.QueryEscape(all[230].LogicalDate.Format(time.RFC3339)))
	if len(end.Runs) != 40 || end.Runs[39].ID != all[249].ID || end.Newer != "" {
		t.Errorf("a page after the last 19 runs: %d runs ending %d, newer %q; want the latest 40", len(end.Runs), end.Runs[len(end.Runs)-1].ID, end.Newer)
	}

	// Bounds: limit= from 1 to 1,000; one of before= and after=.
	if one := gridJSON(t, fetch, "/api/grid?pipeline=hourly&limit=1"); len(one.Runs) != 1 || one.Runs[0].ID != all[249].ID {
		t.Errorf("limit=1: %d runs", len(one.Runs))
	}
	if most := gridJSON(t, fetch, "/api/grid?pipeline=hourly&limit=1000"); len(most.Runs) != 250 || most.Older != "" {
		t.Errorf("limit=1000: %d runs, older %q", len(most.Runs), most.Older)
	}
	for path, want := range map[string]string{
		"/api/grid?pipeline=hourly&limit=1001":                                             "limit=1001: want a number of runs from 1 to 1000",
		"/api/grid?pipeline=hourly&limit=0":                                                "limit=0",
		"/api/grid?pipeline=hourly&limit=-5":                                               "limit=-5",
		"/api/grid?pipeline=hourly&limit=ten":                                              "limit=ten",
		"/api/grid?pipeline=hourly&before=yesterday":                                       "before=yesterday: want a logical date",
		"/api/grid?pipeline=hourly&after=2025-03-01":                                       "after=2025-03-01: want a logical date",
		"/api/grid?pipeline=hourly&before=2025-03-02T00:00:00Z&after=2025-03-01T00:00:00Z": "give one of them",
		"/pipelines/hourly?limit=5000":                                                     "limit=5000",
	} {
		code, body := fetch(path)
		if code != 400 || !strings.Contains(body, want) {
			t.Errorf("%s: %d %s; want 400 saying %q", path, code, body, want)
		}
	}

	// The page follows the window: its columns, and its polls ask for the
	// same page.
	code, page := fetch("/pipelines/hourly?limit=30&before=" + url.QueryEscape(all[100].LogicalDate.Format(time.RFC3339)))
	if code != 200 || strings.Count(page, `<th class="run `) != 30 {
		t.Fatalf("the page of 30 runs: %d, %d columns", code, strings.Count(page, `<th class="run `))
	}
	if !strings.Contains(page, `data-window="&amp;before=2025-03-05T04%3A00%3A00%2B01%3A00&amp;limit=30"`) {
		t.Errorf("the page does not poll its own window:\n%s", page[strings.Index(page, `<div id="grid"`):][:300])
	}
	for _, want := range []string{`<span class="day">2025-03-04</span> 00:00</a>`, `>23:00</a>`, `id="pg-older" href="/pipelines/hourly?before=2025-03-03T22%3a00%3a00%2b01%3a00&amp;limit=30"`} {
		if !strings.Contains(page, want) {
			t.Errorf("the page lacks %s", want)
		}
	}
}

// A daily pipeline keeps its days as column names; runs covered by a
// batch of a backfill name their batch's run.
func TestAPIGridBatches(t *testing.T) {
	e := newEnv(t, `
pipeline "daily" {
  schedule   = "@daily"
  start_date = "2025-03-01"
  task "t" { command = "true" }
}
`)
	now := utc("2025-03-08T00:00:00Z")
	e.run(scheduler.Options{Now: now})
	batch, err := dsl.ParseBatch("3d")
	if err != nil {
		t.Fatal(err)
	}
	plan := e.plan(backfill.PlanParams{Pipeline: "daily", Start: utc("2025-03-01T00:00:00Z"), End: utc("2025-03-06T00:00:00Z"), Reprocess: "completed", Now: now, Batch: batch})
	if _, err := e.apply(backfill.ApplyOptions{Plan: plan, Now: now}); err != nil {
		t.Fatal(err)
	}
	srv := e.server("")
	g := gridJSON(t, func(p string) (int, string) { res, b := get(t, srv, p); return res.StatusCode, b }, "/api/grid?pipeline=daily")
	if len(g.Runs) != 7 || g.SubDaily {
		t.Fatalf("%d runs, sub_daily %v", len(g.Runs), g.SubDaily)
	}
	var got []string
	for _, r := range g.Runs {
		if r.Label != r.DS || r.At != r.DS || r.Day != "" {
			t.Errorf("a daily run is named %q %q %q; want its ds", r.Label, r.At, r.Day)
		}
		got = append(got, fmt.Sprintf("%s %s %s %d", r.DS, r.Kind, r.BatchOf, r.BatchRun))
	}
	lead1, lead2 := g.Runs[0].ID, g.Runs[3].ID
	want := []string{
		"2025-03-01 backfill  0",
		fmt.Sprintf("2025-03-02 backfill backfill__2025-03-01T00:00:00Z %d", lead1),
		fmt.Sprintf("2025-03-03 backfill backfill__2025-03-01T00:00:00Z %d", lead1),
		"2025-03-04 backfill  0",
		fmt.Sprintf("2025-03-05 backfill backfill__2025-03-04T00:00:00Z %d", lead2),
		fmt.Sprintf("2025-03-06 backfill backfill__2025-03-04T00:00:00Z %d", lead2),
		"2025-03-07 scheduled  0",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("runs:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if g.Runs[0].Seconds <= 0 || g.Runs[1].Seconds != 0 {
		t.Errorf("durations: the batch's run %v, a covered run %v; want > 0 and 0", g.Runs[0].Seconds, g.Runs[1].Seconds)
	}
	_, page := get(t, srv, "/pipelines/daily")
	if n := strings.Count(page, `<th class="run s-success covered"`); n != 4 {
		t.Errorf("%d covered columns on the page; want 4", n)
	}
	if !strings.Contains(page, fmt.Sprintf("covered by batch run backfill__2025-03-01T00:00:00Z (run %d)", lead1)) {
		t.Error("the page does not name the batch's run of a covered run")
	}
}
