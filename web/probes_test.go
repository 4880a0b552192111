package web_test

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rewind-dev/rewind/scheduler"
	"github.com/rewind-dev/rewind/web"
)

// probedHCL: a daily pipeline whose skew probe appends a line to the file
// probes.log of the workspace each time it runs (the count of probes), and
// prints 900 for 2025-03-04 (hot: over 3 x the median 100), else 100.
const probedHCL = `
pool "large" { slots = 2 }
pipeline "probed" {
  schedule   = "@daily"
  start_date = "2025-03-01"
  skew {
    probe      = ["sh", "-c", "echo $0 >> probes.log; if [ $0 = 2025-03-04 ]; then echo 900; else echo 100; fi", run.ds]
    hot_factor = 3
    pool       = "large"
  }
  task "t" { command = "true" }
}
`

// probeCount is how many probes ran in the workspace dir.
func probeCount(t *testing.T, dir string) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "probes.log"))
	if os.IsNotExist(err) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(b), "\n")
}

// GET /api/dates shows the probe values a run recorded and runs no probe:
// a date no run measured is "not_probed"; `rewind dates --recorded` prints
// the same bytes, and plain `rewind dates` measures.
func TestAPIDatesShowsRecordedProbes(t *testing.T) {
	e := newEnv(t, probedHCL)
	e.run(scheduler.Options{Catchup: true, Now: utc("2025-03-05T00:00:00Z")}) // 2025-03-01 .. 04
	ran := probeCount(t, e.dir)
	if ran == 0 {
		t.Fatal("the run measured no date")
	}
	srv := e.server("")
	path := "/api/dates?pipeline=probed&start=2025-03-02&end=2025-03-06&now=2025-03-10T00:00:00Z"
	var body string
	for range 5 {
		var res *http.Response
		if res, body = get(t, srv, path); res.StatusCode != 200 {
			t.Fatalf("%s: %d %s", path, res.StatusCode, body)
		}
	}
	if n := probeCount(t, e.dir); n != ran {
		t.Errorf("the view ran %d probes", n-ran)
	}
	var dates []web.DateJSON
	if err := json.Unmarshal([]byte(body), &dates); err != nil || len(dates) != 5 {
		t.Fatalf("dates: %v %s", err, body)
	}
	for _, d := range dates {
		if d.Probe == nil {
			t.Fatalf("%s: no probe field: %s", d.DS, body)
		}
		switch d.DS {
		case "2025-03-02", "2025-03-03":
			if d.Probe.State != web.ProbeMeasured || d.Probe.Value == nil || *d.Probe.Value != 100 || d.Probe.MeasuredAt == "" || d.Pool != "default" || d.Reason != "" {
				t.Errorf("%s: %+v %+v", d.DS, d, *d.Probe)
			}
		case "2025-03-04":
			if d.Probe.State != web.ProbeMeasured || *d.Probe.Value != 900 || *d.Probe.Median != 100 || d.Pool != "large" || d.Reason != "probe: 900 > 3 x median 100" {
				t.Errorf("%s: %+v %+v", d.DS, d, *d.Probe)
			}
		default: // no run yet
			if d.Probe.State != web.ProbeNotProbed || d.Probe.Value != nil || d.Probe.MeasuredAt != "" || d.Pool != "default" {
				t.Errorf("%s: %+v %+v", d.DS, d, *d.Probe)
			}
		}
	}
	out, errOut, code := cli(t, e.dir, e.state, "dates", "probed", e.dir, "--start", "2025-03-02", "--end", "2025-03-06", "--now", "2025-03-10T00:00:00Z", "--recorded", "--json")
	if code != 0 || out != body {
		t.Errorf("rewind dates --recorded --json (exit %d, %s) differs from /api/dates:\n--- cli\n%s\n--- api\n%s", code, errOut, out, body)
	}
	text, _, _ := cli(t, e.dir, e.state, "dates", "probed", e.dir, "--start", "2025-03-04", "--end", "2025-03-05", "--now", "2025-03-10T00:00:00Z", "--recorded")
	if !strings.Contains(text, "large  (probe: 900 > 3 x median 100)") || !strings.Contains(text, "default  (not probed yet)") {
		t.Errorf("rewind dates --recorded:\n%s", text)
	}
	if n := probeCount(t, e.dir); n != ran {
		t.Errorf("rewind dates --recorded ran %d probes", n-ran)
	}
	// The operator's own command measures.
	out, errOut, code = cli(t, e.dir, e.state, "dates", "probed", e.dir, "--start", "2025-03-05", "--end", "2025-03-05", "--now", "2025-03-10T00:00:00Z", "--json")
	if code != 0 || !strings.Contains(out, `"state": "measured"`) || probeCount(t, e.dir) == ran {
		t.Errorf("rewind dates --json (exit %d, %s) did not measure:\n%s", code, errOut, out)
	}
}

// Every window a request names is bounded: more than web.MaxDates due
// intervals, or now= more than a year ahead, is a 400 that says so.
func TestAPIDatesBoundsTheWindow(t *testing.T) {
	e := newEnv(t, `
pipeline "minutely" {
  schedule   = "* * * * *"
  start_date = "2025-03-01"
  skew {
    probe = ["sh", "-c", "echo x >> probes.log; echo 1"]
    pool  = "default"
  }
  task "t" { command = "true" }
}
`)
	srv := e.server("")
	for path, want := range map[string]int{
		"/api/dates?pipeline=minutely":                                                     400, // start_date .. the clock
		"/api/dates?pipeline=minutely&now=2125-01-01":                                      400,
		"/api/dates?pipeline=minutely&start=2025-03-01&end=2025-03-01&now=2025-03-02":      400, // 1,440
		"/api/dates?pipeline=minutely&start=2025-03-01T00:00:00Z&end=2025-03-01T16:39:00Z": 200, // 1,000
		"/api/dates?pipeline=minutely&start=2025-03-01T00:00:00Z&end=2025-03-01T16:40:00Z": 400, // 1,001
		"/api/dates?pipeline=minutely&start=2025-03-01T00:00:00Z&end=2025-03-01T01:00:00Z": 200,
	} {
		res, body := get(t, srv, path)
		if res.StatusCode != want {
			t.Errorf("%s: %d; want %d: %s", path, res.StatusCode, want, body)
			continue
		}
		if want == 400 && !strings.Contains(body, "due intervals") && !strings.Contains(body, "one year") {
			t.Errorf("%s: the 400 does not say why: %s", path, body)
		}
		if want == 200 && strings.Count(body, `"state": "not_probed"`) != strings.Count(body, `"logical_date"`) {
			t.Errorf("%s: dates should all be not_probed", path)
		}
	}
	if n := probeCount(t, e.dir); n != 0 {
		t.Errorf("the view ran %d probes", n)
	}
}
