package web_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	_ "github.com/mattn/go-sqlite3"

	"github.com/rewind-dev/rewind/backfill"
	"github.com/rewind-dev/rewind/lease"
	"github.com/rewind-dev/rewind/scheduler"
	"github.com/rewind-dev/rewind/store"
	"github.com/rewind-dev/rewind/store/pgtest"
	"github.com/rewind-dev/rewind/web"
)

// dailyHCL: two tasks over the days from 2025-03-01; 2025-03-04 fails in
// both tasks, 2025-03-05 runs load in pool large (a hot date of load's own
// skew block).
const dailyHCL = `
pool "large" { slots = 2 }
pipeline "daily" {
  schedule   = "@daily"
  start_date = "2025-03-01"
  task "extract" {
    command = "echo extracting $REWIND_DS; if [ $REWIND_DS = 2025-03-04 ]; then echo boom >&2; exit 1; fi"
  }
  task "load" {
    command = "echo loading $REWIND_DS in $REWIND_POOL; if [ $REWIND_DS = 2025-03-04 ]; then exit 3; fi"
    skew {
      hot_dates = ["2025-03-05"]
      pool      = "large"
    }
  }
}
`

func dailyEnv(t *testing.T) *env {
	e := newEnv(t, dailyHCL)
	e.run(scheduler.Options{Catchup: true, Now: utc("2025-03-07T00:00:00Z")}) // 6 dates
	return e
}

// GET /api/runs is `rewind runs --json`, byte for byte, with and without
// a pipeline.
func TestAPIRunsIsRunsJSON(t *testing.T) {
	e := dailyEnv(t)
	srv := e.server("")
	for _, q := range []struct{ path, args string }{
		{"/api/runs?pipeline=daily", "--pipeline daily"},
		{"/api/runs", ""},
	} {
		res, body := get(t, srv, q.path)
		if res.StatusCode != 200 || res.Header.Get("Content-Type") != "application/json" {
			t.Fatalf("%s: %d %s: %s", q.path, res.StatusCode, res.Header.Get("Content-Type"), body)
		}
		args := append([]string{"runs", "--json"}, strings.Fields(q.args)...)
		out, errOut, code := cli(t, e.dir, e.state, args...)
		if code != 0 {
			t.Fatalf("rewind %v: exit %d: %s", args, code, errOut)
		}
		if body != out {
			t.Errorf("%s differs from rewind %s:\n--- api\n%s\n--- cli\n%s", q.path, strings.Join(args, " "), body, out)
		}
	}
	var runs []web.RunJSON
	_, body := get(t, srv, "/api/runs?pipeline=daily")
	if err := json.Unmarshal([]byte(body), &runs); err != nil || len(runs) != 6 {
		t.Fatalf("runs: %v, %d runs", err, len(runs))
	}
	if r := runs[3]; r.DS != "2025-03-04" || r.State != "failed" || r.Tasks[0].Attempts[0].ExitCode == nil || *r.Tasks[0].Attempts[0].ExitCode != 1 {
		t.Errorf("the failed date: %+v", r)
	}
	if res, _ := get(t, srv, "/api/runs?pipeline=nope"); res.StatusCode != 404 {
		t.Errorf("unknown pipeline: %d; want 404", res.StatusCode)
	}
}

