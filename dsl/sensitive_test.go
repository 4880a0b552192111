package dsl

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/hcl/v2"
)

const secretValue = "s3cr3t-T0KEN-value"

const sensitiveVars = `
variable "token" {
  sensitive = true
}

variable "who" {
  default = "world"
}

locals {
  auth = "Bearer ${var.token}"
}
`

func sensitiveOpts() LoadOptions {
	return LoadOptions{Vars: map[string]string{"token": secretValue}}
}

// diagText is every diagnostic as rewind prints it, snippets included.
func diagText(ws *Workspace, diags hcl.Diagnostics) string {
	var b strings.Builder
	WriteDiagnostics(&b, ws.Files, diags, false, 0)
	return b.String()
}

func rv() RunVars {
	d := time.Date(2025, 7, 1, 0, 0, 0, 0, time.UTC)
	return RunVars{ID: "r", LogicalDate: d, DataIntervalStart: d, DataIntervalEnd: d.AddDate(0, 0, 1), Kind: "manual", Dir: "/tmp/r"}
}

func TestSensitiveStringCommandUsesEnvironment(t *testing.T) {
	ws := mustLoad(t, sensitiveVars+`
pipeline "p" {
  schedule   = "@daily"
  start_date = "2025-07-01"
  task "t" {
    command = "deploy --token ${var.token} --auth ${local.auth} --who ${var.who} --len ${strlen(var.token)}"
    env     = { TOKEN = var.token }
  }
  task "argv" {
    command = ["sh", "-c", "echo $REWIND_SECRET_token"]
  }
}
pool "cluster" {
  setup = "true"
}
notify "team" {
  command = ["sh", "-c", "cat"]
}`, sensitiveOpts())
	cmd, err := ws.Pipeline("p").Task("t").Render(rv(), PoolVars{Name: "default"})
	if err != nil {
		t.Fatal(err)
	}
	want := `deploy --token "${REWIND_SECRET_token}" --auth "${REWIND_SECRET_1}" --who world --len "${REWIND_SECRET_2}"`
	if got := cmd.Argv[2]; got != want {
		t.Errorf("script\n got %s\nwant %s", got, want)
	}
	for _, a := range cmd.Argv {
		if strings.Contains(a, secretValue) {
			t.Errorf("argv holds the secret: %q", cmd.Argv)
		}
	}
	wantEnv := map[string]string{
		"REWIND_SECRET_token": secretValue,
		"REWIND_SECRET_1":     "Bearer " + secretValue,
		"REWIND_SECRET_2":     "18",
		"TOKEN":               secretValue,
	}
	for k, v := range wantEnv {
		if cmd.Env[k] != v {
			t.Errorf("env %s = %q, want %q", k, cmd.Env[k], v)
		}
	}
	// A list command gets the secret's environment variable too.
	cmd, err = ws.Pipeline("p").Task("argv").Render(rv(), PoolVars{Name: "default"})
	if err != nil {
		t.Fatal(err)
	}
	if cmd.Env["REWIND_SECRET_token"] != secretValue {
		t.Errorf("argv task env %q", cmd.Env)
	}
	// So do pool setups and notify commands.
	setup, err := ws.Pools["cluster"].SetupCommand()
	if err != nil || setup.Env["REWIND_SECRET_token"] != secretValue {
		t.Errorf("pool setup: %v %v", setup, err)
	}
	notify, err := ws.Notifies[0].Command()
	if err != nil || notify.Env["REWIND_SECRET_token"] != secretValue {
		t.Errorf("notify command: %v %v", notify, err)
	}
}

func TestSensitiveArgvRefused(t *testing.T) {
	ws, diags := load(t, map[string]string{"main.hcl": sensitiveVars + `
pipeline "p" {
  schedule   = "@daily"
  start_date = "2025-07-01"
  task "t" {
    command = ["deploy", "--token", var.token]
  }
  task "derived" {
    command = ["curl", "-H", local.auth, "https://example.com"]
  }
}`}, sensitiveOpts())
	if !diags.HasErrors() {
		t.Fatal("a sensitive value in an argv command loaded")
	}
	text := diagText(ws, diags)
	for _, want := range []string{
		"main.hcl:18,37-46: Sensitive value in an argv command",
		"Element 2 of the command is derived from var.token, which is sensitive",
		"main.hcl:21,30-40: Sensitive value in an argv command",
		"Element 2 of the command is derived from local.auth, which is sensitive",
		"process list (ps)",
		`Use the string form, command = "... ${var.token}"`,
		"$REWIND_SECRET_token",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("diagnostics lack %q:\n%s", want, text)
		}
	}
	if strings.Contains(text, secretValue) {
		t.Errorf("diagnostics show the secret:\n%s", text)
	}
}

