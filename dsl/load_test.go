package dsl

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/hcl/v2"
)

// load writes files into a temporary workspace and loads it.
func load(t *testing.T, files map[string]string, opts LoadOptions) (*Workspace, hcl.Diagnostics) {
	t.Helper()
	dir := t.TempDir()
	for name, src := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return Load(dir, opts)
}

func mustLoad(t *testing.T, src string, opts LoadOptions) *Workspace {
	t.Helper()
	ws, diags := load(t, map[string]string{"main.hcl": src}, opts)
	if diags.HasErrors() {
		t.Fatalf("unexpected diagnostics:\n%s", diags.Error())
	}
	return ws
}

func TestExamplesValidate(t *testing.T) {
	dirs, err := filepath.Glob("../examples/*")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, dir := range dirs {
		if info, err := os.Stat(dir); err != nil || !info.IsDir() {
			continue
		}
		names = append(names, filepath.Base(dir))
		ws, diags := Load(dir, LoadOptions{})
		if len(diags) > 0 {
			t.Errorf("%s:\n%s", dir, diags.Error())
			continue
		}
		if len(ws.Pipelines) == 0 {
			t.Errorf("%s: no pipelines", dir)
		}
	}
	for _, want := range []string{"daily_revenue", "events"} {
		found := false
		for _, n := range names {
			found = found || n == want
		}
		if !found {
			t.Errorf("examples/%s is missing", want)
		}
	}
}

func TestExampleDailyRevenue(t *testing.T) {
	ws, diags := Load("../examples/daily_revenue", LoadOptions{})
	if diags.HasErrors() {
		t.Fatal(diags.Error())
	}
	p := ws.Pipeline("daily_revenue")
	if p == nil {
		t.Fatal("no pipeline daily_revenue")
	}
	var order []string
	for _, task := range p.Tasks {
		order = append(order, task.Name)
	}
	want := []string{"extract_fx_rates", "extract_transactions", "fx_join", "report"}
	if !reflect.DeepEqual(order, want) {
		t.Errorf("tasks = %v, want %v", order, want)
	}
	if got := p.Task("fx_join").DependsOn; !reflect.DeepEqual(got, []string{"extract_fx_rates", "extract_transactions"}) {
		t.Errorf("fx_join depends on %v", got)
	}
	start := time.Date(2025, 7, 1, 0, 0, 0, 0, time.UTC)
	if !p.StartDate.Equal(start) || !p.EndDate.Equal(start.AddDate(0, 0, 89)) {
		t.Errorf("dates %v .. %v", p.StartDate, p.EndDate)
	}
}

func TestExampleEventsSkew(t *testing.T) {
	ws, diags := Load("../examples/events", LoadOptions{})
	if diags.HasErrors() {
		t.Fatal(diags.Error())
	}
	p := ws.Pipeline("events")
	if p == nil {
		t.Fatal("no pipeline events")
	}
	for _, name := range []string{"load_orders", "load_sessions", "load_clicks"} {
		task := p.Task(name)
		if task == nil {
			t.Fatalf("no task %s", name)
		}
		if !reflect.DeepEqual(task.DependsOn, []string{"extract"}) {
			t.Errorf("%s depends on %v", name, task.DependsOn)
		}
	}
	if got := p.Task("summarize").DependsOn; len(got) != 3 {
		t.Errorf("summarize depends on %v, want the three load tasks", got)
	}
	s := p.Skew
	if s == nil || s.Pool != "large" || !reflect.DeepEqual(s.HotDates, []string{"2025-11-28"}) || s.HotFactor != 3 {
		t.Fatalf("skew = %+v", s)
	}
	cases := []struct {
		ds  string
		hot bool
	}{
		{"2025-11-28", true},  // Black Friday
		{"2024-11-29", true},  // Black Friday 2024
		{"2025-11-21", false}, // a Friday, a week early
		{"2025-11-27", false}, // Thanksgiving, a Thursday
		{"2025-12-05", false}, // a Friday in December
	}
	for _, c := range cases {
		ld, _ := time.Parse(dateOnly, c.ds)
		hot, err := s.HotWhen(RunVars{LogicalDate: ld, DataIntervalStart: ld, DataIntervalEnd: ld.AddDate(0, 0, 1)})
		if err != nil {
			t.Fatal(err)
		}
		if hot != c.hot {
			t.Errorf("HotWhen(%s) = %v, want %v", c.ds, hot, c.hot)
		}
	}
	probe, err := s.ProbeCommand(RunVars{LogicalDate: time.Date(2025, 11, 28, 0, 0, 0, 0, time.UTC)})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"sh", "scripts/probe.sh", "2025-11-28"}; !reflect.DeepEqual(probe.Argv, want) {
		t.Errorf("probe argv = %q, want %q", probe.Argv, want)
	}
	if !filepath.IsAbs(probe.Dir) || filepath.Base(probe.Dir) != "events" {
		t.Errorf("probe dir = %q", probe.Dir)
	}
	if ws.Pools["standard"].EscalateTo != "large" || ws.Pools["large"].Memory != 8<<30 {
		t.Errorf("pools = %+v %+v", ws.Pools["standard"], ws.Pools["large"])
	}
}

