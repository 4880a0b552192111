package dsl

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

const revenueOutput = `
  output "revenue" {
    table   = "analytics.fct_daily_revenue"
    from    = "${run.dir}/revenue.csv"
    columns = { ds = "date", currency = "string", amount_usd = "double" }
  }
`

func TestOutputDefaults(t *testing.T) {
	ws := mustLoad(t, pipe("revenue", revenueOutput), LoadOptions{})
	p := ws.Pipeline("revenue")
	if len(p.Outputs) != 1 {
		t.Fatalf("outputs: %d", len(p.Outputs))
	}
	o := p.Outputs[0]
	if p.Output("revenue") != o || p.Output("nosuch") != nil {
		t.Errorf("Pipeline.Output does not find the output by name")
	}
	want := []OutputColumn{{"ds", "date"}, {"currency", "string"}, {"amount_usd", "double"}}
	switch {
	case o.Name != "revenue", o.Table != "analytics.fct_daily_revenue":
		t.Errorf("name, table: %q %q", o.Name, o.Table)
	case o.Catalog != DefaultCatalogName:
		t.Errorf("catalog: %q, want local", o.Catalog)
	case o.Partition != "ds":
		t.Errorf("partition: %q", o.Partition)
	case o.Retention != 14*24*time.Hour:
		t.Errorf("retention: %s", o.Retention)
	case o.MaxChange == nil || len(o.MaxChange) != 0:
		t.Errorf("max_change: %v", o.MaxChange)
	case !reflect.DeepEqual(o.Columns, want):
		t.Errorf("columns: %v, want %v", o.Columns, want)
	case o.FromText() != "${run.dir}/revenue.csv":
		t.Errorf("FromText: %q", o.FromText())
	case o.DeclRange.Start.Line != 6:
		t.Errorf("DeclRange: %s", o.DeclRange)
	}
	if c := o.Column("amount_usd"); c == nil || c.Type != "double" || o.Column("nosuch") != nil {
		t.Errorf("Column: %v", c)
	}
}

func TestOutputAttributes(t *testing.T) {
	src := `
variable "ns" {
  default = "analytics"
}
catalog "prod" {
  type = "rest"
  uri  = "https://catalog.example.com/api"
}
` + pipe("revenue", `
  output "revenue" {
    catalog   = "prod"
    table     = "${var.ns}.fct_daily_revenue"
    from      = "out/${run.ds}/*.csv"
    # the order written is kept, whatever the names
    columns   = {
      zeta       = "long"
      amount_usd = "double"
      day        = "date"
      "flag"     = "boolean"
      at         = "timestamp"
      n          = "int"
      name       = "string"
    }
    partition = "day"
    retention = "1d12h"
    validate {
      max_change = { amount_usd = 0.05, zeta = 2, n = 0.5 }
    }
  }
`)
	o := mustLoad(t, src, LoadOptions{}).Pipeline("revenue").Outputs[0]
	var names []string
	for _, c := range o.Columns {
		names = append(names, c.Name+":"+c.Type)
	}
	if got := strings.Join(names, " "); got != "zeta:long amount_usd:double day:date flag:boolean at:timestamp n:int name:string" {
		t.Errorf("columns: %s", got)
	}
	switch {
	case o.Catalog != "prod", o.Table != "analytics.fct_daily_revenue", o.Partition != "day":
		t.Errorf("catalog, table, partition: %q %q %q", o.Catalog, o.Table, o.Partition)
	case o.Retention != 36*time.Hour:
		t.Errorf("retention: %s", o.Retention)
	case !reflect.DeepEqual(o.MaxChange, map[string]float64{"amount_usd": 0.05, "zeta": 2, "n": 0.5}):
		t.Errorf("max_change: %v", o.MaxChange)
	case o.FromText() != "out/${run.ds}/*.csv":
		t.Errorf("FromText: %q", o.FromText())
	}

	// columns that are not an object constructor: sorted by name.
	src = `
locals {
  cols = { ds = "date", b = "string", a = "double" }
}
` + pipe("revenue", `
  output "revenue" {
    table   = "a.b"
    from    = "x.csv"
    columns = local.cols
  }
`)
	o = mustLoad(t, src, LoadOptions{}).Pipeline("revenue").Outputs[0]
	if want := []OutputColumn{{"a", "double"}, {"b", "string"}, {"ds", "date"}}; !reflect.DeepEqual(o.Columns, want) {
		t.Errorf("columns from a local: %v, want %v", o.Columns, want)
	}
}

