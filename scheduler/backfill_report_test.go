package scheduler_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/rewind-dev/rewind/backfill"
	"github.com/rewind-dev/rewind/scheduler"
	"github.com/rewind-dev/rewind/store"
)

// reportHook is a webhook on 127.0.0.1 that keeps the bodies it gets and
// answers status.
type reportHook struct {
	mu     sync.Mutex
	bodies []struct{ ID, Pipeline, State, Report string }
	status int
	srv    *httptest.Server
}

func newReportHook(t *testing.T, status int) *reportHook {
	h := &reportHook{status: status}
	h.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, _ := io.ReadAll(r.Body)
		var body struct{ ID, Pipeline, State, Report string }
		if err := json.Unmarshal(raw, &body); err != nil {
			t.Errorf("webhook body %s: %v", raw, err)
		}
		h.mu.Lock()
		h.bodies = append(h.bodies, body)
		h.mu.Unlock()
		w.WriteHeader(h.status)
	}))
	t.Cleanup(h.srv.Close)
	return h
}

func (h *reportHook) got() []struct{ ID, Pipeline, State, Report string } {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append(h.bodies[:0:0], h.bodies...)
}

// validationReportHCL is revenue (max_change 5 %) with a consumer, a notify
// block that gets backfill reports (a command and a webhook) and one that
// gets only failed runs.
func validationReportHCL(hook string) string {
	return revenueHCL + `
pipeline "kpis" {
  schedule   = "@daily"
  start_date = "2025-07-01"
  consumes   = [pipeline.revenue]
  task "t" { command = "true" }
}
notify "team" {
  command = ["sh", "-c", "cat > notified.md; echo $REWIND_BACKFILL_STATE >> notified.state"]
  webhook = "` + hook + `/hook"
}
notify "oncall" {
  on      = ["run_failed"]
  command = ["sh", "-c", "touch oncall.got"]
}
`
}

