package main

import (
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rewind-dev/rewind/executor/slurmtest"
)

// slurmJobs are the ids of the Slurm jobs (finished ones included: the
// test cluster keeps them for an hour) whose name starts with prefix.
func slurmJobs(t *testing.T, prefix string) []string {
	t.Helper()
	out, err := exec.Command("scontrol", "show", "job", "-o").CombinedOutput()
	if err != nil && !strings.Contains(string(out), "No jobs") {
		t.Fatalf("scontrol show job: %v %s", err, out)
	}
	var ids []string
	for _, l := range strings.Split(string(out), "\n") {
		if !strings.Contains(l, " JobName="+prefix) {
			continue
		}
		for _, f := range strings.Fields(l) {
			if id, ok := strings.CutPrefix(f, "JobId="); ok {
				ids = append(ids, id)
			}
		}
	}
	return ids
}

// kill -9 of `rewind scheduler` while 8 attempts run as Slurm jobs: the
// jobs keep running in Slurm, and the next scheduler adopts each by its job
// id (nothing is submitted again) and records the outcome each job really
// had: 7 successes and one exit 3.
func TestSchedulerKilledSlurmJobsAdopted(t *testing.T) {
	part := slurmtest.Partition(t)
	t.Parallel()
	name := fmt.Sprintf("adopt%d", time.Now().UnixNano()%1e9)
	w := newWorkspace(t, map[string]string{"main.hcl": fmt.Sprintf(`
pool "cluster" {
  executor  = "slurm"
  partition = %q
  memory    = "64MiB"
  cpus      = 1
  slots     = 8
}
pipeline %q {
  schedule        = "@daily"
  start_date      = "2025-07-01"
  end_date        = "2025-07-08"
  max_active_runs = 8
  task "t" {
    pool    = "cluster"
    timeout = "10m"
    command = <<-EOT
      echo "$REWIND_DS $SLURM_JOB_ID" >> started.log
      while [ ! -e release ]; do sleep 0.2; done
      echo "$REWIND_DS" >> ended.log
      if [ "$REWIND_DS" = 2025-07-03 ]; then exit 3; fi
    EOT
  }
}
`, part, name)})
	first := w.start("scheduler", "--poll", "100ms")
	waitFor(t, "8 Slurm jobs to run", func() bool { return len(w.lines("started.log")) == 8 })
	first.kill9()
	jobs := slurmJobs(t, "rewind:"+name+":")
	if len(jobs) != 8 {
		t.Fatalf("%d Slurm jobs after the kill, want 8: %v", len(jobs), jobs)
	}

	second := w.start("scheduler", "--poll", "100ms")
	waitFor(t, "the 8 jobs to be adopted", func() bool {
		return strings.Count(second.stderr.String(), "adopting the Slurm job of a previous rewind") == 8
	})
	w.touch("release")
	waitFor(t, "the 8 runs to finish", func() bool { return w.runsIn("success", "failed") == 8 })
	second.term()
	if after := slurmJobs(t, "rewind:"+name+":"); len(after) != 8 {
		t.Errorf("%d Slurm jobs in all, want the 8 adopted ones (none submitted again): %v", len(after), after)
	}
	jobOf := map[string]string{}
	for _, l := range w.lines("started.log") {
		ds, id, _ := strings.Cut(l, " ")
		jobOf[ds] = id
	}
	slurmRunsEndedOnce(t, w, []string{"2025-07-03"}, func(ds string) string { return jobOf[ds] })
	if n := len(w.lines("ended.log")); n != 8 {
		t.Errorf("%d jobs ran to their end, want 8", n)
	}
}

// SIGTERM stops `rewind scheduler` without cancelling its Slurm jobs: they
// run on (a restart or a handover does not lose hours of cluster work),
// and the next scheduler adopts them by job id and records their outcome.
func TestSchedulerStopLeavesSlurmJobs(t *testing.T) {
	part := slurmtest.Partition(t)
	t.Parallel()
	name := fmt.Sprintf("leave%d", time.Now().UnixNano()%1e9)
	w := newWorkspace(t, map[string]string{"main.hcl": fmt.Sprintf(`
pool "cluster" {
  executor  = "slurm"
  partition = %q
  memory    = "64MiB"
  slots     = 2
}
pipeline %q {
  schedule   = "@daily"
  start_date = "2025-07-01"
  end_date   = "2025-07-02"
  task "t" {
    pool    = "cluster"
    command = <<-EOT
      echo "$REWIND_DS" >> started.log
      while [ ! -e release ]; do sleep 0.2; done
      echo "$REWIND_DS" >> ended.log
    EOT
  }
}
`, part, name)})
	first := w.start("scheduler", "--poll", "100ms")
	waitFor(t, "2 Slurm jobs to run", func() bool { return len(w.lines("started.log")) == 2 })
	first.term()
	if n := strings.Count(first.stderr.String(), "leaving a Slurm job running"); n != 2 {
		t.Fatalf("%d jobs left running, want 2:\n%s", n, first.stderr.String())
	}
	for _, id := range slurmJobs(t, "rewind:"+name+":") {
		out, _ := exec.Command("scontrol", "show", "job", "-o", id).CombinedOutput()
		if !strings.Contains(string(out), "JobState=RUNNING") {
			t.Errorf("job %s is not running after the scheduler stopped: %s", id, out)
		}
	}
	second := w.start("scheduler", "--poll", "100ms")
	waitFor(t, "the 2 jobs to be adopted", func() bool {
		return strings.Count(second.stderr.String(), "adopting the Slurm job of a previous rewind") == 2
	})
	w.touch("release")
	waitFor(t, "the 2 runs to succeed", func() bool { return w.runsIn("success") == 2 })
	second.term()
	if jobs := slurmJobs(t, "rewind:"+name+":"); len(jobs) != 2 {
		t.Errorf("%d Slurm jobs, want the 2 first ones: %v", len(jobs), jobs)
	}
	for _, r := range w.runsJSON() {
		if a := r.Tasks[0].Attempts; len(a) != 1 || a[0].State != "success" {
			t.Errorf("%s: attempts %+v, want its one attempt, success", r.DS, a)
		}
	}
}

