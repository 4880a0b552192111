package examples_test

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io/fs"
	"maps"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rewind-dev/rewind/backfill"
	"github.com/rewind-dev/rewind/dsl"
	"github.com/rewind-dev/rewind/scheduler"
)

const (
	pipeline = "daily_revenue"
	table    = "analytics.fct_daily_revenue"
	now      = "2025-09-29T00:00:00Z"
	days     = 90 // 2025-07-01 .. 2025-09-28
)

// TestDailyRevenueStory runs the seeds' story with the real binary, real
// task processes and a real local Iceberg warehouse: 90 days written with
// the previous day's FX rate, a backfill with the fix that validates,
// reports the corrections and cuts over, a rollback, and the expiry of the
// old version. The correct totals are computed here, in Go, from the raw
// CSV files the extract tasks wrote, independently of the pipeline's awk.
func TestDailyRevenueStory(t *testing.T) {
	start := time.Now()
	bin := buildRewind(t)
	work := filepath.Join(t.TempDir(), pipeline)
	copyExample(t, pipeline, work)
	rw := &cli{t: t, bin: bin, dir: work}

	// The workspace is valid.
	if out, err := rw.run("validate", "."); err != nil {
		t.Fatalf("validate: %v\n%s", err, out)
	}

	// a. 90 days written with the bug.
	if out, err := rw.run("run", "--catchup", "-var", "fx_rate_day=previous", "--now", now, "--quiet", "."); err != nil {
		t.Fatalf("run --catchup with the bug: %v\n%s", err, out)
	}
	runs := rw.runs()
	if len(runs) != days {
		t.Fatalf("%d runs; want %d", len(runs), days)
	}
	for _, r := range runs {
		if r.State != "success" || r.Kind != "scheduled" || len(r.Tasks) != 4 {
			t.Fatalf("run %s: state %s, kind %s, %d tasks; want 4 tasks, success, scheduled", r.DS, r.State, r.Kind, len(r.Tasks))
		}
	}
	if out, err := rw.run("logs", pipeline, "2025-07-01", "fx_join"); err != nil || !strings.Contains(out, "previous day's rates") {
		t.Fatalf("fx_join did not get fx_rate_day=previous: %v\n%s", err, out)
	}
	for _, r := range runs {
		report, err := os.ReadFile(filepath.Join(work, "out", "report_"+r.DS+".txt"))
		if err != nil || !regexp.MustCompile(`^`+r.DS+` revenue: [0-9]+\.[0-9]{2} USD from [0-9]+ transactions in [0-9]+ currencies\n$`).Match(report) {
			t.Fatalf("report of %s: %v %q", r.DS, err, report)
		}
	}

	raw := readRaw(t, work)
	if len(raw) != days {
		t.Fatalf("raw data of %d dates; want %d", len(raw), days)
	}
	correct, buggy := map[string]float64{}, map[string]float64{}
	for ds, d := range raw {
		correct[ds] = d.total(t, ds)
		buggy[ds] = d.total(t, dayBefore(t, ds))
	}
	wrong := stats(t, work, "main")
	if len(wrong) != days {
		t.Fatalf("main has %d partitions; want %d", len(wrong), days)
	}
	for ds, d := range raw {
		got := wrong[ds]
		if got.rows != int64(len(d.currencies)) {
			t.Errorf("main %s: %d rows; want one per currency (%d)", ds, got.rows, len(d.currencies))
		}
		if !near(got.usd, buggy[ds]) {
			t.Errorf("main %s: %.6f USD; want %.6f (the previous day's rates)", ds, got.usd, buggy[ds])
		}
		if rel := math.Abs(got.usd-correct[ds]) / correct[ds]; rel < 1e-3 {
			t.Errorf("main %s: %.6f USD is within %.2g of the correct %.6f: the bug is not visible", ds, got.usd, rel, correct[ds])
		}
	}

	// b. The plan: every date reprocessed, 15 at a time.
	window := []string{pipeline, "--start", "2025-07-01", "--end", "2025-09-28", "--reprocess", "completed", "--max-active-runs", "15", "--now", now}
	out, err := rw.run(append([]string{"backfill", "plan", "--json"}, window...)...)
	if err != nil {
		t.Fatalf("backfill plan: %v\n%s", err, out)
	}
	var plan struct {
		Selected int `json:"selected"`
		Waves    int `json:"waves"`
		Dates    []struct {
			DS     string `json:"ds"`
			Action string `json:"action"`
		} `json:"dates"`
	}
	if err := json.Unmarshal([]byte(out), &plan); err != nil {
		t.Fatalf("plan --json: %v\n%s", err, out)
	}
	if plan.Selected != days || plan.Waves != 6 || len(plan.Dates) != days {
		t.Fatalf("plan: %d of %d dates in %d waves; want %d in 6", plan.Selected, len(plan.Dates), plan.Waves, days)
	}
	for _, d := range plan.Dates {
		if d.Action != "reprocess" || raw[d.DS] == nil {
			t.Fatalf("plan: %s %s; want every date of the window reprocessed", d.DS, d.Action)
		}
	}
	if out, err := rw.run(append([]string{"backfill", "plan"}, window...)...); err != nil || !strings.Contains(out, "6 waves") {
		t.Fatalf("backfill plan: %v\n%s", err, out)
	}

	// c. The fix: no -var. The backfill writes its branch, validates it,
	// reports the corrections and cuts over.
	out, err = rw.run(append([]string{"backfill", "apply"}, window...)...)
	if err != nil {
		t.Fatalf("backfill apply: %v\n%s", err, out)
	}
	m := regexp.MustCompile(`(?m)^report: (\S+\.md)$`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("backfill apply printed no report path:\n%s", out)
	}
	reportPath := m[1]
	if !filepath.IsAbs(reportPath) {
		reportPath = filepath.Join(work, reportPath)
	}
	id := strings.TrimSuffix(filepath.Base(reportPath), ".md")
	if want := filepath.Join(work, ".rewind", "backfills", id+".md"); reportPath != want {
		t.Errorf("report at %s; want %s", reportPath, want)
	}
	report, err := os.ReadFile(reportPath)
	if err != nil {
		t.Fatal(err)
	}
	corrections := parseCorrections(t, string(report))
	if len(corrections) != days {
		t.Fatalf("the report corrects %d dates; want %d:\n%s", len(corrections), days, report)
	}
	for ds, c := range corrections {
		if raw[ds] == nil || math.Abs(c.old-buggy[ds]) > 0.006 || math.Abs(c.new-correct[ds]) > 0.006 {
			t.Errorf("report %s: %.2f -> %.2f; want %.2f -> %.2f", ds, c.old, c.new, buggy[ds], correct[ds])
		}
	}
	if out, err := rw.run("logs", pipeline, "2025-07-01", "fx_join"); err != nil || !strings.Contains(out, "same day's rates") {
		t.Fatalf("the backfill's fx_join did not use the same day's rates: %v\n%s", err, out)
	}
	// The report task ran again with the fixed revenue (out/ is not versioned:
	// a rollback leaves it as the backfill wrote it).
	for ds := range raw {
		report, err := os.ReadFile(filepath.Join(work, "out", "report_"+ds+".txt"))
		m := regexp.MustCompile(`^` + ds + ` revenue: ([0-9.]+) USD`).FindSubmatch(report)
		if err != nil || m == nil || math.Abs(parseFloat(t, string(m[1]))-correct[ds]) > 0.006 {
			t.Errorf("report of %s after the backfill: %v %q; want %.2f USD", ds, err, report, correct[ds])
		}
	}
	// The backfill rewrote the raw files: the same data (the source is a
	// function of the date).
	for ds, d := range readRaw(t, work) {
		if got := d.total(t, ds); got != correct[ds] {
			t.Errorf("raw data of %s changed: %.6f, then %.6f", ds, correct[ds], got)
		}
	}
	fixed := stats(t, work, "main")
	for ds := range raw {
		if !near(fixed[ds].usd, correct[ds]) || fixed[ds].rows != wrong[ds].rows {
			t.Errorf("main %s after the cutover: %d rows, %.6f USD; want %d, %.6f", ds, fixed[ds].rows, fixed[ds].usd, wrong[ds].rows, correct[ds])
		}
	}
	tagged := stats(t, work, backfill.TagName(id))
	sameStats(t, "the tag "+backfill.TagName(id), tagged, wrong)
	// The cutover is a commit of its own on main (the window's partitions
	// replaced by the branch's), the old main tagged.
	refs := rw.refs()
	if refs["main"] == "" || refs[backfill.TagName(id)] == "" || refs[backfill.TagName(id)] == refs["main"] || refs[scheduler.BranchName(id)] == "" {
		t.Fatalf("refs after the cutover: %v; want main moved past the tag, the branch kept", refs)
	}

	// d. Rollback: main is back at the tag, the wrong totals.
	if out, err := rw.run("backfill", "rollback", id); err != nil {
		t.Fatalf("backfill rollback: %v\n%s", err, out)
	}
	sameStats(t, "main after the rollback", stats(t, work, "main"), wrong)

	// e. Expiry: the tag and the branch go, main still reads.
	if out, err := rw.run("lake", "expire", "--older-than", "0s"); err != nil {
		t.Fatalf("lake expire: %v\n%s", err, out)
	}
	refs = rw.refs()
	if len(refs) != 1 || refs["main"] == "" {
		t.Fatalf("refs after expire: %v; want main alone", refs)
	}
	sameStats(t, "main after expire", stats(t, work, "main"), wrong)
	t.Logf("the story took %s", time.Since(start).Round(time.Millisecond))
}

