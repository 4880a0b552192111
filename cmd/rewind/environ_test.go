package main

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/rewind-dev/rewind/executor/procenv"
	"github.com/rewind-dev/rewind/executor/slurmtest"
)

// envWorkspace is a workspace whose every kind of process writes its
// environment (env) to a file of the workspace's directory: the task
// (task.env), the skew probe (probe.env), the requires command
// (requires.env), the pool's setup and teardown (setup.env, teardown.env)
// and the notify command (notify.env). The task also prints its sensitive
// variable, for rewind logs to redact.
const envWorkspace = `
environment {
  pass = ["AWS_REGION", "SPARK_*"]
}

variable "token" {
  sensitive = true
}

variable "other" {
  default = "unused"
}

pool "transient" {
  setup        = "env > setup.env"
  teardown     = "env > teardown.env"
  idle_timeout = "1s"
}

pipeline "envp" {
  schedule   = "@daily"
  start_date = "2025-07-01"
  end_date   = "2025-07-01"
  params     = { region = "eu" }

  requires "src" {
    command = "env > requires.env"
  }

  skew {
    probe = "env > probe.env; echo 1"
    pool  = "transient"
  }

  task "t" {
    pool    = "transient"
    env     = { FROM_ENV_BLOCK = "x" }
    command = "env > task.env; echo \"the token is $REWIND_SECRET_token\""
  }
}

notify "n" {
  command = "env > notify.env"
}
`

// rewindEnv is what rewind's own environment holds in these tests: its
// configuration and secrets that no process it starts may see (forbidden,
// by name and by value), and what passes through.
type rewindEnv struct {
	vars      []string // NAME=VALUE for rewind's environment
	forbidden []string // names a process must not get
	secrets   []string // values that must appear in no process's environment
}

func newRewindEnv(t *testing.T, state string) rewindEnv {
	var rnd [6]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		t.Fatal(err)
	}
	tag := hex.EncodeToString(rnd[:])
	e := rewindEnv{
		vars: []string{
			"PGPASSWORD=pg-password-" + tag,
			"REWIND_UI_TOKEN=ui-token-" + tag,
			"REWIND_HOST=envtest-host-" + tag,
			"REWIND_VAR_token=token-" + tag,
			"REWIND_VAR_other=other-var-" + tag,
			"AWS_SECRET_ACCESS_KEY=aws-secret-" + tag,
			"AWS_REGION=eu-west-1",
			"SPARK_HOME=/opt/spark",
			"SPARKLING=not-passed-" + tag,
			"LANG=C.UTF-8",
			"TZ=UTC",
		},
		forbidden: []string{
			"REWIND_STATE", "PGPASSWORD", "REWIND_UI_TOKEN", "REWIND_HOST",
			"REWIND_VAR_token", "REWIND_VAR_other", "AWS_SECRET_ACCESS_KEY",
			"SPARKLING", "REWIND_TEST_AS_MAIN",
		},
		secrets: []string{
			"pg-password-" + tag, "ui-token-" + tag, "envtest-host-" + tag,
			"other-var-" + tag, "aws-secret-" + tag, "not-passed-" + tag,
		},
	}
	// The state's DSN holds a password: for PostgreSQL, one the server
	// (trust authentication) never asks for.
	if u, err := url.Parse(state); err == nil && strings.HasPrefix(u.Scheme, "postgres") {
		u.User = url.UserPassword(u.User.Username(), "dsn-password-"+tag)
		e.vars = append(e.vars, "REWIND_STATE="+u.String())
		e.secrets = append(e.secrets, "dsn-password-"+tag)
	} else {
		e.vars = append(e.vars, "REWIND_STATE="+state)
	}
	return e
}

// sqliteState is the workspace's own SQLite state, named: a REWIND_STATE
// for the tests to set.
func sqliteState(t *testing.T, w *workspace) string {
	if err := os.Mkdir(filepath.Join(w.dir, ".rewind"), 0o700); err != nil {
		t.Fatal(err)
	}
	return "sqlite:" + filepath.Join(w.dir, ".rewind", "state.db")
}

// rewindWith runs rewind in w with env's variables added to its own
// environment.
func (w *workspace) rewindWith(env rewindEnv, args ...string) (int, string, string) {
	w.t.Helper()
	cmd := w.command(args...)
	cmd.Env = append(cmd.Env, env.vars...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode(), out.String(), errb.String()
	}
	if err != nil {
		w.t.Fatal(err)
	}
	return 0, out.String(), errb.String()
}

// shellMade are the variables /bin/sh sets by itself.
var shellMade = []string{"PWD", "OLDPWD", "SHLVL", "_"}