// The view reads a PostgreSQL state as it reads SQLite: the same runs
// JSON as the CLI, the same grid (skipped without $REWIND_TEST_POSTGRES,
// except in CI).
func TestAPIOnPostgres(t *testing.T) {
	e := newEnvOn(t, pgtest.DSN(t), dailyHCL)
	e.run(scheduler.Options{Catchup: true, Now: utc("2025-03-07T00:00:00Z")})
	srv := e.server("")
	_, body := get(t, srv, "/api/runs?pipeline=daily")
	out, errOut, code := cli(t, e.dir, e.state, "runs", "--pipeline", "daily", "--json")
	if code != 0 || body != out {
		t.Errorf("/api/runs on PostgreSQL differs from rewind runs --json (exit %d %s):\n--- api\n%s\n--- cli\n%s", code, errOut, body, out)
	}
	var g web.GridJSON
	_, body = get(t, srv, "/api/grid?pipeline=daily")
	if err := json.Unmarshal([]byte(body), &g); err != nil || len(g.Runs) != 6 || g.Runs[4].Pool != "large" {
		t.Errorf("grid on PostgreSQL: %v %s", err, body)
	}
	var c web.CellJSON
	_, body = get(t, srv, fmt.Sprintf("/api/cell?pipeline=daily&run=%d&task=extract", g.Runs[3].ID))
	json.Unmarshal([]byte(body), &c)
	if len(c.Attempts) != 1 {
		t.Fatalf("cell %s", body)
	}
	if _, text := get(t, srv, c.Attempts[0].Log); !strings.Contains(text, "boom") {
		t.Errorf("log tail on PostgreSQL: %q", text)
	}
}

// GET /api/dates is `rewind dates --recorded --json`.
func TestAPIDatesIsDatesJSON(t *testing.T) {
	e := dailyEnv(t)
	srv := e.server("")
	_, body := get(t, srv, "/api/dates?pipeline=daily&start=2025-03-02&end=2025-03-06&now=2025-03-10T00:00:00Z")
	if _, body2 := get(t, srv, "/api/dates?pipeline=daily&start=2025-03-02T00:00:00Z&end=2025-03-06T00:00:00Z&now=2025-03-10T00:00:00Z"); body2 != body {
		t.Errorf("timestamps bound the window like dates here:\n%s\n%s", body, body2)
	}
	out, errOut, code := cli(t, e.dir, e.state, "dates", "daily", e.dir, "--start", "2025-03-02", "--end", "2025-03-06", "--now", "2025-03-10T00:00:00Z", "--recorded", "--json")
	if code != 0 {
		t.Fatalf("rewind dates: exit %d: %s", code, errOut)
	}
	if body != out {
		t.Errorf("/api/dates differs from rewind dates --json:\n--- api\n%s\n--- cli\n%s", body, out)
	}
	var dates []web.DateJSON
	if err := json.Unmarshal([]byte(body), &dates); err != nil || len(dates) != 5 {
		t.Fatalf("dates: %v %v", err, dates)
	}
	for path, want := range map[string]int{"/api/dates?pipeline=nope": 404, "/api/dates?pipeline=daily&start=yesterday": 400, "/api/dates": 400,
		"/api/dates?pipeline=daily&start=2025-03-05&end=2025-03-04": 400} {
		if res, _ := get(t, srv, path); res.StatusCode != want {
			t.Errorf("%s: %d; want %d", path, res.StatusCode, want)
		}
	}
}

// revenueHCL writes one CSV per day, its amounts scaled by the file
// factor: a backfill after a factor change fails its validation.
const revenueHCL = `
catalog "local" {
  uri       = ".rewind/catalog.db"
  warehouse = ".rewind/warehouse"
}
pipeline "revenue" {
  schedule        = "@daily"
  start_date      = "2025-07-01"
  max_active_runs = 4
  task "compute" {
    command = "awk -v ds=$REWIND_DS -v f=$(cat factor) 'BEGIN { print \"ds,currency,amount_usd\"; print ds \",EUR,\" 100*f; print ds \",USD,\" 50*f }' > $REWIND_RUN_DIR/revenue.csv"
  }
  output "revenue" {
    table     = "analytics.fct_daily_revenue"
    from      = "${run.dir}/revenue.csv"
    columns   = { ds = "date", currency = "string", amount_usd = "double" }
    partition = "ds"
    validate {
      max_change = { amount_usd = 0.05 }
    }
  }
}
`

