package dsl

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// pipe is a pipeline block named name with one task and the given extra
// body (consumes, for_each, requires blocks).
func pipe(name, body string) string {
	return fmt.Sprintf(`
pipeline %q {
  schedule   = "@daily"
  start_date = "2025-07-01"
%s
  task "a" {
    command = "true"
  }
}
`, name, body)
}

func TestConsumes(t *testing.T) {
	loads := pipe("load", `  for_each = toset(["orders", "fx rates"])`)
	cases := []struct {
		name string
		src  string
		want map[string][]string // pipeline -> Consumes
	}{
		{"none", pipe("a", "") + pipe("b", ""), map[string][]string{"a": nil, "b": nil}},
		{"sorted and unique", pipe("report", `  consumes = [pipeline.revenue, pipeline.fx, pipeline.revenue]`) + pipe("revenue", "") + pipe("fx", ""),
			map[string][]string{"report": {"fx", "revenue"}, "revenue": nil, "fx": nil}},
		{"chain", pipe("a", `  consumes = [pipeline.b]`) + pipe("b", `  consumes = [pipeline.c]`) + pipe("c", ""),
			map[string][]string{"a": {"b"}, "b": {"c"}, "c": nil}},
		{"every instance", loads + pipe("report", `  consumes = [pipeline.load]`),
			map[string][]string{"report": {"load_fx_rates", "load_orders"}, "load_orders": nil}},
		{"one instance by key", loads + pipe("report", `  consumes = [pipeline.load["fx rates"]]`),
			map[string][]string{"report": {"load_fx_rates"}}},
		{"one instance by name", loads + pipe("report", `  consumes = [pipeline.load_orders]`),
			map[string][]string{"report": {"load_orders"}}},
		{"instances consume another pipeline", pipe("raw", "") + pipe("load", `  for_each = toset(["a", "b"])
  consumes = [pipeline.raw]`), map[string][]string{"load_a": {"raw"}, "load_b": {"raw"}, "raw": nil}},
		{"empty for_each", pipe("load", `  for_each = toset([])`) + pipe("report", `  consumes = [pipeline.load]`),
			map[string][]string{"report": nil}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ws, diags := load(t, map[string]string{"main.hcl": c.src}, LoadOptions{})
			if diags.HasErrors() {
				t.Fatal(diags.Error())
			}
			for name, want := range c.want {
				p := ws.Pipeline(name)
				if p == nil {
					t.Fatalf("no pipeline %s", name)
				}
				if !reflect.DeepEqual(p.Consumes, want) {
					t.Errorf("%s consumes %q, want %q", name, p.Consumes, want)
				}
			}
		})
	}
}

func TestConsumers(t *testing.T) {
	ws := mustLoad(t, pipe("fx", "")+pipe("revenue", `  consumes = [pipeline.fx]`)+
		pipe("report", `  consumes = [pipeline.revenue, pipeline.fx]`)+
		pipe("load", `  for_each = toset(["x", "y"])
  consumes = [pipeline.fx]`), LoadOptions{})
	names := func(ps []*Pipeline) []string {
		var out []string
		for _, p := range ps {
			out = append(out, p.Name)
		}
		return out
	}
	for producer, want := range map[string][]string{
		"fx":      {"load_x", "load_y", "report", "revenue"},
		"revenue": {"report"},
		"report":  nil,
		"nosuch":  nil,
	} {
		if got := names(ws.Consumers(producer)); !reflect.DeepEqual(got, want) {
			t.Errorf("Consumers(%s) = %q, want %q", producer, got, want)
		}
	}
}