// buildRewind builds the binary from the module root, once.
func buildRewind(t *testing.T) string {
	t.Helper()
	begin := time.Now()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to build rewind: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "rewind")
	cmd := exec.Command(goBin, "build", "-ldflags=-s -w", "-o", bin, "./cmd/rewind") // no symbol tables: a faster link
	cmd.Dir = ".."
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	t.Logf("go build: %s", time.Since(begin).Round(time.Millisecond))
	return bin
}

// copyExample copies the example's files, leaving out what running it in
// place (the README's quick start) leaves behind.
func copyExample(t *testing.T, name, dst string) {
	t.Helper()
	src := name
	err := filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		if d.IsDir() {
			if rel == ".rewind" || rel == "out" {
				return filepath.SkipDir
			}
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), data, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
}

type cli struct {
	t        *testing.T
	bin, dir string
}

// run runs rewind in the workspace with an environment free of REWIND_*
// settings (state, variables) of whoever runs the test; stdout, or stdout
// and stderr when it fails.
func (c *cli) run(args ...string) (string, error) {
	c.t.Helper()
	cmd := exec.Command(c.bin, args...)
	cmd.Dir = c.dir
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "REWIND_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	begin := time.Now()
	err := cmd.Run()
	c.t.Logf("rewind %s: %s", strings.Join(args, " "), time.Since(begin).Round(time.Millisecond))
	if err != nil {
		return stdout.String() + stderr.String(), fmt.Errorf("rewind %s: %w", strings.Join(args, " "), err)
	}
	return stdout.String(), nil
}

