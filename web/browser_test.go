package web_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/rewind-dev/rewind/backfill"
	"github.com/rewind-dev/rewind/lease"
	"github.com/rewind-dev/rewind/scheduler"
	"github.com/rewind-dev/rewind/store"
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

// evalAsync is eval of a script whose value is a promise: its result.
func evalAsync[T any](t *testing.T, ctx context.Context, js string) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](js, chromedp.EvalAwaitPromise))
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

// An hourly pipeline's grid names its columns by their time of day in
// the pipeline's timezone (HH:MM), with the day where it changes; so do
// its tooltips and the panel of a cell.
func TestBrowserGridHourly(t *testing.T) {
	ctx := browser(t)
	e := newEnv(t, hourlyHCL)
	sum := e.run(scheduler.Options{Catchup: true, Now: utc("2025-03-02T23:00:00Z")}) // 2025-03-01 00:00 .. 03-02 23:00 CET
	if len(sum.Finished) != 48 {
		t.Fatalf("%d runs; want 48", len(sum.Finished))
	}
	base := e.startUI()
	within(t, ctx, 60*time.Second, chromedp.Navigate(base+"pipelines/hourly"), chromedp.WaitVisible(chromedp.CSS("table.grid")))
	heads := eval[[]string](t, ctx, `[...document.querySelectorAll("tr.dates th.run a")].map(a => a.textContent)`)
	if len(heads) != 48 {
		t.Fatalf("%d columns", len(heads))
	}
	hhmm := regexp.MustCompile(`^(2025-03-0[12] )?\d\d:\d\d$`)
	for i, h := range heads {
		if !hhmm.MatchString(h) {
			t.Errorf("column %d is %q; want HH:MM", i, h)
		}
	}
	if heads[0] != "2025-03-01 00:00" || heads[1] != "01:00" || heads[24] != "2025-03-02 00:00" || heads[47] != "23:00" {
		t.Errorf("columns %q .. %q, %q; want the day where it changes", heads[0], heads[1], heads[24])
	}
	title := eval[string](t, ctx, `document.querySelectorAll("tr.dates th.run")[13].title`)
	if !strings.HasPrefix(title, "2025-03-01 13:00 CET: success (scheduled)") {
		t.Errorf("tooltip %q", title)
	}
	within(t, ctx, 30*time.Second,
		chromedp.Click(chromedp.CSS(`tr[data-task="extract"] td.c:nth-child(15)`)),
		chromedp.Poll[chromedp.Void](`document.getElementById("detail-title").textContent !== ""`, chromedp.WithPollingTimeout(20*time.Second)))
	if got := eval[string](t, ctx, `document.getElementById("detail-title").textContent`); got != "extract · 2025-03-01 13:00 CET · success" {
		t.Errorf("panel %q", got)
	}
}