// kill -9 of `rewind scheduler` in the middle of a job array: half of its
// ten elements have ended, half still run. The next scheduler adopts every
// element by its array's job id and its index (the attempt's job id,
// "ARRAYID_i"), records the outcome each had (exit 0 or 3, none lost) and
// runs none of them again.
func TestSchedulerKilledMidSlurmArrayAdopted(t *testing.T) {
	part := slurmtest.Partition(t)
	t.Parallel()
	name := fmt.Sprintf("array%d", time.Now().UnixNano()%1e9)
	w := newWorkspace(t, map[string]string{"main.hcl": fmt.Sprintf(`
pool "cluster" {
  executor  = "slurm"
  partition = %q
  memory    = "64MiB"
  cpus      = 1
  slots     = 10
}
pipeline %q {
  schedule        = "@daily"
  start_date      = "2025-07-01"
  end_date        = "2025-07-10"
  max_active_runs = 10
  task "t" {
    pool    = "cluster"
    timeout = "10m"
    command = <<-EOT
      echo "$REWIND_DS $SLURM_ARRAY_JOB_ID $SLURM_ARRAY_TASK_ID" >> started.log
      case "$REWIND_DS" in
      2025-07-0[1-5]) ;;
      *) while [ ! -e release ]; do sleep 0.2; done ;;
      esac
      echo "$REWIND_DS" >> ended.log
      case "$REWIND_DS" in 2025-07-03|2025-07-08) exit 3 ;; esac
    EOT
  }
}
`, part, name)})
	first := w.start("scheduler", "--poll", "100ms")
	waitFor(t, "10 elements to start and 5 to end", func() bool {
		return len(w.lines("started.log")) == 10 && len(w.lines("ended.log")) == 5
	})
	first.kill9()
	arrays := map[string]bool{}
	for _, l := range w.lines("started.log") {
		f := strings.Fields(l)
		if len(f) != 3 || f[1] == "" {
			t.Fatalf("started.log line %q: not an element of an array", l)
		}
		arrays[f[1]] = true
	}
	if len(arrays) != 1 {
		t.Fatalf("the ten attempts ran in arrays %v, want one", arrays)
	}

	second := w.start("scheduler", "--poll", "100ms")
	waitFor(t, "the 5 running elements to be adopted", func() bool {
		return strings.Count(second.stderr.String(), "adopting the Slurm job of a previous rewind") >= 5
	})
	w.touch("release")
	waitFor(t, "the 10 runs to finish", func() bool { return w.runsIn("success", "failed") == 10 })
	second.term()
	if jobs := slurmJobs(t, "rewind:"+name+":"); len(jobs) != 10 {
		t.Errorf("%d Slurm jobs in all, want the 10 elements (none submitted again): %v", len(jobs), jobs)
	}
	element := map[string]string{} // ds -> ARRAYID_i, as the job saw itself
	for _, l := range w.lines("started.log") {
		f := strings.Fields(l)
		element[f[0]] = f[1] + "_" + f[2]
	}
	if len(element) != 10 || len(w.lines("started.log")) != 10 {
		t.Errorf("started: %v; want each of the 10 dates once", w.lines("started.log"))
	}
	slurmRunsEndedOnce(t, w, []string{"2025-07-03", "2025-07-08"}, func(ds string) string { return "submitted to Slurm as job " + element[ds] + "," })
	if n := len(w.lines("ended.log")); n != 10 {
		t.Errorf("%d elements ran to their end, want 10: %v", n, w.lines("ended.log"))
	}
}

// slurmRunsEndedOnce checks that each run of w ended with its one attempt:
// failed with exit 3 on the dates of failed, success with 0 elsewhere, the
// attempt's log naming its job as logNames(ds) says.
func slurmRunsEndedOnce(t *testing.T, w *workspace, failed []string, logNames func(ds string) string) {
	t.Helper()
	for _, r := range w.runsJSON() {
		ti := r.Tasks[0]
		want, code := "success", 0
		if slices.Contains(failed, r.DS) {
			want, code = "failed", 3
		}
		if r.State != want || len(ti.Attempts) != 1 {
			t.Errorf("%s: run %s with attempts %+v; want %s with its one attempt", r.DS, r.State, ti.Attempts, want)
			continue
		}
		a := ti.Attempts[0]
		if a.ExitCode == nil || *a.ExitCode != code {
			t.Errorf("%s: exit code %v, want %d (the job's own)", r.DS, a.ExitCode, code)
		}
		b, err := os.ReadFile(a.LogPath)
		if name := logNames(r.DS); err != nil || !strings.Contains(string(b), name) {
			t.Errorf("%s: the attempt's log does not name its Slurm job (%q) (%v):\n%s", r.DS, name, err, b)
		}
	}
}
