package dsl

import (
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// withPipeline appends a minimal pipeline to src, so that a workspace of
// pools and limits alone is also a complete one.
func withPipeline(src string) string {
	return src + minimal
}

func TestPoolDefaults(t *testing.T) {
	ws := mustLoad(t, withPipeline(`pool "plain" {}`), LoadOptions{})
	if ws.Limits == nil || len(ws.Limits) != 0 {
		t.Errorf("limits = %v, want an empty map", ws.Limits)
	}
	for _, name := range []string{"default", "plain"} {
		p := ws.Pools[name]
		if p == nil {
			t.Fatalf("no pool %s", name)
		}
		if p.Slots != DefaultPoolSlots || p.IdleTimeout != 5*time.Minute || p.ReservedForScheduled != 0 || p.EscalateTo != "" || p.Memory != 0 || p.CPUs != 0 {
			t.Errorf("pool %s: %+v", name, p)
		}
		launcher, err := p.Launcher()
		if launcher != nil || err != nil {
			t.Errorf("pool %s: launcher %q, %v", name, launcher, err)
		}
		setup, err := p.SetupCommand()
		if setup != nil || err != nil {
			t.Errorf("pool %s: setup %+v, %v", name, setup, err)
		}
		teardown, err := p.TeardownCommand()
		if teardown != nil || err != nil {
			t.Errorf("pool %s: teardown %+v, %v", name, teardown, err)
		}
	}

	// A workspace with errors still has its default pool and limits map.
	ws, diags := load(t, map[string]string{"main.hcl": `pool "x" {`}, LoadOptions{})
	if !diags.HasErrors() || ws.Pools[DefaultPoolName].IdleTimeout != DefaultIdleTimeout || ws.Limits == nil {
		t.Errorf("after a syntax error: %+v %v", ws.Pools[DefaultPoolName], ws.Limits)
	}

	// Methods of a nil pool are safe.
	var none *Pool
	if v := none.Vars(); v != (PoolVars{}) {
		t.Errorf("nil Vars = %+v", v)
	}
	if l, err := none.Launcher(); l != nil || err != nil {
		t.Errorf("nil Launcher = %q, %v", l, err)
	}
	if c, err := none.SetupCommand(); c != nil || err != nil {
		t.Errorf("nil SetupCommand = %+v, %v", c, err)
	}
	if c, err := none.TeardownCommand(); c != nil || err != nil {
		t.Errorf("nil TeardownCommand = %+v, %v", c, err)
	}
}

func TestPoolAttributes(t *testing.T) {
	cases := []struct {
		name     string
		src      string
		reserved int
		idle     time.Duration
		escalate string
	}{
		{"reserved", `pool "p" {
  slots                  = 4
  reserved_for_scheduled = 3
}`, 3, DefaultIdleTimeout, ""},
		{"reserved zero", `pool "p" {
  reserved_for_scheduled = 0
}`, 0, DefaultIdleTimeout, ""},
		{"reserved with default slots", `pool "p" {
  reserved_for_scheduled = 15
}`, 15, DefaultIdleTimeout, ""},
		{"idle_timeout", `pool "p" {
  idle_timeout = "1h30m"
}`, 0, 90 * time.Minute, ""},
		{"idle_timeout in days", `pool "p" {
  idle_timeout = "1d"
}`, 0, 24 * time.Hour, ""},
		{"oom_escalate_to", `pool "big" {}
pool "p" {
  oom_escalate_to = "big"
}`, 0, DefaultIdleTimeout, "big"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := mustLoad(t, withPipeline(c.src), LoadOptions{}).Pools["p"]
			if p.ReservedForScheduled != c.reserved || p.IdleTimeout != c.idle || p.EscalateTo != c.escalate {
				t.Errorf("pool = %+v, want reserved %d, idle %v, escalate %q", p, c.reserved, c.idle, c.escalate)
			}
		})
	}
}