// failedValidation makes a backfill of 2025-07-01 .. 2025-07-02 whose
// amounts doubled: over max_change, so main is untouched and the
// backfill failed (scheduler's TestOutputsValidationBlocksCutover).
func failedValidation(t *testing.T) (*env, string) {
	e := newEnv(t, revenueHCL)
	e.write("factor", "1")
	now := utc("2025-07-03T00:00:00Z")
	e.run(scheduler.Options{Now: now})
	e.write("factor", "2")
	plan := e.plan(backfill.PlanParams{Pipeline: "revenue", Start: utc("2025-07-01T00:00:00Z"), End: utc("2025-07-02T00:00:00Z"), Reprocess: "completed", Now: now})
	res, err := e.apply(backfill.ApplyOptions{Plan: plan, Now: now})
	if !errors.Is(err, backfill.ErrValidation) || res.State != store.BackfillFailed {
		t.Fatalf("apply: %v; want a validation failure", err)
	}
	return e, res.ID
}

// GET /api/backfills/ID/status is `rewind backfill status ID --json`;
// GET /api/backfills/ID has the validation table with the failing dates.
func TestAPIBackfill(t *testing.T) {
	e, id := failedValidation(t)
	srv := e.server("")
	_, body := get(t, srv, "/api/backfills/"+id+"/status")
	out, errOut, code := cli(t, e.dir, e.state, "backfill", "status", id, "--json")
	if code != 0 {
		t.Fatalf("rewind backfill status: exit %d: %s", code, errOut)
	}
	if body != out {
		t.Errorf("/api/backfills/%s/status differs from rewind backfill status --json:\n--- api\n%s\n--- cli\n%s", id, body, out)
	}

	res, body := get(t, srv, "/api/backfills/"+id)
	if res.StatusCode != 200 {
		t.Fatalf("%d %s", res.StatusCode, body)
	}
	var b web.BackfillJSON
	if err := json.Unmarshal([]byte(body), &b); err != nil {
		t.Fatal(err)
	}
	if b.Validation == nil || b.Validation.Failing != 2 || len(b.Validation.Rows) != 2 || b.Validation.Old != "main" {
		t.Fatalf("validation %+v", b.Validation)
	}
	for _, r := range b.Validation.Rows {
		if !r.Violates || r.Old != 150 || r.New != 300 || r.Change == nil || *r.Change != 1 {
			t.Errorf("row %+v; want 150 -> 300, change 1, over max_change", r)
		}
	}
	phase := map[string]string{}
	for _, p := range b.Phases {
		phase[p.Name] = p.State
	}
	if phase["run"] != "done" || phase["validate"] != "failed" || phase["cutover"] != "pending" {
		t.Errorf("phases %v", phase)
	}
	if b.Plan == nil || b.Plan.Selected != 2 || len(b.Dates) != 2 || b.Progress["success"] != 2 {
		t.Errorf("plan %+v, dates %+v, progress %v", b.Plan, b.Dates, b.Progress)
	}
	if len(b.Outputs) != 1 || !b.Outputs[0].BranchSet || b.Outputs[0].TagSet {
		t.Errorf("outputs %+v; want the branch kept and no tag (no cutover)", b.Outputs)
	}
	if res, _ := get(t, srv, "/api/backfills/nope"); res.StatusCode != 404 {
		t.Errorf("unknown backfill: %d", res.StatusCode)
	}
	// The page shows the failing dates and their change.
	_, page := get(t, srv, "/backfills/"+id)
	for _, want := range []string{`<tr class="violates" data-ds="2025-07-01">`, `<tr class="violates" data-ds="2025-07-02">`, "100.00%", "validate"} {
		if !strings.Contains(page, want) {
			t.Errorf("the backfill page lacks %q", want)
		}
	}
}

