package web_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/rewind-dev/rewind/scheduler"
)

// The browser tests drive Debian's chromium headless through the DevTools
// protocol against `rewind ui` (the built binary) on a free loopback port.
// Without chromium they are skipped, unless CI is set: then they fail.
// Screenshots go to t.ArtifactDir(): kept with
// `go test ./web/ -run Browser -artifacts -outputdir DIR`.

func chromiumPath(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") != "" {
		t.Fatal("chromium not found and CI is set: .ci/run installs it (apt-get install chromium)")
	}
	t.Skip("chromium not found (apt-get install chromium); with CI set this test fails instead")
	return ""
}

// browser starts a headless chromium for the test and returns a tab.
func browser(t *testing.T) context.Context {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromiumPath(t)), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.WindowSize(1400, 900), chromedp.UserDataDir(t.TempDir()))
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(alloc)
	t.Cleanup(func() {
		cancel()
		cancelAlloc()
	})
	if err := chromedp.Do(ctx); err != nil { // starts the browser, without a timeout
		t.Fatalf("start chromium: %v", err)
	}
	return ctx
}

// within runs actions with a time limit.
func within(t *testing.T, ctx context.Context, d time.Duration, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		t.Fatal(err)
	}
}

func eval[T any](t *testing.T, ctx context.Context, js string) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](js))
	if err != nil {
		t.Fatalf("%s: %v", js, err)
	}
	return v
}

func screenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.ArtifactDir(), name)
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", path)
}

// redColumns is the script that lists the dates whose every task cell is
// failed, and counts the failed cells.
const redColumns = `(() => {
  const heads = [...document.querySelectorAll("tr.dates th.run")];
  const rows = [...document.querySelectorAll("table.grid tbody tr")];
  const red = heads.filter((h, j) => rows.every(r => r.cells[j + 1].classList.contains("s-failed"))).map(h => h.dataset.ds);
  const failed = document.querySelectorAll("table.grid tbody td.s-failed").length;
  return red.join(",") + " " + failed;
})()`