func TestPoolTemplates(t *testing.T) {
	ws := mustLoad(t, withPipeline(`
variable "cluster" {
  default = "spark-bf"
}
locals {
  account = "analytics"
}
pool "slurm" {
  memory   = "8GiB"
  cpus     = 4
  launcher = ["srun", "--mem=${floor(pool.memory / 1048576)}M", "--cpus-per-task=${pool.cpus}", "--account=${local.account}", pool.cpus]
  setup    = "cluster up ${var.cluster} --name ${pool.name} --cpus ${pool.cpus}"
  teardown = ["cluster", "down", var.cluster, pool.name]
}
pool "bare" {
  launcher = ["nice"]
}
`), LoadOptions{})
	p := ws.Pools["slurm"]
	if v := p.Vars(); v != (PoolVars{Name: "slurm", Memory: 8 << 30, CPUs: 4}) {
		t.Errorf("Vars = %+v", v)
	}
	launcher, err := p.Launcher()
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"srun", "--mem=8192M", "--cpus-per-task=4", "--account=analytics", "4"}; !reflect.DeepEqual(launcher, want) {
		t.Errorf("launcher = %q, want %q", launcher, want)
	}
	dir := ws.Pipeline("p").Dir
	setup, err := p.SetupCommand()
	if err != nil {
		t.Fatal(err)
	}
	want := &Command{Argv: []string{"/bin/sh", "-c", "cluster up spark-bf --name slurm --cpus 4"}, Env: map[string]string{}, Dir: dir}
	if !reflect.DeepEqual(setup, want) {
		t.Errorf("setup:\n got %+v\nwant %+v", setup, want)
	}
	if !filepath.IsAbs(setup.Dir) {
		t.Errorf("setup dir %q is not absolute", setup.Dir)
	}
	teardown, err := p.TeardownCommand()
	if err != nil {
		t.Fatal(err)
	}
	want = &Command{Argv: []string{"cluster", "down", "spark-bf", "slurm"}, Env: map[string]string{}, Dir: dir}
	if !reflect.DeepEqual(teardown, want) {
		t.Errorf("teardown:\n got %+v\nwant %+v", teardown, want)
	}

	// The pool values come from the pool's fields.
	p.CPUs = 16
	if launcher, err := p.Launcher(); err != nil || launcher[2] != "--cpus-per-task=16" {
		t.Errorf("launcher after CPUs = 16: %q, %v", launcher, err)
	}

	bare := ws.Pools["bare"]
	if launcher, err := bare.Launcher(); err != nil || !reflect.DeepEqual(launcher, []string{"nice"}) {
		t.Errorf("bare launcher = %q, %v", launcher, err)
	}
	if setup, err := bare.SetupCommand(); setup != nil || err != nil {
		t.Errorf("bare setup = %+v, %v", setup, err)
	}

	// null is the same as leaving the attribute out.
	ws = mustLoad(t, withPipeline(`pool "n" {
  launcher = null
  setup    = null
  teardown = null
}`), LoadOptions{})
	n := ws.Pools["n"]
	if l, err := n.Launcher(); l != nil || err != nil {
		t.Errorf("null launcher = %q, %v", l, err)
	}
	if c, err := n.SetupCommand(); c != nil || err != nil {
		t.Errorf("null setup = %+v, %v", c, err)
	}
}

// expectDiags loads src and checks that the summaries (with positions) of
// its diagnostics are exactly want.
func expectDiags(t *testing.T, src string, want ...string) {
	t.Helper()
	ws, diags := load(t, map[string]string{"main.hcl": src}, LoadOptions{})
	got := strings.ReplaceAll(summaries(diags), ws.Dir+string(filepath.Separator), "")
	if got != strings.Join(want, "\n") {
		t.Errorf("diagnostics:\n%s\nwant:\n%s", got, strings.Join(want, "\n"))
	}
	for _, d := range diags {
		if d.Subject == nil {
			t.Errorf("diagnostic without subject: %s", d.Summary)
		}
	}
}

