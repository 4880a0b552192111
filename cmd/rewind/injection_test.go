package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Values from outside the HCL files reach a string command as one word
// each, and never run: through -var, REWIND_VAR_* and for_each keys, and
// with the workspace in a directory whose name is itself hostile.
func TestNoShellInjection(t *testing.T) {
	hostile := []string{
		"x; touch pwned1", "a && touch pwned2", "b | touch pwned3", "$(touch pwned4)",
		"`touch pwned5`", "c\ntouch pwned6", "it's", `say "hi"`, "*", "-rf", "",
	}
	parent := t.TempDir()
	dir := filepath.Join(parent, "ws $(touch pwned7) dir")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	hcl := `
variable "v" {
  type = list(string)
}
variable "e" {
  type = string
}
pipeline "p" {
  schedule   = "@daily"
  start_date = "2025-07-01"
  end_date   = "2025-07-01"
  task "vars" {
    command = "./args.sh vars.txt ${join("", [])}${var.v[0]} ${var.v[1]} ${var.v[2]} ${var.v[3]} ${var.v[4]} ${var.v[5]} ${var.v[6]} ${var.v[7]} ${var.v[8]} ${var.v[9]} ${var.v[10]}"
  }
  task "env" {
    command = "./args.sh env.txt ${var.e}"
  }
  task "dir" {
    command = "./args.sh dir.txt ${run.dir}"
  }
  task "keys" {
    for_each = toset(["k1"])
    command  = "./args.sh keys.txt ${each.key} ${var.e}"
  }
}
`
	files := map[string]string{
		"main.hcl": hcl,
		"args.sh":  "#!/bin/sh\nout=$1; shift\nfor a in \"$@\"; do printf '[%s]\\n' \"$a\"; done > \"$out\"\n",
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	w := &workspace{t: t, dir: dir}
	list := `["` + strings.Join(escapeAll(hostile), `", "`) + `"]`
	cmd := w.command("run", "--quiet", "--now", "2025-07-02T00:00:00Z", "-var", "v="+list, ".")
	cmd.Env = append(cmd.Env, "REWIND_VAR_e=$(touch pwned8); touch pwned9")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("run: %v\n%s", err, out)
	}
	for _, d := range []string{dir, parent} {
		matches, _ := filepath.Glob(filepath.Join(d, "pwned*"))
		if len(matches) > 0 {
			t.Errorf("a value ran as shell code: %v", matches)
		}
	}
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	var want strings.Builder
	for _, h := range hostile {
		want.WriteString("[" + h + "]\n")
	}
	if got := read("vars.txt"); got != want.String() {
		t.Errorf("-var values as the task's arguments:\n%s\nwant:\n%s", got, want.String())
	}
	if got, want := read("env.txt"), "[$(touch pwned8); touch pwned9]\n"; got != want {
		t.Errorf("REWIND_VAR_e as an argument: %q, want %q", got, want)
	}
	if got := read("dir.txt"); !strings.HasPrefix(got, "["+dir+"/.rewind/runs/p/") || strings.Count(got, "\n") != 1 {
		t.Errorf("run.dir in a hostile workspace path: %q, want one argument under %s", got, dir)
	}
	if got, want := read("keys.txt"), "[k1]\n[$(touch pwned8); touch pwned9]\n"; got != want {
		t.Errorf("for_each key and variable: %q, want %q", got, want)
	}
}

// escapeAll writes values as HCL string literals' contents.
func escapeAll(vals []string) []string {
	out := make([]string, len(vals))
	for i, v := range vals {
		v = strings.ReplaceAll(v, `\`, `\\`)
		v = strings.ReplaceAll(v, `"`, `\"`)
		v = strings.ReplaceAll(v, "\n", `\n`)
		v = strings.ReplaceAll(v, "${", "$${")
		out[i] = v
	}
	return out
}