// A validation that fails (a change over max_change) still writes the
// report and sends it to every block that gets backfill reports, with
// state failed: it says that the validation FAILED, each date over its
// rule, and the two ways on. The backfill stays failed at validate, main
// untouched, the consumers unpaused; apply --resume --force then cuts over
// and the report is written again, a success.
func TestValidationFailureIsReported(t *testing.T) {
	hook := newReportHook(t, http.StatusOK)
	e := newEnv(t, validationReportHCL(hook.srv.URL))
	ctx := context.Background()
	e.setFactor("1")
	now := utc("2025-07-03T00:00:00Z")
	e.run(scheduler.Options{Now: now})
	e.setFactor("2") // +100 %, over max_change = 0.05
	plan := e.plan(backfill.PlanParams{Pipeline: "revenue", Start: utc("2025-07-01T00:00:00Z"), End: utc("2025-07-02T00:00:00Z"), Reprocess: "completed", Now: now})
	res, err := e.apply(backfill.ApplyOptions{Plan: plan, Now: now})
	if !errors.Is(err, backfill.ErrValidation) || res.State != store.BackfillFailed {
		t.Fatalf("apply: %v (%s); want a validation failure", err, res.State)
	}
	b, err := e.st.GetBackfill(ctx, res.ID)
	if err != nil || b.State != store.BackfillFailed || b.Phase != backfill.PhaseValidate {
		t.Fatalf("backfill %+v (%v); want failed at validate", b, err)
	}
	if got := e.stats("main")["2025-07-01"].Sums["amount_usd"]; got != 150 {
		t.Errorf("main changed: %g", got)
	}
	if p, _ := e.st.GetPipeline(ctx, "kpis"); p.Paused {
		t.Error("the consumer stays paused after a failed validation")
	}
	if res.Undelivered != nil {
		t.Errorf("undelivered: %v", res.Undelivered)
	}

	path := filepath.Join(e.home, "backfills", res.ID+".md")
	if res.ReportPath != path {
		t.Errorf("report path %q; want %q", res.ReportPath, path)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("no report: %v", err)
	}
	report := string(raw)
	for _, want := range []string{
		"Validation FAILED",
		"revenue 2025-07-01 amount_usd: 150.00 -> 300.00 (100.00% > 5.00%)",
		"revenue 2025-07-02 amount_usd: 150.00 -> 300.00 (100.00% > 5.00%)",
		"`rewind backfill apply --resume " + res.ID + " --force`",
		"`rewind backfill cancel " + res.ID + "`",
		"| revenue | 2025-07-01 | 2 -> 2 | amount_usd | 150.00 | 300.00 | 100.00% **over** | 0.05 |",
	} {
		if !strings.Contains(report, want) {
			t.Errorf("the report lacks %q:\n%s", want, report)
		}
	}
	if strings.Contains(report, "then rebuilt for the window") || !strings.Contains(report, "not rebuilt: main is untouched: kpis") {
		t.Errorf("the report says the consumers were rebuilt; main is untouched:\n%s", report)
	}
	if got := e.events("notified.md"); strings.Join(got, "\n")+"\n" != report {
		t.Errorf("the notify command got %q", got)
	}
	if got := e.events("notified.state"); strings.Join(got, ",") != "failed" {
		t.Errorf("REWIND_BACKFILL_STATE = %v; want failed", got)
	}
	if got := hook.got(); len(got) != 1 || got[0].ID != res.ID || got[0].State != "failed" || got[0].Report != report {
		t.Errorf("webhook bodies %+v; want one, state failed, with the report", got)
	}
	if _, err := os.Stat(filepath.Join(e.dir, "oncall.got")); err == nil {
		t.Error("a block that does not get backfill reports got one")
	}

	// --resume --force cuts over: the report is written again, a success.
	res, err = e.apply(backfill.ApplyOptions{ResumeID: res.ID, Force: true, Now: now})
	if err != nil || res.State != store.BackfillSuccess {
		t.Fatalf("resume --force: %v (%s)", err, res.State)
	}
	raw, _ = os.ReadFile(path)
	if strings.Contains(string(raw), "FAILED") || !strings.Contains(string(raw), "| revenue | 2025-07-01 | 2 -> 2 | amount_usd | 150.00 | 300.00 | 100.00% **over** | 0.05 |") {
		t.Errorf("the report after --force:\n%s", raw)
	}
	if got := e.events("notified.state"); strings.Join(got, ",") != "failed,success" {
		t.Errorf("REWIND_BACKFILL_STATE = %v; want failed, then success", got)
	}
	if got := hook.got(); len(got) != 2 || got[1].State != "success" {
		t.Errorf("webhook bodies %+v; want a second one, state success", got)
	}
}

// The report of a failed validation that cannot be delivered changes
// nothing of the backfill: it stays failed at validate, the delivery error
// is recorded beside why it failed, and cancel settles it as before.
func TestValidationFailureReportUndelivered(t *testing.T) {
	hook := newReportHook(t, http.StatusInternalServerError)
	e := newEnv(t, validationReportHCL(hook.srv.URL))
	ctx := context.Background()
	e.setFactor("1")
	now := utc("2025-07-03T00:00:00Z")
	e.run(scheduler.Options{Now: now})
	e.setFactor("2")
	plan := e.plan(backfill.PlanParams{Pipeline: "revenue", Start: utc("2025-07-01T00:00:00Z"), End: utc("2025-07-02T00:00:00Z"), Reprocess: "completed", Now: now})
	res, err := e.apply(backfill.ApplyOptions{Plan: plan, Now: now})
	if !errors.Is(err, backfill.ErrValidation) || res.State != store.BackfillFailed {
		t.Fatalf("apply: %v (%s); want a validation failure", err, res.State)
	}
	if res.Undelivered == nil || !strings.Contains(res.Undelivered.Error(), "notify team: webhook") {
		t.Errorf("undelivered %v; want the webhook's answer", res.Undelivered)
	}
	b, err := e.st.GetBackfill(ctx, res.ID)
	if err != nil || b.State != store.BackfillFailed || b.Phase != backfill.PhaseValidate {
		t.Fatalf("backfill %s, phase %s (%v); want failed at validate", b.State, b.Phase, err)
	}
	if !strings.Contains(b.Detail, "validation failed") || !strings.Contains(b.Detail, "report not delivered: notify team: webhook") {
		t.Errorf("detail %q; want why it failed and why the report was not delivered", b.Detail)
	}
	if got := e.events("notified.state"); strings.Join(got, ",") != "failed" {
		t.Errorf("the command block got %v; want the report, state failed", got)
	}
	if _, err := backfill.CancelBackfill(ctx, e.st, res.ID); err != nil {
		t.Fatalf("cancel: %v", err)
	}
	if b, _ := e.st.GetBackfill(ctx, res.ID); b.State != store.BackfillCancelled {
		t.Errorf("after cancel: %s", b.State)
	}
	if got := e.stats("main")["2025-07-01"].Sums["amount_usd"]; got != 150 {
		t.Errorf("main changed: %g", got)
	}
}

