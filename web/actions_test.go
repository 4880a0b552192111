package web_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/rewind-dev/rewind/scheduler"
	"github.com/rewind-dev/rewind/store"
	"github.com/rewind-dev/rewind/web"
)

const opsHCL = `
pipeline "ops" {
  schedule   = "@daily"
  start_date = "2025-03-01"
  task "extract" {
    command = "if [ $REWIND_DS = 2025-03-02 ]; then exit 1; fi"
  }
  task "load" {
    depends_on = [task.extract]
    command    = "true"
  }
  task "report" {
    depends_on = [task.load]
    command    = "true"
  }
}
`

const uiToken = "t0ken-for-tests"

// opsEnv is four dates of ops, the second failed, and a running backfill
// of it recorded in the state (no apply runs it).
func opsEnv(t *testing.T) *env {
	t.Helper()
	e := newEnv(t, opsHCL)
	e.run(scheduler.Options{Catchup: true, Now: utc("2025-03-05T00:00:00Z")})
	if err := e.st.CreateBackfill(context.Background(), store.Backfill{ID: "ops_bf", Pipeline: "ops", From: utc("2025-03-01T00:00:00Z"),
		To: utc("2025-03-02T00:00:00Z"), Reprocess: "failed", State: store.BackfillRunning, Phase: "run", Plan: "{}", CreatedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	return e
}

// writeServer is the view over the env's state with writes, behind token
// ("" none).
func (e *env) writeServer(token string) *httptest.Server {
	e.t.Helper()
	s, err := web.New(web.Options{State: e.st, Write: e.st, Workspace: e.ws, Home: e.home, Token: token})
	if err != nil {
		e.t.Fatal(err)
	}
	srv := httptest.NewServer(s)
	e.t.Cleanup(func() {
		srv.Close()
		s.Close()
	})
	return srv
}

// session signs in as name: the session cookie and the CSRF token the
// pages carry.
func session(t *testing.T, srv *httptest.Server, name string) (*http.Cookie, string) {
	t.Helper()
	client := srv.Client()
	client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	res, err := client.PostForm(srv.URL+"/login", url.Values{"token": {uiToken}, "name": {name}, "next": {"/"}})
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != 303 || len(res.Cookies()) != 1 {
		t.Fatalf("/login: %d %v", res.StatusCode, res.Cookies())
	}
	ck := res.Cookies()[0]
	_, body := get(t, srv, "/pipelines/ops", "Cookie", ck.Name+"="+ck.Value)
	m := regexp.MustCompile(`<meta name="csrf-token" content="([0-9a-f]+)">`).FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("no CSRF token in the page of a signed-in session:\n%s", body)
	}
	return ck, m[1]
}

// post sends form to path with the header pairs given.
func post(t *testing.T, srv *httptest.Server, path string, form url.Values, header ...string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, srv.URL+path, strings.NewReader(form.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	client := srv.Client()
	client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	res, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	if res.StatusCode == http.StatusSeeOther {
		return res.StatusCode, res.Header.Get("Location")
	}
	return res.StatusCode, string(b)
}

// snapshot is everything the actions could change: runs with their task
// instances and attempts, pipelines, backfills and the audit trail.
func snapshot(t *testing.T, st store.Store) string {
	t.Helper()
	ctx := context.Background()
	runs, err := st.ListRuns(ctx, store.ListRunsParams{WithTasks: true, WithAttempts: true})
	if err != nil {
		t.Fatal(err)
	}
	ps, err := st.ListPipelines(ctx)
	if err != nil {
		t.Fatal(err)
	}
	bs, err := st.ListBackfills(ctx)
	if err != nil {
		t.Fatal(err)
	}
	audit, err := st.ListAudit(ctx, store.ListAuditParams{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal([]any{runs, ps, bs, audit})
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// actionPaths are web.ActionRoutes on the env's pipeline and backfill.
func actionPaths() []string {
	var out []string
	for _, p := range web.ActionRoutes {
		out = append(out, strings.NewReplacer("{name}", "ops", "{id}", "ops_bf").Replace(p))
	}
	return out
}

// actionForm is a form every action would take: the failed date, its
// first task, the steps of the backfill form.
var actionForm = url.Values{"start": {"2025-03-02"}, "end": {"2025-03-02"}, "task": {"extract"}, "step": {"apply"}}

// Every write refuses, with 403 and no change to the state, a request
// without the CSRF token of its session, one from another origin, and
// one without the token; a view started without a token refuses every
// write and says how to start it.
func TestWritesRefused(t *testing.T) {
	e := opsEnv(t)
	srv := e.writeServer(uiToken)
	ck, csrf := session(t, srv, "ann")
	cookie := ck.Name + "=" + ck.Value
	own := srv.URL
	open := e.writeServer("")
	for _, path := range actionPaths() {
		withCSRF := url.Values{"csrf": {csrf}}
		for k, v := range actionForm {
			withCSRF[k] = v
		}
		for _, c := range []struct {
			name   string
			srv    *httptest.Server
			form   url.Values
			header []string
			says   string
		}{
			{"no CSRF token", srv, actionForm, []string{"Cookie", cookie, "Origin", own}, "CSRF token"},
			{"a wrong CSRF token", srv, actionForm, []string{"Cookie", cookie, "Origin", own, "X-CSRF-Token", strings.Repeat("0", 64)}, "CSRF token"},
			{"a foreign Origin", srv, withCSRF, []string{"Cookie", cookie, "Origin", "http://evil.example"}, "cross-origin"},
			{"a foreign Referer", srv, withCSRF, []string{"Cookie", cookie, "Referer", "http://evil.example/page"}, "cross-origin"},
			{"neither Origin nor Referer", srv, withCSRF, []string{"Cookie", cookie}, "neither Origin nor Referer"},
			{"a bearer from a foreign Origin", srv, actionForm, []string{"Authorization", "Bearer " + uiToken, "Origin", "http://evil.example"}, "cross-origin"},
			{"no token", srv, withCSRF, []string{"Origin", own}, "needs the token"},
			{"a wrong token", srv, actionForm, []string{"Authorization", "Bearer nope", "Origin", own}, "needs the token"},
			{"a view without a token", open, actionForm, []string{"Origin", open.URL}, "--token or REWIND_UI_TOKEN"},
		} {
			before := snapshot(t, e.st)
			code, body := post(t, c.srv, path, c.form, c.header...)
			if code != http.StatusForbidden || !strings.Contains(body, c.says) {
				t.Errorf("POST %s with %s: %d %s; want 403 saying %q", path, c.name, code, body, c.says)
			}
			if after := snapshot(t, e.st); after != before {
				t.Errorf("POST %s with %s changed the state", path, c.name)
			}
		}
	}
	// Without a token the pages show no action.
	if _, body := get(t, open, "/pipelines/ops"); strings.Contains(body, "csrf-token") || strings.Contains(body, `data-act=`) {
		t.Error("a view without a token shows write controls")
	}
	if _, body := get(t, srv, "/pipelines/ops", "Cookie", cookie); !strings.Contains(body, `data-act="clear"`) || !strings.Contains(body, "signed in as ann") {
		t.Error("a signed-in view shows no write controls")
	}
}

// copyState copies the env's SQLite state (no write in flight) to a new
// file: the CLI's twin of what the view changes.
func copyState(t *testing.T, e *env) string {
	t.Helper()
	src := strings.TrimPrefix(e.state, "sqlite:")
	dir := t.TempDir()
	for _, suffix := range []string{"", "-wal", "-shm"} {
		b, err := os.ReadFile(src + suffix)
		if os.IsNotExist(err) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "state.db"+suffix), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return "sqlite:" + filepath.Join(dir, "state.db")
}

// tasksOf summarizes a state as its runs' and task instances' states, its
// pipelines' pause flags and its backfills' states.
func tasksOf(t *testing.T, dsn string) string {
	t.Helper()
	st, err := store.Open(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var b strings.Builder
	runs, _ := st.ListRuns(context.Background(), store.ListRunsParams{WithTasks: true})
	for _, r := range runs {
		b.WriteString(r.DS + ":" + string(r.State) + ":")
		for _, ti := range r.Tasks {
			b.WriteString(ti.Task + "=" + string(ti.State) + ",")
		}
		b.WriteString("\n")
	}
	ps, _ := st.ListPipelines(context.Background())
	for _, p := range ps {
		b.WriteString(p.Name + " paused=" + map[bool]string{true: "yes", false: "no"}[p.Paused] + "\n")
	}
	bs, _ := st.ListBackfills(context.Background())
	for _, bf := range bs {
		b.WriteString(bf.ID + " " + string(bf.State) + " hold=" + map[bool]string{true: "yes", false: "no"}[bf.OnHold] + "\n")
	}
	return b.String()
}

func auditRows(t *testing.T, st store.Store) []store.AuditEntry {
	t.Helper()
	list, err := st.ListAudit(context.Background(), store.ListAuditParams{})
	if err != nil {
		t.Fatal(err)
	}
	return list
}

// A good POST does what the CLI command does (the same change of the
// state, the same message) and writes one audit row; a refused one
// answers the CLI's error with the status of its exit code, and is
// recorded too.
func TestWritesDoWhatTheCLIDoes(t *testing.T) {
	e := opsEnv(t)
	srv := e.writeServer(uiToken)
	ck, csrf := session(t, srv, "ann")
	hdr := []string{"Cookie", ck.Name + "=" + ck.Value, "Origin", srv.URL, "X-CSRF-Token", csrf}
	for _, c := range []struct {
		path string
		form url.Values
		cli  []string
	}{
		{"/api/pipelines/ops/clear", url.Values{"start": {"2025-03-02"}, "end": {"2025-03-02"}, "only_failed": {"true"}},
			[]string{"clear", "ops", "--start", "2025-03-02", "--end", "2025-03-02", "--only-failed"}},
		{"/api/pipelines/ops/mark/failed", url.Values{"start": {"2025-03-03T00:00:00Z"}, "end": {"2025-03-03T00:00:00Z"}, "task": {"load"}, "downstream": {"true"}},
			[]string{"mark", "failed", "ops", "--start", "2025-03-03T00:00:00Z", "--end", "2025-03-03T00:00:00Z", "--task", "load", "--downstream"}},
		{"/api/pipelines/ops/mark/success", url.Values{"start": {"2025-03-01"}, "end": {"2025-03-04"}},
			[]string{"mark", "success", "ops", "--start", "2025-03-01", "--end", "2025-03-04"}},
		{"/api/pipelines/ops/clear", url.Values{"start": {"2025-03-04"}, "end": {"2025-03-04"}, "task": {"load"}, "downstream": {"true"}},
			[]string{"clear", "ops", "--start", "2025-03-04", "--end", "2025-03-04", "--task", "load", "--downstream"}},
		{"/api/pipelines/ops/pause", nil, []string{"pause", "ops"}},
		{"/api/pipelines/ops/unpause", nil, []string{"unpause", "ops"}},
		{"/api/backfills/ops_bf/pause", nil, []string{"backfill", "pause", "ops_bf"}},
		{"/api/backfills/ops_bf/unpause", nil, []string{"backfill", "unpause", "ops_bf"}},
		{"/api/backfills/ops_bf/cancel", nil, []string{"backfill", "cancel", "ops_bf"}},
	} {
		twin := copyState(t, e)
		rows := len(auditRows(t, e.st))
		code, body := post(t, srv, c.path, c.form, hdr...)
		out, errOut, exit := cli(t, e.dir, twin, c.cli...)
		if code != 200 || exit != 0 {
			t.Fatalf("POST %s: %d %s; rewind %v: exit %d %s", c.path, code, body, c.cli, exit, errOut)
		}
		var msg struct{ Message string }
		if err := json.Unmarshal([]byte(body), &msg); err != nil || msg.Message+"\n" != out {
			t.Errorf("POST %s says %q; rewind %v says %q", c.path, msg.Message, c.cli, out)
		}
		if got, want := tasksOf(t, e.state), tasksOf(t, twin); got != want {
			t.Errorf("POST %s left\n%s\nrewind %v left\n%s", c.path, got, c.cli, want)
		}
		list := auditRows(t, e.st)
		if len(list) != rows+1 || list[0].Who != "ann" || list[0].Result != "ok" || !strings.HasPrefix(list[0].From, "127.0.0.1:") {
			t.Errorf("POST %s: audit %d -> %d rows, newest %+v; want one more, by ann, ok", c.path, rows, len(list), list[0])
		}
	}
	// Refusals: the CLI's message, the status of its exit code; recorded.
	for _, c := range []struct {
		path string
		form url.Values
		code int
		cli  []string
	}{
		{"/api/pipelines/ops/clear", url.Values{"start": {"2025-03-02"}}, 400, []string{"clear", "ops", "--start", "2025-03-02"}},
		{"/api/pipelines/ops/mark/success", url.Values{"start": {"2025-03-02"}, "end": {"2025-03-02"}, "task": {"nope"}}, 404,
			[]string{"mark", "success", "ops", "--start", "2025-03-02", "--end", "2025-03-02", "--task", "nope"}},
		{"/api/pipelines/nope/pause", nil, 404, []string{"pause", "nope"}},
		{"/api/backfills/ops_bf/pause", nil, 409, []string{"backfill", "pause", "ops_bf"}},
		{"/api/backfills/nope/cancel", nil, 404, []string{"backfill", "cancel", "nope"}},
	} {
		rows := len(auditRows(t, e.st))
		code, body := post(t, srv, c.path, c.form, hdr...)
		_, errOut, exit := cli(t, e.dir, e.state, c.cli...)
		var msg struct{ Error string }
		_ = json.Unmarshal([]byte(body), &msg)
		if code != c.code || exit != 2 || "rewind: "+msg.Error+"\n" != errOut {
			t.Errorf("POST %s: %d %q; want %d and what rewind %v says (exit %d): %q", c.path, code, msg.Error, c.code, c.cli, exit, errOut)
		}
		found := false
		for _, a := range auditRows(t, e.st) {
			found = found || a.Who == "ann" && a.Result == msg.Error && a.ID > int64(rows)
		}
		if !found {
			t.Errorf("POST %s: the refusal is not in the audit trail", c.path)
		}
	}
}

// Retry now makes an up_for_retry task instance eligible at once.
func TestRetryNow(t *testing.T) {
	e := opsEnv(t)
	ctx := context.Background()
	runs, err := e.st.ListRuns(ctx, store.ListRunsParams{WithTasks: true})
	if err != nil {
		t.Fatal(err)
	}
	r := runs[0]
	if _, err := e.st.ClearTasks(ctx, store.ClearTasksParams{Pipeline: "ops", From: r.LogicalDate, To: r.LogicalDate, Task: "report", Now: time.Now()}); err != nil {
		t.Fatal(err)
	}
	var id int64
	for _, ti := range r.Tasks {
		if ti.Task == "report" {
			id = ti.ID
		}
	}
	a, err := e.st.ClaimTask(ctx, store.ClaimTaskParams{TaskInstanceID: id, Pool: "default", Now: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	later := time.Now().Add(time.Hour)
	one := 1
	if err := e.st.FinishAttempt(ctx, store.FinishAttemptParams{AttemptID: a.ID, State: store.AttemptFailed, TaskState: store.TaskUpForRetry, ExitCode: &one,
		CountFailure: true, NextTryAt: later, Now: time.Now()}); err != nil {
		t.Fatal(err)
	}
	srv := e.writeServer(uiToken)
	day := r.LogicalDate.Format(time.RFC3339)
	code, body := post(t, srv, "/api/pipelines/ops/retry", url.Values{"start": {day}, "end": {day}, "task": {"report"}},
		"Authorization", "Bearer "+uiToken)
	if code != 200 || !strings.Contains(body, "1 task instances of ops from "+day+" to "+day+" retry now") {
		t.Fatalf("retry: %d %s", code, body)
	}
	runs, _ = e.st.ListRuns(ctx, store.ListRunsParams{WithTasks: true, From: r.LogicalDate, To: r.LogicalDate})
	for _, ti := range runs[0].Tasks {
		if ti.Task == "report" && (ti.State != store.TaskUpForRetry || !ti.NextTryAt.Before(later)) {
			t.Errorf("report after retry now: %s, next try %v; want up_for_retry now", ti.State, ti.NextTryAt)
		}
	}
	if list := auditRows(t, e.st); len(list) != 1 || list[0].Who != "token" || list[0].Action != "retry" || list[0].Result != "ok" {
		t.Errorf("audit %+v", list)
	}
	// A task instance that is not up_for_retry: refused, 409.
	if code, body := post(t, srv, "/api/pipelines/ops/retry", url.Values{"start": {day}, "end": {day}, "task": {"load"}},
		"Authorization", "Bearer "+uiToken); code != 409 || !strings.Contains(body, "no task instance is up_for_retry") {
		t.Errorf("retry of a task that is not up_for_retry: %d %s", code, body)
	}
}

// waitJob waits until the view's job of backfill id has ended and
// returns what /api/backfills/ID/job says of it.
func waitJob(t *testing.T, srv *httptest.Server, id string) web.JobJSON {
	t.Helper()
	deadline := time.Now().Add(120 * time.Second)
	for time.Now().Before(deadline) {
		res, body := get(t, srv, "/api/backfills/"+id+"/job", "Authorization", "Bearer "+uiToken)
		var j web.JobJSON
		if res.StatusCode == 200 && json.Unmarshal([]byte(body), &j) == nil && !j.Running {
			return j
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("the view's job of backfill %s did not end", id)
	return web.JobJSON{}
}

// backfillStates are the backfills of a state as `backfill list` shows
// them, ids left out: state, phase, and whether rolled back.
func backfillStates(t *testing.T, dsn string) string {
	t.Helper()
	st, err := store.Open(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	bs, err := st.ListBackfills(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, b := range bs {
		out = append(out, string(b.State)+"/"+b.Phase+"/"+map[bool]string{true: "rolled_back", false: "kept"}[b.RolledBack])
	}
	return strings.Join(out, " ")
}

// The backfill form's plan changes nothing; its apply, a resume and a
// rollback run in the view and leave the state as the CLI's apply,
// apply --resume and rollback leave a copy of it, each with one audit row
// when it ends.
func TestBackfillJobsDoWhatTheCLIDoes(t *testing.T) {
	e := newEnv(t, strings.Replace(gatedRevenueHCL, "[ -e gated ]; then while [ ! -e go ]; do sleep 0.1; done; if [ -e broken ]; then exit 1; fi; fi;", "[ -e broken ]; then exit 1; fi;", 1))
	e.run(scheduler.Options{Now: utc("2025-07-03T00:00:00Z")})
	e.write("broken", "")
	srv := e.writeServer(uiToken)
	ck, csrf := session(t, srv, "ann")
	hdr := []string{"Cookie", ck.Name + "=" + ck.Value, "Origin", srv.URL, "X-CSRF-Token", csrf}
	form := url.Values{"start": {"2025-07-01"}, "end": {"2025-07-02"}, "reprocess": {"completed"}}
	twin := copyState(t, e)

	// The plan: a page with backfill plan's dates; nothing recorded.
	before := snapshot(t, e.st)
	form.Set("step", "plan")
	code, body := post(t, srv, "/pipelines/revenue/backfill", form, hdr...)
	if code != 200 || !strings.Contains(body, `id="plan-table"`) || strings.Count(body, `<tr class="a-reprocess">`) != 2 {
		t.Fatalf("plan: %d\n%s", code, body)
	}
	if snapshot(t, e.st) != before {
		t.Error("the plan changed the state")
	}

	// Apply: 2025-07-02 fails, as with the CLI.
	form.Set("step", "apply")
	code, loc := post(t, srv, "/pipelines/revenue/backfill", form, hdr...)
	if code != http.StatusSeeOther || !strings.HasPrefix(loc, "/backfills/revenue_") {
		t.Fatalf("apply: %d %s", code, loc)
	}
	id := strings.TrimPrefix(loc, "/backfills/")
	if j := waitJob(t, srv, id); j.Kind != "apply" || j.Result != "failed" || j.Error == "" {
		t.Errorf("the apply's job: %+v", j)
	}
	_, _, exit := cli(t, e.dir, twin, "backfill", "apply", "revenue", "--start", "2025-07-01", "--end", "2025-07-02", "--reprocess", "completed", "--quiet")
	if got, want := backfillStates(t, e.state), backfillStates(t, twin); exit != 1 || got != want {
		t.Errorf("after apply: the view left %q, the CLI %q (exit %d)", got, want, exit)
	}
	out, _, _ := cli(t, e.dir, twin, "backfill", "list", "--json")
	var twins []struct{ ID string }
	if err := json.Unmarshal([]byte(out), &twins); err != nil || len(twins) != 1 {
		t.Fatalf("rewind backfill list --json: %v\n%s", err, out)
	}
	twinID := twins[0].ID

	// Resume, once fixed.
	if err := os.Remove(filepath.Join(e.dir, "broken")); err != nil {
		t.Fatal(err)
	}
	for _, step := range []struct {
		action string
		cli    []string
		result string
	}{
		{"resume", []string{"backfill", "apply", "--resume", twinID, "--quiet"}, "success"},
		{"rollback", []string{"backfill", "rollback", twinID}, "rolled_back"},
	} {
		rows := len(auditRows(t, e.st))
		code, body := post(t, srv, "/api/backfills/"+id+"/"+step.action, nil, hdr...)
		if code != http.StatusAccepted {
			t.Fatalf("%s: %d %s", step.action, code, body)
		}
		if j := waitJob(t, srv, id); j.Kind != step.action || j.Result != step.result || j.Error != "" {
			t.Errorf("the %s's job: %+v", step.action, j)
		}
		if _, errOut, exit := cli(t, e.dir, twin, step.cli...); exit != 0 {
			t.Fatalf("rewind %v: exit %d %s", step.cli, exit, errOut)
		}
		if got, want := backfillStates(t, e.state), backfillStates(t, twin); got != want {
			t.Errorf("after %s: the view left %q, the CLI %q", step.action, got, want)
		}
		list := auditRows(t, e.st)
		if len(list) != rows+1 || list[0].Action != "backfill."+step.action || list[0].Who != "ann" || list[0].Result != "ok" || list[0].Target != id {
			t.Errorf("after %s: audit %d -> %d rows, newest %+v", step.action, rows, len(list), list[0])
		}
	}
	if got, want := tasksOf(t, e.state), tasksOf(t, twin); strings.Split(got, "revenue_")[0] != strings.Split(want, "revenue_")[0] {
		t.Errorf("runs: the view left\n%s\nthe CLI\n%s", got, want)
	}
}