func TestPoolDiagnostics(t *testing.T) {
	cases := []struct {
		name string
		src  string
		want []string
	}{
		{"reserved equal to slots", `pool "p" {
  slots                  = 2
  reserved_for_scheduled = 2
}`, []string{"main.hcl:3,28-29: Invalid reserved_for_scheduled"}},
		{"reserved above default slots", `pool "p" {
  reserved_for_scheduled = 16
}`, []string{"main.hcl:2,28-30: Invalid reserved_for_scheduled"}},
		{"reserved negative", `pool "p" {
  reserved_for_scheduled = -1
}`, []string{"main.hcl:2,28-30: Invalid reserved_for_scheduled"}},
		{"reserved fraction", `pool "p" {
  reserved_for_scheduled = 0.5
}`, []string{"main.hcl:2,28-31: Invalid reserved_for_scheduled"}},
		{"reserved with invalid slots", `pool "p" {
  slots                  = 0
  reserved_for_scheduled = 3
}`, []string{"main.hcl:2,28-29: Invalid slots"}},
		{"idle_timeout zero", `pool "p" {
  idle_timeout = "0s"
}`, []string{"main.hcl:2,18-22: Invalid idle_timeout"}},
		{"idle_timeout not a duration", `pool "p" {
  idle_timeout = 300
}`, []string{"main.hcl:2,18-21: Invalid idle_timeout"}},
		{"idle_timeout negative", `pool "p" {
  idle_timeout = "-5m"
}`, []string{"main.hcl:2,18-23: Invalid idle_timeout"}},
		{"launcher string", `pool "p" {
  launcher = "srun"
}`, []string{"main.hcl:2,14-20: Incorrect attribute value type"}},
		{"launcher empty", `pool "p" {
  launcher = []
}`, []string{"main.hcl:2,14-16: Invalid launcher"}},
		{"launcher element", `pool "p" {
  launcher = ["srun", ["x"]]
}`, []string{"main.hcl:2,14-29: Incorrect attribute value type"}},
		{"run in launcher", `pool "p" {
  launcher = ["srun", "--job-name=${run.ds}"]
}`, []string{"main.hcl:2,37-43: run.* not available here"}},
		{"run in setup and teardown", `pool "p" {
  setup    = "up ${run.id}"
  teardown = ["down", run.pipeline]
}`, []string{"main.hcl:2,20-26: run.* not available here", "main.hcl:3,23-35: run.* not available here"}},
		{"unknown pool attribute", `pool "p" {
  launcher = ["srun", pool.mem]
}`, []string{"main.hcl:2,27-31: Unknown pool attribute"}},
		{"each in setup", `pool "p" {
  setup = each.key
}`, []string{"main.hcl:2,11-19: Reference to each outside for_each"}},
		{"setup type", `pool "p" {
  setup = { a = 1 }
}`, []string{"main.hcl:2,11-20: Incorrect attribute value type"}},
		{"teardown empty", `pool "p" {
  teardown = "  "
}`, []string{"main.hcl:2,14-18: Invalid teardown"}},
		{"escalate_to renamed", `pool "big" {}
pool "p" {
  escalate_to = "big"
}`, []string{"main.hcl:3,3-14: Unsupported argument"}},
		{"escalate to itself", `pool "p" {
  oom_escalate_to = "p"
}`, []string{"main.hcl:2,21-24: Invalid oom_escalate_to"}},
		{"escalate to unknown", `pool "p" {
  oom_escalate_to = "huge"
}`, []string{"main.hcl:2,21-27: Unknown pool"}},
		{"escalation cycle", `pool "a" {
  oom_escalate_to = "b"
}
pool "b" {
  oom_escalate_to = "a"
}`, []string{"main.hcl:2,21-24: Pool escalation cycle"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			expectDiags(t, c.src, c.want...)
		})
	}
}

func TestParseRate(t *testing.T) {
	cases := []struct {
		in  string
		n   int
		per time.Duration
		err bool
	}{
		{"10/s", 10, time.Second, false},
		{"60/m", 60, time.Minute, false},
		{"100/h", 100, time.Hour, false},
		{"1000/d", 1000, 24 * time.Hour, false},
		{"5/30s", 5, 30 * time.Second, false},
		{"1/1h30m", 1, 90 * time.Minute, false},
		{"2/2d", 2, 48 * time.Hour, false},
		{" 60 / m ", 60, time.Minute, false},
		{"1/1ms", 1, time.Millisecond, false},
		{"", 0, 0, true},
		{"60", 0, 0, true},
		{"60/", 0, 0, true},
		{"/m", 0, 0, true},
		{"0/s", 0, 0, true},
		{"-1/s", 0, 0, true},
		{"+1/s", 0, 0, true},
		{"1.5/s", 0, 0, true},
		{"60/minute", 0, 0, true},
		{"5/0s", 0, 0, true},
		{"5/-1s", 0, 0, true},
		{"99999999999/s", 0, 0, true},
		{"1/s/s", 0, 0, true},
	}
	for _, c := range cases {
		n, per, err := ParseRate(c.in)
		if (err != nil) != c.err || n != c.n || per != c.per {
			t.Errorf("ParseRate(%q) = %d, %v, %v; want %d, %v, error %v", c.in, n, per, err, c.n, c.per, c.err)
		}
	}
}