type runJSON struct {
	DS    string            `json:"ds"`
	Kind  string            `json:"kind"`
	State string            `json:"state"`
	Tasks []json.RawMessage `json:"tasks"`
}

func (c *cli) runs() []runJSON {
	c.t.Helper()
	out, err := c.run("runs", "--pipeline", pipeline, "--json")
	if err != nil {
		c.t.Fatalf("runs: %v\n%s", err, out)
	}
	var runs []runJSON
	if err := json.Unmarshal([]byte(out), &runs); err != nil {
		c.t.Fatalf("runs --json: %v\n%s", err, out)
	}
	return runs
}

// refs reads the table's branches and tags from `rewind lake show`.
func (c *cli) refs() map[string]string {
	c.t.Helper()
	out, err := c.run("lake", "show", table)
	if err != nil {
		c.t.Fatalf("lake show: %v\n%s", err, out)
	}
	refs := map[string]string{}
	for _, m := range regexp.MustCompile(`(?m)^ref (\S+) -> (\S+)$`).FindAllStringSubmatch(out, -1) {
		refs[m[1]] = m[2]
	}
	return refs
}

// rawDay is what the extract tasks wrote into one run's directory.
type rawDay struct {
	amounts    map[string]float64            // currency -> sum of the amounts in that currency
	currencies map[string]bool               // the currencies with transactions
	rates      map[string]map[string]float64 // date -> currency -> USD per unit
}

// total converts the day's amounts with the rates of rateDay, in currency
// order, so that the same data gives the same float.
func (d *rawDay) total(t *testing.T, rateDay string) float64 {
	t.Helper()
	var usd float64
	for _, cur := range slices.Sorted(maps.Keys(d.amounts)) {
		amount := d.amounts[cur]
		r, ok := d.rates[rateDay][cur]
		if !ok {
			t.Fatalf("no %s rate for %s", cur, rateDay)
		}
		usd += amount * r
	}
	return usd
}