func TestSensitiveDerivedValuesRedacted(t *testing.T) {
	cases := []struct {
		name, body string
		want       []string
	}{
		{"description", `description = "pipeline ${var.token}"`, []string{"main.hcl:17,17-40: Sensitive value not allowed here", "derived from var.token, which is sensitive"}},
		{"tags from a local", `tags = [local.auth]`, []string{"main.hcl:17,10-22: Sensitive value not allowed here", "derived from local.auth, which is sensitive", "read $REWIND_SECRET_token"}},
		{"for_each", `for_each = toset([var.token])`, []string{"Sensitive value not allowed here"}},
		// tonumber quotes its argument in its error: redacted.
		{"function error", `max_active_runs = tonumber(var.token)`, []string{"cannot convert " + `"` + SensitiveText + `"` + " to number"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ws, diags := load(t, map[string]string{"main.hcl": sensitiveVars + `
pipeline "p" {
  schedule   = "@daily"
  start_date = "2025-07-01"
  ` + c.body + `
  task "t" {
    command = "true"
  }
}`}, sensitiveOpts())
			text := diagText(ws, diags)
			if !diags.HasErrors() {
				t.Fatalf("loaded: %s", text)
			}
			for _, w := range c.want {
				if !strings.Contains(text, w) {
					t.Errorf("diagnostics lack %q:\n%s", w, text)
				}
			}
			if strings.Contains(text, secretValue) {
				t.Errorf("diagnostics show the secret:\n%s", text)
			}
		})
	}
}

func TestSensitiveCommandNotATemplate(t *testing.T) {
	ws, diags := load(t, map[string]string{"main.hcl": sensitiveVars + `
pipeline "p" {
  schedule   = "@daily"
  start_date = "2025-07-01"
  task "t" {
    command = local.auth
  }
}`}, sensitiveOpts())
	text := diagText(ws, diags)
	if !strings.Contains(text, "main.hcl:18,15-25: Sensitive value in a command that is not a template") {
		t.Errorf("diagnostics:\n%s", text)
	}
}

func TestSensitiveInvalidValueRedacted(t *testing.T) {
	ws, diags := load(t, map[string]string{"main.hcl": `
variable "pin" {
  type      = number
  sensitive = true
}
pipeline "p" {
  schedule   = "@daily"
  start_date = "2025-07-01"
  task "t" { command = "true" }
}`}, LoadOptions{Env: []string{"REWIND_VAR_pin=not-a-number-" + secretValue}})
	text := diagText(ws, diags)
	if !strings.Contains(text, "The value (sensitive value) given by REWIND_VAR_pin is not a valid number.") || strings.Contains(text, secretValue) {
		t.Errorf("diagnostics:\n%s", text)
	}
}

func TestSensitiveRedact(t *testing.T) {
	ws := mustLoad(t, sensitiveVars+`
pipeline "p" {
  schedule   = "@daily"
  start_date = "2025-07-01"
  task "t" { command = "echo ${var.token}" }
}`, sensitiveOpts())
	if !ws.HasSecrets() {
		t.Fatal("no secrets")
	}
	if got := ws.Redact("curl -H 'Bearer " + secretValue + "' failed"); got != "curl -H '(sensitive value)' failed" {
		t.Errorf("Redact: %q", got)
	}
	base := errors.New("exit 1: " + secretValue)
	err := ws.RedactError(base)
	if strings.Contains(err.Error(), secretValue) || !errors.Is(err, base) {
		t.Errorf("RedactError: %v", err)
	}
}