// checkEnv reads the environment a process wrote to path (env's output)
// and checks that it is exactly the documented one: the names of want
// (all present), the default pass-through variables that rewind's own
// environment has, the workspace's named ones (AWS_REGION, SPARK_HOME),
// and extra (names, or prefixes ending in *, that may be there: what
// Slurm adds); nothing forbidden, no secret value.
func checkEnv(t *testing.T, path string, env rewindEnv, want []string, extra ...string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("the process wrote no environment: %v", err)
	}
	got := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		// A value may span lines; a variable's line starts NAME=.
		k, v, ok := strings.Cut(line, "=")
		if ok && validEnvName(k) {
			got[k] = v
		}
	}
	for _, s := range env.secrets {
		if strings.Contains(string(b), s) {
			t.Errorf("%s: holds the secret value %q", filepath.Base(path), s)
		}
	}
	for _, k := range env.forbidden {
		if _, ok := got[k]; ok {
			t.Errorf("%s: %s passed to the process", filepath.Base(path), k)
		}
	}
	required := append([]string{"PATH", "LANG", "TZ", "AWS_REGION", "SPARK_HOME"}, want...)
	if os.Getenv("HOME") != "" {
		required = append(required, "HOME")
	}
	for _, k := range required {
		if _, ok := got[k]; !ok {
			t.Errorf("%s: %s missing", filepath.Base(path), k)
		}
	}
	allowed := append(append(slices.Clone(required), shellMade...), extra...)
	var unexpected []string
	for k := range got {
		ok := procenv.Passes(k, nil)
		for _, p := range allowed {
			ok = ok || procenv.Match(p, k)
		}
		if !ok {
			unexpected = append(unexpected, k)
		}
	}
	sort.Strings(unexpected)
	if len(unexpected) > 0 {
		t.Errorf("%s: variables beyond the documented set: %v", filepath.Base(path), unexpected)
	}
	if got["AWS_REGION"] != "eu-west-1" || got["SPARK_HOME"] != "/opt/spark" {
		t.Errorf("%s: the workspace's pass-through variables: AWS_REGION=%q SPARK_HOME=%q", filepath.Base(path), got["AWS_REGION"], got["SPARK_HOME"])
	}
}

func validEnvName(k string) bool {
	if k == "" {
		return false
	}
	for i, r := range k {
		if !(r == '_' || r >= 'A' && r <= 'Z' || r >= 'a' && r <= 'z' || i > 0 && r >= '0' && r <= '9') {
			return false
		}
	}
	return true
}

// The task-environment contract of an attempt (README, Task environment).
var attemptContract = []string{
	"REWIND_PIPELINE", "REWIND_TASK", "REWIND_RUN_ID", "REWIND_DS", "REWIND_DS_NODASH",
	"REWIND_LOGICAL_DATE", "REWIND_DATA_INTERVAL_START", "REWIND_DATA_INTERVAL_END",
	"REWIND_RUN_KIND", "REWIND_TRY_NUMBER", "REWIND_POOL", "REWIND_POOL_MEMORY",
	"REWIND_POOL_CPUS", "REWIND_RUN_DIR",
}