// The grid: runs as columns oldest first, tasks in the workspace's order,
// the hot date marked with its pool and reason.
func TestAPIGrid(t *testing.T) {
	e := dailyEnv(t)
	srv := e.server("")
	_, body := get(t, srv, "/api/grid?pipeline=daily")
	var g web.GridJSON
	if err := json.Unmarshal([]byte(body), &g); err != nil {
		t.Fatal(err)
	}
	if len(g.Runs) != 6 || strings.Join(g.Tasks, ",") != "extract,load" || g.Active || g.Counts["failed"] != 1 {
		t.Fatalf("grid: %d runs, tasks %v, active %v, counts %v", len(g.Runs), g.Tasks, g.Active, g.Counts)
	}
	for i, r := range g.Runs {
		if want := fmt.Sprintf("2025-03-%02d", i+1); r.DS != want {
			t.Errorf("column %d is %s; want %s", i, r.DS, want)
		}
	}
	if c := g.Runs[3].Cells; c[0].State != "failed" || c[1].State != "failed" {
		t.Errorf("2025-03-04: %+v", c)
	}
	hot := g.Runs[4]
	if hot.Pool != "large" || hot.Reason != "hot_dates" || hot.Cells[1].Pool != "large" || hot.Cells[0].Pool != "default" || hot.Cells[0].Reason != "" {
		t.Errorf("the hot date: %+v", hot)
	}
	if res, _ := get(t, srv, "/api/grid"); res.StatusCode != 400 {
		t.Errorf("no pipeline: %d", res.StatusCode)
	}
	// A poll that finds nothing new gets 304.
	res, _ := get(t, srv, "/api/grid?pipeline=daily")
	if res2, _ := get(t, srv, "/api/grid?pipeline=daily", "If-None-Match", res.Header.Get("ETag")); res2.StatusCode != 304 {
		t.Errorf("same grid again: %d; want 304", res2.StatusCode)
	}
	// The HTML grid has the same columns and the marked cell.
	_, page := get(t, srv, "/pipelines/daily")
	if n := strings.Count(page, `<th class="run `); n != 6 {
		t.Errorf("the grid page has %d columns; want 6", n)
	}
	if n := strings.Count(page, `data-pool="large"`); n != 1 {
		t.Errorf("the grid page marks %d cells with pool large; want 1", n)
	}
}

// A cell's attempts carry their ids; the log of each is served by id.
func TestCellAndLogTail(t *testing.T) {
	e := dailyEnv(t)
	srv := e.server("")
	var g web.GridJSON
	_, body := get(t, srv, "/api/grid?pipeline=daily")
	json.Unmarshal([]byte(body), &g)
	run := g.Runs[3].ID
	_, body = get(t, srv, fmt.Sprintf("/api/cell?pipeline=daily&run=%d&task=extract", run))
	var c web.CellJSON
	if err := json.Unmarshal([]byte(body), &c); err != nil {
		t.Fatal(err)
	}
	if c.State != "failed" || len(c.Attempts) != 1 || c.Attempts[0].ID == 0 || *c.Attempts[0].ExitCode != 1 || c.Attempts[0].Seconds <= 0 {
		t.Fatalf("cell %+v", c)
	}
	res, text := get(t, srv, c.Attempts[0].Log)
	if res.StatusCode != 200 || !strings.HasPrefix(res.Header.Get("Content-Type"), "text/plain") {
		t.Fatalf("log: %d %s", res.StatusCode, text)
	}
	if !strings.Contains(text, "extracting 2025-03-04") || !strings.Contains(text, "boom") {
		t.Errorf("log tail %q", text)
	}
	if regexp.MustCompile(`[0-9a-f]{32}`).MatchString(text) {
		t.Errorf("the log tail shows the attempt's nonce: %q", text)
	}
	// A tail of a few bytes starts at a whole line.
	_, short := get(t, srv, fmt.Sprintf("/api/attempts/%d/log?tail=12", c.Attempts[0].ID))
	if strings.Contains(short, "extracting") {
		t.Errorf("tail=12: %q", short)
	}
	for path, want := range map[string]int{
		fmt.Sprintf("/api/cell?pipeline=daily&run=%d&task=nope", run): 404,
		"/api/cell?pipeline=daily&run=99999&task=extract":             404,
		"/api/cell?pipeline=daily&run=x&task=extract":                 400,
	} {
		if res, _ := get(t, srv, path); res.StatusCode != want {
			t.Errorf("%s: %d; want %d", path, res.StatusCode, want)
		}
	}
}