// A 60-date catchup with one failed date and one hot date: 60 columns,
// one column of red cells, one cell marked with pool large; a click shows
// a cell's attempts and the tail of its log.
func TestBrowserGrid(t *testing.T) {
	ctx := browser(t)
	e := newEnv(t, dailyHCL)
	sum := e.run(scheduler.Options{Catchup: true, Now: utc("2025-04-30T00:00:00Z")}) // 2025-03-01 .. 2025-04-29
	if len(sum.Finished) != 60 {
		t.Fatalf("%d runs finished; want 60", len(sum.Finished))
	}
	base := e.startUI()
	within(t, ctx, 60*time.Second, chromedp.Navigate(base+"pipelines/daily"), chromedp.WaitVisible(chromedp.CSS("table.grid")))

	if n := eval[int](t, ctx, `document.querySelectorAll("tr.dates th.run").length`); n != 60 {
		t.Errorf("the grid has %d columns; want 60", n)
	}
	if got := eval[string](t, ctx, `[...document.querySelectorAll("tr.dates th.run")].map(h => h.dataset.ds).filter((d, i, a) => i > 0 && d < a[i-1]).length + " " + document.querySelector("tr.dates th.run:last-child").dataset.ds`); got != "0 2025-04-29" {
		t.Errorf("columns out of order or newest not on the right: %s", got)
	}
	if got := eval[string](t, ctx, redColumns); got != "2025-03-04 2" {
		t.Errorf("red columns and failed cells: %q; want the one column 2025-03-04 of 2 failed cells", got)
	}
	if got := eval[string](t, ctx, `getComputedStyle(document.querySelector("td.c.s-failed")).backgroundColor`); got != "rgb(217, 59, 59)" {
		t.Errorf("a failed cell is drawn %s; want red", got)
	}
	hot := eval[string](t, ctx, `[...document.querySelectorAll("td.c.hot")].map(td => td.dataset.pool + " " + td.parentElement.dataset.task + " " + td.textContent).join("|")`)
	if hot != "large load L" {
		t.Errorf("hot cells %q; want one cell of load marked with pool large", hot)
	}
	if got := eval[string](t, ctx, `document.querySelector("tr.dates th.run.hot").textContent + " " + document.querySelector("tr.dates th.run.hot").title`); !strings.Contains(got, "2025-03-05large") || !strings.Contains(got, "hot_dates") {
		t.Errorf("the hot date's column header: %q; want its pool and reason", got)
	}

	// Clicking the failed extract cell shows its attempt and its log tail.
	within(t, ctx, 30*time.Second,
		chromedp.Click(chromedp.CSS(`tr[data-task="extract"] td.c.s-failed`)),
		chromedp.WaitVisible(chromedp.CSS("#detail")),
		chromedp.Poll[chromedp.Void](`(document.querySelector("#detail-logs pre.log") || {}).textContent?.includes("boom")`, chromedp.WithPollingTimeout(20*time.Second)),
	)
	title := eval[string](t, ctx, `document.getElementById("detail-title").textContent`)
	row := eval[string](t, ctx, `[...document.querySelectorAll("#detail-attempts tr")].map(tr => [...tr.cells].map(c => c.textContent).join("|")).join("\n")`)
	logText := eval[string](t, ctx, `document.querySelector("#detail-logs pre.log").textContent`)
	if title != "extract · 2025-03-04 · failed" || !strings.HasPrefix(row, "1|default|failed|1|") || strings.Count(row, "\n") != 0 {
		t.Errorf("detail %q, attempts %q", title, row)
	}
	if !strings.Contains(logText, "extracting 2025-03-04") {
		t.Errorf("log tail %q", logText)
	}
	// The hot cell says where it ran and why.
	within(t, ctx, 30*time.Second,
		chromedp.Click(chromedp.CSS(`td.c.hot[data-pool="large"]`)),
		chromedp.Poll[chromedp.Void](`(document.querySelector("#detail-logs pre.log") || {}).textContent?.includes("loading 2025-03-05 in large")`, chromedp.WithPollingTimeout(20*time.Second)),
	)
	if row := eval[string](t, ctx, `document.querySelector("#detail-attempts tr").textContent`); !strings.Contains(row, "large") || !strings.Contains(row, "hot_dates") {
		t.Errorf("hot attempt row %q; want pool large and reason hot_dates", row)
	}
	screenshot(t, ctx, "grid.png")

	// The Gantt chart of the failed run, linked from the cell.
	within(t, ctx, 30*time.Second,
		chromedp.Click(chromedp.CSS(`tr[data-task="extract"] td.c.s-failed`)),
		chromedp.Poll[chromedp.Void](`document.getElementById("detail-title").textContent.includes("extract")`, chromedp.WithPollingTimeout(10*time.Second)),
		chromedp.Click(chromedp.CSS(`#detail-links a`)),
		chromedp.WaitVisible(chromedp.CSS("svg.gantt")),
	)
	if n := eval[int](t, ctx, `document.querySelectorAll("svg.gantt rect.bar").length`); n != 2 {
		t.Errorf("the Gantt chart has %d bars; want 2 attempts", n)
	}
	screenshot(t, ctx, "gantt.png")
}

// While a catchup runs, the grid follows it without a reload: runs appear,
// cells go running, then green.
func TestBrowserGridLive(t *testing.T) {
	ctx := browser(t)
	e := newEnv(t, `
pipeline "live" {
  schedule        = "@daily"
  start_date      = "2025-05-01"
  max_active_runs = 2
  task "extract" { command = "sleep 0.5; echo extracted" }
  task "load" {
    depends_on = [task.extract]
    command    = "sleep 0.5; echo loaded"
  }
}
`)
	base := e.startUI()
	within(t, ctx, 60*time.Second, chromedp.Navigate(base+"pipelines/live"), chromedp.WaitVisible(chromedp.CSS("#empty")))
	eval[bool](t, ctx, `window.__sameDocument = true`)

	done := make(chan error, 1)
	go func() {
		_, err := scheduler.Run(context.Background(), scheduler.Options{Store: e.st, Workspace: e.ws, Home: e.home, Catchup: true, Now: utc("2025-05-11T00:00:00Z")}) // 10 dates, 2 at a time: 5 s or more
		done <- err
	}()
	within(t, ctx, 60*time.Second,
		chromedp.Poll[chromedp.Void](`document.querySelector("td.c.s-running") !== null`, chromedp.WithPollingTimeout(45*time.Second)),
		chromedp.Poll[chromedp.Void](`document.querySelector("td.c.s-success") !== null`, chromedp.WithPollingTimeout(45*time.Second)),
	)
	if !eval[bool](t, ctx, `window.__sameDocument === true && performance.getEntriesByType("navigation").length === 1`) {
		t.Error("the page reloaded to show the catchup")
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(90 * time.Second):
		t.Fatal("the catchup did not finish")
	}
	within(t, ctx, 30*time.Second,
		chromedp.Poll[chromedp.Void](`document.querySelectorAll("table.grid tbody td.c.s-success").length === 20`, chromedp.WithPollingTimeout(20*time.Second)))
	if !eval[bool](t, ctx, `window.__sameDocument === true && document.querySelectorAll("tr.dates th.run").length === 10`) {
		t.Error("the grid did not end with the 10 runs in the same document")
	}
}

