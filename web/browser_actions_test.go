package web_test

import (
	"context"
	"encoding/json"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/rewind-dev/rewind/scheduler"
)

// updateDocs makes the browser tests of the actions also write their
// screenshots to docs/ (go test ./web/ -run BrowserActions -update-docs).
var updateDocs = flag.Bool("update-docs", false, "write the screenshots of the browser tests of the actions to docs/")

// docShot takes a screenshot as screenshot does, and with -update-docs
// also writes it to docs/NAME.
func docShot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	screenshot(t, ctx, name)
	if !*updateDocs {
		return
	}
	b, err := os.ReadFile(filepath.Join(t.ArtifactDir(), name))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join("..", "docs", name), b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// signIn signs the browser in with the token, as name, from the page it
// was sent to.
func signIn(t *testing.T, ctx context.Context, page, name string) {
	t.Helper()
	within(t, ctx, 60*time.Second,
		chromedp.Navigate(page),
		chromedp.WaitVisible(chromedp.CSS(`form.login input[name="token"]`)),
		chromedp.SendKeys(chromedp.CSS(`input[name="token"]`), uiToken),
		chromedp.SendKeys(chromedp.CSS(`input[name="name"]`), name),
		chromedp.Click(chromedp.CSS(`form.login button[type="submit"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#who[data-write="true"]`)),
	)
	if who := eval[string](t, ctx, `document.getElementById("who").textContent`); !strings.Contains(who, "signed in as "+name) {
		t.Fatalf("after sign-in the page says %q", who)
	}
}

// startScheduler runs `rewind scheduler` on the env's workspace and state
// until the test ends.
func (e *env) startScheduler() {
	e.t.Helper()
	cmd := exec.Command(rewindBinary(e.t), "scheduler", "--quiet", "--state", e.state, e.dir)
	cmd.Dir = e.dir
	cmd.Env = append(os.Environ(), "REWIND_STATE=", "REWIND_UI_TOKEN=")
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			if err != nil {
				e.t.Errorf("rewind scheduler did not stop cleanly: %v\n%s", err, out.String())
			}
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			e.t.Errorf("rewind scheduler still running 30 s after SIGTERM\n%s", out.String())
		}
	})
}