// Every process rewind starts gets only the documented environment: the
// contract, its command's own variables, the default pass-through set and
// what the workspace names; never rewind's configuration (REWIND_STATE with
// its password, PGPASSWORD, REWIND_UI_TOKEN, REWIND_HOST), a REWIND_VAR_*,
// or anything else of rewind's environment. Logs are 0600, the directories
// of logs and runs 0700, and rewind logs shows the task's sensitive value
// redacted.
func TestProcessEnvironment(t *testing.T) {
	onBackends(t, func(t *testing.T, b backend) {
		w := b.workspace(t, map[string]string{"main.hcl": envWorkspace})
		if w.state == "" {
			w.state = sqliteState(t, w)
		}
		env := newRewindEnv(t, w.state)
		code, out, errs := w.rewindWith(env, "backfill", "apply", "envp", "--start", "2025-07-01", "--end", "2025-07-01", "--quiet", "--now", "2025-08-01T00:00:00Z")
		if code != 0 {
			t.Fatalf("backfill apply: exit %d\n%s\n%s", code, out, errs)
		}
		secret := "REWIND_SECRET_token"
		t.Run("task", func(t *testing.T) {
			checkEnv(t, filepath.Join(w.dir, "task.env"), env, append(slices.Clone(attemptContract), "REWIND_PARAM_region", secret, "FROM_ENV_BLOCK"))
		})
		t.Run("probe", func(t *testing.T) {
			checkEnv(t, filepath.Join(w.dir, "probe.env"), env, attemptContract)
		})
		t.Run("requires", func(t *testing.T) {
			checkEnv(t, filepath.Join(w.dir, "requires.env"), env, []string{
				"REWIND_PIPELINE", "REWIND_DS", "REWIND_DS_NODASH", "REWIND_LOGICAL_DATE",
				"REWIND_DATA_INTERVAL_START", "REWIND_DATA_INTERVAL_END",
			})
		})
		t.Run("setup", func(t *testing.T) {
			checkEnv(t, filepath.Join(w.dir, "setup.env"), env, []string{"REWIND_POOL", "REWIND_POOL_MEMORY", "REWIND_POOL_CPUS", secret})
		})
		t.Run("teardown", func(t *testing.T) {
			checkEnv(t, filepath.Join(w.dir, "teardown.env"), env, []string{"REWIND_POOL", "REWIND_POOL_MEMORY", "REWIND_POOL_CPUS", secret})
		})
		t.Run("notify", func(t *testing.T) {
			checkEnv(t, filepath.Join(w.dir, "notify.env"), env, []string{"REWIND_REPORT", "REWIND_BACKFILL_ID", "REWIND_BACKFILL_STATE", "REWIND_PIPELINE", secret})
		})

		t.Run("private logs and run directories", func(t *testing.T) {
			home := filepath.Join(w.dir, ".rewind")
			n := 0
			for _, sub := range []string{"logs", "runs", "backfills"} {
				err := filepath.WalkDir(filepath.Join(home, sub), func(path string, d fs.DirEntry, err error) error {
					if err != nil {
						return err
					}
					fi, err := d.Info()
					if err != nil {
						return err
					}
					want := fs.FileMode(0o600)
					if d.IsDir() {
						want = 0o700
					}
					if fi.Mode().Perm() != want {
						t.Errorf("%s: mode %o, want %o", path, fi.Mode().Perm(), want)
					}
					n++
					return nil
				})
				if err != nil {
					t.Error(err)
				}
			}
			if n < 6 {
				t.Errorf("only %d files and directories under logs, runs and backfills", n)
			}
		})

		t.Run("logs redacted", func(t *testing.T) {
			code, out, errs := w.rewindWith(env, "logs", "envp", "2025-07-01", "t")
			if code != 0 {
				t.Fatalf("logs: exit %d\n%s\n%s", code, out, errs)
			}
			tokenValue := ""
			for _, kv := range env.vars {
				if v, ok := strings.CutPrefix(kv, "REWIND_VAR_token="); ok {
					tokenValue = v
				}
			}
			if strings.Contains(out, tokenValue) {
				t.Errorf("rewind logs printed the sensitive value:\n%s", out)
			}
			if !strings.Contains(out, "the token is (sensitive value)") {
				t.Errorf("rewind logs: want the task's line with its value redacted, got:\n%s", out)
			}
			// The log itself holds what the task printed.
			found := false
			_ = filepath.WalkDir(filepath.Join(w.dir, ".rewind", "logs"), func(path string, d fs.DirEntry, err error) error {
				if err == nil && !d.IsDir() {
					b, _ := os.ReadFile(path)
					found = found || strings.Contains(string(b), "the token is "+tokenValue)
				}
				return nil
			})
			if !found {
				t.Error("no log holds the task's line with the value: the redaction is not shown to work")
			}
		})
	})
}

// A Slurm job's environment, read from inside the job, is the attempt's:
// sbatch exports exactly what rewind built, to which Slurm adds its own
// variables.
func TestSlurmJobEnvironment(t *testing.T) {
	part := slurmtest.Partition(t)
	w := newWorkspace(t, map[string]string{"main.hcl": fmt.Sprintf(`
environment {
  pass = ["AWS_REGION", "SPARK_*"]
}

variable "token" {
  sensitive = true
}

variable "other" {
  default = "unused"
}

pool "cluster" {
  executor  = "slurm"
  partition = %q
  memory    = "64MiB"
  cpus      = 1
}

pipeline "slurmenv" {
  schedule   = "@daily"
  start_date = "2025-07-01"
  end_date   = "2025-07-01"

  task "t" {
    pool    = "cluster"
    env     = { FROM_ENV_BLOCK = "x" }
    command = "env > task.env"
  }
}
`, part)})
	w.state = sqliteState(t, w)
	env := newRewindEnv(t, w.state)
	// sbatch finds its cluster with SLURM_CONF, which passes to it (and so
	// to the job) with the Slurm client's other configuration.
	code, out, errs := w.rewindWith(env, "run", "--catchup", "--quiet", "--now", "2025-07-02T00:00:00Z")
	if code != 0 {
		t.Fatalf("run: exit %d\n%s\n%s", code, out, errs)
	}
	checkEnv(t, filepath.Join(w.dir, "task.env"), env,
		append(slices.Clone(attemptContract), "REWIND_SECRET_token", "FROM_ENV_BLOCK", "SLURM_JOB_ID"),
		// What Slurm sets in a batch job.
		"SLURM_*", "SLURMD_*", "ENVIRONMENT", "HOSTNAME", "TMPDIR")
}
