package requires

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rewind-dev/rewind/dsl"
)

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

// load loads the workspace in dir and returns its pipeline name.
func load(t *testing.T, dir, name string) *dsl.Pipeline {
	t.Helper()
	ws, diags := dsl.Load(dir, dsl.LoadOptions{})
	if diags.HasErrors() {
		t.Fatal(diags.Error())
	}
	p := ws.Pipeline(name)
	if p == nil {
		t.Fatalf("no pipeline %s", name)
	}
	return p
}

// pipe is a pipeline block named name with one task and the given extra
// body (requires blocks, for_each).
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

// requiresSrc is dsl's fixture: a pipeline with a requires block of every
// kind.
var requiresSrc = func() string {
	b, err := os.ReadFile("../../dsl/testdata/requires.hcl")
	if err != nil {
		panic(err)
	}
	return string(b)
}()

func TestCheck(t *testing.T) {
	dir := t.TempDir()
	writeTree(t, dir, map[string]string{
		"pipelines/main.hcl": requiresSrc,
		// Of rewind's own environment, a command gets only what the
		// workspace names (beyond PATH, HOME, ...).
		"pipelines/environment.hcl":                        "environment {\n  pass = [\"REWIND_TEST_INHERITED\"]\n}\n",
		"pipelines/data/transactions/2025-07-03.csv":       "id,amount\n1,10\n",
		"pipelines/data/transactions/2025-07-04.csv":       "",
		"pipelines/data/events/20250703/part-0.parquet":    "x",
		"pipelines/data/events/20250704/part-0.parquet/_x": "a directory named like a file",
	})
	p := load(t, filepath.Join(dir, "pipelines"), "revenue")
	req := func(name string) *dsl.Requirement {
		for _, r := range p.Requires {
			if r.Name == name {
				return r
			}
		}
		t.Fatalf("no requirement %s", name)
		return nil
	}

	t.Setenv("REWIND_TEST_INHERITED", "inherited")
	loc := p.Timezone
	day := func(d int) dsl.RunVars {
		return dsl.RunVars{
			LogicalDate:       time.Date(2025, 7, d, 0, 0, 0, 0, loc),
			DataIntervalStart: time.Date(2025, 7, d, 0, 0, 0, 0, loc).UTC(),
			DataIntervalEnd:   time.Date(2025, 7, d+1, 0, 0, 0, 0, loc).UTC(),
			Kind:              "backfill",
		}
	}
	pdir := filepath.Join(dir, "pipelines")
	if real, err := filepath.EvalSymlinks(pdir); err == nil {
		pdir = real
	}
	cases := []struct {
		req  string
		day  int
		want string // "" = satisfied
	}{
		{"transactions", 3, ""},
		{"transactions", 4, ""}, // an empty file matches a path
		{"transactions", 5, "no file matches data/transactions/2025-07-05.csv"},
		{"partitions", 3, ""},
		{"partitions", 4, "no file matches data/events/20250704/*.parquet (only directories do)"},
		{"partitions", 5, "no file matches data/events/20250705/*.parquet"},
		{"nonempty", 3, ""},
		{"nonempty", 4, "command exited 1"},
		{"shell", 3, ""},
		{"shell", 4, "command exited 3: checking"},
		{"env", 3, "command exited 1: revenue|2025-07-03|20250703|2025-07-03T00:00:00+09:00|2025-07-03T00:00:00+09:00|2025-07-04T00:00:00+09:00|" + pdir + "|inherited|"},
		{"truth", 3, ""},
		{"falsity", 3, "command exited 1"},
		{"absent", 3, `command cannot start: exec: "rewind-no-such-program-for-requires": executable file not found in $PATH`},
	}
	for _, c := range cases {
		err := Check(context.Background(), req(c.req), day(c.day))
		got := ""
		if err != nil {
			got = err.Error()
		}
		if got != c.want {
			t.Errorf("%s on 2025-07-%02d: %q, want %q", c.req, c.day, got, c.want)
		}
	}

	// rv.Pipeline, when set, names the pipeline.
	rv := day(3)
	rv.Pipeline = "other"
	if err := Check(context.Background(), req("env"), rv); err == nil || !strings.Contains(err.Error(), "exited 1: other|") {
		t.Errorf("env with rv.Pipeline: %v", err)
	}
}

func TestCheckCommandStops(t *testing.T) {
	dir := t.TempDir()
	writeTree(t, dir, map[string]string{"main.hcl": pipe("p", `  requires "slow" {
    command = ["sh", "-c", "sleep 30 & sleep 30"]
  }`)})
	r := load(t, dir, "p").Requires[0]
	rv := dsl.RunVars{LogicalDate: time.Date(2025, 7, 1, 0, 0, 0, 0, time.UTC)}

	saved := timeout
	timeout = 200 * time.Millisecond
	defer func() { timeout = saved }()
	start := time.Now()
	err := Check(context.Background(), r, rv)
	if err == nil || err.Error() != "command did not finish within 200ms" {
		t.Errorf("timeout: %v", err)
	}
	timeout = time.Minute
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	err = Check(ctx, r, rv)
	if err == nil || !strings.HasPrefix(err.Error(), "command interrupted: ") {
		t.Errorf("cancelled: %v", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("the checks took %s: the process group was not killed", d)
	}
}

func TestCheckForEach(t *testing.T) {
	dir := t.TempDir()
	writeTree(t, dir, map[string]string{
		"main.hcl": pipe("load", `  for_each = toset(["orders", "fx"])
  requires "source" {
    path = "data/${each.key}/${run.ds}.csv"
  }`),
		"data/orders/2025-07-01.csv": "x",
	})
	rv := dsl.RunVars{LogicalDate: time.Date(2025, 7, 1, 0, 0, 0, 0, time.UTC)}
	if err := Check(context.Background(), load(t, dir, "load_orders").Requires[0], rv); err != nil {
		t.Errorf("orders: %v", err)
	}
	err := Check(context.Background(), load(t, dir, "load_fx").Requires[0], rv)
	if err == nil || err.Error() != "no file matches data/fx/2025-07-01.csv" {
		t.Errorf("fx: %v", err)
	}
}
