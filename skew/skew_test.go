package skew_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rewind-dev/rewind/dsl"
	"github.com/rewind-dev/rewind/skew"
	"github.com/rewind-dev/rewind/store"
	"github.com/rewind-dev/rewind/timetable"
)

// The skew rules of one pipeline: Black Friday by expression, one date by
// list, a pool that escalates when an attempt runs out of memory.
const blackFriday = `
pool "large"  {
  slots = 2
}
pool "medium" {
  slots            = 4
  oom_escalate_to  = "large"
}
pipeline "revenue" {
  schedule   = "@daily"
  start_date = "2025-11-01"
  skew {
    hot_dates  = ["2025-11-03"]
    hot_when   = run.month == 11 && run.weekday == "Friday" && run.day >= 23 && run.day <= 29
    pool       = "large"
    hot_factor = 3
  }
  task "aggregate" {
    command = "true"
    pool    = "medium"
  }
}
`

func load(t *testing.T, hcl string) *dsl.Workspace {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "main.hcl"), []byte(hcl), 0o644); err != nil {
		t.Fatal(err)
	}
	ws, diags := dsl.Load(dir, dsl.LoadOptions{})
	if diags.HasErrors() {
		t.Fatalf("load: %s", diags.Error())
	}
	return ws
}

func day(ds string) time.Time {
	d, err := time.Parse("2006-01-02", ds)
	if err != nil {
		panic(err)
	}
	return d
}

// november is the pipeline's due intervals on 2025-12-01 (it starts on
// 2025-11-01).
func november(t *testing.T, p *dsl.Pipeline) []timetable.Interval {
	t.Helper()
	tt, err := timetable.New(p.Schedule, p.Timezone)
	if err != nil {
		t.Fatal(err)
	}
	var ivs []timetable.Interval
	for iv := range tt.Intervals(timetable.Window{StartDate: p.StartDate, Now: day("2025-12-01")}) {
		ivs = append(ivs, iv)
	}
	return ivs
}

func rv(ds string) dsl.RunVars {
	d := day(ds)
	return dsl.RunVars{ID: store.RunID(store.KindScheduled, d), Pipeline: "revenue", LogicalDate: d,
		DataIntervalStart: d, DataIntervalEnd: d.AddDate(0, 0, 1), Kind: string(store.KindScheduled)}
}

func attempt(try int, state store.AttemptState, pool string, took time.Duration) store.Attempt {
	start := day("2025-11-01")
	return store.Attempt{TryNumber: try, State: state, Pool: pool, StartedAt: start, EndedAt: start.Add(took)}
}

func TestTaskRoutes(t *testing.T) {
	ws := load(t, blackFriday)
	p := ws.Pipeline("revenue")
	task := p.Tasks[0]
	cases := []struct {
		name       string
		ds         string
		h          skew.History
		pool       string
		reasonHead string // "" for the task's own pool
	}{
		{"an ordinary Friday", "2025-11-21", skew.History{}, "medium", ""},
		{"Black Friday by expression", "2025-11-28", skew.History{}, "large", "hot_when: "},
		{"a listed date", "2025-11-03", skew.History{}, "large", "hot_dates"},
		{"the last try ran 4x the median", "2025-11-10",
			skew.History{Attempts: []store.Attempt{attempt(1, store.AttemptSuccess, "medium", 40*time.Minute)}, Median: 10 * time.Minute},
			"large", "history: try 1 ran 40m0s, over 3 x the median 10m0s"},
		{"the last try ran 2x the median", "2025-11-10",
			skew.History{Attempts: []store.Attempt{attempt(1, store.AttemptSuccess, "medium", 20*time.Minute)}, Median: 10 * time.Minute},
			"medium", ""},
		{"out of memory in medium escalates to large", "2025-11-10",
			skew.History{Attempts: []store.Attempt{attempt(1, store.AttemptOOM, "medium", time.Minute)}},
			"large", "oom escalation: try 1 ran out of memory in pool medium"},
		{"an OOM in another pool does not escalate this one", "2025-11-10",
			skew.History{Attempts: []store.Attempt{attempt(1, store.AttemptOOM, "large", time.Minute)}},
			"medium", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := skew.Task(ws, p, task, rv(c.ds), nil, c.h)
			if got.Pool != c.pool || !strings.HasPrefix(got.Reason, c.reasonHead) || (c.reasonHead == "" && got.Reason != "") {
				t.Errorf("route of %s = %+v, want pool %s and a reason starting %q", c.ds, got, c.pool, c.reasonHead)
			}
		})
	}
}

