package dsl

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// shellPayloads are values that would be code, or would be changed, if the
// shell parsed them.
var shellPayloads = []string{
	"x'; touch P; '", `"; touch P; "`, "$(touch P)", "`touch P`", "\n", `\`, "*", "",
	"a b", "if", "$HOME", "${HOME}", "'", `"`, "\\\n", "-n", "é ü", "x\nEOF\ntouch P\n",
}

// shellContexts are the quoting contexts of a string command, each a
// template around ${V} that writes what the shell made of the value to the
// file out, and what out must then hold for a value v.
var shellContexts = []struct {
	name     string
	template string
	want     func(v string) string
}{
	{"bare", `printf '%s' ${V} > out`, same},
	{"single", `printf '%s' '${V}' > out`, same},
	{"single_inside", `printf '%s' 'a ${V} b' > out`, around("a ", " b")},
	{"double", `printf '%s' "${V}" > out`, same},
	{"double_inside", `printf '%s' "a ${V} b" > out`, around("a ", " b")},
	{"command_subst", `v=$(printf '%s' ${V}; printf x); printf '%s' "$${v%x}" > out`, same},
	{"command_subst_double", `printf '%s' "$(printf '%s' "${V}"; printf x)" > out`, around("", "x")},
	{"backticks", "v=`printf '%s' ${V}; printf x`; printf '%s' \"$${v%x}\" > out", same},
	{"backticks_in_double", "printf '%s' \"`printf '%s' ${V}`x\" > out", func(v string) string { return strings.TrimRight(v, "\n") + "x" }}, // `...` drops trailing newlines
	{"single_in_backticks", "v=`printf '%s' '<${V}>'; printf x`; printf '%s' \"$${v%x}\" > out", around("<", ">")},
	{"heredoc", "cat > out <<EOF\n[${V}]\nEOF", func(v string) string { return "[" + v + "]\n" }},
	{"heredoc_dash", "cat > out <<-EOF\n\t[${V}]\n\tEOF", func(v string) string { return "[" + v + "]\n" }},
	{"case_pattern", `case "$P" in ${V}) echo match > out;; *) echo other > out;; esac`, func(string) string { return "match\n" }},
	{"case_literal", `case "zz" in ${V}) echo match > out;; *) echo other > out;; esac`, func(v string) string {
		if v == "zz" {
			return "match\n"
		}
		return "other\n"
	}},
	{"assignment", `x=${V}; printf '%s' "$x" > out`, same},
	{"redirect_target", `printf x > ${V} && mv -- "$P" out`, func(string) string { return "x" }},
	{"comment", "printf '%s' \"$P\" > out # ${V}\n", same},
	{"if_directive", `%{ if true }printf '%s' ${V} > out%{ endif }`, same},
}

func same(v string) string { return v }

func around(a, b string) func(string) string {
	return func(v string) string { return a + v + b }
}

// A value never becomes code and reaches the process byte for byte, in
// every quoting context, from -var, sensitive variables and for_each keys.
// Each case runs the rendered command under /bin/sh.
func TestShellContextsRunNoValue(t *testing.T) {
	for _, c := range shellContexts {
		for _, src := range []string{"var", "sensitive", "each"} {
			t.Run(c.name+"/"+src, func(t *testing.T) {
				for i, payload := range shellPayloads {
					if src == "each" && payload == "" || c.name == "redirect_target" && (payload == "" || strings.Contains(payload, "/")) {
						continue // for_each keys are never empty; a file name is never empty nor has a /
					}
					ref := map[string]string{"var": "var.v", "sensitive": "var.s", "each": "each.key"}[src]
					template := strings.ReplaceAll(c.template, "${V}", "${"+ref+"}")
					forEach := ""
					if src == "each" {
						forEach = "for_each = toset([var.v])"
					}
					files := map[string]string{"main.hcl": `
variable "v" {}
variable "s" { sensitive = true }
pipeline "p" {
  schedule   = "@daily"
  start_date = "2025-07-01"
  task "t" {
    ` + forEach + `
    command = "` + hclString(template) + `"
    env     = { P = var.v }
  }
}`}
					ws, diags := load(t, files, LoadOptions{Vars: map[string]string{"v": payload, "s": payload}})
					if diags.HasErrors() {
						t.Fatalf("payload %q: %s", payload, diags.Error())
					}
					tasks := ws.Pipeline("p").Tasks
					if len(tasks) != 1 {
						t.Fatalf("%d tasks", len(tasks))
					}
					cmd, err := tasks[0].Render(rv(), PoolVars{Name: "default"})
					if err != nil {
						t.Fatalf("payload %q: render: %v", payload, err)
					}
					if src == "sensitive" && len(payload) >= 3 && strings.Contains(cmd.Argv[2], payload) {
						t.Errorf("payload %q: the sensitive value is in argv: %q", payload, cmd.Argv[2])
					}
					dir := t.TempDir()
					run := exec.Command(cmd.Argv[0], cmd.Argv[1:]...)
					run.Dir = dir
					run.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + dir}
					for k, v := range cmd.Env {
						run.Env = append(run.Env, k+"="+v)
					}
					var stderr bytes.Buffer
					run.Stderr = &stderr
					if err := run.Run(); err != nil {
						t.Errorf("payload %d %q: %v\nscript: %s\n%s", i, payload, err, cmd.Argv[2], stderr.String())
						continue
					}
					if _, err := os.Stat(filepath.Join(dir, "P")); err == nil {
						t.Errorf("payload %q ran as code: P exists\nscript: %s", payload, cmd.Argv[2])
					}
					got, err := os.ReadFile(filepath.Join(dir, "out"))
					if err != nil {
						t.Errorf("payload %q: %v\nscript: %s", payload, err, cmd.Argv[2])
						continue
					}
					want := c.want(payload)
					if string(got) != want {
						t.Errorf("payload %q: the process received %q, want %q\nscript: %s", payload, got, want, cmd.Argv[2])
					}
				}
			})
		}
	}
}

// hclString writes s as the contents of an HCL string literal.
func hclString(s string) string {
	s = strings.ReplaceAll(s, `\`, `\\`)
	s = strings.ReplaceAll(s, `"`, `\"`)
	s = strings.ReplaceAll(s, "\n", `\n`)
	s = strings.ReplaceAll(s, "\t", `\t`)
	return s
}
