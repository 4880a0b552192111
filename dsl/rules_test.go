package dsl

import (
	"math"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// ruleOutput is an output whose validate block holds rules (from line 6).
func ruleOutput(rules string) string {
	return `
variable "min_ratio" {
  default = 0.9
}
locals {
  tolerance = 0.5
}
` + pipe("p", `  output "o" {
    table   = "a.t"
    from    = "x.csv"
    columns = { ds = "date", currency = "string", amount_usd = "double", n = "long", k = "int", ok = "boolean" }
    validate {
      rules = `+rules+`
    }
  }`)
}

func TestRules(t *testing.T) {
	ws := mustLoad(t, ruleOutput(`[
        new.rows == old.rows,
        new.amount_usd >= var.min_ratio * old.amount_usd,
        abs(new.n - old.n) <= local.tolerance,
        new["k"] > 0 || old.rows == 0,
        new.amount_usd /
          old.amount_usd < 2,
      ]`), LoadOptions{})
	o := ws.Pipeline("p").Output("o")
	wantRules := []string{
		"new.rows == old.rows",
		"new.amount_usd >= var.min_ratio * old.amount_usd",
		"abs(new.n - old.n) <= local.tolerance",
		`new["k"] > 0 || old.rows == 0`,
		"new.amount_usd / old.amount_usd < 2",
	}
	if !reflect.DeepEqual(o.Rules, wantRules) {
		t.Errorf("Rules:\n%q\nwant\n%q", o.Rules, wantRules)
	}
	if got, want := o.RuleColumns(), []string{"amount_usd", "k", "n"}; !reflect.DeepEqual(got, want) {
		t.Errorf("RuleColumns: %q, want %q", got, want)
	}

	base := map[string]float64{"rows": 10, "amount_usd": 100, "n": 5, "k": 1}
	with := func(kv ...any) map[string]float64 {
		m := map[string]float64{}
		for k, v := range base {
			m[k] = v
		}
		for i := 0; i < len(kv); i += 2 {
			if v, ok := kv[i+1].(float64); ok {
				m[kv[i].(string)] = v
			} else {
				delete(m, kv[i].(string))
			}
		}
		return m
	}
	cases := []struct {
		name     string
		old, new map[string]float64
		want     []string
	}{
		{"all pass", base, base, nil},
		{"rows differ", base, with("rows", 11.0), []string{"new.rows == old.rows"}},
		{"amount down 20%", base, with("amount_usd", 80.0), []string{"new.amount_usd >= var.min_ratio * old.amount_usd"}},
		{"amount down 10% passes", base, with("amount_usd", 90.0), nil},
		{"n within tolerance", base, with("n", 5.5), nil},
		{"n beyond tolerance", base, with("n", 4.0), []string{"abs(new.n - old.n) <= local.tolerance"}},
		{"k zero, old rows", base, with("k", 0.0), []string{`new["k"] > 0 || old.rows == 0`}},
		{"k zero, new date", with("rows", 0.0, "k", 0.0), with("k", 0.0, "rows", 0.0), nil},
		{"amount doubled, two fail", base, with("amount_usd", 200.0), []string{"new.amount_usd / old.amount_usd < 2"}},
		{"division by zero", with("amount_usd", 0.0), with("amount_usd", 0.0), []string{"new.amount_usd / old.amount_usd < 2: can't divide zero by zero or infinity by infinity"}},
		{"missing sum", base, with("n", nil), []string{"abs(new.n - old.n) <= local.tolerance: no value for new.n"}},
		{"NaN sum", with("k", math.NaN()), base, nil},
		{"NaN used", base, with("n", math.NaN()), []string{"abs(new.n - old.n) <= local.tolerance: new.n is NaN"}},
		{"nil maps", nil, nil, []string{
			"new.rows == old.rows: no value for new.rows",
			"new.amount_usd >= var.min_ratio * old.amount_usd: no value for new.amount_usd",
			"abs(new.n - old.n) <= local.tolerance: no value for new.n",
			`new["k"] > 0 || old.rows == 0: no value for new.k`,
			"new.amount_usd / old.amount_usd < 2: no value for new.amount_usd",
		}},
		{"infinite", base, with("amount_usd", math.Inf(1)), []string{"new.amount_usd / old.amount_usd < 2"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := o.CheckRules(c.old, c.new)
			if len(got) != len(c.want) {
				t.Fatalf("CheckRules: %q, want %q", got, c.want)
			}
			for i := range got {
				// An evaluation error is "text: error"; the want holds its start.
				if got[i] != c.want[i] && (!strings.HasSuffix(c.want[i], ": ") || !strings.HasPrefix(got[i], c.want[i]) || len(got[i]) == len(c.want[i])) {
					t.Errorf("CheckRules[%d]: %q, want %q", i, got[i], c.want[i])
				}
			}
		})
	}

	// A missing value of a column no rule needs does not matter; nor does
	// an output without rules.
	if got := o.CheckRules(map[string]float64{"rows": 1, "amount_usd": 1, "n": 1, "k": 1}, map[string]float64{"rows": 1, "amount_usd": 1, "n": 1, "k": 1, "other": math.NaN()}); got != nil {
		t.Errorf("CheckRules with extra keys: %q", got)
	}
	plain := mustLoad(t, pipe("p", revenueOutput), LoadOptions{}).Pipeline("p").Output("revenue")
	if plain.Rules != nil || plain.RuleColumns() != nil || plain.CheckRules(nil, nil) != nil {
		t.Errorf("an output without rules: %q %q", plain.Rules, plain.RuleColumns())
	}
	var none *Output
	if none.RuleColumns() != nil || none.CheckRules(nil, nil) != nil {
		t.Errorf("nil output")
	}
}

func TestRulesRowsOnly(t *testing.T) {
	o := mustLoad(t, ruleOutput(`[new.rows >= old.rows - 1]`), LoadOptions{}).Pipeline("p").Output("o")
	if o.RuleColumns() != nil {
		t.Errorf("RuleColumns: %q", o.RuleColumns())
	}
	if got := o.CheckRules(map[string]float64{"rows": 10}, map[string]float64{"rows": 9}); got != nil {
		t.Errorf("9 after 10: %q", got)
	}
	if got := o.CheckRules(map[string]float64{"rows": 10}, map[string]float64{"rows": 8}); !reflect.DeepEqual(got, []string{"new.rows >= old.rows - 1"}) {
		t.Errorf("8 after 10: %q", got)
	}
}

func TestRulesForEach(t *testing.T) {
	ws := mustLoad(t, pipe("p", `  for_each = { eu = 0.5, us = 0.8 }
  output "o" {
    table   = "a.t_${each.key}"
    from    = "x.csv"
    columns = { ds = "date", amount = "double" }
    validate {
      rules = [new.amount >= each.value * old.amount]
    }
  }`), LoadOptions{})
	old := map[string]float64{"rows": 1, "amount": 100}
	new := map[string]float64{"rows": 1, "amount": 60}
	if got := ws.Pipeline("p_eu").Output("o").CheckRules(old, new); got != nil {
		t.Errorf("eu: %q", got)
	}
	if got := ws.Pipeline("p_us").Output("o").CheckRules(old, new); len(got) != 1 {
		t.Errorf("us: %q", got)
	}
}

func TestRulesDiagnostics(t *testing.T) {
	cases := []struct {
		name  string
		rules string
		want  []string
	}{
		{"unknown column", `[new.amount_eur > 0]`, []string{"main.hcl:17,19-30: Unknown column"}},
		{"unknown column in index", `[old["amount_eur"] > 0]`, []string{"main.hcl:17,19-33: Unknown column"}},
		{"string column", `[new.currency == old.currency]`, []string{"main.hcl:17,19-28: Unknown column", "main.hcl:17,35-44: Unknown column"}},
		{"boolean column", `[new.ok]`, []string{"main.hcl:17,19-22: Unknown column"}},
		{"not bool", `[new.rows == old.rows, new.rows - old.rows]`, []string{"main.hcl:17,38-57: Invalid rule"}},
		{"string", `["new.rows == old.rows"]`, []string{"main.hcl:17,16-38: Invalid rule"}},
		{"null", `[null]`, []string{"main.hcl:17,16-20: Invalid rule"}},
		{"run", `[new.rows > run.day]`, []string{"main.hcl:17,27-34: run.* not available here"}},
		{"pool", `[new.rows > pool.cpus]`, []string{"main.hcl:17,27-36: pool.* not available here"}},
		{"each outside for_each", `[new.rows > each.value]`, []string{"main.hcl:17,27-37: Reference to each outside for_each"}},
		{"bare old", `[length(keys(old)) > 0]`, []string{"main.hcl:17,28-31: Invalid reference"}},
		{"unknown root", `[newest.rows > 0]`, []string{"main.hcl:17,16-27: Unknown variable"}},
		{"undeclared var", `[new.rows > var.nosuch]`, []string{"main.hcl:17,27-37: Reference to undeclared input variable"}},
		{"not a list", `"new.rows == old.rows"`, []string{"main.hcl:17,15-37: Invalid rules"}},
		{"unknown function", `[nosuch(new.rows)]`, []string{"main.hcl:17,16-22: Call to unknown function"}},
		{"wrong operand", `[new.rows > "x"]`, []string{"main.hcl:17,27-30: Invalid operand"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, diags := load(t, map[string]string{"main.hcl": ruleOutput(c.rules)}, LoadOptions{})
			var got []string
			for _, d := range diags {
				r := *d.Subject
				r.Filename = filepath.Base(r.Filename)
				got = append(got, r.String()+": "+d.Summary)
			}
			if !reflect.DeepEqual(got, c.want) {
				t.Errorf("got\n%s\nwant\n%s\n%s", strings.Join(got, "\n"), strings.Join(c.want, "\n"), diags.Error())
			}
		})
	}

	// The details list what old and new hold.
	_, diags := load(t, map[string]string{"main.hcl": ruleOutput(`[new.amount_eur > 0]`)}, LoadOptions{})
	if len(diags) != 1 || !strings.Contains(diags[0].Detail, `no column "amount_eur"`) || !strings.Contains(diags[0].Detail, "numeric column (double, long or int): amount_usd, n, k.") {
		t.Errorf("unknown column detail: %s", diags.Error())
	}
	_, diags = load(t, map[string]string{"main.hcl": ruleOutput(`[new.ok]`)}, LoadOptions{})
	if len(diags) != 1 || !strings.Contains(diags[0].Detail, `"ok" has type "boolean"`) {
		t.Errorf("boolean column detail: %s", diags.Error())
	}
	_, diags = load(t, map[string]string{"main.hcl": ruleOutput(`[new.rows - old.rows]`)}, LoadOptions{})
	if len(diags) != 1 || !strings.Contains(diags[0].Detail, "but new.rows - old.rows is a number") {
		t.Errorf("not bool detail: %s", diags.Error())
	}
	_, diags = load(t, map[string]string{"main.hcl": pipe("p", `  output "o" {
    table   = "a.t"
    from    = "x.csv"
    columns = { ds = "date", s = "string" }
    validate {
      rules = [new.s == old.s]
    }
  }`)}, LoadOptions{})
	if len(diags) != 2 || !strings.Contains(diags[0].Detail, "rows, the row count of the date's partition, only") {
		t.Errorf("no numeric column detail: %s", diags.Error())
	}
	// old.* and new.* exist in rules only.
	_, diags = load(t, map[string]string{"main.hcl": pipe("p", `  output "o" {
    table   = "a.t"
    from    = "${new.rows}.csv"
    columns = { ds = "date" }
  }`)}, LoadOptions{})
	if len(diags) != 1 || diags[0].Summary != "Unknown variable" || !strings.Contains(diags[0].Detail, "validate rules") {
		t.Errorf("new outside rules: %s", diags.Error())
	}
	// A column in error is not reported again.
	_, diags = load(t, map[string]string{"main.hcl": pipe("p", `  output "o" {
    table   = "a.t"
    from    = "x.csv"
    columns = { ds = "date", amount = "float" }
    validate {
      rules = [new.amount > 0]
    }
  }`)}, LoadOptions{})
	if len(diags) != 1 || diags[0].Summary != "Invalid column type" {
		t.Errorf("column in error: %s", diags.Error())
	}
}
