package main

import (
	"bytes"
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/rewind-dev/rewind/dsl"
	"github.com/rewind-dev/rewind/metrics/metricstest"
)

// metricsHCL: an hourly pipeline over six hours whose 03:00 run fails
// after a retry, and a daily one over two days.
const metricsHCL = `
pool "large" { slots = 3 }
pipeline "hourly" {
  schedule   = "@hourly"
  start_date = "2025-07-01T00:00:00Z"
  end_date   = "2025-07-01T05:00:00Z"
  task "extract" {
    command     = "test $REWIND_LOGICAL_DATE != 2025-07-01T03:00:00Z"
    retries     = 1
    retry_delay = "0s"
  }
  task "load" {
    depends_on = [task.extract]
    pool       = "large"
    command    = "true"
  }
}
pipeline "daily" {
  schedule   = "@daily"
  start_date = "2025-07-01"
  end_date   = "2025-07-02"
  task "t" { command = "true" }
}
`

// runCounts are the runs of runs --json by pipeline and state, and their
// attempts by pool and state.
func runCounts(runs []runJSON) (byState, attempts map[[2]string]float64) {
	byState, attempts = map[[2]string]float64{}, map[[2]string]float64{}
	for _, r := range runs {
		byState[[2]string{r.Pipeline, r.State}]++
		for _, ti := range r.Tasks {
			for _, a := range ti.Attempts {
				attempts[[2]string{a.Pool, a.State}]++
			}
		}
	}
	return byState, attempts
}

// checkMetrics checks a scrape against runs --json: every run state of
// every pipeline and every attempt outcome of every pool, and nothing
// more.
func checkMetrics(t *testing.T, where string, fams metricstest.Families, runs []runJSON) {
	t.Helper()
	byState, attempts := runCounts(runs)
	for _, p := range []string{"hourly", "daily"} {
		for _, st := range []string{"queued", "running", "success", "failed"} {
			got, ok := fams.Value("rewind_runs", "pipeline", p, "state", st)
			if want := byState[[2]string{p, st}]; !ok || got != want {
				t.Errorf("%s: rewind_runs{pipeline=%q,state=%q} = %v (%v); runs --json has %v", where, p, st, got, ok, want)
			}
		}
	}
	if got := fams.Sum("rewind_runs"); got != float64(len(runs)) {
		t.Errorf("%s: rewind_runs add up to %v; runs --json has %d runs", where, got, len(runs))
	}
	total := 0.0
	for k, n := range attempts {
		total += n
		if got, _ := fams.Value("rewind_attempts_total", "pool", k[0], "outcome", k[1]); got != n {
			t.Errorf("%s: rewind_attempts_total{pool=%q,outcome=%q} = %v; runs --json has %v", where, k[0], k[1], got, n)
		}
	}
	if got := fams.Sum("rewind_attempts_total"); got != total {
		t.Errorf("%s: rewind_attempts_total add up to %v; runs --json has %v attempts", where, got, total)
	}
}

var (
	uiURL      = regexp.MustCompile(`on (http://127\.0\.0\.1:\d+)/`)
	metricsURL = regexp.MustCompile(`url=(http://127\.0\.0\.1:\d+/metrics)`)
)

// listening waits until the process p says where it listens and returns it.
func listening(t *testing.T, p *proc, re *regexp.Regexp) string {
	t.Helper()
	var u string
	waitFor(t, p.args[0]+" to say where it listens", func() bool {
		if p.exited() {
			t.Fatalf("%v exited: %s", p.args, p.stderr.String())
		}
		m := re.FindStringSubmatch(p.stderr.String())
		if m != nil {
			u = m[1]
		}
		return m != nil
	})
	return u
}