func TestConsumesDiagnostics(t *testing.T) {
	cases := []struct {
		name string
		src  string
		want []string
	}{
		{"unknown", pipe("a", `  consumes = [pipeline.b, pipeline.nosuch]`) + pipe("b", ""),
			[]string{"main.hcl:5,27-42: Unknown pipeline"}},
		{"itself", pipe("a", `  consumes = [pipeline.a]`),
			[]string{"main.hcl:5,15-25: Pipeline consumes itself"}},
		{"cycle of two", pipe("b", `  consumes = [pipeline.a]`) + pipe("a", `  consumes = [pipeline.b]`),
			[]string{"main.hcl:14,15-25: Consumes cycle"}},
		{"cycle of three", pipe("a", `  consumes = [pipeline.b]`) + pipe("b", `  consumes = [pipeline.c]`) + pipe("c", `  consumes = [pipeline.a]`),
			[]string{"main.hcl:5,15-25: Consumes cycle"}},
		{"two cycles", pipe("a", `  consumes = [pipeline.b]`) + pipe("b", `  consumes = [pipeline.a]`) +
			pipe("c", `  consumes = [pipeline.a, pipeline.d]`) + pipe("d", `  consumes = [pipeline.c]`),
			[]string{"main.hcl:5,15-25: Consumes cycle", "main.hcl:23,27-37: Consumes cycle"}},
		{"for_each block consumes itself", pipe("load", `  for_each = toset(["x", "y"])
  consumes = [pipeline.load]`),
			[]string{"main.hcl:6,15-28: Pipeline consumes itself"}},
		{"for_each instance consumes itself", pipe("load", `  for_each = toset(["x", "y"])
  consumes = [pipeline.load["x"]]`),
			[]string{"main.hcl:6,15-33: Pipeline consumes itself"}},
		{"cycle through for_each", pipe("load", `  for_each = toset(["x"])
  consumes = [pipeline.report]`) + pipe("report", `  consumes = [pipeline.load]`),
			[]string{"main.hcl:6,15-30: Consumes cycle"}},
		{"unknown key", pipe("load", `  for_each = toset(["x"])`) + pipe("r", `  consumes = [pipeline.load["y"]]`),
			[]string{"main.hcl:14,15-33: Unknown pipeline"}},
		{"key without for_each", pipe("a", "") + pipe("r", `  consumes = [pipeline.a["y"]]`),
			[]string{"main.hcl:14,15-30: Invalid consumes reference"}},
		{"a string", pipe("a", "") + pipe("r", `  consumes = ["a"]`),
			[]string{"main.hcl:14,15-18: Invalid consumes reference"}},
		{"a task", pipe("a", "") + pipe("r", `  consumes = [task.a]`),
			[]string{"main.hcl:14,15-21: Invalid consumes reference"}},
		{"not a list", pipe("a", "") + pipe("r", `  consumes = pipeline.a`),
			[]string{"main.hcl:14,14-24: Invalid consumes"}},
		{"an expression", pipe("load", `  for_each = toset(["a", "b"])
  consumes = each.key == "b" ? [] : [pipeline.load["b"]]`),
			[]string{"main.hcl:6,14-57: Invalid consumes"}},
		{"pipeline outside consumes", pipe("a", `  description = pipeline.b`) + pipe("b", ""),
			[]string{"main.hcl:5,17-27: Pipeline reference outside consumes"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			expectDiags(t, c.src, c.want...)
		})
	}

	_, diags := load(t, map[string]string{"main.hcl": pipe("a", `  consumes = [pipeline.nosuch]`) + pipe("b", "")}, LoadOptions{})
	if len(diags) != 1 || !strings.Contains(diags[0].Detail, `"nosuch"`) || !strings.Contains(diags[0].Detail, "The declared pipelines are: a, b.") {
		t.Errorf("unknown pipeline: %s", diags.Error())
	}
	_, diags = load(t, map[string]string{"main.hcl": pipe("a", `  consumes = [pipeline.b]`) + pipe("b", `  consumes = [pipeline.c]`) + pipe("c", `  consumes = [pipeline.a]`)}, LoadOptions{})
	if len(diags) != 1 || !strings.Contains(diags[0].Detail, "a -> b -> c -> a") {
		t.Errorf("cycle: %s", diags.Error())
	}
}

func TestConsumesHash(t *testing.T) {
	base := pipe("fx", "") + pipe("rates", "")
	hash := func(body string) string {
		t.Helper()
		return mustLoad(t, base+pipe("report", body), LoadOptions{}).Pipeline("report").Hash
	}
	none, fx, both := hash(""), hash(`  consumes = [pipeline.fx]`), hash(`  consumes = [pipeline.rates, pipeline.fx]`)
	if none == fx || fx == both || none == both {
		t.Errorf("consumes does not change the hash: %s %s %s", none, fx, both)
	}
	if again := hash(`  consumes = [pipeline.fx, pipeline.rates, pipeline.fx]`); again != both {
		t.Errorf("the order or repeats of consumes changed the hash")
	}
}

