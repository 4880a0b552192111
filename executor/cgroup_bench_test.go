package executor

import "testing"

// BenchmarkCgroupLifecycle is the cost of an attempt's cgroup alone, with a
// memory limit and no process: made, read as at an attempt's end, removed.
func BenchmarkCgroupLifecycle(b *testing.B) {
	r, err := attemptCgroups()
	if err != nil {
		b.Skip(err)
	}
	for b.Loop() {
		c, _, err := r.newCgroup(cgroupName(NewNonce(), ""), 100<<20, 0)
		if err != nil {
			b.Fatal(err)
		}
		_ = c.empty()
		_, _ = c.peak(), c.oomKills()
		c.remove()
	}
}