const minimal = `
pipeline "p" {
  schedule   = "@daily"
  start_date = "2025-07-01"
  task "a" {
    command = "true"
  }
}
`

func TestDefaults(t *testing.T) {
	ws := mustLoad(t, minimal, LoadOptions{})
	p := ws.Pipeline("p")
	if p.Timezone != time.UTC || !p.Catchup || p.MaxActiveRuns != 16 || p.MaxActiveTasks != 16 || !p.EndDate.IsZero() || p.Skew != nil {
		t.Errorf("pipeline defaults: %+v", p)
	}
	a := p.Task("a")
	if a.Retries != 0 || a.RetryDelay != 5*time.Minute || a.RetryExponentialBackoff || a.Timeout != 0 || a.Pool != "default" || a.DependsOnPast {
		t.Errorf("task defaults: %+v", a)
	}
	if a.Workdir != p.Dir || !filepath.IsAbs(a.Workdir) {
		t.Errorf("workdir %q, pipeline dir %q", a.Workdir, p.Dir)
	}
	if d := ws.Pools["default"]; d == nil || d.Slots != 16 || len(ws.Pools) != 1 {
		t.Errorf("pools = %v", ws.Pools)
	}
	if p.Hash == "" || len(p.Hash) != 64 {
		t.Errorf("hash = %q", p.Hash)
	}

	ws = mustLoad(t, `pool "default" { slots = 4 }
pool "big" {
  slots  = 1
  memory = "1.5GB"
}
pipeline "p" {
  schedule     = "0 3 * * 1-5"
  timezone     = "Europe/Rome"
  start_date   = "2025-07-01"
  end_date     = "2025-12-31T23:00:00Z"
  default_pool = "big"
  catchup      = false
  task "a" {
    command = "true"
  }
  task "b" {
    command = "true"
    pool    = "default"
  }
}`, LoadOptions{})
	p = ws.Pipeline("p")
	if ws.Pools["default"].Slots != 4 || ws.Pools["big"].Memory != 1500000000 {
		t.Errorf("pools: %+v %+v", ws.Pools["default"], ws.Pools["big"])
	}
	if p.Task("a").Pool != "big" || p.Task("b").Pool != "default" || p.Catchup {
		t.Errorf("pools of tasks: %s %s", p.Task("a").Pool, p.Task("b").Pool)
	}
	if got := p.StartDate.Format(time.RFC3339); got != "2025-07-01T00:00:00+02:00" {
		t.Errorf("start_date = %s, want midnight in Rome", got)
	}
	if got := p.EndDate.Format(time.RFC3339); got != "2026-01-01T00:00:00+01:00" {
		t.Errorf("end_date = %s", got)
	}
}

