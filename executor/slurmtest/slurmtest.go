// Package slurmtest gives tests the Slurm cluster they run against: the
// one .ci/slurm.sh starts, named by $REWIND_TEST_SLURM (its default
// partition; the cluster also has a partition "large") and $SLURM_CONF.
// Without it, tests that need Slurm are skipped, except in CI ($CI set),
// where they fail: CI must not pass by skipping the Slurm executor.
package slurmtest

import (
	"os"
	"os/exec"
	"testing"
)

// EnvPartition names the default partition of the test cluster.
const EnvPartition = "REWIND_TEST_SLURM"

// Partition returns the test cluster's default partition, skipping the
// test when there is no cluster outside CI and failing it in CI or when
// the Slurm commands are missing.
func Partition(t testing.TB) string {
	t.Helper()
	p := os.Getenv(EnvPartition)
	if p == "" {
		if os.Getenv("CI") != "" {
			t.Fatalf("CI is set but %s is not: start Slurm with .ci/slurm.sh start", EnvPartition)
		}
		t.Skipf("%s is unset (eval \"$(.ci/slurm.sh start)\" to run the Slurm tests)", EnvPartition)
	}
	if _, err := exec.LookPath("sbatch"); err != nil {
		t.Fatalf("%s is set but: %v", EnvPartition, err)
	}
	return p
}