// A year of a daily pipeline of 20 tasks (365 runs, 7,300 task
// instances, run for real): the grid of the whole year renders and
// scrolls, the first run never under the task names. The time from
// navigation to the grid's first frame is logged (README: Web view),
// not asserted.
func TestBrowserGrid365x20(t *testing.T) {
	ctx := browser(t)
	var hcl strings.Builder
	hcl.WriteString("pool \"default\" { slots = 32 }\npipeline \"year\" {\n  schedule         = \"@daily\"\n  start_date       = \"2025-01-01\"\n  max_active_runs  = 32\n  max_active_tasks = 64\n")
	for i := range 20 {
		fmt.Fprintf(&hcl, "  task \"task_%02d\" { command = \"case $REWIND_DS in 2025-06-15) exit 1;; esac\" }\n", i)
	}
	hcl.WriteString("}\n")
	e := newEnv(t, hcl.String())
	began := time.Now()
	sum := e.run(scheduler.Options{Catchup: true, Now: utc("2026-01-01T00:00:00Z")})
	if len(sum.Finished) != 365 {
		t.Fatalf("%d runs; want 365", len(sum.Finished))
	}
	t.Logf("365 runs of 20 tasks ran in %v", time.Since(began).Round(time.Millisecond))
	base := e.startUI()
	for _, c := range []struct {
		path string
		runs int
	}{{"pipelines/year", 100}, {"pipelines/year?limit=365", 365}} {
		start := time.Now()
		within(t, ctx, 120*time.Second, chromedp.Navigate(base+c.path),
			chromedp.Poll[chromedp.Void](`performance.getEntriesByName("rewind:grid-ready").length > 0`, chromedp.WithPollingTimeout(60*time.Second)))
		wall := time.Since(start)
		timing := eval[[]float64](t, ctx, `(() => { const n = performance.getEntriesByType("navigation")[0];
		  return [n.responseStart, n.responseEnd, n.domContentLoadedEventEnd, performance.getEntriesByName("rewind:grid-ready")[0].startTime]; })()`)
		if n := eval[int](t, ctx, `document.querySelectorAll("tr.dates th.run").length`); n != c.runs {
			t.Fatalf("%s: %d columns; want %d", c.path, n, c.runs)
		}
		if n := eval[int](t, ctx, `document.querySelectorAll("table.grid tbody td.c").length`); n != 20*c.runs {
			t.Errorf("%s: %d cells; want %d", c.path, n, 20*c.runs)
		}
		// Scrolled to the oldest run: it is beside the task names, not
		// under them; scrolled back to the newest: the last run shows.
		scroll := evalAsync[[]float64](t, ctx, `(async () => {
		  const root = document.getElementById("grid"), frame = () => new Promise(r => requestAnimationFrame(r));
		  const t0 = performance.now();
		  root.scrollLeft = 0; await frame(); await frame();
		  const t1 = performance.now();
		  const td = document.querySelector("table.grid tbody tr td.c"), th = document.querySelector("table.grid tbody th.task");
		  const b = td.getBoundingClientRect(), hit = document.elementFromPoint(b.left + b.width / 2, b.top + b.height / 2) === td ? 1 : 0;
		  const gap = b.left - th.getBoundingClientRect().right;
		  const h = document.querySelector("tr.dates th.run").getBoundingClientRect();
		  const head = document.querySelector("tr.dates th.run").contains(document.elementFromPoint(h.left + h.width / 2, h.bottom - 20)) ? 1 : 0;
		  root.scrollLeft = root.scrollWidth; await frame(); await frame();
		  const last = [...document.querySelectorAll("table.grid tbody tr:first-child td.c")].pop().getBoundingClientRect();
		  const shown = last.right <= root.getBoundingClientRect().right + 1 ? 1 : 0;
		  return [t1 - t0, hit, gap, head, shown];
		})()`)
		if scroll[1] != 1 || scroll[2] < 0 || scroll[3] != 1 || scroll[4] != 1 {
			t.Errorf("%s: first cell on top %v, gap to the task names %v px, first header on top %v, last cell shown %v", c.path, scroll[1], scroll[2], scroll[3], scroll[4])
		}
		t.Logf("%s: %d runs x 20 tasks: grid drawn %.0f ms after navigation (response %.0f..%.0f ms, DOMContentLoaded %.0f ms; %v as the test saw it); a scroll across it drawn in %.0f ms",
			c.path, c.runs, timing[3], timing[0], timing[1], timing[2], wall.Round(time.Millisecond), scroll[0])
		if c.runs == 365 {
			screenshot(t, ctx, "grid-365x20.png")
		}
	}
}