// DateRoutes is what `rewind dates` and plans show: the pipeline's skew
// block over a window, for tasks in the pipeline's default pool.
func TestDateRoutesOfNovember(t *testing.T) {
	ws := load(t, blackFriday)
	p := ws.Pipeline("revenue")
	ivs := november(t, p)
	if len(ivs) != 30 {
		t.Fatalf("%d intervals in November", len(ivs))
	}
	routes := skew.DateRoutes(context.Background(), p, ivs)
	hot := map[string]string{}
	for i, r := range routes {
		if r.Pool != "default" {
			hot[ivs[i].DS()] = r.Pool + " " + r.Reason
		}
	}
	want := map[string]string{
		"2025-11-03": "large hot_dates",
		"2025-11-28": "large hot_when: " + p.Skew.HotWhenText,
	}
	if len(hot) != len(want) {
		t.Fatalf("hot dates %v, want %v", hot, want)
	}
	for ds, w := range want {
		if hot[ds] != w {
			t.Errorf("%s: %q, want %q", ds, hot[ds], w)
		}
	}
}

// A probe measures each date against the median of its window: a date
// above hot_factor x the median is hot, a date whose probe fails is not,
// and the failure says which date and why.
func TestProbeRoutes(t *testing.T) {
	ws := load(t, `
pipeline "events" {
  schedule   = "@daily"
  start_date = "2025-11-01"
  skew {
    probe      = "case $REWIND_DS in 2025-11-28) echo 900;; 2025-11-05) echo not-a-number;; *) echo 100;; esac"
    hot_factor = 3
    pool       = "large"
  }
  task "t" {
    command = "true"
  }
}
pool "large" {
  slots = 1
}
`)
	p := ws.Pipeline("events")
	ivs := november(t, p)
	routes, failures := skew.DateRoutesChecked(skew.ProbeContext(context.Background(), day("2025-12-01")), p, ivs)
	for i, r := range routes {
		switch ds := ivs[i].DS(); ds {
		case "2025-11-28":
			if r.Pool != "large" || r.Detector != skew.DetectorProbe || !strings.HasPrefix(r.Reason, "probe: 900 > 3 x median 100") {
				t.Errorf("%s: %+v", ds, r)
			}
		case "2025-11-05":
			if r.Pool != "default" || r.Detector != "" || !strings.HasPrefix(r.Reason, "probe failed, not treated as hot: ") {
				t.Errorf("%s: %+v", ds, r)
			}
		default:
			if r.Pool != "default" || r.Reason != "" {
				t.Errorf("%s: %+v", ds, r)
			}
		}
	}
	if len(failures) != 1 || !strings.Contains(failures[0], "2025-11-05") {
		t.Errorf("failures %q, want one naming 2025-11-05", failures)
	}
}

// history is the workspace of the history detector's tests: a floor and a
// task that turns history off, another that turns it on against a block
// with history off.
func historyWorkspace(t *testing.T, skewAttrs string) *dsl.Workspace {
	t.Helper()
	return load(t, `
pool "large" {
  slots = 2
}
pipeline "hourly" {
  schedule   = "@hourly"
  start_date = "2025-11-01"
  skew {
    pool = "large"
`+skewAttrs+`
  }
  task "load" {
    command = "true"
  }
  task "quiet" {
    command      = "true"
    skew_history = false
  }
  task "loud" {
    command      = "true"
    skew_history = true
  }
}
`)
}