// A real catchup on a SQLite state, then /metrics of `rewind ui` and of
// `rewind scheduler --metrics-listen 127.0.0.1:0`, parsed with expfmt:
// runs by pipeline and state and attempts by pool and outcome are what
// `rewind runs --json` shows; the scheduler adds its executions and its
// leadership, under its REWIND_HOST.
func TestMetricsMatchRunsJSON(t *testing.T) {
	t.Parallel()
	w := newWorkspace(t, map[string]string{"main.hcl": metricsHCL})
	if code, out, errs := w.rewind("run", "--catchup", "--now", "2025-07-03T00:00:00Z"); code != exitFailed {
		t.Fatalf("run --catchup: exit %d, want %d (one run fails)\n%s%s", code, exitFailed, out, errs)
	}
	runs := w.runsJSON()
	if len(runs) != 8 {
		t.Fatalf("%d runs, want 8", len(runs))
	}

	ui := w.start("ui", "--listen", "127.0.0.1:0")
	fams := metricstest.Scrape(t, listening(t, ui, uiURL)+"/metrics")
	checkMetrics(t, "rewind ui", fams, runs)
	if got, _ := fams.Value("rewind_attempts_total", "pool", "default", "outcome", "failed"); got != 2 {
		t.Errorf("rewind ui: rewind_attempts_total{default,failed} = %v, want the 2 tries of 03:00", got)
	}
	ui.term()

	s := w.startEnv([]string{"REWIND_HOST=metrics-test-host"}, "scheduler", "--metrics-listen", "127.0.0.1:0", "--poll", "50ms", "--grace", "1s")
	u := listening(t, s, metricsURL)
	waitFor(t, "the scheduler's first execution", func() bool {
		n, _ := metricstest.Scrape(t, u).Value("rewind_scheduler_executions_total", "result", "ok")
		return n >= 1
	})
	fams = metricstest.Scrape(t, u)
	checkMetrics(t, "rewind scheduler", fams, w.runsJSON())
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"rewind_leader", []string{"host", "metrics-test-host"}, 1},
		{"rewind_scheduler_leading", nil, 1},
		{"rewind_scheduler_takeovers_total", nil, 0},
		{"rewind_pool_slots", []string{"pool", "large"}, 3},
		{"rewind_attempts_running", []string{"pool", "large"}, 0},
		{"rewind_tasks_queued", []string{"pool", "default"}, 0},
		{"rewind_state_up", nil, 1},
	} {
		if got, ok := fams.Value(c.name, c.labels...); !ok || got != c.want {
			t.Errorf("rewind scheduler: %s%v = %v (%v), want %v", c.name, c.labels, got, ok, c.want)
		}
	}
	if n, _ := fams.Value("rewind_scheduler_execution_duration_seconds"); n < 1 {
		t.Errorf("rewind_scheduler_execution_duration_seconds counts %v executions, want at least 1", n)
	}
	if _, ok := fams.Value("rewind_leader_lease_age_seconds"); !ok {
		t.Errorf("no rewind_leader_lease_age_seconds while a scheduler leads")
	}
	s.term()
}

// --log-format json: each line the scheduler logs is one JSON object with
// time (RFC 3339), level and msg, then the line's own keys; a format that
// is neither text nor json is a usage error.
func TestSchedulerLogFormatJSON(t *testing.T) {
	t.Parallel()
	w := newWorkspace(t, map[string]string{"main.hcl": `
pipeline "p" {
  schedule   = "@daily"
  start_date = "2025-07-01"
  end_date   = "2025-07-02"
  task "t" { command = "echo $REWIND_DS >> days.log" }
}
`})
	p := w.start("scheduler", "--log-format", "json", "--poll", "50ms", "--grace", "1s")
	waitFor(t, "the catchup logged", func() bool { return strings.Contains(p.stderr.String(), `"msg":"execution done"`) })
	p.term()
	lines := strings.Split(strings.TrimSuffix(p.stderr.String(), "\n"), "\n")
	msgs := map[string]map[string]any{}
	for _, line := range lines {
		var obj map[string]any
		dec := json.NewDecoder(strings.NewReader(line))
		if err := dec.Decode(&obj); err != nil || dec.More() {
			t.Fatalf("not one JSON object: %q (%v)", line, err)
		}
		for _, k := range []string{"time", "level", "msg"} {
			if s, ok := obj[k].(string); !ok || s == "" {
				t.Errorf("%q: no %s", line, k)
			}
		}
		if _, err := time.Parse(time.RFC3339Nano, obj["time"].(string)); err != nil {
			t.Errorf("%q: time: %v", line, err)
		}
		msgs[obj["msg"].(string)] = obj
	}
	for _, msg := range []string{"scheduler started", "active: this scheduler leads", "run finished", "execution done", "scheduler stopped"} {
		if msgs[msg] == nil {
			t.Errorf("no %q line in\n%s", msg, p.stderr.String())
		}
	}
	if r := msgs["run finished"]; r != nil && (r["pipeline"] != "p" || r["state"] != "success" || r["level"] != "INFO") {
		t.Errorf("run finished: %v; want pipeline p, state success, level INFO", r)
	}
	if d := msgs["execution done"]; d != nil && d["succeeded"] != 2.0 {
		t.Errorf("execution done: %v; want succeeded 2", d)
	}
	if s := msgs["scheduler started"]; s != nil && s["lease_ttl"] != "30s" {
		t.Errorf("scheduler started: lease_ttl %v; want \"30s\", as in the text lines", s["lease_ttl"])
	}

	code, _, stderr := w.rewind("scheduler", "--log-format", "yaml")
	if code != exitUsage || !strings.Contains(stderr, `--log-format "yaml": want text or json`) {
		t.Errorf("--log-format yaml: exit %d, stderr %q; want exit 2 naming the choices", code, stderr)
	}
	code, _, stderr = w.rewind("scheduler", "--metrics-listen", "9464")
	if code != exitUsage || !strings.Contains(stderr, `--metrics-listen "9464": want HOST:PORT`) {
		t.Errorf("--metrics-listen 9464: exit %d, stderr %q; want exit 2 asking for HOST:PORT", code, stderr)
	}
}

