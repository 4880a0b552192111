package main

import (
	"fmt"
	"os"
	"os/exec"
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

// The quoting contexts of a string command and the payloads of the
// security issue: every context times every payload, from -var,
// REWIND_VAR_* and for_each keys, through `rewind run`. Each task writes
// what it received to $O; P must never be created.
var injectionContexts = []struct {
	name, template string
	want           func(v string) string
}{
	{"bare", `printf '%s' ${V} > "$O"`, nil},
	{"single", `printf '%s' '${V}' > "$O"`, nil},
	{"single_inside", `printf '%s' 'a ${V} b' > "$O"`, func(v string) string { return "a " + v + " b" }},
	{"double", `printf '%s' "${V}" > "$O"`, nil},
	{"double_inside", `printf '%s' "a${V}b" > "$O"`, func(v string) string { return "a" + v + "b" }},
	{"command_subst", `v=$(printf '%s' ${V}; printf x); printf '%s' "$${v%x}" > "$O"`, nil},
	{"command_subst_quoted", `v="$(printf '%s' "${V}"; printf x)"; printf '%s' "$${v%x}" > "$O"`, nil},
	{"backticks", "v=`printf '%s' ${V}; printf x`; printf '%s' \"$${v%x}\" > \"$O\"", nil},
	{"backticks_quoted", "v=`printf '%s' \"${V}\"; printf x`; printf '%s' \"$${v%x}\" > \"$O\"", nil},
	{"heredoc", "cat > \"$O\" <<EOF\n${V}\nEOF", func(v string) string { return v + "\n" }},
	{"case_pattern", `case "$P" in ${V}) echo match > "$O";; *) echo other > "$O";; esac`, func(string) string { return "match\n" }},
}

var injectionPayloads = []string{"x'; touch P; '", `"; touch P; "`, "$(touch P)", "`touch P`", "\n", `\`, "*", ""}

func TestInjectionEveryContext(t *testing.T) {
	dir := t.TempDir()
	var hcl strings.Builder
	hcl.WriteString("variable \"v\" {\n  type = list(string)\n}\n")
	for i := range injectionPayloads {
		fmt.Fprintf(&hcl, "variable \"e%d\" {}\n", i)
	}
	hcl.WriteString("pipeline \"p\" {\n  schedule   = \"@daily\"\n  start_date = \"2025-07-01\"\n  end_date   = \"2025-07-01\"\n")
	type expect struct{ file, want, what string }
	var expects []expect
	for _, c := range injectionContexts {
		for i, payload := range injectionPayloads {
			want := payload
			if c.want != nil {
				want = c.want(payload)
			}
			for _, src := range []struct{ name, ref, forEach string }{
				{"var", fmt.Sprintf("var.v[%d]", i), ""},
				{"env", fmt.Sprintf("var.e%d", i), ""},
				{"key", "each.key", fmt.Sprintf("for_each = toset([var.v[%d]])\n", i)},
			} {
				if src.name == "key" && payload == "" {
					continue // for_each keys are never empty
				}
				name := fmt.Sprintf("%s_%d_%s", c.name, i, src.name)
				tmpl := strings.ReplaceAll(c.template, "${V}", "${"+src.ref+"}")
				fmt.Fprintf(&hcl, "  task %q {\n    %s    command = \"%s\"\n    env = { O = \"out/%s\", P = var.v[%d] }\n  }\n",
					name, src.forEach, hclTemplate(tmpl), name, i)
				expects = append(expects, expect{file: name, want: want, what: fmt.Sprintf("%s, %s, payload %q", c.name, src.name, payload)})
			}
		}
	}
	hcl.WriteString("}\n")
	if err := os.WriteFile(filepath.Join(dir, "main.hcl"), []byte(hcl.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "out"), 0o755); err != nil {
		t.Fatal(err)
	}
	w := &workspace{t: t, dir: dir}
	list := `["` + strings.Join(escapeAll(injectionPayloads), `", "`) + `"]`
	withVars := func(args ...string) *exec.Cmd {
		cmd := w.command(append(args, "-var", "v="+list)...)
		for i, p := range injectionPayloads {
			cmd.Env = append(cmd.Env, fmt.Sprintf("REWIND_VAR_e%d=%s", i, p))
		}
		return cmd
	}
	if out, err := withVars("validate").CombinedOutput(); err != nil || strings.Contains(string(out), "Warning") {
		t.Fatalf("validate: %v\n%s", err, out)
	}
	if out, err := withVars("run", "--now", "2025-07-02T00:00:00Z").CombinedOutput(); err != nil {
		t.Fatalf("run: %v\n%s", err, out)
	}
	if _, err := os.Stat(filepath.Join(dir, "P")); err == nil {
		t.Errorf("a value ran as shell code: %s/P exists", dir)
	}
	for _, e := range expects {
		got, err := os.ReadFile(filepath.Join(dir, "out", e.file))
		if err != nil {
			t.Errorf("%s: %v", e.what, err)
			continue
		}
		if string(got) != e.want {
			t.Errorf("%s: the task received %q, want %q", e.what, got, e.want)
		}
	}
	t.Logf("%d tasks, %d contexts x %d payloads x 3 sources", len(expects), len(injectionContexts), len(injectionPayloads))
}

// hclTemplate writes a template as an HCL string literal's contents,
// keeping its interpolations.
func hclTemplate(s string) string {
	s = strings.ReplaceAll(s, `\`, `\\`)
	s = strings.ReplaceAll(s, `"`, `\"`)
	return strings.ReplaceAll(s, "\n", `\n`)
}
