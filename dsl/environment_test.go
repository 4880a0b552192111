package dsl

import (
	"slices"
	"strings"
	"testing"
	"time"
)

const envPipeline = `
pool "p" {
  setup = "true"
}
pipeline "p" {
  schedule   = "@daily"
  start_date = "2025-07-01"
  requires "r" {
    command = "true"
  }
  skew {
    probe = "echo 1"
    pool  = "p"
  }
  task "t" {
    pool    = "p"
    command = "true"
  }
}
notify "n" {
  command = "cat"
}
`

// The environment block's patterns reach every rendered command.
func TestEnvironmentPass(t *testing.T) {
	ws := mustLoad(t, `
environment {
  pass = ["AWS_*", "SPARK_HOME"]
}
`+envPipeline, LoadOptions{})
	want := []string{"AWS_*", "SPARK_HOME"}
	if !slices.Equal(ws.Environment.Pass, want) {
		t.Fatalf("Environment.Pass = %q, want %q", ws.Environment.Pass, want)
	}
	p := ws.Pipeline("p")
	rv := RunVars{Pipeline: "p", LogicalDate: time.Date(2025, 7, 1, 0, 0, 0, 0, time.UTC), Kind: "manual"}
	task, err := p.Task("t").Render(rv, PoolVars{})
	if err != nil {
		t.Fatal(err)
	}
	probe, err := p.Skew.ProbeCommand(rv)
	if err != nil {
		t.Fatal(err)
	}
	req, err := p.Requires[0].Render(rv)
	if err != nil {
		t.Fatal(err)
	}
	setup, err := ws.Pools["p"].SetupCommand()
	if err != nil {
		t.Fatal(err)
	}
	notify, err := ws.Notifies[0].Command()
	if err != nil {
		t.Fatal(err)
	}
	for what, got := range map[string][]string{"task": task.Pass, "probe": probe.Pass, "requires": req.Pass, "setup": setup.Pass, "notify": notify.Pass} {
		if !slices.Equal(got, want) {
			t.Errorf("%s: Pass = %q, want %q", what, got, want)
		}
	}

	// Without the block, nothing beyond the default set.
	ws = mustLoad(t, envPipeline, LoadOptions{})
	if len(ws.Environment.Pass) != 0 {
		t.Fatalf("Environment.Pass = %q without an environment block", ws.Environment.Pass)
	}
}

func TestEnvironmentErrors(t *testing.T) {
	for _, c := range []struct {
		src, want string
	}{
		{`environment {
  pass = ["AWS_*", "*"]
}`, `main.hcl:2,20-23: Invalid pass pattern`},
		{`environment {
  pass = ["A*B"]
}`, `main.hcl:2,11-16: Invalid pass pattern`},
		{`environment {
  pass = ["ok", "1X"]
}`, `main.hcl:2,17-21: Invalid pass pattern`},
		{`environment {
  pass = ["A-B"]
}`, `main.hcl:2,11-16: Invalid pass pattern`},
		{`environment {
  pass = [""]
}`, `main.hcl:2,11-13: Invalid pass pattern`},
		{`environment {
  pass = "AWS_*"
}`, `main.hcl:2,10-17: `},
		{`environment {
  pass = ["A"]
}
environment {
  pass = ["B"]
}`, `main.hcl:4,1-12: Duplicate environment block`},
		{`environment {
  keep = ["A"]
}`, `main.hcl:2,3-7: Unsupported argument`},
	} {
		_, diags := load(t, map[string]string{"main.hcl": c.src + envPipeline}, LoadOptions{})
		if !diags.HasErrors() {
			t.Errorf("%s: no error", c.src)
			continue
		}
		var got []string
		for _, d := range diags {
			got = append(got, d.Subject.String()+": "+d.Summary)
		}
		found := false
		for _, g := range got {
			if strings.Contains(g, c.want) {
				found = true
			}
		}
		if !found {
			t.Errorf("%s:\n got %q\nwant one with %q", c.src, got, c.want)
		}
	}
}