func TestCatalogs(t *testing.T) {
	// The implicit local catalog, resolved against the workspace directory.
	ws := mustLoad(t, pipe("revenue", revenueOutput), LoadOptions{})
	dir, _ := filepath.Abs(ws.Dir)
	local := ws.Catalogs["local"]
	if len(ws.Catalogs) != 1 || local == nil {
		t.Fatalf("catalogs: %v", ws.Catalogs)
	}
	want := Catalog{Name: "local", Type: "sql", URI: filepath.Join(dir, ".rewind", "catalog.db"), Warehouse: filepath.Join(dir, ".rewind", "warehouse")}
	if *local != want {
		t.Errorf("implicit local: %+v, want %+v", *local, want)
	}

	// A workspace loaded by a relative path still stores absolute paths.
	wd, _ := os.Getwd()
	rel, err := filepath.Rel(wd, ws.Dir)
	if err == nil {
		ws2, diags := Load(rel, LoadOptions{})
		if diags.HasErrors() {
			t.Fatal(diags.Error())
		}
		if got := ws2.Catalogs["local"].URI; got != want.URI {
			t.Errorf("relative workspace: uri %q, want %q", got, want.URI)
		}
	}

	// Declared catalogs: relative sql paths resolve against the declaring
	// file's directory, absolute ones are kept; rest keeps uri and warehouse.
	root := t.TempDir()
	writeTree(t, root, map[string]string{
		"ws/catalogs.hcl": `
catalog "local" {
  uri = "state/catalog.db"
}
catalog "abs" {
  type      = "sql"
  uri       = "/var/lib/rewind/catalog.db"
  warehouse = "/data/warehouse"
}
catalog "prod" {
  type      = "rest"
  uri       = "https://catalog.example.com/api/catalog"
  warehouse = "s3://lake/warehouse"
}
catalog "rest_min" {
  type = "rest"
  uri  = "http://127.0.0.1:8181"
}
`,
		"ws/main.hcl": pipe("revenue", revenueOutput),
	})
	ws, diags := Load(filepath.Join(root, "ws"), LoadOptions{})
	if diags.HasErrors() {
		t.Fatal(diags.Error())
	}
	wsDir := filepath.Join(root, "ws")
	for name, want := range map[string]Catalog{
		"local":    {Type: "sql", URI: filepath.Join(wsDir, "state", "catalog.db"), Warehouse: filepath.Join(wsDir, ".rewind", "warehouse")},
		"abs":      {Type: "sql", URI: "/var/lib/rewind/catalog.db", Warehouse: "/data/warehouse"},
		"prod":     {Type: "rest", URI: "https://catalog.example.com/api/catalog", Warehouse: "s3://lake/warehouse"},
		"rest_min": {Type: "rest", URI: "http://127.0.0.1:8181"},
	} {
		c := ws.Catalogs[name]
		if c == nil {
			t.Errorf("no catalog %s", name)
			continue
		}
		got := *c
		got.Name, got.DeclRange = "", want.DeclRange
		if got != want {
			t.Errorf("catalog %s: %+v, want %+v", name, got, want)
		}
		if c.Name != name || c.DeclRange.Filename == "" {
			t.Errorf("catalog %s: name %q, range %s", name, c.Name, c.DeclRange)
		}
	}
	if len(ws.Catalogs) != 4 {
		t.Errorf("catalogs: %d, want 4", len(ws.Catalogs))
	}

	// A single file: the implicit catalog is in its directory.
	ws, diags = Load(filepath.Join(wsDir, "main.hcl"), LoadOptions{})
	if diags.HasErrors() {
		t.Fatal(diags.Error())
	}
	if got := ws.Catalogs["local"].URI; got != filepath.Join(wsDir, ".rewind", "catalog.db") {
		t.Errorf("single file: local uri %q", got)
	}

	// Even a workspace with syntax errors has the implicit catalog.
	ws, _ = load(t, map[string]string{"main.hcl": "pipeline {"}, LoadOptions{})
	if ws.Catalogs["local"] == nil {
		t.Errorf("no implicit catalog after a syntax error")
	}
}