// The history detector counts a try only from its history_min_duration
// on (default one minute): 32 ms against a median of 6 ms is not hot, a
// try of a minute or more over hot_factor x the median is.
func TestHistoryFloor(t *testing.T) {
	const ms = time.Millisecond
	cases := []struct {
		name   string
		attrs  string // of the skew block, besides pool
		task   string
		took   time.Duration
		median time.Duration
		hot    bool
	}{
		{"32ms against 6ms, the default floor", "", "load", 32 * ms, 6 * ms, false},
		{"just under the default floor", "", "load", time.Minute - ms, 6 * ms, false},
		{"at the default floor", "", "load", time.Minute, 6 * ms, true},
		{"just over the default floor", "", "load", time.Minute + ms, 6 * ms, true},
		{"over the floor but not 3x the median", "", "load", 2 * time.Minute, time.Minute, false},
		{"over the floor and 3x the median", "", "load", 3*time.Minute + ms, time.Minute, true},
		{"under a floor of 10m", `history_min_duration = "10m"`, "load", 10*time.Minute - ms, ms, false},
		{"at a floor of 10m", `history_min_duration = "10m"`, "load", 10 * time.Minute, ms, true},
		{"no floor: 32ms against 6ms", `history_min_duration = "0s"`, "load", 32 * ms, 6 * ms, true},
		{"no floor: 18ms is not over 3x 6ms", `history_min_duration = "0s"`, "load", 18 * ms, 6 * ms, false},
		{"history off in the block", `history = false`, "load", time.Hour, 6 * ms, false},
		{"history off for the task", "", "quiet", time.Hour, 6 * ms, false},
		{"history on for the task, off in the block", `history = false`, "loud", time.Hour, 6 * ms, true},
		{"history on for the task, under the floor", `history = false`, "loud", 32 * ms, 6 * ms, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ws := historyWorkspace(t, c.attrs)
			p := ws.Pipeline("hourly")
			var task *dsl.Task
			for _, tk := range p.Tasks {
				if tk.Name == c.task {
					task = tk
				}
			}
			h := skew.History{Attempts: []store.Attempt{attempt(1, store.AttemptSuccess, "default", c.took)}, Median: c.median}
			got := skew.Task(ws, p, task, rv("2025-11-10"), nil, h)
			if c.hot {
				if got.Pool != "large" || got.Detector != skew.DetectorHistory || !strings.HasPrefix(got.Reason, "history: try 1 ran ") {
					t.Errorf("%s ran %s against a median of %s: %+v, want pool large by history", c.task, c.took, c.median, got)
				}
			} else if got != (skew.Route{Pool: "default"}) {
				t.Errorf("%s ran %s against a median of %s: %+v, want its own pool", c.task, c.took, c.median, got)
			}
		})
	}
}

// Each route names the detector that found the date hot.
func TestRouteDetectors(t *testing.T) {
	ws := load(t, blackFriday)
	p := ws.Pipeline("revenue")
	task := p.Tasks[0]
	for _, c := range []struct {
		ds       string
		h        skew.History
		detector string
	}{
		{"2025-11-21", skew.History{}, ""},
		{"2025-11-03", skew.History{}, skew.DetectorHotDates},
		{"2025-11-28", skew.History{}, skew.DetectorHotWhen},
		{"2025-11-10", skew.History{Attempts: []store.Attempt{attempt(1, store.AttemptSuccess, "medium", 40*time.Minute)}, Median: 10 * time.Minute}, skew.DetectorHistory},
		{"2025-11-10", skew.History{Attempts: []store.Attempt{attempt(1, store.AttemptOOM, "medium", time.Minute)}}, skew.DetectorOOM},
	} {
		if got := skew.Task(ws, p, task, rv(c.ds), nil, c.h); got.Detector != c.detector {
			t.Errorf("%s: %+v, want detector %q", c.ds, got, c.detector)
		}
	}
}