// Logs are served by attempt id only, from the state's log directory:
// paths, traversal, other parameters and logs that point elsewhere are
// refused.
func TestLogRefusals(t *testing.T) {
	e := dailyEnv(t)
	srv := e.server("")
	for _, path := range []string{
		"/api/attempts/..%2F..%2F..%2Fetc%2Fpasswd/log",
		"/api/attempts/%2Fetc%2Fpasswd/log",
		"/api/attempts/1%2F..%2F..%2Fetc%2Fpasswd/log",
		"/api/attempts/..%2Fstate.db/log",
		"/api/attempts/1.log/log",
		"/api/attempts/-1/log",
		"/api/attempts/01/log",
		"/api/attempts/1/log?path=/etc/passwd",
		"/api/attempts/1/log?file=../../state.db",
		"/api/attempts/1/log?tail=-5",
	} {
		res, body := get(t, srv, path)
		if res.StatusCode != 400 {
			t.Errorf("%s: %d %s; want 400", path, res.StatusCode, body)
		}
	}
	for _, path := range []string{
		"/api/attempts/../../../etc/passwd/log",
		"/api/attempts/1/../../../../etc/passwd",
		"/api/logs/.rewind/logs/daily/extract/x.log",
		"/api/attempts/99999/log",
		"/static/../../.rewind/state.db",
		"/static/",
		"/static/%2e%2e/server.go",
	} {
		res, body := get(t, srv, path)
		if res.StatusCode != 404 || strings.Contains(body, "root:") || strings.Contains(body, "SQLite format") {
			t.Errorf("%s: %d %.80q; want 404", path, res.StatusCode, body)
		}
	}

	// An attempt whose recorded log path points outside the log directory
	// (a state edited by hand), or whose log is a symbolic link, is not served.
	db, err := sql.Open("sqlite3", "file:"+filepath.Join(e.home, "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var id1, id2 int64
	var log2 string
	if err := db.QueryRow(`SELECT id FROM attempts ORDER BY id LIMIT 1`).Scan(&id1); err != nil {
		t.Fatal(err)
	}
	if err := db.QueryRow(`SELECT id, log_path FROM attempts ORDER BY id LIMIT 1 OFFSET 1`).Scan(&id2, &log2); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`UPDATE attempts SET log_path = ? WHERE id = ?`, filepath.Join(e.home, "logs", "..", "state.db"), id1); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(log2); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc/passwd", log2); err != nil {
		t.Fatal(err)
	}
	for _, id := range []int64{id1, id2} {
		res, body := get(t, srv, fmt.Sprintf("/api/attempts/%d/log", id))
		if res.StatusCode != 404 || strings.Contains(body, "root:") || strings.Contains(body, "SQLite") {
			t.Errorf("attempt %d: %d %.80q; want 404", id, res.StatusCode, body)
		}
	}
}