func TestOutputDiagnostics(t *testing.T) {
	out := func(body string) string {
		return pipe("p", "  output \"o\" {\n"+body+"\n  }\n")
	}
	const ok = `    table   = "a.t"
    from    = "x.csv"
    columns = { ds = "date", n = "long", s = "string" }`
	cases := []struct {
		name string
		src  string
		want []string
	}{
		// catalogs
		{"bad catalog type", `catalog "c" {
  type = "hive"
}`, []string{"main.hcl:2,10-16: Invalid catalog type"}},
		{"rest without uri", `catalog "c" {
  type = "rest"
}`, []string{"main.hcl:1,1-12: Missing required argument"}},
		{"rest uri not http", `catalog "c" {
  type = "rest"
  uri  = "thrift://metastore:9083"
}`, []string{"main.hcl:3,10-35: Invalid uri"}},
		{"empty sql uri", `catalog "c" {
  uri = ""
}`, []string{"main.hcl:2,9-11: Invalid uri"}},
		{"duplicate catalog", "catalog \"c\" {}\ncatalog \"c\" {}", []string{"main.hcl:2,1-12: Duplicate catalog"}},
		{"duplicate local", "catalog \"local\" {}\ncatalog \"local\" {}", []string{"main.hcl:2,1-16: Duplicate catalog"}},
		{"catalog run", `catalog "c" {
  uri = "${run.ds}.db"
}`, []string{"main.hcl:2,12-18: run.* not available here"}},
		{"catalog name", `catalog "a b" {}`, []string{"main.hcl:1,9-14: Invalid catalog name"}},
		{"catalog unknown attribute", `catalog "c" {
  path = "x"
}`, []string{`main.hcl:2,3-7: Unsupported argument`}},

		// outputs
		{"unknown catalog", out(`    catalog = "nosuch"
` + ok), []string{"main.hcl:6,15-23: Unknown catalog"}},
		{"table without dot", out(`    table   = "t"
    from    = "x.csv"
    columns = { ds = "date" }`), []string{"main.hcl:6,15-18: Invalid table"}},
		{"table with two dots", out(`    table   = "a.b.c"
    from    = "x.csv"
    columns = { ds = "date" }`), []string{"main.hcl:6,15-22: Invalid table"}},
		{"table not identifiers", out(`    table   = "a.1b"
    from    = "x.csv"
    columns = { ds = "date" }`), []string{"main.hcl:6,15-21: Invalid table"}},
		{"missing table", out(`    from    = "x.csv"
    columns = { ds = "date" }`), []string{"main.hcl:5,3-13: Missing required argument"}},
		{"missing from", out(`    table   = "a.t"
    columns = { ds = "date" }`), []string{"main.hcl:5,3-13: Missing required argument"}},
		{"empty from", out(`    table   = "a.t"
    from    = ""
    columns = { ds = "date" }`), []string{"main.hcl:7,15-17: Invalid from"}},
		{"bad glob", out(`    table   = "a.t"
    from    = "x[.csv"
    columns = { ds = "date" }`), []string{"main.hcl:7,15-23: Invalid from"}},
		{"from pool", out(`    table   = "a.t"
    from    = "${pool.name}.csv"
    columns = { ds = "date" }`), []string{"main.hcl:7,18-27: pool.* not available here"}},
		{"from unknown run attribute", out(`    table   = "a.t"
    from    = "${run.date}.csv"
    columns = { ds = "date" }`), []string{"main.hcl:7,21-26: Unknown run attribute"}},
		{"table run", out(`    table   = "a.t_${run.ds_nodash}"
    from    = "x.csv"
    columns = { ds = "date" }`), []string{"main.hcl:6,22-35: run.* not available here"}},
		{"missing columns", out(`    table   = "a.t"
    from    = "x.csv"`), []string{"main.hcl:5,3-13: Missing required argument"}},
		{"empty columns", out(`    table   = "a.t"
    from    = "x.csv"
    columns = {}`), []string{"main.hcl:8,15-17: Invalid columns"}},
		{"columns not a map", out(`    table   = "a.t"
    from    = "x.csv"
    columns = ["ds"]`), []string{"main.hcl:8,15-21: Incorrect attribute value type"}},
		{"bad column type", out(`    table   = "a.t"
    from    = "x.csv"
    columns = { ds = "date", n = "float", s = "String" }`), []string{"main.hcl:8,34-41: Invalid column type", "main.hcl:8,47-55: Invalid column type"}},
		{"duplicate column", out(`    table   = "a.t"
    from    = "x.csv"
    columns = { ds = "date", n = "long", ds = "date" }`), []string{"main.hcl:8,42-44: Duplicate column"}},
		{"partition not a column", out(ok + `
    partition = "day"`), []string{"main.hcl:9,17-22: Invalid partition"}},
		{"partition not a date", out(ok + `
    partition = "s"`), []string{"main.hcl:9,17-20: Invalid partition"}},
		{"default partition missing", out(`    table   = "a.t"
    from    = "x.csv"
    columns = { day = "date" }`), []string{"main.hcl:8,15-31: Missing partition column"}},
		{"default partition not a date", out(`    table   = "a.t"
    from    = "x.csv"
    columns = { ds = "string" }`), []string{"main.hcl:8,22-30: Invalid partition"}},
		{"bad retention", out(ok + `
    retention = "two weeks"`), []string{"main.hcl:9,17-28: Invalid retention"}},
		{"zero retention", out(ok + `
    retention = "0s"`), []string{"main.hcl:9,17-21: Invalid retention"}},
		{"max_change unknown column", out(ok + `
    validate {
      max_change = { amount = 0.05 }
    }`), []string{"main.hcl:10,22-28: Unknown max_change column"}},
		{"max_change not numeric", out(ok + `
    validate {
      max_change = { s = 0.05, ds = 0.1, n = 0.1 }
    }`), []string{"main.hcl:10,22-23: Invalid max_change column", "main.hcl:10,32-34: Invalid max_change column"}},
		{"max_change not positive", out(ok + `
    validate {
      max_change = { n = 0 }
    }`), []string{"main.hcl:10,26-27: Invalid max_change"}},
		{"max_change not a number", out(ok + `
    validate {
      max_change = { n = "a lot" }
    }`), []string{"main.hcl:10,20-35: Incorrect attribute value type"}},
		{"duplicate validate", out(ok + `
    validate {}
    validate {}`), []string{"main.hcl:10,5-13: Duplicate validate block"}},
		{"unknown validate attribute", out(ok + `
    validate {
      min_rows = 1
    }`), []string{"main.hcl:10,7-15: Unsupported argument"}},
		{"output name", pipe("p", `  output "a.b" {
`+ok+`
  }`), []string{"main.hcl:5,10-15: Invalid output name"}},
		{"duplicate output", pipe("p", `  output "o" {
`+ok+`
  }
  output "o" {
    table   = "a.u"
    from    = "x.csv"
    columns = { ds = "date" }
  }`), []string{"main.hcl:10,3-13: Duplicate output"}},
		{"one table twice in a pipeline", pipe("p", `  output "o" {
`+ok+`
  }
  output "u" {
    table   = "a.t"
    from    = "y.csv"
    columns = { ds = "date" }
  }`), []string{"main.hcl:11,15-20: Table written by two outputs"}},
		{"one table in two pipelines", pipe("p", `  output "o" {
`+ok+`
  }`) + pipe("q", `  output "o" {
    catalog = "local"
    table   = "a.t"
    from    = "y.csv"
    columns = { ds = "date" }
  }`), []string{"main.hcl:20,15-20: Table written by two outputs"}},
		{"for_each instances on one table", pipe("p", `  for_each = toset(["x", "y"])
  output "o" {
`+ok+`
  }`), []string{"main.hcl:7,15-20: Table written by two outputs"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			src := c.src
			if !strings.Contains(src, "pipeline") {
				src += "\n" + pipe("p", "")
			}
			expectDiags(t, src, c.want...)
		})
	}

	// The same table in two catalogs, and per-instance tables, are fine.
	mustLoad(t, `catalog "prod" {
  type = "rest"
  uri  = "https://catalog.example.com"
}
`+pipe("p", `  output "o" {
`+ok+`
  }
  output "u" {
    catalog = "prod"
`+ok+`
  }`), LoadOptions{})
	ws := mustLoad(t, pipe("p", `  for_each = toset(["x", "y"])
  output "o" {
    table   = "a.t_${each.key}"
    from    = "${each.key}.csv"
    columns = { ds = "date" }
  }`), LoadOptions{})
	if got := ws.Pipeline("p_y").Outputs[0].Table; got != "a.t_y" {
		t.Errorf("for_each table: %q", got)
	}

	// Details name both places and the choices.
	_, diags := load(t, map[string]string{"main.hcl": out(`    catalog = "nosuch"
` + ok)}, LoadOptions{})
	if len(diags) != 1 || !strings.Contains(diags[0].Detail, "The declared catalogs are: local.") {
		t.Errorf("unknown catalog: %s", diags.Error())
	}
	_, diags = load(t, map[string]string{"main.hcl": out(`    table   = "a.t"
    from    = "x.csv"
    columns = { ds = "date", n = "float" }`)}, LoadOptions{})
	if len(diags) != 1 || !strings.Contains(diags[0].Detail, "date, string, double, long, int, boolean, timestamp") {
		t.Errorf("column type: %s", diags.Error())
	}
}