// The backfill page of a backfill whose validation failed shows the
// failing dates and their change.
func TestBrowserBackfill(t *testing.T) {
	ctx := browser(t)
	e, id := failedValidation(t)
	base := e.startUI()
	within(t, ctx, 60*time.Second, chromedp.Navigate(base+"backfills/"+id), chromedp.WaitVisible(chromedp.CSS("#validation")))
	rows := eval[string](t, ctx, `[...document.querySelectorAll("#validation tr.violates")].map(tr => tr.cells[1].textContent + " " + tr.cells[4].textContent + " " + tr.cells[5].textContent + " " + tr.querySelector("td.change").textContent).join("|")`)
	if rows != "2025-07-01 150.00 300.00 100.00%|2025-07-02 150.00 300.00 100.00%" {
		t.Errorf("failing dates %q", rows)
	}
	if got := eval[string](t, ctx, `document.getElementById("failing").textContent`); got != "2 over their rules" {
		t.Errorf("failing count %q", got)
	}
	phases := eval[string](t, ctx, `[...document.querySelectorAll("#phases tbody tr")].map(tr => tr.cells[0].textContent + "=" + tr.cells[1].textContent).join(" ")`)
	if !strings.Contains(phases, "run=done validate=failed cutover=pending") {
		t.Errorf("phases %q", phases)
	}
	if n := eval[int](t, ctx, `document.querySelectorAll("svg.chart rect.cbar.over").length`); n != 2 {
		t.Errorf("the chart has %d bars over max_change; want 2", n)
	}
	screenshot(t, ctx, "backfill.png")
}

// The backfill page of a backfill with succeeded, failed and skipped
// dates: its progress bar counts each and gives its share, its heatmap
// has a square per date, and its phases their times.
func TestBrowserBackfillProgress(t *testing.T) {
	ctx := browser(t)
	e, id, _, _ := mixedBackfill(t)
	base := e.startUI()
	within(t, ctx, 60*time.Second, chromedp.Navigate(base+"backfills/"+id), chromedp.WaitVisible(chromedp.CSS("#bars svg.pbar")))
	legend := eval[string](t, ctx, `document.querySelector('.pbarrow[data-role="backfill"] .pcounts').textContent`)
	if legend != "10 targeted · 5 succeeded (50.0%) · 2 failed (20.0%) · 0 in progress (0.0%) · 3 skipped (30.0%)" {
		t.Errorf("the bar's legend: %q", legend)
	}
	widths := eval[string](t, ctx, `[...document.querySelectorAll('.pbarrow[data-role="backfill"] rect.seg')].map(r => r.dataset.key + "=" + Math.round(r.getBBox().width)).join(" ")`)
	if widths != "succeeded=300 failed=120 skipped=180" {
		t.Errorf("the bar's segments: %q; want 50%%, 20%% and 30%% of 600 px", widths)
	}
	squares := eval[string](t, ctx, `[...document.querySelectorAll("svg.heatmap rect.hd")].map(r => r.getAttribute("class").replace("hd ", "")).join(" ")`)
	if strings.Count(squares, "s-success") != 5 || strings.Count(squares, "s-failed") != 2 || strings.Count(squares, "s-skip") != 3 || strings.Count(squares, "outside") != 2 {
		t.Errorf("heatmap squares: %s", squares)
	}
	phases := eval[string](t, ctx, `[...document.querySelectorAll("#phases tbody tr")].map(tr => [...tr.cells].map(c => c.textContent).join("|")).join("\n")`)
	stamp := regexp.MustCompile(`^\d{4}-\d\d-\d\d \d\d:\d\d:\d\dZ$`)
	for _, row := range strings.Split(phases, "\n") {
		f := strings.Split(row, "|")
		if len(f) != 5 {
			t.Fatalf("phase row %q", row)
		}
		reached := f[1] == "done" || f[1] == "failed"
		if reached != (stamp.MatchString(f[2]) && stamp.MatchString(f[3]) && f[4] != "") {
			t.Errorf("phase %s (%s): started %q, ended %q, took %q", f[0], f[1], f[2], f[3], f[4])
		}
	}
	if !eval[bool](t, ctx, `!document.getElementById("ledger").open`) {
		t.Error("the ledger of every date is open by default")
	}
	screenshot(t, ctx, "backfill-progress.png")
}