// A backfill whose dates failed is told as a failed validation is: it
// fails (at validate: its dates are not all done), and its report, sent
// with state failed, names the dates that failed and the two ways on
// (apply --resume, cancel). Fixed, the resume succeeds.
func TestRunFailureIsReported(t *testing.T) {
	hook := newReportHook(t, http.StatusOK)
	e := newEnv(t, `
pipeline "p" {
  schedule   = "@daily"
  start_date = "2025-07-01"
  task "t" { command = "test ! -f broken_$REWIND_DS" }
}
notify "team" {
  command = ["sh", "-c", "cat > notified.md; echo $REWIND_BACKFILL_STATE >> notified.state"]
  webhook = "`+hook.srv.URL+`/hook"
}
`)
	now := utc("2025-07-04T00:00:00Z")
	e.touch("broken_2025-07-02")
	plan := e.plan(backfill.PlanParams{Pipeline: "p", Start: utc("2025-07-01T00:00:00Z"), End: utc("2025-07-03T00:00:00Z"), Now: now})
	res, err := e.apply(backfill.ApplyOptions{Plan: plan, Now: now})
	if !errors.Is(err, backfill.ErrUnfinished) || res.State != store.BackfillFailed {
		t.Fatalf("apply: %v (%s); want failed with a failed date", err, res.State)
	}
	raw, err := os.ReadFile(filepath.Join(e.home, "backfills", res.ID+".md"))
	if err != nil {
		t.Fatalf("no report: %v", err)
	}
	report := string(raw)
	for _, want := range []string{
		"**FAILED**: dates of the window failed",
		"## FAILED: dates of the window failed",
		"failed: 2025-07-02",
		"- dates: 3 planned, 2 succeeded, 1 failed",
		"`rewind backfill apply --resume " + res.ID + "` runs the failed dates again",
		"`rewind backfill cancel " + res.ID + "` gives the backfill up",
	} {
		if !strings.Contains(report, want) {
			t.Errorf("report lacks %q:\n%s", want, report)
		}
	}
	if strings.Contains(report, "Validation FAILED") {
		t.Errorf("the report of failed dates speaks of a validation:\n%s", report)
	}
	if got := hook.got(); len(got) != 1 || got[0].State != "failed" || got[0].Report != report {
		t.Errorf("webhook got %+v; want the report once, state failed", got)
	}
	if got, _ := os.ReadFile(filepath.Join(e.dir, "notified.state")); strings.TrimSpace(string(got)) != "failed" {
		t.Errorf("command block got state %q; want failed", got)
	}
	e.remove("broken_2025-07-02")
	res, err = e.apply(backfill.ApplyOptions{ResumeID: res.ID, Now: now})
	if err != nil || res.State != store.BackfillSuccess {
		t.Fatalf("resume: %v (%s)", err, res.State)
	}
	if got := hook.got(); len(got) != 2 || got[1].State != "success" {
		t.Errorf("after the resume the webhook got %+v; want a second report, success", got)
	}
}