// writeTree writes files (slash-separated paths) under dir.
func writeTree(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, src := range files {
		path := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// requiresSrc is a pipeline with a requires block of every kind, shared
// with executor/requires' tests, which run them.
var requiresSrc = string(must(os.ReadFile("testdata/requires.hcl")))

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

func TestRequires(t *testing.T) {
	dir := t.TempDir()
	writeTree(t, dir, map[string]string{"pipelines/main.hcl": requiresSrc})
	ws, diags := Load(filepath.Join(dir, "pipelines"), LoadOptions{})
	if diags.HasErrors() {
		t.Fatal(diags.Error())
	}
	p := ws.Pipeline("revenue")
	var names []string
	for _, r := range p.Requires {
		names = append(names, r.Name)
	}
	if want := []string{"transactions", "partitions", "nonempty", "shell", "env", "truth", "falsity", "absent"}; !reflect.DeepEqual(names, want) {
		t.Fatalf("requires %q, want %q (in declaration order)", names, want)
	}
	req := func(name string) *Requirement {
		for _, r := range p.Requires {
			if r.Name == name {
				return r
			}
		}
		t.Fatalf("no requirement %s", name)
		return nil
	}

	for name, want := range map[string]string{
		"transactions": "path data/transactions/${run.ds}.csv",
		"partitions":   "path ${local.root}/events/${run.ds_nodash}/*.parquet",
		"nonempty":     `command ["test", "-s", "data/transactions/${run.ds}.csv"]`,
		"truth":        `command ["true"]`,
	} {
		if got := req(name).Describe(); got != want {
			t.Errorf("Describe(%s) = %q, want %q", name, got, want)
		}
	}

	loc := p.Timezone
	day := func(d int) RunVars {
		return RunVars{
			LogicalDate:       time.Date(2025, 7, d, 0, 0, 0, 0, loc),
			DataIntervalStart: time.Date(2025, 7, d, 0, 0, 0, 0, loc).UTC(),
			DataIntervalEnd:   time.Date(2025, 7, d+1, 0, 0, 0, 0, loc).UTC(),
			Kind:              "backfill",
		}
	}
	// Render evaluates the templates for one date and runs nothing (the
	// checks themselves are executor/requires's, tested there).
	pdir := filepath.Join(dir, "pipelines")
	for _, c := range []struct {
		req  string
		path string
		argv []string
	}{
		{"transactions", "data/transactions/2025-07-03.csv", nil},
		{"partitions", "data/events/20250703/*.parquet", nil},
		{"nonempty", "", []string{"test", "-s", "data/transactions/2025-07-03.csv"}},
		{"shell", "", []string{"/bin/sh", "-c", "echo checking >&2; test \"$REWIND_DS\" = 2025-07-03 || { echo \"missing day $REWIND_DS\" >&2; exit 3; }"}},
		{"absent", "", []string{"rewind-no-such-program-for-requires"}},
	} {
		got, err := req(c.req).Render(day(3))
		if err != nil {
			t.Errorf("Render(%s): %v", c.req, err)
			continue
		}
		if got.Name != c.req || got.Path != c.path || !reflect.DeepEqual(got.Argv, c.argv) || got.Dir != pdir || !reflect.DeepEqual(got.Env, p.DateEnv(day(3))) {
			t.Errorf("Render(%s) = %+v, want path %q, argv %q, dir %s and the date's env", c.req, got, c.path, c.argv, pdir)
		}
	}
	if _, err := (*Requirement)(nil).Render(day(3)); err == nil || err.Error() != "the requirement sets neither path nor command" {
		t.Errorf("Render of nil: %v", err)
	}

	if got, want := p.DateEnv(day(3)), []string{
		"REWIND_PIPELINE=revenue",
		"REWIND_DS=2025-07-03",
		"REWIND_DS_NODASH=20250703",
		"REWIND_LOGICAL_DATE=2025-07-03T00:00:00+09:00",
		"REWIND_DATA_INTERVAL_START=2025-07-03T00:00:00+09:00",
		"REWIND_DATA_INTERVAL_END=2025-07-04T00:00:00+09:00",
	}; !reflect.DeepEqual(got, want) {
		t.Errorf("DateEnv:\n got %q\nwant %q", got, want)
	}
}

func TestRequiresDiagnostics(t *testing.T) {
	cases := []struct {
		name string
		body string
		want []string
	}{
		{"neither", `  requires "x" {}`, []string{"main.hcl:5,3-15: Requires block without path or command"}},
		{"both", `  requires "x" {
    path    = "a"
    command = ["b"]
  }`, []string{"main.hcl:7,5-12: Conflicting requires arguments"}},
		{"both, command first", `  requires "x" {
    command = ["b"]
    path    = "a"
  }`, []string{"main.hcl:7,5-9: Conflicting requires arguments"}},
		{"pool in path", `  requires "x" {
    path = "data/${pool.name}/${run.ds}.csv"
  }`, []string{"main.hcl:6,20-29: pool.* not available here"}},
		{"pool in command", `  requires "x" {
    command = ["check", pool.memory]
  }`, []string{"main.hcl:6,25-36: pool.* not available here"}},
		{"unknown run attribute", `  requires "x" {
    path = "data/${run.date}.csv"
  }`, []string{"main.hcl:6,23-28: Unknown run attribute"}},
		{"duplicate", `  requires "x" {
    path = "a"
  }
  requires "x" {
    path = "b"
  }`, []string{"main.hcl:8,3-15: Duplicate requires block"}},
		{"empty path", `  requires "x" {
    path = ""
  }`, []string{"main.hcl:6,12-14: Invalid path"}},
		{"bad glob", `  requires "x" {
    path = "data/[.csv"
  }`, []string{"main.hcl:6,12-24: Invalid path"}},
		{"path not a string", `  requires "x" {
    path = ["a"]
  }`, []string{"main.hcl:6,12-17: Incorrect attribute value type"}},
		{"empty command", `  requires "x" {
    command = []
  }`, []string{"main.hcl:6,15-17: Invalid command"}},
		{"unknown attribute", `  requires "x" {
    glob = "a"
  }`, []string{"main.hcl:5,3-15: Requires block without path or command", "main.hcl:6,5-9: Unsupported argument"}},
		{"invalid name", `  requires "a b" {
    path = "a"
  }`, []string{"main.hcl:5,12-17: Invalid requires name"}},
		{"each outside for_each", `  requires "x" {
    path = "data/${each.key}.csv"
  }`, []string{"main.hcl:6,20-28: Reference to each outside for_each"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			expectDiags(t, pipe("p", c.body), c.want...)
		})
	}

	// The duplicate's detail names the first declaration.
	_, diags := load(t, map[string]string{"main.hcl": pipe("p", cases[6].body)}, LoadOptions{})
	if len(diags) != 1 || !strings.Contains(diags[0].Detail, "main.hcl:5,3-15") {
		t.Errorf("duplicate: %s", diags.Error())
	}
}

func TestRequiresForEach(t *testing.T) {
	dir := t.TempDir()
	writeTree(t, dir, map[string]string{
		"main.hcl": pipe("load", `  for_each = toset(["orders", "fx"])
  requires "source" {
    path = "data/${each.key}/${run.ds}.csv"
  }`),
	})
	ws, diags := Load(dir, LoadOptions{})
	if diags.HasErrors() {
		t.Fatal(diags.Error())
	}
	rv := RunVars{LogicalDate: time.Date(2025, 7, 1, 0, 0, 0, 0, time.UTC)}
	for name, want := range map[string]string{"load_orders": "data/orders/2025-07-01.csv", "load_fx": "data/fx/2025-07-01.csv"} {
		if c, err := ws.Pipeline(name).Requires[0].Render(rv); err != nil || c.Path != want {
			t.Errorf("%s: %+v, %v; want path %s", name, c, err, want)
		}
	}
	if got := ws.Pipeline("load_fx").Requires[0].Describe(); got != "path data/${each.key}/${run.ds}.csv" {
		t.Errorf("Describe = %q", got)
	}
}

func TestNotify(t *testing.T) {
	dir := t.TempDir()
	writeTree(t, dir, map[string]string{
		"main.hcl": minimal + `
variable "channel" {
  default = "#data"
}
notify "slack" {
  command = ["sh", "scripts/post.sh", var.channel]
}
notify "hook" {
  webhook = "http://127.0.0.1:8080/hook"
}
notify "both" {
  command = "cat > report.md"
  webhook = "https://hooks.example.com/rewind?team=data"
}
`,
	})
	ws, diags := Load(dir, LoadOptions{})
	if diags.HasErrors() {
		t.Fatal(diags.Error())
	}
	var names []string
	for _, n := range ws.Notifies {
		names = append(names, n.Name)
	}
	if want := []string{"both", "hook", "slack"}; !reflect.DeepEqual(names, want) {
		t.Fatalf("notifies %q, want %q", names, want)
	}
	both, hook, slack := ws.Notifies[0], ws.Notifies[1], ws.Notifies[2]
	wsDir := ws.Pipeline("p").Dir
	if hook.Webhook != "http://127.0.0.1:8080/hook" || both.Webhook != "https://hooks.example.com/rewind?team=data" || slack.Webhook != "" {
		t.Errorf("webhooks %q %q %q", hook.Webhook, both.Webhook, slack.Webhook)
	}
	cmd, err := slack.Command()
	if err != nil {
		t.Fatal(err)
	}
	if want := (&Command{Argv: []string{"sh", "scripts/post.sh", "#data"}, Env: map[string]string{}, Dir: wsDir}); !reflect.DeepEqual(cmd, want) {
		t.Errorf("slack command %+v, want %+v", cmd, want)
	}
	cmd, err = both.Command()
	if err != nil || !reflect.DeepEqual(cmd.Argv, []string{"/bin/sh", "-c", "cat > report.md"}) {
		t.Errorf("both command %+v, %v", cmd, err)
	}
	if cmd, err := hook.Command(); cmd != nil || err != nil {
		t.Errorf("hook command %+v, %v", cmd, err)
	}
	if slack.DeclRange.Start.Line != 13 {
		t.Errorf("slack declared at %s", slack.DeclRange)
	}

	// No notify block: none.
	if ws := mustLoad(t, minimal, LoadOptions{}); len(ws.Notifies) != 0 {
		t.Errorf("notifies %v", ws.Notifies)
	}
}

func TestNotifyDiagnostics(t *testing.T) {
	cases := []struct {
		name string
		src  string
		want []string
	}{
		{"neither", `notify "n" {}`, []string{"main.hcl:1,1-11: Notify without command or webhook"}},
		{"run in command", `notify "n" {
  command = ["sh", "post.sh", run.ds]
}`, []string{"main.hcl:2,31-37: run.* not available here"}},
		{"run in webhook", `notify "n" {
  webhook = "http://x/${run.id}"
}`, []string{"main.hcl:2,25-31: run.* not available here"}},
		{"pool in command", `notify "n" {
  command = "post ${pool.name}"
}`, []string{"main.hcl:2,21-30: pool.* not available here"}},
		{"relative webhook", `notify "n" {
  webhook = "/hook"
}`, []string{"main.hcl:2,13-20: Invalid webhook"}},
		{"ftp webhook", `notify "n" {
  webhook = "ftp://example.com/x"
}`, []string{"main.hcl:2,13-34: Invalid webhook"}},
		{"no host", `notify "n" {
  webhook = "http:///hook"
}`, []string{"main.hcl:2,13-27: Invalid webhook"}},
		{"unparsable", `notify "n" {
  webhook = "http://exa mple.com/"
}`, []string{"main.hcl:2,13-35: Invalid webhook"}},
		{"webhook a number", `notify "n" {
  webhook = 8080
}`, []string{"main.hcl:2,13-17: Invalid webhook"}}, // "8080" is no URL
		{"webhook null", `notify "n" {
  webhook = null
}`, []string{"main.hcl:2,13-17: Missing value"}},
		{"command type", `notify "n" {
  command = 42
}`, []string{"main.hcl:2,13-15: Incorrect attribute value type"}},
		{"duplicate", `notify "n" {
  webhook = "http://a/"
}
notify "n" {
  webhook = "http://b/"
}`, []string{"main.hcl:4,1-11: Duplicate notify block"}},
		{"inside a pipeline", `pipeline "q" {
  schedule   = "@daily"
  start_date = "2025-07-01"
  notify "n" {}
  task "a" {
    command = "true"
  }
}`, []string{"main.hcl:4,3-9: Unsupported block type"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			expectDiags(t, withPipeline(c.src), c.want...)
		})
	}
}