// The token rule: loopback without a token; any other address only with
// one; with a token every request carries it.
func TestTokenRule(t *testing.T) {
	ctx := context.Background()
	for _, addr := range []string{"127.0.0.1:8080", "127.0.0.2:0", "localhost:8080", "[::1]:8080"} {
		if err := web.CheckListen(ctx, addr, ""); err != nil {
			t.Errorf("%s without a token: %v; want allowed", addr, err)
		}
	}
	for _, addr := range []string{"0.0.0.0:8080", ":8080", "[::]:8080", "192.168.1.20:8080", "10.0.0.1:80"} {
		if err := web.CheckListen(ctx, addr, ""); !errors.Is(err, web.ErrTokenRequired) {
			t.Errorf("%s without a token: %v; want ErrTokenRequired", addr, err)
		}
		if err := web.CheckListen(ctx, addr, "s3cret-token"); err != nil {
			t.Errorf("%s with a token: %v", addr, err)
		}
	}
	if err := web.CheckListen(ctx, "nonsense", ""); err == nil {
		t.Error("an address without a port was accepted")
	}

	e := dailyEnv(t)
	// The command refuses to start (exit 2) on a non-loopback address
	// without a token, and says why.
	_, errOut, code := cli(t, e.dir, e.state, "ui", "--listen", "0.0.0.0:0", e.dir)
	if code != 2 || !strings.Contains(errOut, "token") {
		t.Errorf("rewind ui --listen 0.0.0.0:0: exit %d, %q; want exit 2 naming the token", code, errOut)
	}

	const token = "0123456789abcdef"
	srv := e.server(token)
	for _, h := range [][]string{nil, {"Authorization", "Bearer wrong"}, {"Authorization", "Basic " + token}} {
		res, body := get(t, srv, "/api/runs", h...)
		if res.StatusCode != 401 || !strings.Contains(res.Header.Get("WWW-Authenticate"), "Bearer") || strings.Contains(body, "daily") {
			t.Errorf("%v: %d %q; want 401", h, res.StatusCode, body)
		}
	}
	if res, body := get(t, srv, "/pipelines/daily"); res.StatusCode != 401 || !strings.Contains(body, `name="token"`) {
		t.Errorf("a page without the token: %d; want 401 and the sign-in form", res.StatusCode)
	}
	if res, _ := get(t, srv, "/api/runs", "Authorization", "Bearer "+token); res.StatusCode != 200 {
		t.Errorf("with the token: %d", res.StatusCode)
	}
	// A browser signs in with the form: a cookie, then pages work.
	client := srv.Client()
	client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	res, err := client.PostForm(srv.URL+"/login", url.Values{"token": {"wrong"}, "next": {"/pipelines/daily"}})
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != 401 || len(res.Cookies()) != 0 {
		t.Errorf("wrong token at /login: %d, cookies %v", res.StatusCode, res.Cookies())
	}
	res, err = client.PostForm(srv.URL+"/login", url.Values{"token": {token}, "next": {"//evil.example/"}})
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != 303 || res.Header.Get("Location") != "/" || len(res.Cookies()) != 1 || strings.Contains(res.Cookies()[0].Value, token) {
		t.Fatalf("/login: %d to %q, cookies %v", res.StatusCode, res.Header.Get("Location"), res.Cookies())
	}
	c := res.Cookies()[0]
	if !c.HttpOnly || c.SameSite != http.SameSiteStrictMode {
		t.Errorf("session cookie %+v: want HttpOnly, SameSite=Strict", c)
	}
	if res, _ := get(t, srv, "/pipelines/daily", "Cookie", c.Name+"="+c.Value); res.StatusCode != 200 {
		t.Errorf("a page with the session cookie: %d", res.StatusCode)
	}
}