func TestOutputFiles(t *testing.T) {
	root := t.TempDir()
	writeTree(t, root, map[string]string{
		"ws/main.hcl": pipe("revenue", `
  output "revenue" {
    table   = "analytics.fct_daily_revenue"
    from    = "${run.dir}/part-*.csv"
    columns = { ds = "date", amount_usd = "double" }
  }
  output "fx" {
    table   = "analytics.fx"
    from    = "data/${run.ds}/fx-*.jsonl"
    columns = { ds = "date", rate = "double" }
  }
`),
		"run1/part-2.csv":               "x",
		"run1/part-10.csv":              "x",
		"run1/part-1.csv":               "x",
		"run1/other.csv":                "x",
		"ws/data/2025-07-03/fx-b.jsonl": "x",
		"ws/data/2025-07-03/fx-a.jsonl": "x",
	})
	if err := os.Mkdir(filepath.Join(root, "ws", "data", "2025-07-03", "fx-c.jsonl"), 0o755); err != nil {
		t.Fatal(err)
	}
	ws, diags := Load(filepath.Join(root, "ws"), LoadOptions{})
	if diags.HasErrors() {
		t.Fatal(diags.Error())
	}
	p := ws.Pipeline("revenue")
	rv := RunVars{LogicalDate: time.Date(2025, 7, 3, 0, 0, 0, 0, time.UTC), Dir: filepath.Join(root, "run1")}

	files, err := p.Output("revenue").Files(rv)
	want := []string{filepath.Join(root, "run1", "part-1.csv"), filepath.Join(root, "run1", "part-10.csv"), filepath.Join(root, "run1", "part-2.csv")}
	if err != nil || !reflect.DeepEqual(files, want) {
		t.Errorf("absolute glob: %v, %v; want %v", files, err, want)
	}
	// Relative to the pipeline file's directory; directories do not count.
	files, err = p.Output("fx").Files(rv)
	want = []string{filepath.Join(root, "ws", "data", "2025-07-03", "fx-a.jsonl"), filepath.Join(root, "ws", "data", "2025-07-03", "fx-b.jsonl")}
	if err != nil || !reflect.DeepEqual(files, want) {
		t.Errorf("relative glob: %v, %v; want %v", files, err, want)
	}
	if pat, err := p.Output("fx").Pattern(rv); err != nil || pat != "data/2025-07-03/fx-*.jsonl" {
		t.Errorf("Pattern: %q, %v", pat, err)
	}
	// No match: an error naming the pattern.
	rv.LogicalDate = rv.LogicalDate.AddDate(0, 0, 1)
	if _, err := p.Output("fx").Files(rv); err == nil || !strings.Contains(err.Error(), "data/2025-07-04/fx-*.jsonl") {
		t.Errorf("no match: %v", err)
	}
	rv.Dir = filepath.Join(root, "nosuch")
	if _, err := p.Output("revenue").Files(rv); err == nil || !strings.Contains(err.Error(), filepath.Join(root, "nosuch", "part-*.csv")) {
		t.Errorf("no match: %v", err)
	}
	var nilOut *Output
	if _, err := nilOut.Files(rv); err == nil {
		t.Errorf("a nil output has files")
	}
}

