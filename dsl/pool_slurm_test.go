package dsl

import "testing"

func TestSlurmPool(t *testing.T) {
	ws := mustLoad(t, `
pool "large" {
  executor  = "slurm"
  partition = "bigmem"
  memory    = "64GiB"
  cpus      = 16
  slots     = 20
}
pool "anywhere" { executor = "slurm" }
pool "here"     { executor = "local" }
pool "plain"    {}
`, LoadOptions{})
	l := ws.Pools["large"]
	if !l.Slurm() || l.Executor != ExecutorSlurm || l.Partition != "bigmem" || l.Memory != 64<<30 || l.CPUs != 16 || l.Slots != 20 {
		t.Errorf("large = %+v", l)
	}
	if a := ws.Pools["anywhere"]; !a.Slurm() || a.Partition != "" {
		t.Errorf("anywhere = %+v", a)
	}
	for _, name := range []string{"here", "plain", DefaultPoolName} {
		if p := ws.Pools[name]; p.Slurm() || p.Executor != ExecutorLocal {
			t.Errorf("%s: executor %q", name, p.Executor)
		}
	}
}

func TestSlurmPoolDiagnostics(t *testing.T) {
	cases := []struct {
		name string
		src  string
		want []string
	}{
		{"unknown executor", `pool "p" {
  executor = "kubernetes"
}`, []string{"main.hcl:2,14-26: Invalid executor"}},
		{"executor not a string", `pool "p" {
  executor = 3
}`, nil},
		{"partition without slurm", `pool "p" {
  partition = "bigmem"
}`, []string{"main.hcl:2,3-12: Partition without Slurm"}},
		{"partition on a local pool", `pool "p" {
  executor  = "local"
  partition = "bigmem"
}`, []string{"main.hcl:3,3-12: Partition without Slurm"}},
		{"empty partition", `pool "p" {
  executor  = "slurm"
  partition = ""
}`, []string{"main.hcl:3,15-17: Invalid partition"}},
		{"two partitions", `pool "p" {
  executor  = "slurm"
  partition = "a,b"
}`, []string{"main.hcl:3,15-20: Invalid partition"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.want == nil {
				// A number converts to a string: "3" is not an executor.
				c.want = []string{"main.hcl:2,14-15: Invalid executor"}
			}
			expectDiags(t, c.src, c.want...)
		})
	}
}