// Every response carries the security headers; pages have no inline
// script; the view answers reads only, and (without a token) loopback
// names only.
func TestHeadersAndReadOnly(t *testing.T) {
	e, id := failedValidation(t)
	srv := e.server("")
	var runs []web.RunJSON
	_, body := get(t, srv, "/api/runs")
	json.Unmarshal([]byte(body), &runs)
	var g web.GridJSON
	_, body = get(t, srv, "/api/grid?pipeline=revenue")
	json.Unmarshal([]byte(body), &g)
	pages := []string{"/", "/pipelines/revenue", fmt.Sprintf("/pipelines/revenue/runs/%d", g.Runs[0].ID), "/backfills/" + id, "/login"}
	paths := append(pages, "/api/pipelines", "/api/runs", "/api/backfills", "/api/grid?pipeline=revenue", "/static/app.js", "/static/style.css", "/nope", "/pipelines/nope")
	script := regexp.MustCompile(`(?is)<script\b[^>]*>`)
	for _, p := range paths {
		res, body := get(t, srv, p)
		h := res.Header
		csp := h.Get("Content-Security-Policy")
		for _, want := range []string{"default-src 'none'", "script-src 'self'", "frame-ancestors 'none'"} {
			if !strings.Contains(csp, want) {
				t.Errorf("%s: Content-Security-Policy %q lacks %q", p, csp, want)
			}
		}
		if strings.Contains(csp, "unsafe-inline") || strings.Contains(csp, "unsafe-eval") {
			t.Errorf("%s: CSP allows inline code: %q", p, csp)
		}
		if h.Get("X-Content-Type-Options") != "nosniff" || h.Get("Referrer-Policy") != "same-origin" || h.Get("X-Frame-Options") != "DENY" {
			t.Errorf("%s: headers %v", p, h)
		}
		if strings.HasPrefix(h.Get("Content-Type"), "text/html") {
			for _, tag := range script.FindAllString(body, -1) {
				if !strings.Contains(tag, `src="/static/`) {
					t.Errorf("%s: a script that is not a static file: %s", p, tag)
				}
			}
			if m := regexp.MustCompile(`(?i)\son[a-z]+\s*=`).FindString(body); m != "" {
				t.Errorf("%s: an inline event handler %q", p, m)
			}
			if strings.Contains(body, "<script>") || strings.Contains(body, "style=\"") {
				t.Errorf("%s: inline script or style", p)
			}
		}
	}
	for _, p := range pages[:4] {
		if res, body := get(t, srv, p); res.StatusCode != 200 {
			t.Errorf("%s: %d %s", p, res.StatusCode, body)
		}
	}
	if res, _ := get(t, srv, "/pipelines/nope"); res.StatusCode != 404 {
		t.Errorf("unknown pipeline page: %d", res.StatusCode)
	}
	// Reads only.
	for _, m := range []string{"POST", "PUT", "DELETE", "PATCH"} {
		req, _ := http.NewRequest(m, srv.URL+"/api/runs", strings.NewReader("{}"))
		res, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != 405 {
			t.Errorf("%s /api/runs: %d; want 405", m, res.StatusCode)
		}
	}
	// A name that is not loopback (DNS rebinding) gets nothing without a token.
	if res, body := get(t, srv, "/api/runs", "Host", "evil.example:80"); res.StatusCode != 403 || strings.Contains(body, "revenue") {
		t.Errorf("Host evil.example: %d; want 403", res.StatusCode)
	}
}

// Sensitive values are redacted from everything the view serves, a log
// tail included.
func TestRedaction(t *testing.T) {
	const secret = "hunter2-is-the-password"
	e := newEnv(t, `
variable "token" {
  sensitive = true
}
pipeline "deploy" {
  schedule   = "@daily"
  start_date = "2025-07-01"
  task "push" {
    command = "echo pushing with ${var.token}"
  }
}
`, "REWIND_VAR_token="+secret)
	e.run(scheduler.Options{Now: utc("2025-07-02T00:00:00Z")})
	srv := e.server("")
	var g web.GridJSON
	_, body := get(t, srv, "/api/grid?pipeline=deploy")
	json.Unmarshal([]byte(body), &g)
	_, body = get(t, srv, fmt.Sprintf("/api/cell?pipeline=deploy&run=%d&task=push", g.Runs[0].ID))
	var c web.CellJSON
	json.Unmarshal([]byte(body), &c)
	logs, _ := filepath.Glob(filepath.Join(e.home, "logs", "deploy", "push", "*.log"))
	if len(logs) != 1 {
		t.Fatalf("logs %v", logs)
	}
	raw, err := os.ReadFile(logs[0])
	if err != nil || !strings.Contains(string(raw), secret) {
		t.Fatalf("the task was meant to print its secret to its log: %v %q", err, raw)
	}
	_, text := get(t, srv, c.Attempts[0].Log)
	if strings.Contains(text, secret) || !strings.Contains(text, "pushing with (sensitive value)") {
		t.Errorf("log tail %q: want the secret redacted", text)
	}
}