func TestOutputHash(t *testing.T) {
	hash := func(body string) string {
		t.Helper()
		return mustLoad(t, `catalog "other" {}
`+pipe("p", body), LoadOptions{}).Pipeline("p").Hash
	}
	none := hash("")
	if none != mustLoad(t, pipe("p", ""), LoadOptions{}).Pipeline("p").Hash {
		t.Errorf("declaring a catalog changed the hash of a pipeline without outputs")
	}
	base := hash(revenueOutput)
	if base == none {
		t.Errorf("an output does not change the hash")
	}
	same := map[string]string{
		"layout":    strings.Replace(revenueOutput, "table   =", "table =", 1),
		"retention": strings.Replace(revenueOutput, "columns", "retention = \"30d\"\n    columns", 1),
		"validate":  strings.Replace(revenueOutput, "columns", "validate {\n      max_change = { amount_usd = 0.1 }\n    }\n    columns", 1),
	}
	for name, body := range same {
		if hash(body) != base {
			t.Errorf("%s changed the hash", name)
		}
	}
	changed := map[string]string{
		"table":        strings.Replace(revenueOutput, "fct_daily_revenue", "fct_revenue", 1),
		"from":         strings.Replace(revenueOutput, "revenue.csv", "revenue.jsonl", 1),
		"column type":  strings.Replace(revenueOutput, `amount_usd = "double"`, `amount_usd = "long"`, 1),
		"column order": strings.Replace(revenueOutput, `currency = "string", amount_usd = "double"`, `amount_usd = "double", currency = "string"`, 1),
		"partition":    strings.Replace(revenueOutput, `currency = "string"`, `day = "date"`, 1) + "\n",
		"catalog":      strings.Replace(revenueOutput, "columns", "catalog = \"other\"\n    columns", 1),
	}
	changed["partition"] = strings.Replace(changed["partition"], "columns", "partition = \"day\"\n    columns", 1)
	for name, body := range changed {
		if hash(body) == base {
			t.Errorf("changing the %s kept the hash", name)
		}
	}
}