func TestSensitiveHash(t *testing.T) {
	src := sensitiveVars + `
pipeline "p" {
  schedule   = "@daily"
  start_date = "2025-07-01"
  task "t" { command = "deploy ${var.token} ${local.auth} ${var.who}" }
}`
	hash := func(opts LoadOptions) string {
		return mustLoad(t, src, opts).Pipeline("p").Hash
	}
	a := hash(LoadOptions{Vars: map[string]string{"token": "one"}})
	b := hash(LoadOptions{Vars: map[string]string{"token": "two"}})
	c := hash(LoadOptions{Vars: map[string]string{"token": "one", "who": "else"}})
	if a != b {
		t.Error("rotating a sensitive value changed the pipeline's hash")
	}
	if a == c {
		t.Error("changing a variable that is not sensitive kept the pipeline's hash")
	}
	plain := mustLoad(t, strings.Replace(src, "sensitive = true", "sensitive = false", 1), LoadOptions{Vars: map[string]string{"token": "one"}}).Pipeline("p").Hash
	if plain == a {
		t.Error("making a variable sensitive kept the hash")
	}
}

func TestSensitiveWebhook(t *testing.T) {
	ws := mustLoad(t, `
variable "hook" {
  sensitive = true
}
notify "team" {
  webhook = var.hook
}
pipeline "p" {
  schedule   = "@daily"
  start_date = "2025-07-01"
  task "t" { command = "true" }
}`, LoadOptions{Vars: map[string]string{"hook": "https://hooks.example/services/" + secretValue}})
	if ws.Notifies[0].Webhook != "https://hooks.example/services/"+secretValue {
		t.Errorf("webhook %q", ws.Notifies[0].Webhook)
	}
	ws, diags := load(t, map[string]string{"main.hcl": `
variable "hook" {
  sensitive = true
}
notify "team" {
  webhook = var.hook
}`}, LoadOptions{Vars: map[string]string{"hook": "ftp://hooks.example/services/" + secretValue}})
	text := diagText(ws, diags)
	if !strings.Contains(text, `not a URL of scheme "ftp" (ftp://hooks.example/…(redacted))`) || strings.Contains(text, secretValue) {
		t.Errorf("diagnostics:\n%s", text)
	}
}

func TestRedactURL(t *testing.T) {
	for in, want := range map[string]string{
		"https://hooks.example/T0KEN":                "https://hooks.example/…(redacted)",
		"https://hooks.example:8443/a/b?token=T0KEN": "https://hooks.example:8443/…(redacted)",
		"https://user:T0KEN@hooks.example/":          "https://hooks.example/…(redacted)",
		"https://hooks.example/":                     "https://hooks.example/",
		"https://hooks.example":                      "https://hooks.example/",
		"http://127.0.0.1:8080/hook#T0KEN":           "http://127.0.0.1:8080/…(redacted)",
		"http://hooks.example/%zzT0KEN":              "http://hooks.example/…(redacted)",
		"hooks.example/T0KEN":                        "…(redacted)",
	} {
		if got := RedactURL(in); got != want {
			t.Errorf("RedactURL(%q) = %q, want %q", in, got, want)
		}
	}
	for _, s := range []string{"http://hooks.example/%zzT0KEN", "hooks.example/T0KEN", "ftp://hooks.example/T0KEN", "http:T0KEN"} {
		msg := checkWebhook(s)
		if msg == "" || strings.Contains(msg, "T0KEN") {
			t.Errorf("checkWebhook(%q) = %q", s, msg)
		}
	}
}

func TestWorkdirMustExist(t *testing.T) {
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "jobs"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "file"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	src := `pipeline "p" {
  schedule   = "@daily"
  start_date = "2025-07-01"
  task "ok" {
    command = "true"
    workdir = "jobs"
  }
  task "missing" {
    command = "true"
    workdir = "/nonexistent/x/y"
  }
  task "file" {
    command = "true"
    workdir = "file"
  }
  task "per_run" {
    command = "true"
    workdir = "out/${run.ds}"
  }
}`
	if err := os.WriteFile(filepath.Join(dir, "main.hcl"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	ws, diags := Load(dir, LoadOptions{})
	text := diagText(ws, diags)
	for _, want := range []string{
		"main.hcl:10,15-33: Missing workdir",
		"workdir /nonexistent/x/y does not exist",
		"main.hcl:14,15-21: Invalid workdir",
		"file is not a directory",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("diagnostics lack %q:\n%s", want, text)
		}
	}
	if n := strings.Count(text, "Error:"); n != 2 {
		t.Errorf("%d errors, want 2:\n%s", n, text)
	}
}