// /api/scheduler and the pipelines page say which rewind scheduler is
// active (the leader lease) and which rewind executes (the execution
// lease); released or expired leases are nobody's.
func TestAPIScheduler(t *testing.T) {
	e := dailyEnv(t)
	srv := e.server("")
	state := func() web.SchedulerJSON {
		t.Helper()
		res, body := get(t, srv, "/api/scheduler")
		var s web.SchedulerJSON
		if res.StatusCode != 200 || json.Unmarshal([]byte(body), &s) != nil {
			t.Fatalf("/api/scheduler: %d %s", res.StatusCode, body)
		}
		return s
	}
	page := func() string {
		t.Helper()
		_, body := get(t, srv, "/")
		return body
	}
	if s := state(); s.Leader != nil || s.Executing != nil {
		t.Fatalf("no lease held: %+v", s)
	}
	if !strings.Contains(page(), "No <code>rewind scheduler</code> is active.") {
		t.Errorf("the page does not say that no scheduler is active")
	}
	now := time.Now()
	for _, l := range []store.AcquireLeaseParams{
		{Name: lease.Leader, Holder: "node-a:42", Host: "node-a", PID: 42, TTL: time.Hour, Now: now},
		{Name: lease.Execution, Holder: "node-a:42", Host: "node-a", PID: 42, TTL: time.Hour, Now: now},
	} {
		if _, ok, err := e.st.AcquireLease(context.Background(), l); err != nil || !ok {
			t.Fatalf("acquire %s: %v %v", l.Name, ok, err)
		}
	}
	s := state()
	if s.Leader == nil || s.Leader.Host != "node-a" || s.Leader.PID != 42 || s.Leader.Generation != 1 || s.Executing == nil || s.Executing.PID != 42 {
		t.Fatalf("leases held by node-a: %+v %+v", s.Leader, s.Executing)
	}
	if p := page(); !strings.Contains(p, "Active scheduler: <strong>node-a</strong> pid 42") || !strings.Contains(p, "Executing: node-a pid 42.") {
		t.Errorf("the page does not name the active scheduler:\n%s", p)
	}
	if err := e.st.ReleaseLease(context.Background(), store.ReleaseLeaseParams{Name: lease.Execution, Holder: "node-a:42"}); err != nil {
		t.Fatal(err)
	}
	if s := state(); s.Leader == nil || s.Executing != nil {
		t.Errorf("after the execution ended: %+v %+v; want the leader, nothing executing", s.Leader, s.Executing)
	}
}

// A secret with what JSON and HTML escape in it (", &, <, >, ', \), in a
// failing probe's stderr that becomes a date's route reason: no response of
// the view carries it, plain or escaped (redacted before encoding).
func TestRedactionBeforeEncoding(t *testing.T) {
	const secret = `hun"ter&2<x>'y\z`
	t.Setenv("REWIND_VAR_token", secret) // the probe inherits it, and prints it
	e := newEnv(t, `
variable "token" {
  sensitive = true
}
pool "large" { slots = 1 }
pipeline "deploy" {
  schedule   = "@daily"
  start_date = "2025-07-01"
  skew {
    probe = "printf '%s\n' \"$REWIND_VAR_token\" >&2; exit 3"
    pool  = "large"
  }
  task "push" {
    command = "true"
  }
}
`, "REWIND_VAR_token="+secret)
	e.run(scheduler.Options{Now: utc("2025-07-02T00:00:00Z")})
	srv := e.server("")
	var g web.GridJSON
	_, body := get(t, srv, "/api/grid?pipeline=deploy")
	if err := json.Unmarshal([]byte(body), &g); err != nil || len(g.Runs) != 1 {
		t.Fatalf("grid: %v %s", err, body)
	}
	paths := []string{"/api/grid?pipeline=deploy", "/api/runs", "/api/pipelines",
		fmt.Sprintf("/api/cell?pipeline=deploy&run=%d&task=push", g.Runs[0].ID),
		"/", "/pipelines/deploy", fmt.Sprintf("/pipelines/deploy/runs/%d", g.Runs[0].ID)}
	escaped := []string{secret, `hun\"ter`, `ter\u00262`, `ter&amp;2`, `&lt;x&gt;`, `\u003cx\u003e`, `&#39;y`, `&#34;ter`, `y\\z`}
	sawReason := false
	for _, p := range paths {
		res, body := get(t, srv, p)
		if res.StatusCode != 200 {
			continue
		}
		for _, form := range escaped {
			if strings.Contains(body, form) {
				t.Errorf("%s carries the secret as %q", p, form)
			}
		}
		sawReason = sawReason || strings.Contains(body, "probe failed")
	}
	if !sawReason {
		t.Fatal("no response shows the probe's failure: the test no longer exercises redaction")
	}
}