func TestForEach(t *testing.T) {
	ws := mustLoad(t, `
variable "regions" {
  type    = map(string)
  default = { eu = "Europe/Rome", "us-east" = "America/New_York" }
}
pipeline "sync" {
  for_each   = var.regions
  schedule   = "@daily"
  timezone   = each.value
  start_date = "2025-07-01"
  task "extract" {
    command = "extract ${each.key}"
  }
  task "load" {
    for_each   = toset(["orders", "order items"])
    depends_on = [task.extract]
    command    = ["load", each.key, run.ds]
  }
  task "check_orders" {
    depends_on = [task.load["orders"]]
    command    = "check"
  }
  task "report" {
    depends_on = [task.load, task.check_orders]
    command    = "report"
  }
}`, LoadOptions{})
	var names []string
	for _, p := range ws.Pipelines {
		names = append(names, p.Name)
	}
	if want := []string{"sync_eu", "sync_us-east"}; !reflect.DeepEqual(names, want) {
		t.Fatalf("pipelines = %v, want %v", names, want)
	}
	p := ws.Pipeline("sync_us-east")
	if p.Timezone.String() != "America/New_York" || p.Label != "sync" || p.Key != "us-east" {
		t.Errorf("pipeline %+v", p)
	}
	var order []string
	for _, task := range p.Tasks {
		order = append(order, task.Name)
	}
	if want := []string{"extract", "load_order_items", "load_orders", "check_orders", "report"}; !reflect.DeepEqual(order, want) {
		t.Errorf("tasks = %v, want %v", order, want)
	}
	if got := p.Task("report").DependsOn; !reflect.DeepEqual(got, []string{"check_orders", "load_order_items", "load_orders"}) {
		t.Errorf("report depends on %v", got)
	}
	if got := p.Task("check_orders").DependsOn; !reflect.DeepEqual(got, []string{"load_orders"}) {
		t.Errorf("check_orders depends on %v", got)
	}
	li := p.Task("load_order_items")
	if li.Label != "load" || li.Key != "order items" {
		t.Errorf("instance %q: label %q key %q", li.Name, li.Label, li.Key)
	}
	cmd, err := li.Render(RunVars{LogicalDate: time.Date(2025, 7, 2, 0, 0, 0, 0, p.Timezone)}, PoolVars{})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"load", "order items", "2025-07-02"}; !reflect.DeepEqual(cmd.Argv, want) {
		t.Errorf("argv = %q, want %q", cmd.Argv, want)
	}
	cmd, err = p.Task("extract").Render(RunVars{}, PoolVars{})
	if err != nil {
		t.Fatal(err)
	}
	if cmd.Argv[2] != "extract us-east" {
		t.Errorf("argv = %q", cmd.Argv)
	}
}

func TestVariablePrecedence(t *testing.T) {
	src := `
variable "env" {
  default = "dev"
}
variable "days" {
  type    = number
  default = 7
}
variable "tables" {
  type    = list(string)
  default = ["a"]
}
pipeline "p" {
  schedule   = "@daily"
  start_date = "2025-07-01"
  task "a" {
    command = "run ${var.env} ${var.days} ${join(",", var.tables)}"
  }
}`
	cases := []struct {
		name string
		vars map[string]string
		env  []string
		want string
	}{
		{"defaults", nil, nil, "run dev 7 a"},
		{"environment", nil, []string{"REWIND_VAR_env=staging", "REWIND_VAR_days=30", `REWIND_VAR_tables=["x","y"]`}, "run staging 30 x,y"},
		{"-var wins over environment", map[string]string{"env": "prod", "days": "1"}, []string{"REWIND_VAR_env=staging", "REWIND_VAR_days=30"}, "run prod 1 a"},
		{"unrelated environment", nil, []string{"REWIND_VAR=x", "ENV=x", "REWIND_VAR_ENV=x"}, "run dev 7 a"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ws := mustLoad(t, src, LoadOptions{Vars: c.vars, Env: c.env})
			cmd, err := ws.Pipeline("p").Task("a").Render(RunVars{}, PoolVars{})
			if err != nil {
				t.Fatal(err)
			}
			if cmd.Argv[2] != c.want {
				t.Errorf("command = %q, want %q", cmd.Argv[2], c.want)
			}
		})
	}

	_, diags := load(t, map[string]string{"main.hcl": src}, LoadOptions{Vars: map[string]string{"days": "many", "nope": "1"}})
	msgs := summaries(diags)
	if !strings.Contains(msgs, "Invalid value for variable") || !strings.Contains(msgs, "Value for undeclared variable") {
		t.Errorf("diagnostics: %s", msgs)
	}
}