func TestLimits(t *testing.T) {
	ws := mustLoad(t, `
locals {
  per_minute = 60
}
limit "oltp" {
  concurrency = 2
  rate        = "${local.per_minute}/m"
}
limit "s3" {
  rate = "5/30s"
}
limit "warehouse" {
  concurrency = 1
}
pipeline "p" {
  schedule   = "@daily"
  start_date = "2025-07-01"
  task "a" {
    command = "true"
    limits  = [limit.s3, limit.oltp, limit.s3]
  }
  task "b" {
    for_each = toset(["x", "y"])
    command  = "true"
    limits   = [limit.warehouse]
  }
  task "c" {
    command = "true"
    limits  = []
  }
}`, LoadOptions{})
	want := map[string]Limit{
		"oltp":      {Name: "oltp", Concurrency: 2, Rate: 60, Per: time.Minute},
		"s3":        {Name: "s3", Rate: 5, Per: 30 * time.Second},
		"warehouse": {Name: "warehouse", Concurrency: 1},
	}
	if len(ws.Limits) != len(want) {
		t.Fatalf("limits = %v", ws.Limits)
	}
	for name, w := range want {
		got := ws.Limits[name]
		if got == nil {
			t.Fatalf("no limit %s", name)
		}
		g := *got
		g.DeclRange = w.DeclRange
		if g != w {
			t.Errorf("limit %s = %+v, want %+v", name, g, w)
		}
		if got.DeclRange.Filename == "" || got.DeclRange.Start.Line == 0 {
			t.Errorf("limit %s has no DeclRange", name)
		}
	}
	p := ws.Pipeline("p")
	for task, limits := range map[string][]string{
		"a":   {"oltp", "s3"},
		"b_x": {"warehouse"},
		"b_y": {"warehouse"},
		"c":   nil,
	} {
		if got := p.Task(task).Limits; !reflect.DeepEqual(got, limits) {
			t.Errorf("task %s limits = %q, want %q", task, got, limits)
		}
	}
	if got := mustLoad(t, minimal, LoadOptions{}).Pipeline("p").Task("a").Limits; got != nil {
		t.Errorf("limits without the attribute = %q", got)
	}
}