// poll waits until js is true in the page; the page may reload meanwhile
// (an evaluation that a navigation interrupts is tried again).
func poll(t *testing.T, ctx context.Context, what, js string) {
	t.Helper()
	deadline := time.Now().Add(120 * time.Second)
	var last error
	for time.Now().Before(deadline) {
		ectx, cancel := context.WithTimeout(ctx, 10*time.Second)
		ok, err := chromedp.Run(ectx, chromedp.Evaluate[bool]("!!("+js+")"))
		cancel()
		if err == nil && ok {
			return
		}
		last = err
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("%s: not so after 120 s (last error %v)", what, last)
}

// An on-call engineer signs in, opens a failed cell of the grid and
// clears it with its downstream; a running `rewind scheduler` runs it
// again and the cells turn green, without a reload.
func TestBrowserActionsClearFromTheGrid(t *testing.T) {
	ctx := browser(t)
	e := newEnv(t, `
pipeline "p" {
  schedule   = "@daily"
  start_date = "2025-03-01"
  end_date   = "2025-03-06"
  task "extract" {
    command = "echo extracting $REWIND_DS; if [ $REWIND_DS = 2025-03-04 ] && [ -e broken ]; then echo boom >&2; exit 1; fi"
  }
  task "load" {
    depends_on = [task.extract]
    command    = "echo loading $REWIND_DS"
  }
}
`)
	e.write("broken", "")
	e.run(scheduler.Options{Catchup: true, Now: utc("2025-03-07T00:00:00Z")})
	if err := os.Remove(filepath.Join(e.dir, "broken")); err != nil {
		t.Fatal(err)
	}
	base, _ := e.startUIWith(uiToken)
	e.startScheduler()
	signIn(t, ctx, base+"pipelines/p", "oncall")
	within(t, ctx, 30*time.Second, chromedp.WaitVisible(chromedp.CSS("table.grid")))
	if n := eval[int](t, ctx, `document.querySelectorAll("td.c.s-failed, td.c.s-upstream_failed").length`); n != 2 {
		t.Fatalf("%d cells failed or upstream_failed; want 2 (extract and load of 2025-03-04)", n)
	}
	eval[bool](t, ctx, `window.__sameDocument = true`)
	within(t, ctx, 30*time.Second,
		chromedp.Click(chromedp.CSS(`tr[data-task="extract"] td.c.s-failed`)),
		chromedp.Poll[chromedp.Void](`document.getElementById("detail-title").textContent === "extract · 2025-03-04 · failed"`, chromedp.WithPollingTimeout(20*time.Second)),
		chromedp.WaitVisible(chromedp.CSS(`#detail-actions`)),
	)
	docShot(t, ctx, "ui-grid-actions.png")
	within(t, ctx, 30*time.Second, chromedp.Click(chromedp.CSS(`#detail-actions button[data-scope="task"][data-downstream="true"]`)))
	poll(t, ctx, "the clear's answer", `document.getElementById("action-result").textContent !== ""`)
	if got := eval[string](t, ctx, `document.getElementById("action-result").textContent`); got != "cleared 2 task instances of p from 2025-03-04T00:00:00Z to 2025-03-04T00:00:00Z" {
		t.Fatalf("the clear says %q", got)
	}
	// The scheduler runs the date again; the grid follows it.
	poll(t, ctx, "the cleared cells turn green", `(() => {
  const i = [...document.querySelectorAll("tr.dates th.run")].findIndex(h => h.dataset.ds === "2025-03-04");
  return i >= 0 && [...document.querySelectorAll("table.grid tbody tr")].every(r => r.cells[i + 1].classList.contains("s-success"));
})()`)
	if !eval[bool](t, ctx, `window.__sameDocument === true && performance.getEntriesByType("navigation").length === 1`) {
		t.Error("the page reloaded to show the clear")
	}
	out, _, code := cli(t, e.dir, e.state, "audit", "--json")
	if code != 0 || !strings.Contains(out, `"who": "oncall"`) || !strings.Contains(out, `"action": "clear"`) {
		t.Errorf("rewind audit --json: exit %d\n%s", code, out)
	}
	within(t, ctx, 30*time.Second, chromedp.Reload(), chromedp.WaitVisible(chromedp.CSS("table#audit")))
	if row := eval[string](t, ctx, `document.querySelector("table#audit tbody tr").textContent`); !strings.Contains(row, "oncall") || !strings.Contains(row, "clear") {
		t.Errorf("the grid page's audit trail starts with %q", row)
	}
}

const gatedRevenueHCL = `
catalog "local" {
  uri       = ".rewind/catalog.db"
  warehouse = ".rewind/warehouse"
}
pipeline "revenue" {
  schedule        = "@daily"
  start_date      = "2025-07-01"
  end_date        = "2025-07-02"
  max_active_runs = 4
  task "compute" {
    command = "if [ $REWIND_DS = 2025-07-02 ] && [ -e gated ]; then while [ ! -e go ]; do sleep 0.1; done; if [ -e broken ]; then exit 1; fi; fi; awk -v ds=$REWIND_DS 'BEGIN { print \"ds,currency,amount_usd\"; print ds \",EUR,100\"; print ds \",USD,50\" }' > $REWIND_RUN_DIR/revenue.csv"
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

// backfillStateOf is `rewind backfill status ID --json`: state and on_hold.
func backfillStateOf(t *testing.T, e *env, id string) (state string, onHold bool) {
	t.Helper()
	out, errOut, code := cli(t, e.dir, e.state, "backfill", "status", id, "--json")
	if code != 0 {
		t.Fatalf("rewind backfill status: exit %d %s", code, errOut)
	}
	var st struct {
		State  string `json:"state"`
		OnHold bool   `json:"on_hold"`
	}
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatal(err)
	}
	return st.State, st.OnHold
}

// The backfill form shows the plan as `backfill plan` computes it and
// changes nothing; apply runs it in the view; the backfill's page pauses
// it, refuses a second resume while it runs, unpauses it, resumes it once
// it failed, and rolls it back. `rewind backfill status --json` agrees
// with the page at every step.
func TestBrowserActionsBackfill(t *testing.T) {
	ctx := browser(t)
	e := newEnv(t, gatedRevenueHCL)
	e.run(scheduler.Options{Now: utc("2025-07-03T00:00:00Z")})
	e.write("gated", "")
	base, ui := e.startUIWith(uiToken)
	signIn(t, ctx, base+"pipelines/revenue", "oncall")

	// The form, then the plan.
	within(t, ctx, 60*time.Second,
		chromedp.Click(chromedp.CSS("#backfill-link")),
		chromedp.WaitVisible(chromedp.CSS("#backfill-form")),
		chromedp.SendKeys(chromedp.CSS(`#backfill-form input[name="start"]`), "2025-07-01"),
		chromedp.SendKeys(chromedp.CSS(`#backfill-form input[name="end"]`), "2025-07-02"),
		chromedp.SetValue(chromedp.CSS(`#backfill-form select[name="reprocess"]`), "completed"),
		chromedp.Click(chromedp.CSS("#plan-button")),
		chromedp.WaitVisible(chromedp.CSS("#plan-table")),
	)
	rows := eval[string](t, ctx, `[...document.querySelectorAll("#plan-table tbody tr")].map(tr => tr.cells[0].textContent + " " + tr.cells[2].textContent + " " + tr.cells[3].textContent).join("|")`)
	out, errOut, code := cli(t, e.dir, e.state, "backfill", "plan", "revenue", "--start", "2025-07-01", "--end", "2025-07-02", "--reprocess", "completed", "--json")
	if code != 0 {
		t.Fatalf("rewind backfill plan: exit %d %s", code, errOut)
	}
	var plan struct {
		Dates []struct{ DS, Action, Pool string }
	}
	if err := json.Unmarshal([]byte(out), &plan); err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, d := range plan.Dates {
		want = append(want, d.DS+" "+d.Action+" "+d.Pool)
	}
	if rows != strings.Join(want, "|") || len(want) != 2 {
		t.Errorf("the form's plan %q; rewind backfill plan --json %q", rows, want)
	}
	if out, _, _ := cli(t, e.dir, e.state, "backfill", "list", "--json"); strings.TrimSpace(out) != "[]" {
		t.Errorf("the plan recorded a backfill: %s", out)
	}
	docShot(t, ctx, "ui-backfill-form.png")

	// Apply: the backfill's page; it runs in the view.
	within(t, ctx, 60*time.Second, chromedp.Click(chromedp.CSS("#apply-button")), chromedp.WaitVisible(chromedp.CSS("#backfill-actions")))
	id := eval[string](t, ctx, `document.getElementById("backfill").dataset.id`)
	if st, hold := backfillStateOf(t, e, id); st != "running" || hold {
		t.Fatalf("after apply: %s, on hold %v; want running", st, hold)
	}
	click := func(act string) {
		t.Helper()
		within(t, ctx, 30*time.Second, chromedp.Click(chromedp.CSS(`#backfill-actions button[data-act="`+act+`"]`)))
	}
	// pageIs waits until the page shows the backfill so; a state other
	// than running also waits for the view's job to have ended.
	pageIs := func(what, state, hold string) {
		t.Helper()
		ended := "true"
		if state != "running" {
			ended = `!document.querySelector('#job[data-running="true"]')`
		}
		poll(t, ctx, what, `(() => { const b = document.getElementById("backfill"); return b && b.dataset.state === "`+state+`" && b.dataset.hold === "`+hold+`" && `+ended+`; })()`)
		if st, h := backfillStateOf(t, e, id); st != state || (h && hold != "true") || (!h && hold != "false") {
			t.Fatalf("%s: the page says %s, on hold %s; rewind backfill status says %s, on hold %v", what, state, hold, st, h)
		}
	}
	click("pause")
	pageIs("paused", "running", "true")
	if got := eval[string](t, ctx, `document.getElementById("action-result").textContent`); got != "backfill "+id+": paused: nothing new starts until rewind backfill unpause" {
		t.Errorf("pause says %q", got)
	}

	// A second resume while the apply runs: the refusal of the CLI.
	click("resume")
	poll(t, ctx, "the refused resume", `document.getElementById("action-result").dataset.status === "409"`)
	refusal := eval[string](t, ctx, `document.getElementById("action-result").textContent`)
	if !strings.HasPrefix(refusal, "backfill "+id+" is owned by another rewind (pid ") || !strings.Contains(refusal, "(pid "+strconv.Itoa(ui.Process.Pid)+" ") {
		t.Errorf("the second resume says %q; want the owner's refusal naming the view's pid %d", refusal, ui.Process.Pid)
	}
	if _, errOut, code := cli(t, e.dir, e.state, "backfill", "apply", "--resume", id); code != 3 {
		t.Errorf("rewind backfill apply --resume while the view runs it: exit %d %s; want 3", code, errOut)
	}

	click("unpause")
	pageIs("unpaused", "running", "false")

	// 2025-07-02 fails: the backfill fails.
	e.write("broken", "")
	e.write("go", "")
	pageIs("failed", "failed", "false")

	// Fixed: resume runs it again in the view, validates and cuts over.
	if err := os.Remove(filepath.Join(e.dir, "broken")); err != nil {
		t.Fatal(err)
	}
	click("resume")
	pageIs("resumed", "success", "false")
	docShot(t, ctx, "ui-backfill-actions.png")

	click("rollback")
	pageIs("rolled back", "rolled_back", "false")

	audit := eval[string](t, ctx, `[...document.querySelectorAll("table#audit tbody tr")].map(tr => tr.cells[1].textContent + " " + tr.cells[3].textContent + " " + (tr.cells[6].textContent === "ok" ? "ok" : "error")).reverse().join("|")`)
	// The apply is recorded when it ended: failed, before its resume.
	if audit != "oncall backfill.pause ok|oncall backfill.resume error|oncall backfill.unpause ok|oncall backfill.apply error|oncall backfill.resume ok|oncall backfill.rollback ok" {
		t.Errorf("the backfill's audit trail: %s", audit)
	}
}