func summaries(diags hcl.Diagnostics) string {
	var s []string
	for _, d := range diags {
		line := d.Summary
		if d.Subject != nil {
			line = d.Subject.String() + ": " + line
		}
		s = append(s, line)
	}
	return strings.Join(s, "\n")
}

func TestLocals(t *testing.T) {
	ws := mustLoad(t, `
variable "bucket" {
  default = "lake"
}
locals {
  prefix = "s3://${var.bucket}/${local.area}"
}
locals {
  area   = upper("finance")
  tables = [for t in ["a", "b"] : "${local.prefix}/${t}"]
}
pipeline "p" {
  schedule   = "@daily"
  start_date = "2025-07-01"
  task "a" {
    command = concat(["copy"], local.tables)
  }
}`, LoadOptions{})
	cmd, err := ws.Pipeline("p").Task("a").Render(RunVars{}, PoolVars{})
	if err != nil {
		t.Fatal(err)
	}
	if want := "copy s3://lake/FINANCE/a s3://lake/FINANCE/b"; strings.Join(cmd.Argv, " ") != want {
		t.Errorf("command = %q, want %q", cmd.Argv, want)
	}

	// The same string built in a local and used as a string command would
	// make var.bucket code: refused at the command, naming the variable.
	_, diags := load(t, map[string]string{"main.hcl": `
variable "bucket" {
  default = "lake"
}
locals {
  copy = "copy s3://${var.bucket}/a"
}
pipeline "p" {
  schedule   = "@daily"
  start_date = "2025-07-01"
  task "a" {
    command = local.copy
  }
}`}, LoadOptions{})
	if msgs := summaries(diags); !strings.Contains(msgs, "main.hcl:12,15-25: Command built outside its template") {
		t.Errorf("a string command built in a local from var.*: %s", msgs)
	}

	_, diags = load(t, map[string]string{"main.hcl": `
locals {
  a = local.b
  b = "${local.c}x"
  c = local.a
  d = 1
}`}, LoadOptions{})
	if got := summaries(diags); !strings.Contains(got, "main.hcl:3,3-4: Local value cycle") || len(diags) != 1 {
		t.Errorf("diagnostics: %s", got)
	}
	if !strings.Contains(diags[0].Detail, "local.a -> local.b -> local.c -> local.a") {
		t.Errorf("detail: %s", diags[0].Detail)
	}
}