// The banner says when no scheduler holds the leader lease, and goes
// away, without a reload, once one does.
func TestBrowserBanner(t *testing.T) {
	ctx := browser(t)
	e := dailyEnv(t)
	base := e.startUI()
	within(t, ctx, 60*time.Second, chromedp.Navigate(base), chromedp.WaitVisible(chromedp.CSS("#banner")))
	if got := eval[string](t, ctx, `document.getElementById("banner").textContent`); !strings.HasPrefix(got, "No rewind scheduler holds the leader lease") {
		t.Errorf("banner %q", got)
	}
	eval[bool](t, ctx, `window.__sameDocument = true`)
	l := store.AcquireLeaseParams{Name: lease.Leader, Holder: "node-a:42", Host: "node-a", PID: 42, TTL: time.Hour, Now: time.Now()}
	if _, ok, err := e.st.AcquireLease(context.Background(), l); err != nil || !ok {
		t.Fatalf("acquire: %v %v", ok, err)
	}
	within(t, ctx, 30*time.Second, chromedp.Poll[chromedp.Void](`document.getElementById("banner").hidden`, chromedp.WithPollingTimeout(20*time.Second)))
	if err := e.st.ReleaseLease(context.Background(), store.ReleaseLeaseParams{Name: lease.Leader, Holder: "node-a:42"}); err != nil {
		t.Fatal(err)
	}
	within(t, ctx, 30*time.Second, chromedp.Poll[chromedp.Void](`!document.getElementById("banner").hidden`, chromedp.WithPollingTimeout(20*time.Second)))
	if !eval[bool](t, ctx, `window.__sameDocument === true`) {
		t.Error("the page reloaded")
	}
	// Another page, loaded while a scheduler leads, has no banner.
	if _, ok, err := e.st.AcquireLease(context.Background(), l); err != nil || !ok {
		t.Fatalf("acquire: %v %v", ok, err)
	}
	within(t, ctx, 60*time.Second, chromedp.Navigate(base+"pipelines/daily"), chromedp.WaitVisible(chromedp.CSS("table.grid")))
	if !eval[bool](t, ctx, `document.getElementById("banner").hidden`) {
		t.Error("the banner shows while a scheduler leads")
	}
}

// A backfill of a year with succeeded, failed and skipped dates fits on
// one screen: its bar, the heatmap of its 365 dates, its phases.
func TestBrowserBackfillYear(t *testing.T) {
	ctx := browser(t)
	e := newEnv(t, `
pipeline "orders" {
  schedule        = "@daily"
  start_date      = "2025-01-01"
  max_active_runs = 16
  task "extract" { command = "case $REWIND_DS in *-13) echo no source >&2; exit 1;; esac" }
  task "load" {
    depends_on = [task.extract]
    command    = "true"
  }
}
`)
	e.run(scheduler.Options{Now: utc("2025-04-01T00:00:00Z")}) // the nightly ran January to March
	now := utc("2026-01-01T00:00:00Z")
	plan := e.plan(backfill.PlanParams{Pipeline: "orders", Start: utc("2025-01-01T00:00:00Z"), End: utc("2025-12-31T00:00:00Z"), Reprocess: "none", Now: now})
	res, err := e.apply(backfill.ApplyOptions{Plan: plan, Now: now})
	if !errors.Is(err, backfill.ErrUnfinished) {
		t.Fatalf("apply: %v; want the dates of the 13th failed", err)
	}
	base := e.startUI()
	within(t, ctx, 60*time.Second, chromedp.Navigate(base+"backfills/"+res.ID), chromedp.WaitVisible(chromedp.CSS("svg.heatmap")))
	legend := eval[string](t, ctx, `document.querySelector('.pbarrow[data-role="backfill"] .pcounts').textContent`)
	if legend != "365 targeted · 266 succeeded (72.9%) · 9 failed (2.5%) · 0 in progress (0.0%) · 90 skipped (24.7%)" {
		t.Errorf("the bar's legend: %q", legend)
	}
	if n := eval[int](t, ctx, `document.querySelectorAll("svg.heatmap rect.hd").length`); n != 365 {
		t.Errorf("%d squares; want 365", n)
	}
	// One screen: the bar, the heatmap and the phases within 1400 x 900.
	bottom := eval[float64](t, ctx, `document.getElementById("phases").getBoundingClientRect().bottom`)
	right := eval[float64](t, ctx, `document.querySelector("svg.heatmap").getBoundingClientRect().right`)
	if bottom > 900 || right > 1400 {
		t.Errorf("the phases end at %.0f px, the heatmap at %.0f px: not one screen of 1400 x 900", bottom, right)
	}
	why := eval[string](t, ctx, `document.querySelector('svg.heatmap rect.hd[data-ds="2025-02-13"] title').textContent`)
	if why != "2025-02-13: skipped · already failed, and reprocess none leaves failed dates" {
		t.Errorf("the square of 2025-02-13 says %q", why)
	}
	screenshot(t, ctx, "backfill-year.png")
}