// readRaw reads every run directory's transactions.csv and fx_rates.csv.
func readRaw(t *testing.T, work string) map[string]*rawDay {
	t.Helper()
	runsDir := filepath.Join(work, ".rewind", "runs", pipeline)
	entries, err := os.ReadDir(runsDir)
	if err != nil {
		t.Fatal(err)
	}
	raw := map[string]*rawDay{}
	for _, e := range entries {
		ds := e.Name()[:min(10, len(e.Name()))]
		if _, err := time.Parse(time.DateOnly, ds); err != nil || !strings.HasPrefix(e.Name(), ds+"T00") {
			t.Fatalf("run directory %s: not named after a logical date", e.Name())
		}
		d := &rawDay{amounts: map[string]float64{}, currencies: map[string]bool{}, rates: map[string]map[string]float64{}}
		txs := readCSV(t, filepath.Join(runsDir, e.Name(), "transactions.csv"), "tx_id", "ts", "customer_id", "currency", "amount")
		if len(txs) < 10 {
			t.Fatalf("%s: %d transactions; want a few dozen", ds, len(txs))
		}
		for _, tx := range txs {
			if !strings.HasPrefix(tx[1], ds+"T") {
				t.Fatalf("%s: transaction %s at %s", ds, tx[0], tx[1])
			}
			d.amounts[tx[3]] += parseFloat(t, tx[4])
			d.currencies[tx[3]] = true
		}
		for _, rate := range readCSV(t, filepath.Join(runsDir, e.Name(), "fx_rates.csv"), "date", "currency", "usd_per_unit") {
			if d.rates[rate[0]] == nil {
				d.rates[rate[0]] = map[string]float64{}
			}
			d.rates[rate[0]][rate[1]] = parseFloat(t, rate[2])
		}
		if len(d.currencies) < 3 {
			t.Fatalf("%s: currencies %v; want several", ds, d.currencies)
		}
		raw[ds] = d
	}
	return raw
}

func readCSV(t *testing.T, path string, header ...string) [][]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll()
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if len(rows) == 0 || strings.Join(rows[0], ",") != strings.Join(header, ",") {
		t.Fatalf("%s: header %v; want %v", path, rows[:min(1, len(rows))], header)
	}
	return rows[1:]
}

func parseFloat(t *testing.T, s string) float64 {
	t.Helper()
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func dayBefore(t *testing.T, ds string) string {
	t.Helper()
	d, err := time.Parse(time.DateOnly, ds)
	if err != nil {
		t.Fatal(err)
	}
	return d.AddDate(0, 0, -1).Format(time.DateOnly)
}

// near: within 1e-6, relative.
func near(a, b float64) bool { return math.Abs(a-b) <= 1e-6*math.Max(math.Abs(a), math.Abs(b)) }

type dayStat struct {
	rows int64
	usd  float64
}

// stats reads the table at ref through the lake package, as rewind does:
// per date, its rows and the sum of amount_usd.
func stats(t *testing.T, work, ref string) map[string]dayStat {
	t.Helper()
	ws, diags := dsl.Load(work, dsl.LoadOptions{})
	if diags.HasErrors() {
		t.Fatalf("load: %s", diags.Error())
	}
	lakes := scheduler.NewLakes(ws)
	defer lakes.Close()
	ctx := context.Background()
	lk, err := lakes.Get(ctx, "local")
	if err != nil {
		t.Fatal(err)
	}
	st, err := lk.PartitionStats(ctx, table, ref, []string{"amount_usd"})
	if err != nil {
		t.Fatalf("%s at %s: %v", table, ref, err)
	}
	out := map[string]dayStat{}
	for ds, s := range st {
		out[ds] = dayStat{rows: s.Rows, usd: s.Sums["amount_usd"]}
	}
	return out
}

func sameStats(t *testing.T, what string, got, want map[string]dayStat) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d dates; want %d", what, len(got), len(want))
	}
	for ds, w := range want {
		if g := got[ds]; g.rows != w.rows || !near(g.usd, w.usd) {
			t.Errorf("%s %s: %d rows, %.6f USD; want %d, %.6f", what, ds, g.rows, g.usd, w.rows, w.usd)
		}
	}
}

type correction struct{ old, new float64 }

// parseCorrections reads the report's table rows
// "| revenue | DS | ROWS | amount_usd | OLD | NEW | CHANGE | MAX |".
func parseCorrections(t *testing.T, report string) map[string]correction {
	t.Helper()
	out := map[string]correction{}
	for _, line := range strings.Split(report, "\n") {
		cells := strings.Split(line, "|")
		if len(cells) < 8 || strings.TrimSpace(cells[1]) != "revenue" || strings.TrimSpace(cells[4]) != "amount_usd" {
			continue
		}
		ds := strings.TrimSpace(cells[2])
		if _, dup := out[ds]; dup {
			t.Fatalf("the report corrects %s twice", ds)
		}
		out[ds] = correction{old: parseFloat(t, strings.TrimSpace(cells[5])), new: parseFloat(t, strings.TrimSpace(cells[6]))}
	}
	if len(out) == 0 {
		t.Fatalf("no corrections in the report:\n%s", report)
	}
	return out
}