func TestLimitDiagnostics(t *testing.T) {
	task := func(limits string) string {
		return `limit "oltp" {
  concurrency = 2
}
pipeline "p" {
  schedule   = "@daily"
  start_date = "2025-07-01"
  task "a" {
    command = "true"
    ` + limits + `
  }
}`
	}
	cases := []struct {
		name string
		src  string
		want []string
	}{
		{"unknown limit", task(`limits = [limit.oltp, limit.s3]`), []string{"main.hcl:9,27-35: Unknown limit"}},
		{"string instead of reference", task(`limits = ["oltp"]`), []string{"main.hcl:9,15-21: Invalid limits reference"}},
		{"other root", task(`limits = [pool.oltp]`), []string{"main.hcl:9,15-24: Invalid limits reference"}},
		{"too long", task(`limits = [limit.oltp.x]`), []string{"main.hcl:9,15-27: Invalid limits reference"}},
		{"bare limit", task(`limits = [limit]`), []string{"main.hcl:9,15-20: Invalid limits reference"}},
		{"not a list", task(`limits = limit.oltp`), []string{"main.hcl:9,14-24: Invalid expression"}},
		{"limit in command", task(`env = { X = limit.oltp }`), []string{"main.hcl:9,17-27: Limit reference outside limits"}},
		{"neither", `limit "oltp" {}`, []string{"main.hcl:1,1-13: Limit without concurrency or rate"}},
		{"duplicate", `limit "oltp" {
  concurrency = 1
}
limit "oltp" {
  concurrency = 2
}`, []string{"main.hcl:4,1-13: Duplicate limit"}},
		{"bad name", `limit "o.l" {
  concurrency = 1
}`, []string{"main.hcl:1,7-12: Invalid limit name"}},
		{"concurrency zero", `limit "oltp" {
  concurrency = 0
}`, []string{"main.hcl:2,17-18: Invalid concurrency"}},
		{"concurrency fraction", `limit "oltp" {
  concurrency = 1.5
}`, []string{"main.hcl:2,17-20: Invalid concurrency"}},
		{"bad rate", `limit "oltp" {
  rate = "sixty/m"
}`, []string{"main.hcl:2,10-19: Invalid rate"}},
		{"rate type", `limit "oltp" {
  rate = ["60/m"]
}`, []string{"main.hcl:2,10-18: Incorrect attribute value type"}},
		{"unknown attribute", `limit "oltp" {
  concurrency = 1
  burst       = 3
}`, []string{"main.hcl:3,3-8: Unsupported argument"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			expectDiags(t, c.src, c.want...)
		})
	}

	// With no limit declared, the error says so.
	_, diags := load(t, map[string]string{"main.hcl": `pipeline "p" {
  schedule   = "@daily"
  start_date = "2025-07-01"
  task "a" {
    command = "true"
    limits  = [limit.oltp]
  }
}`}, LoadOptions{})
	if len(diags) != 1 || !strings.Contains(diags[0].Detail, "No limit is declared") {
		t.Errorf("diagnostics: %s", diags.Error())
	}
	_, diags = load(t, map[string]string{"main.hcl": task(`limits = [limit.olpt]`)}, LoadOptions{})
	if len(diags) != 1 || !strings.Contains(diags[0].Detail, "The declared limits are: oltp.") {
		t.Errorf("diagnostics: %s", diags.Error())
	}
}

