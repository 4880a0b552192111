package web_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/rewind-dev/rewind/metrics/metricstest"
	"github.com/rewind-dev/rewind/web"
)

// GET /metrics serves the state's counts in the text format: runs by
// pipeline and state and attempts by pool and outcome as /api/runs
// (`rewind runs --json`) has them, and the workspace's pools.
func TestMetricsAreTheRuns(t *testing.T) {
	e := dailyEnv(t)
	srv := e.server("")
	_, body := get(t, srv, "/api/runs")
	var runs []web.RunJSON
	if err := json.Unmarshal([]byte(body), &runs); err != nil {
		t.Fatal(err)
	}
	fams := metricstest.Scrape(t, srv.URL+"/metrics")
	checkRunCounts(t, fams, runs)
	if got, _ := fams.Value("rewind_pool_slots", "pool", "large"); got != 2 {
		t.Errorf("rewind_pool_slots{large} = %v, want 2", got)
	}
	if got, _ := fams.Value("rewind_state_up"); got != 1 {
		t.Errorf("rewind_state_up = %v, want 1", got)
	}
}

// checkRunCounts checks that rewind_runs and rewind_attempts_total count
// what runs (as `rewind runs --json` has them) hold.
func checkRunCounts(t *testing.T, fams metricstest.Families, runs []web.RunJSON) {
	t.Helper()
	byState := map[[2]string]float64{}
	attempts := map[[2]string]float64{}
	for _, r := range runs {
		byState[[2]string{r.Pipeline, r.State}]++
		for _, ti := range r.Tasks {
			for _, a := range ti.Attempts {
				attempts[[2]string{a.Pool, a.State}]++
			}
		}
	}
	if len(byState) < 2 || len(attempts) < 2 {
		t.Fatalf("runs %v, attempts %v: want runs and attempts in two states at least", byState, attempts)
	}
	for k, n := range byState {
		if got, _ := fams.Value("rewind_runs", "pipeline", k[0], "state", k[1]); got != n {
			t.Errorf("rewind_runs{pipeline=%q,state=%q} = %v; runs --json has %v", k[0], k[1], got, n)
		}
	}
	if got, want := fams.Sum("rewind_runs"), float64(len(runs)); got != want {
		t.Errorf("rewind_runs add up to %v; runs --json has %v runs", got, want)
	}
	for k, n := range attempts {
		if got, _ := fams.Value("rewind_attempts_total", "pool", k[0], "outcome", k[1]); got != n {
			t.Errorf("rewind_attempts_total{pool=%q,outcome=%q} = %v; runs --json has %v", k[0], k[1], got, n)
		}
	}
}

// /metrics follows the view's token rule, as every route does: with a
// token, a scraper sends it as a bearer token (Prometheus's
// authorization.credentials_file), and without it gets a 401 in JSON,
// not the sign-in page and no names.
func TestMetricsNeedTheToken(t *testing.T) {
	e := dailyEnv(t)
	const token = "0123456789abcdef"
	srv := e.server(token)
	for _, h := range [][]string{nil, {"Authorization", "Bearer wrong"}} {
		res, body := get(t, srv, "/metrics", h...)
		if res.StatusCode != 401 || !strings.Contains(res.Header.Get("WWW-Authenticate"), "Bearer") ||
			res.Header.Get("Content-Type") != "application/json" || strings.Contains(body, "daily") {
			t.Errorf("/metrics %v: %d %s %q; want 401 in JSON without names", h, res.StatusCode, res.Header.Get("Content-Type"), body)
		}
	}
	fams := metricstest.Scrape(t, srv.URL+"/metrics", "Authorization", "Bearer "+token)
	if got := fams.Sum("rewind_runs", "pipeline", "daily"); got != 6 {
		t.Errorf("rewind_runs{pipeline=daily} add up to %v, want 6", got)
	}
	// Without a token, loopback names only, as every route.
	open := e.server("")
	if res, _ := get(t, open, "/metrics", "Host", "rebound.example:8080"); res.StatusCode != 403 {
		t.Errorf("/metrics for Host rebound.example: %d, want 403", res.StatusCode)
	}
}