// A sensitive value is redacted in each value of a log line before the
// handler quotes or escapes it: a secret with quotes and a backslash
// never reaches the log, as text or as JSON.
func TestSchedulerLogRedactsBeforeEscaping(t *testing.T) {
	w := newWorkspace(t, map[string]string{"main.hcl": `
variable "pw" {
  sensitive = true
}
pipeline "p" {
  schedule   = "@daily"
  start_date = "2025-07-01"
  task "t" { command = "true" }
}
`})
	const secret = `s3"cr\et`
	ws, diags := dsl.Load(w.dir, dsl.LoadOptions{Vars: map[string]string{"pw": secret}})
	if diags.HasErrors() {
		t.Fatal(diags.Error())
	}
	for _, format := range []string{logText, logJSON} {
		var buf bytes.Buffer
		log := schedulerLog(&liveRedact{w: &buf, ws: ws}, false, format)
		log.Warn("reload failed: "+secret, "detail", "the value "+secret, "error", errorString("bad "+secret))
		if strings.Contains(buf.String(), `s3`) || !strings.Contains(buf.String(), dsl.SensitiveText) {
			t.Errorf("%s: %s; want the secret redacted everywhere", format, buf.String())
		}
	}
}

type errorString string

func (e errorString) Error() string { return string(e) }

// Scraped during a catchup, held still (the attempts of 04:00 and 05:00
// wait for a gate file, two runs at a time): rewind scheduler's /metrics
// shows what runs --json shows at that moment, runs by state and attempts
// running or ended by pool; and again once the catchup has finished.
func TestMetricsDuringCatchup(t *testing.T) {
	t.Parallel()
	w := newWorkspace(t, map[string]string{"main.hcl": `
pipeline "hourly" {
  schedule        = "@hourly"
  start_date      = "2025-07-01T00:00:00Z"
  end_date        = "2025-07-01T11:00:00Z"
  max_active_runs = 2
  task "t" {
    command = "case $REWIND_LOGICAL_DATE in *T0[45]:*) while [ ! -e gate ]; do sleep 0.05; done;; esac"
  }
}
`})
	s := w.start("scheduler", "--metrics-listen", "127.0.0.1:0", "--poll", "50ms", "--grace", "1s", "--pause-new-over", "0")
	u := listening(t, s, metricsURL)
	compare := func(when string, wantRunning float64) {
		t.Helper()
		runs := w.runsJSON()
		fams := metricstest.Scrape(t, u)
		byState, attempts := runCounts(runs)
		for _, st := range []string{"queued", "running", "success", "failed"} {
			got, ok := fams.Value("rewind_runs", "pipeline", "hourly", "state", st)
			if want := byState[[2]string{"hourly", st}]; !ok || got != want {
				t.Errorf("%s: rewind_runs{state=%q} = %v (%v); runs --json has %v", when, st, got, ok, want)
			}
		}
		running, _ := fams.Value("rewind_attempts_running", "pool", "default")
		if running != attempts[[2]string{"default", "running"}] || running != wantRunning {
			t.Errorf("%s: rewind_attempts_running = %v; runs --json has %v running, want %v", when, running, attempts[[2]string{"default", "running"}], wantRunning)
		}
		if got, _ := fams.Value("rewind_attempts_total", "pool", "default", "outcome", "success"); got != attempts[[2]string{"default", "success"}] {
			t.Errorf("%s: rewind_attempts_total{success} = %v; runs --json has %v", when, got, attempts[[2]string{"default", "success"}])
		}
		t.Logf("%s: %v runs by state, %v attempts", when, byState, attempts)
	}
	// Held: 00:00..03:00 succeeded, 04:00 and 05:00 run, six queued.
	waitFor(t, "the catchup to stop at the gate", func() bool {
		return w.runsIn("success") == 4 && w.runsIn("running") == 2
	})
	compare("during the catchup", 2)
	if n := w.runsIn("queued"); n != 6 {
		t.Errorf("%d runs queued during the catchup, want 6", n)
	}
	w.touch("gate")
	waitFor(t, "the catchup to finish", func() bool { return w.runsIn("success") == 12 })
	compare("after the catchup", 0)
	s.term()
}