func TestRender(t *testing.T) {
	ws := mustLoad(t, `
pool "spark" {
  slots  = 2
  memory = "8GiB"
  cpus   = 4
}
pipeline "p" {
  schedule   = "@daily"
  timezone   = "Asia/Ho_Chi_Minh"
  start_date = "2025-07-01"
  task "shell" {
    command = "extract --date ${run.ds} --out ${run.dir}/tx.csv # ${run.id} ${run.kind} ${run.pipeline}"
    env = {
      DAY      = run.day
      WHEN     = "${run.weekday} ${run.year}-${run.month}"
      INTERVAL = "${run.data_interval_start}/${run.data_interval_end}"
    }
  }
  task "argv" {
    command = ["spark-submit", "--executor-memory", "${floor(pool.memory / 1048576)}m", "--cores", pool.cpus, pool.name, run.ds_nodash, run.logical_date]
    workdir = "jobs/${run.ds}"
    pool    = "spark"
  }
}`, LoadOptions{})
	p := ws.Pipeline("p")
	loc := p.Timezone
	rv := RunVars{
		ID:                "r-42",
		LogicalDate:       time.Date(2025, 7, 1, 0, 0, 0, 0, loc),
		DataIntervalStart: time.Date(2025, 7, 1, 0, 0, 0, 0, loc),
		DataIntervalEnd:   time.Date(2025, 7, 2, 0, 0, 0, 0, loc).UTC(),
		Kind:              "backfill",
		Dir:               "/tmp/runs/r-42",
	}
	cmd, err := p.Task("shell").Render(rv, PoolVars{Name: "default"})
	if err != nil {
		t.Fatal(err)
	}
	want := &Command{
		Argv: []string{"/bin/sh", "-c", "extract --date 2025-07-01 --out /tmp/runs/r-42/tx.csv # r-42 backfill p"},
		Env: map[string]string{
			"DAY":      "1",
			"WHEN":     "Tuesday 2025-7",
			"INTERVAL": "2025-07-01T00:00:00+07:00/2025-07-02T00:00:00+07:00",
		},
		Dir: p.Dir,
	}
	if !reflect.DeepEqual(cmd, want) {
		t.Errorf("shell:\n got %+v\nwant %+v", cmd, want)
	}

	cmd, err = p.Task("argv").Render(rv, PoolVars{Name: "spark", Memory: 8 << 30, CPUs: 4})
	if err != nil {
		t.Fatal(err)
	}
	want = &Command{
		Argv: []string{"spark-submit", "--executor-memory", "8192m", "--cores", "4", "spark", "20250701", "2025-07-01T00:00:00+07:00"},
		Env:  map[string]string{},
		Dir:  filepath.Join(p.Dir, "jobs", "2025-07-01"),
	}
	if !reflect.DeepEqual(cmd, want) {
		t.Errorf("argv:\n got %+v\nwant %+v", cmd, want)
	}
}

func TestParseSize(t *testing.T) {
	cases := []struct {
		in   string
		want int64
		err  bool
	}{
		{"0", 0, false},
		{"1048576", 1048576, false},
		{"100KB", 100000, false},
		{"100kb", 100000, false},
		{"1.5GB", 1500000000, false},
		{"512MiB", 512 << 20, false},
		{"8GiB", 8 << 30, false},
		{"8Gi", 8 << 30, false},
		{"2 TiB", 2 << 40, false},
		{"0.5KiB", 512, false},
		{"1.0001KiB", 1024, false},
		{"", 0, true},
		{"GiB", 0, true},
		{"-1GiB", 0, true},
		{"8 gigabytes", 0, true},
		{"1e3", 0, true},
		{"99999999999TiB", 0, true},
	}
	for _, c := range cases {
		got, err := ParseSize(c.in)
		if (err != nil) != c.err || got != c.want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d, error %v", c.in, got, err, c.want, c.err)
		}
	}
}

func TestFormatSize(t *testing.T) {
	for n, want := range map[int64]string{0: "0B", 1000: "1000B", 1024: "1KiB", 8 << 30: "8GiB", 1536 << 20: "1536MiB"} {
		if got := FormatSize(n); got != want {
			t.Errorf("FormatSize(%d) = %q, want %q", n, got, want)
		}
		if back, err := ParseSize(FormatSize(n)); err != nil || back != n {
			t.Errorf("ParseSize(FormatSize(%d)) = %d, %v", n, back, err)
		}
	}
}

func TestParseDuration(t *testing.T) {
	cases := []struct {
		in   string
		want time.Duration
		err  bool
	}{
		{"30s", 30 * time.Second, false},
		{"5m", 5 * time.Minute, false},
		{"1h30m", 90 * time.Minute, false},
		{"14d", 14 * 24 * time.Hour, false},
		{"1d12h", 36 * time.Hour, false},
		{"0s", 0, false},
		{"-5m", 0, true},
		{"5", 0, true},
		{"5 minutes", 0, true},
		{"d", 0, true},
	}
	for _, c := range cases {
		got, err := ParseDuration(c.in)
		if (err != nil) != c.err || got != c.want {
			t.Errorf("ParseDuration(%q) = %v, %v; want %v, error %v", c.in, got, err, c.want, c.err)
		}
	}
}

