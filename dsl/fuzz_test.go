package dsl

import (
	"os"
	"path/filepath"
	"testing"
)

// FuzzLoad feeds arbitrary bytes to Load as a workspace's only file: it must
// never panic, and every error must point at the file.
func FuzzLoad(f *testing.F) {
	for _, path := range []string{"../examples/daily_revenue/pipeline.hcl", "../examples/events/pipeline.hcl"} {
		src, err := os.ReadFile(path)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(src)
	}
	f.Add([]byte(minimal))
	f.Add([]byte(`catalog "local" {
  uri = ""
}
catalog "prod" {
  type = "rest"
  uri  = "ftp://x"
}
catalog "prod" { type = "hive" }
pipeline "p" {
  schedule   = "@daily"
  start_date = "2025-07-01"
  task "a" {
    command = "true"
  }
  output "o" {
    catalog   = "nosuch"
    table     = "a.b.c"
    from      = "${run.dir}/${pool.name}[.csv"
    columns   = { ds = "date", ds = "long", x = 1, y = "float", (run.ds) = "int" }
    partition = "x"
    retention = "0d"
    validate {
      max_change = { y = -1, z = "a", ds = 0.1 }
    }
    validate {}
  }
  output "o" {
    table   = "a.b"
    from    = ""
    columns = tomap({})
  }
}
`))
	f.Add([]byte(`pool "slurm" {
  slots                  = 2
  reserved_for_scheduled = 2
  idle_timeout           = "0s"
  launcher               = ["srun", "--mem=${pool.memory}", run.ds]
  setup                  = "up ${pool.name}"
  teardown               = ["down", pool.cpus / 0]
  oom_escalate_to        = "slurm"
}
limit "oltp" {
  concurrency = 0
  rate        = "0/30s"
}
limit "oltp" {}
pipeline "p" {
  schedule   = "@daily"
  start_date = "2025-07-01"
  task "a" {
    command = "true"
    limits  = [limit.oltp, limit.nope, "x"]
    skew {
      hot_dates = ["2025-11-28"]
      pool      = "slurm"
    }
    skew {
      pool = "huge"
    }
  }
}`))
	f.Add([]byte(`pipeline "p" {
  for_each = { a = 1, b = 2 }
  schedule = "0 0 30 2 *"
  start_date = "2025-07-01"
  end_date = "2025-06-01"
  skew {
    hot_when = run.nope
    pool = "x"
  }
  task "a" {
    for_each = ["x", "x"]
    depends_on = [task.a["y"], task.b]
    command = [each.value, pool.memory, run.ds]
    env = { A = local.z }
    retries = -1
  }
}
locals {
  a = local.b
  b = local.a
}
variable "v" {
  type = list(number)
}`))
	f.Add([]byte(`pipeline "load" {
  for_each   = toset(["x", "y"])
  schedule   = "@daily"
  start_date = "2025-07-01"
  consumes   = [pipeline.load, pipeline.report["k"], "x"]
  requires "a" {
    path    = "data/${run.ds}/${pool.name}"
    command = ["test", run.nope]
  }
  requires "a" {}
  task "a" {
    command = "true"
  }
}
pipeline "report" {
  schedule   = "@daily"
  start_date = "2025-07-01"
  consumes   = [pipeline.load["x"], pipeline.nope]
  task "a" {
    command = pipeline.load
  }
}
notify "n" {
  webhook = "ftp://x"
  command = [run.ds]
}
notify "n" {}`))
	f.Fuzz(func(t *testing.T, src []byte) {
		dir := t.TempDir()
		name := filepath.Join(dir, "main.hcl")
		if err := os.WriteFile(name, src, 0o644); err != nil {
			t.Fatal(err)
		}
		ws, diags := Load(dir, LoadOptions{})
		if ws == nil || ws.Files[name] == nil {
			t.Fatalf("Load returned no workspace or no file")
		}
		if ws.Pools[DefaultPoolName] == nil {
			t.Fatalf("no default pool")
		}
		for _, d := range diags {
			if d.Subject == nil {
				t.Errorf("diagnostic without subject: %s: %s", d.Summary, d.Detail)
			} else if d.Subject.Filename != name {
				t.Errorf("diagnostic in %q, want %q: %s", d.Subject.Filename, name, d.Summary)
			}
		}
		if diags.HasErrors() {
			return
		}
		// Rendering a valid template may fail (it can divide by zero) but
		// must not panic.
		for _, pool := range ws.Pools {
			_, _ = pool.Launcher()
			_, _ = pool.SetupCommand()
			_, _ = pool.TeardownCommand()
		}
		for _, p := range ws.Pipelines {
			for _, task := range p.Tasks {
				_, _ = task.Render(RunVars{}, PoolVars{})
				if s := task.EffectiveSkew(p); s != nil {
					_, _ = s.HotWhen(RunVars{})
					_, _ = s.ProbeCommand(RunVars{})
					_ = s.IsHotDate("2025-11-28")
				}
			}
			if p.Skew != nil {
				_, _ = p.Skew.HotWhen(RunVars{})
				_, _ = p.Skew.ProbeCommand(RunVars{})
			}
			// Render runs nothing: the fuzzed command is rendered, not run.
			for _, r := range p.Requires {
				_ = r.Describe()
				_, _ = r.Render(RunVars{})
			}
			_ = ws.Consumers(p.Name)
			_ = p.DateEnv(RunVars{})
		}
		for _, n := range ws.Notifies {
			_, _ = n.Command()
		}
	})
}