func TestTaskSkew(t *testing.T) {
	ws := mustLoad(t, `
pool "large" {
  slots = 2
}
pool "xlarge" {
  slots = 1
}
pipeline "p" {
  schedule   = "@daily"
  timezone   = "Europe/Rome"
  start_date = "2025-11-01"

  skew {
    hot_dates = ["2025-11-28"]
    pool      = "large"
  }

  task "plain" {
    command = "true"
  }

  task "own" {
    command = "true"
    skew {
      hot_dates  = ["2025-12-24", "2025-12-31"]
      hot_when   = run.month == 12 && run.day >= 20
      probe      = ["sh", "probe.sh", run.ds, run.pipeline]
      hot_factor = 5
      pool       = "xlarge"
    }
  }

  task "per_key" {
    for_each = { eu = "2025-11-03", us = "2025-11-04" }
    command  = "true"
    skew {
      hot_dates = [each.value]
      hot_when  = run.ds == each.value
      pool      = "large"
    }
  }
}
pipeline "q" {
  schedule   = "@daily"
  start_date = "2025-11-01"
  task "own" {
    command = "true"
    skew {
      hot_dates = ["2025-11-05"]
      pool      = "large"
    }
  }
}`, LoadOptions{})
	p := ws.Pipeline("p")
	plain, own := p.Task("plain"), p.Task("own")
	if plain.Skew != nil || plain.EffectiveSkew(p) != p.Skew || p.Skew == nil {
		t.Errorf("plain: skew %+v, effective %+v", plain.Skew, plain.EffectiveSkew(p))
	}
	s := own.Skew
	if s == nil || own.EffectiveSkew(p) != s {
		t.Fatalf("own: skew %+v, effective %+v", s, own.EffectiveSkew(p))
	}
	if s.Pool != "xlarge" || s.HotFactor != 5 || !reflect.DeepEqual(s.HotDates, []string{"2025-12-24", "2025-12-31"}) || !s.HasHotWhen() || !s.HasProbe() {
		t.Errorf("own skew = %+v", s)
	}
	if s.HotWhenText != "run.month == 12 && run.day >= 20" || s.ProbeText != `["sh", "probe.sh", run.ds, run.pipeline]` {
		t.Errorf("texts: %q %q", s.HotWhenText, s.ProbeText)
	}
	for _, c := range []struct {
		ds           string
		listed, when bool
	}{
		{"2025-12-24", true, true},
		{"2025-12-31", true, true},
		{"2025-12-21", false, true},
		{"2025-11-28", false, false},
		{"2025-12-19", false, false},
		{"2025-12-24T00:00:00Z", false, true},
		{"", false, false},
	} {
		if got := s.IsHotDate(c.ds); got != c.listed {
			t.Errorf("IsHotDate(%q) = %v, want %v", c.ds, got, c.listed)
		}
		ld, err := time.ParseInLocation(dateOnly, c.ds[:min(len(c.ds), 10)], p.Timezone)
		if err != nil {
			continue
		}
		hot, err := s.HotWhen(RunVars{LogicalDate: ld})
		if err != nil || hot != c.when {
			t.Errorf("HotWhen(%s) = %v, %v; want %v", c.ds, hot, err, c.when)
		}
	}
	if !p.Skew.IsHotDate("2025-11-28") || p.Skew.IsHotDate("2025-12-24") {
		t.Errorf("the pipeline's IsHotDate")
	}
	var none *Skew
	if none.IsHotDate("2025-11-28") {
		t.Errorf("nil skew has hot dates")
	}
	probe, err := s.ProbeCommand(RunVars{LogicalDate: time.Date(2025, 12, 24, 0, 0, 0, 0, p.Timezone)})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"sh", "probe.sh", "2025-12-24", "p"}; !reflect.DeepEqual(probe.Argv, want) || probe.Dir != p.Dir {
		t.Errorf("probe = %+v, want argv %q in %s", probe, want, p.Dir)
	}

	for key, ds := range map[string]string{"eu": "2025-11-03", "us": "2025-11-04"} {
		task := p.Task("per_key_" + key)
		if task.Skew == nil || !reflect.DeepEqual(task.Skew.HotDates, []string{ds}) {
			t.Fatalf("per_key_%s skew = %+v", key, task.Skew)
		}
		ld, _ := time.ParseInLocation(dateOnly, ds, p.Timezone)
		if hot, err := task.Skew.HotWhen(RunVars{LogicalDate: ld}); err != nil || !hot {
			t.Errorf("per_key_%s HotWhen(%s) = %v, %v", key, ds, hot, err)
		}
		if hot, err := task.Skew.HotWhen(RunVars{LogicalDate: ld.AddDate(0, 0, 2)}); err != nil || hot {
			t.Errorf("per_key_%s HotWhen(two days later) = %v, %v", key, hot, err)
		}
	}

	q := ws.Pipeline("q")
	if q.Skew != nil || q.Task("own").EffectiveSkew(q) == nil || q.Task("own").EffectiveSkew(q).Pool != "large" {
		t.Errorf("q: %+v", q.Task("own").EffectiveSkew(q))
	}
	var noTask *Task
	if noTask.EffectiveSkew(nil) != nil || plain.EffectiveSkew(nil) != nil {
		t.Errorf("EffectiveSkew without a pipeline")
	}
}

func TestTaskSkewDiagnostics(t *testing.T) {
	task := func(body string) string {
		return `pool "large" {
  slots = 2
}
pipeline "p" {
  schedule   = "@daily"
  start_date = "2025-07-01"
  task "a" {
    command = "true"
` + body + `
  }
}`
	}
	cases := []struct {
		name string
		src  string
		want []string
	}{
		{"unknown pool", task(`    skew {
      hot_dates = ["2025-11-28"]
      pool      = "huge"
    }`), []string{"main.hcl:11,19-25: Unknown pool"}},
		{"missing pool", task(`    skew {
      hot_dates = ["2025-11-28"]
    }`), []string{"main.hcl:9,5-9: Missing required argument"}},
		{"bad hot date", task(`    skew {
      hot_dates = ["2025-11-31"]
      pool      = "large"
    }`), []string{"main.hcl:10,20-32: Invalid hot date"}},
		{"two skew blocks", task(`    skew {
      pool = "large"
    }
    skew {
      pool = "large"
    }`), []string{"main.hcl:12,5-9: Duplicate skew block"}},
		{"pool in hot_when", task(`    skew {
      hot_when = pool.cpus > 2
      pool     = "large"
    }`), []string{"main.hcl:10,18-27: pool.* not available here"}},
		{"hot_factor", task(`    skew {
      hot_factor = 1
      pool       = "large"
    }`), []string{"main.hcl:10,20-21: Invalid hot_factor"}},
		{"unknown attribute", task(`    skew {
      hot_days = ["2025-11-28"]
      pool     = "large"
    }`), []string{"main.hcl:10,7-15: Unsupported argument"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			expectDiags(t, c.src, c.want...)
		})
	}
}