func TestHash(t *testing.T) {
	base := `
variable "mode" {
  default = "full"
}
pipeline "p" {
  schedule   = "@daily"
  start_date = "2025-07-01"
  task "a" {
    command = "extract --mode ${var.mode} ${run.ds}"
  }
}`
	hash := func(src string, opts LoadOptions) string {
		t.Helper()
		return mustLoad(t, src, opts).Pipeline("p").Hash
	}
	h := hash(base, LoadOptions{})
	same := map[string]string{
		"comment": strings.Replace(base, `task "a" {`, "# extracts the day\n  task \"a\" { // really", 1),
		"layout":  strings.Replace(base, `command = "extract`, `command     =     "extract`, 1),
		"description": strings.Replace(base, `schedule   = "@daily"`,
			"schedule   = \"@daily\"\n  description = \"docs only\"\n  tags = [\"x\"]", 1),
	}
	for name, src := range same {
		if got := hash(src, LoadOptions{}); got != h {
			t.Errorf("%s changed the hash", name)
		}
	}
	changed := map[string]string{
		"command":    strings.Replace(base, "extract --mode", "extract --fast --mode", 1),
		"schedule":   strings.Replace(base, "@daily", "@hourly", 1),
		"start_date": strings.Replace(base, "2025-07-01", "2025-07-02", 1),
		"retries":    strings.Replace(base, "command =", "retries = 1\n    command =", 1),
	}
	for name, src := range changed {
		if got := hash(src, LoadOptions{}); got == h {
			t.Errorf("changing the %s kept the hash", name)
		}
	}
	if got := hash(base, LoadOptions{Vars: map[string]string{"mode": "incremental"}}); got == h {
		t.Errorf("a variable the command uses changed, the hash did not")
	}
}

func TestLoadSingleFile(t *testing.T) {
	dir := t.TempDir()
	for name, src := range map[string]string{"a.hcl": minimal, "b.hcl": strings.Replace(minimal, `"p"`, `"q"`, 1), "notes.txt": "x"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ws, diags := Load(dir, LoadOptions{})
	if diags.HasErrors() || len(ws.Pipelines) != 2 || len(ws.Files) != 2 {
		t.Fatalf("directory: %d pipelines, %d files, %s", len(ws.Pipelines), len(ws.Files), diags.Error())
	}
	ws, diags = Load(filepath.Join(dir, "b.hcl"), LoadOptions{})
	if diags.HasErrors() || len(ws.Pipelines) != 1 || ws.Pipelines[0].Name != "q" || ws.Dir != dir {
		t.Fatalf("file: %+v %s", ws, diags.Error())
	}
}

// TestDiagnostics checks that errors in several places are all reported,
// each at its own position.
func TestDiagnostics(t *testing.T) {
	ws, diags := load(t, map[string]string{
		"a.hcl": `pool "big" {
  slots = 1
}
pipeline "p" {
  schedule   = "@daily"
  start_date = "2025-07-01"
  task "a" {
    depends_on = [task.c]
    command    = "a"
  }
  task "b" {
    depends_on = [task.a]
    command    = "b"
  }
  task "c" {
    depends_on = [task.b]
    command    = "c"
    pool       = "huge"
  }
}
`,
		"b.hcl": `pool "big" {
  slots = 2
}
`,
	}, LoadOptions{})
	if ws == nil || len(ws.Files) != 2 {
		t.Fatalf("workspace %+v", ws)
	}
	got := summaries(diags)
	for _, want := range []string{
		"a.hcl:18,18-24: Unknown pool",
		"a.hcl:8,19-25: Dependency cycle",
		"b.hcl:1,1-11: Duplicate pool",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("missing %q in\n%s", want, got)
		}
	}
	for _, d := range diags {
		if d.Summary == "Dependency cycle" && !strings.Contains(d.Detail, "a -> b -> c -> a") {
			t.Errorf("cycle detail: %s", d.Detail)
		}
		if d.Summary == "Duplicate pool" && !strings.Contains(d.Detail, "a.hcl:1,1-11") {
			t.Errorf("duplicate detail: %s", d.Detail)
		}
	}
}