// scheduled is a pipeline of the schedule s with the given body.
func scheduled(s, body string) string {
	return strings.Replace(pipe("p", body), `schedule   = "@daily"`, "schedule   = "+quote(s), 1)
}

// An output partitioned by a timestamp column has one partition per data
// interval: any schedule takes it. A date partition column is for
// schedules that start at most one interval a day.
func TestOutputIntervalPartition(t *testing.T) {
	const hourly = `
  output "views" {
    table     = "analytics.page_views"
    from      = "${run.dir}/views.csv"
    columns   = { hour = "timestamp", page = "string", views = "long" }
    partition = "hour"
  }
`
	for _, s := range []string{"@hourly", "*/15 * * * *", "0 0,12 * * *", "@daily", "@weekly", "30 6 * * 1-5"} {
		o := mustLoad(t, scheduled(s, hourly), LoadOptions{}).Pipeline("p").Outputs[0]
		if o.Partition != "hour" || o.Column("hour").Type != "timestamp" {
			t.Errorf("%s: partition %q", s, o.Partition)
		}
	}
	// A timestamp column named ds is the default partition.
	mustLoad(t, scheduled("@hourly", `
  output "o" {
    table   = "a.t"
    from    = "x.csv"
    columns = { ds = "timestamp", n = "long" }
  }
`), LoadOptions{})
	// Dates on schedules of at most one tick a day.
	for _, s := range []string{"@daily", "@weekly", "@monthly", "@yearly", "30 2 * * *", "0 6 * * 1-5", "0 0 1 * *"} {
		mustLoad(t, scheduled(s, revenueOutput), LoadOptions{})
	}
	for s, want := range map[string]int{"@hourly": 24, "*/15 * * * *": 96, "0 0,12 * * *": 2, "0 9-17 * * 1-5": 9, "@daily": 1, "15 3 1 * *": 1, "not a cron": 0} {
		if got := ticksPerDay(s); got != want {
			t.Errorf("ticksPerDay(%q) = %d, want %d", s, got, want)
		}
	}
}