func TestHashNewAttributes(t *testing.T) {
	base := `
pool "large" {
  slots                  = 4
  reserved_for_scheduled = 1
  idle_timeout           = "10m"
  launcher               = ["srun", "--cpus=${pool.cpus}"]
  setup                  = "up"
  teardown               = "down"
  oom_escalate_to        = "xlarge"
}
pool "xlarge" {
  slots = 1
  setup = "up xl"
}
pool "unused" {
  slots = 1
}
limit "oltp" {
  concurrency = 2
  rate        = "60/m"
}
limit "unused" {
  concurrency = 1
}
pipeline "p" {
  schedule   = "@daily"
  start_date = "2025-07-01"
  task "a" {
    command = "true"
    pool    = "large"
    limits  = [limit.oltp]
  }
  task "b" {
    command = "true"
    skew {
      hot_dates = ["2025-11-28"]
      pool      = "default"
    }
  }
}`
	hash := func(src string) string {
		t.Helper()
		return mustLoad(t, src, LoadOptions{}).Pipeline("p").Hash
	}
	h := hash(base)
	same := map[string]string{
		"unused pool":     strings.Replace(base, "pool \"unused\" {\n  slots = 1", "pool \"unused\" {\n  slots = 2", 1),
		"unused limit":    strings.Replace(base, "limit \"unused\" {\n  concurrency = 1", "limit \"unused\" {\n  concurrency = 3", 1),
		"launcher layout": strings.Replace(base, `["srun", "--cpus=${pool.cpus}"]`, `[ "srun",  "--cpus=${pool.cpus}" ]`, 1),
	}
	for name, src := range same {
		if got := hash(src); got != h {
			t.Errorf("%s changed the hash", name)
		}
	}
	changed := map[string]string{
		"reserved_for_scheduled": strings.Replace(base, "reserved_for_scheduled = 1", "reserved_for_scheduled = 2", 1),
		"idle_timeout":           strings.Replace(base, `"10m"`, `"11m"`, 1),
		"launcher":               strings.Replace(base, `"--cpus=${pool.cpus}"`, `"--cpus=${pool.cpus * 2}"`, 1),
		"setup":                  strings.Replace(base, `setup                  = "up"`, `setup                  = "up --fast"`, 1),
		"teardown":               strings.Replace(base, `"down"`, `"down --now"`, 1),
		"escalation pool setup":  strings.Replace(base, `"up xl"`, `"up xxl"`, 1),
		"limit concurrency":      strings.Replace(base, "concurrency = 2", "concurrency = 3", 1),
		"limit rate":             strings.Replace(base, `"60/m"`, `"60/h"`, 1),
		"task limits":            strings.Replace(base, "limits  = [limit.oltp]", "limits  = [limit.oltp, limit.unused]", 1),
		"task skew date":         strings.Replace(base, `"2025-11-28"`, `"2025-11-29"`, 1),
		"task skew pool":         strings.Replace(base, `pool      = "default"`, `pool      = "unused"`, 1),
		"task skew removed":      strings.Replace(base, "    skew {\n      hot_dates = [\"2025-11-28\"]\n      pool      = \"default\"\n    }\n", "", 1),
	}
	for name, src := range changed {
		if src == base {
			t.Fatalf("%s: the replacement did not apply", name)
		}
		if got := hash(src); got == h {
			t.Errorf("changing the %s kept the hash", name)
		}
	}
}