// validate refuses a date partition on a schedule that ticks more than
// once a day, at the partition attribute (or at the output block when the
// partition is the default ds), and says what to write instead.
func TestOutputDatePartitionOnSubDailySchedule(t *testing.T) {
	explicit := `
  output "views" {
    table     = "analytics.page_views"
    from      = "${run.dir}/views.csv"
    columns   = { day = "date", page = "string", views = "long" }
    partition = "day"
  }
`
	implicit := `
  output "views" {
    table   = "analytics.page_views"
    from    = "${run.dir}/views.csv"
    columns = { ds = "date", hour = "long", views = "long" }
  }
`
	for _, s := range []string{"@hourly", "*/15 * * * *", "0 0,12 * * *"} {
		expectDiags(t, scheduled(s, explicit), "main.hcl:10,17-22: Date partition on a sub-daily schedule")
		expectDiags(t, scheduled(s, implicit), "main.hcl:6,3-17: Date partition on a sub-daily schedule")
	}

	_, diags := load(t, map[string]string{"main.hcl": scheduled("@hourly", explicit)}, LoadOptions{})
	if len(diags) != 1 {
		t.Fatalf("diagnostics: %s", diags.Error())
	}
	d := diags[0]
	for _, want := range []string{
		`The partition column "day" is a date: one partition per day.`,
		`The schedule "@hourly" of pipeline "p" starts up to 24 data intervals a day`,
		`the day would keep only its last run`,
		`run.data_interval_start`,
		`columns = { hour = "timestamp", page = "string", views = "long" } with partition = "hour"`,
	} {
		if !strings.Contains(d.Detail, want) {
			t.Errorf("detail lacks %q:\n%s", want, d.Detail)
		}
	}
	if d.Subject == nil || d.Subject.Start.Line != 10 || d.Subject.Start.Column != 17 {
		t.Errorf("subject %v, want the partition attribute's value at 10:17", d.Subject)
	}
	_, diags = load(t, map[string]string{"main.hcl": scheduled("*/15 * * * *", implicit)}, LoadOptions{})
	if len(diags) != 1 || !strings.Contains(diags[0].Detail, `The output "views" sets no partition, so its partition column is "ds", a date`) ||
		!strings.Contains(diags[0].Detail, "96 data intervals a day") ||
		!strings.Contains(diags[0].Detail, `columns = { interval_start = "timestamp", hour = "long", views = "long" } with partition = "interval_start"`) {
		t.Errorf("default partition: %s", diags.Error())
	}

	// Other types are neither.
	expectDiags(t, scheduled("@hourly", strings.Replace(explicit, `day = "date"`, `day = "string"`, 1)), "main.hcl:10,17-22: Invalid partition")
}
