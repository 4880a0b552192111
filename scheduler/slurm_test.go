package scheduler_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rewind-dev/rewind/executor/slurmtest"
	"github.com/rewind-dev/rewind/scheduler"
	"github.com/rewind-dev/rewind/store"
)

// Attempts in a Slurm pool run as Slurm jobs in the pool's partition, with
// their job ids recorded; one killed by Slurm for memory in a small pool is
// recorded oom and retried in its escalation pool (another partition),
// where it succeeds without using a retry.
func TestSlurmPoolRunsAndEscalates(t *testing.T) {
	part := slurmtest.Partition(t)
	e := newEnv(t, fmt.Sprintf(`
pool "small" {
  executor        = "slurm"
  partition       = %q
  memory          = "100MiB"
  slots           = 4
  oom_escalate_to = "large"
}
pool "large" {
  executor  = "slurm"
  partition = "large"
  memory    = "1GiB"
  cpus      = 1
}
pipeline "p" {
  schedule   = "@daily"
  start_date = "2025-11-27"
  end_date   = "2025-11-28"
  task "work" {
    pool    = "small"
    timeout = "5m"
    command = <<-EOT
      echo "$REWIND_DS $REWIND_POOL $SLURM_JOB_PARTITION $SLURM_JOB_ID $SLURM_JOB_NAME" >> jobs.log
      if [ "$REWIND_DS" = 2025-11-28 ] && [ "$REWIND_POOL" = small ]; then
        x=$(head -c 314572800 /dev/zero | tr '\0' a); sleep 60; echo survived >> jobs.log
      fi
    EOT
  }
}
`, part))
	sum := e.run(scheduler.Options{Now: utc("2025-12-01T00:00:00Z")})
	if sum.Failed() {
		t.Fatalf("the run failed: %+v\njobs.log:\n%s", sum, strings.Join(e.events("jobs.log"), "\n"))
	}
	jobs := e.events("jobs.log")
	for _, l := range jobs {
		if l == "survived" {
			t.Error("the attempt over its --mem was not killed")
		}
	}
	byDS := map[string][]store.Attempt{}
	for _, r := range e.runs("p") {
		byDS[r.LogicalDate.Format("2006-01-02")] = r.Tasks[0].Attempts
	}
	checkJob := func(a store.Attempt, partition string) {
		t.Helper()
		if a.JobID == "" || a.PID != 0 {
			t.Errorf("attempt %d in %s: job id %q, pid %d; want a job id and no pid", a.TryNumber, a.Pool, a.JobID, a.PID)
			return
		}
		// Slurm says where it ran.
		out, err := exec.Command("scontrol", "show", "job", "-o", a.JobID).CombinedOutput()
		if err != nil {
			t.Errorf("scontrol show job %s: %v %s", a.JobID, err, out)
			return
		}
		if !strings.Contains(string(out), " Partition="+partition+" ") {
			t.Errorf("job %s ran in the wrong partition (want %s): %s", a.JobID, partition, out)
		}
		if !strings.Contains(string(out), "JobName=rewind:p:") {
			t.Errorf("job %s is not named after its attempt: %s", a.JobID, out)
		}
	}
	if a := byDS["2025-11-27"]; len(a) != 1 || a[0].State != store.AttemptSuccess {
		t.Errorf("2025-11-27: %+v; want one success", a)
	} else {
		checkJob(a[0], part)
	}
	a := byDS["2025-11-28"]
	if len(a) != 2 {
		t.Fatalf("2025-11-28: %d attempts %+v; want oom in small, then success in large\njobs.log:\n%s", len(a), a, strings.Join(jobs, "\n"))
	}
	if a[0].State != store.AttemptOOM || a[0].Pool != "small" {
		t.Errorf("first attempt: %s in %s; want oom in small", a[0].State, a[0].Pool)
	}
	if a[1].State != store.AttemptSuccess || a[1].Pool != "large" || !strings.Contains(a[1].Reason, "oom escalation") {
		t.Errorf("second attempt: %s in %s (%q); want success in large by oom escalation", a[1].State, a[1].Pool, a[1].Reason)
	}
	checkJob(a[0], part)
	checkJob(a[1], "large")
	if a[0].JobID == a[1].JobID {
		t.Errorf("both attempts have job %s", a[0].JobID)
	}
	if b, err := os.ReadFile(a[0].LogPath); err != nil || !strings.Contains(string(b), "ran out of memory") {
		t.Errorf("log of the oom attempt (%v):\n%s", err, b)
	}
}

// 30 daily runs on a Slurm pool, Black Friday routed by the skew rule to
// the pool on the "large" partition: Slurm says (scontrol show job) that
// the hot date's job ran in "large" and every other date's in the default
// partition, and the job's own environment agrees.
func TestSlurmBlackFridayInLargePartition(t *testing.T) {
	part := slurmtest.Partition(t)
	e := newEnv(t, fmt.Sprintf(`
pool "default" {
  executor  = "slurm"
  partition = %q
  memory    = "64MiB"
  cpus      = 1
  slots     = 8
}
pool "large" {
  executor  = "slurm"
  partition = "large"
  memory    = "256MiB"
  cpus      = 2
  slots     = 2
}
pipeline "sales" {
  schedule        = "@daily"
  start_date      = "2025-11-10"
  end_date        = "2025-12-09"
  max_active_runs = 8
  skew {
    hot_when = run.month == 11 && run.weekday == "Friday" && run.day >= 23
    pool     = "large"
  }
  task "aggregate" {
    timeout = "5m"
    command = "echo \"$REWIND_DS $REWIND_POOL $SLURM_JOB_PARTITION $SLURM_CPUS_PER_TASK\" >> where.log"
  }
}
`, part))
	sum := e.run(scheduler.Options{Now: utc("2025-12-10T00:00:00Z")})
	if sum.Failed() || len(sum.Finished) != 30 {
		t.Fatalf("%d runs finished, failed %v: %+v", len(sum.Finished), sum.Failed(), sum)
	}
	env := map[string]string{}
	for _, l := range e.events("where.log") {
		ds, rest, _ := strings.Cut(l, " ")
		env[ds] = rest
	}
	runs := e.runs("sales")
	if len(runs) != 30 {
		t.Fatalf("%d runs, want 30", len(runs))
	}
	for _, r := range runs {
		ds := r.LogicalDate.Format("2006-01-02")
		pool, partition, cpus := "default", part, "1"
		if ds == "2025-11-28" {
			pool, partition, cpus = "large", "large", "2"
		}
		a := r.Tasks[0].Attempts
		if len(a) != 1 || a[0].State != store.AttemptSuccess || a[0].Pool != pool || a[0].JobID == "" {
			t.Errorf("%s: attempts %+v; want one success in %s with a job id", ds, a, pool)
			continue
		}
		out, err := exec.Command("scontrol", "show", "job", "-o", a[0].JobID).CombinedOutput()
		if err != nil {
			t.Errorf("%s: scontrol show job %s: %v %s", ds, a[0].JobID, err, out)
			continue
		}
		if !strings.Contains(string(out), " Partition="+partition+" ") {
			t.Errorf("%s: job %s did not run in %s: %s", ds, a[0].JobID, partition, out)
		}
		if want := pool + " " + partition + " " + cpus; env[ds] != want {
			t.Errorf("%s: the job's environment says %q, want %q", ds, env[ds], want)
		}
	}
}

// The attempts of one Slurm pool that a pass starts go as one job array:
// each element is its own attempt with its own job id ("ARRAYID_i"),
// exit status, timeout and OOM; the element Slurm killed for memory is
// escalated alone (a job of its own in the large pool), and the others
// are not run again.
func TestSlurmWaveIsOneArray(t *testing.T) {
	part := slurmtest.Partition(t)
	e := newEnv(t, fmt.Sprintf(`
pool "small" {
  executor        = "slurm"
  partition       = %q
  memory          = "100MiB"
  slots           = 6
  oom_escalate_to = "large"
}
pool "large" {
  executor  = "slurm"
  partition = "large"
  memory    = "1GiB"
  cpus      = 1
}
pipeline "wave" {
  schedule        = "@daily"
  start_date      = "2025-11-01"
  end_date        = "2025-11-06"
  max_active_runs = 6
  task "work" {
    pool    = "small"
    timeout = "20s"   # long enough for Slurm to catch the memory hog on a loaded machine
    command = <<-EOT
      echo "$REWIND_DS $REWIND_POOL $SLURM_JOB_ID $SLURM_ARRAY_JOB_ID $SLURM_ARRAY_TASK_ID" >> jobs.log
      case "$REWIND_DS" in
      2025-11-02|2025-11-04) exit 3 ;;
      2025-11-03) if [ "$REWIND_POOL" = small ]; then x=$(head -c 314572800 /dev/zero | tr '\0' a); sleep 60; fi ;;
      2025-11-05) sleep 120 || exit $? ;;  # scancel may signal the sleep an instant before its shell
      esac
      echo "$REWIND_DS $REWIND_POOL done" >> ended.log
    EOT
  }
}
`, part))
	e.run(scheduler.Options{Now: utc("2025-11-07T00:00:00Z")})
	byDS := map[string][]store.Attempt{}
	for _, r := range e.runs("wave") {
		byDS[r.LogicalDate.Format("2006-01-02")] = r.Tasks[0].Attempts
	}
	if len(byDS) != 6 {
		t.Fatalf("%d runs, want 6", len(byDS))
	}
	// Every first attempt is an element of one array, each at its own index.
	array, indices := "", map[string]bool{}
	for ds, as := range byDS {
		if len(as) == 0 {
			t.Fatalf("%s: no attempt", ds)
		}
		base, idx, ok := strings.Cut(as[0].JobID, "_")
		if !ok || as[0].PID != 0 {
			t.Errorf("%s: first attempt's job id %q (pid %d), want ARRAYID_INDEX", ds, as[0].JobID, as[0].PID)
			continue
		}
		if array == "" {
			array = base
		}
		if base != array || indices[idx] {
			t.Errorf("%s: job %s: want an index of its own in array %s (%v)", ds, as[0].JobID, array, indices)
		}
		indices[idx] = true
		// The log names its element and has the job's own output.
		if b, err := os.ReadFile(as[0].LogPath); err != nil || !strings.Contains(string(b), "element "+idx+" of job array "+array) {
			t.Errorf("%s: log of %s (%v):\n%s", ds, as[0].JobID, err, b)
		}
	}
	want := map[string]struct {
		attempts int
		state    store.AttemptState
		code     int
	}{
		"2025-11-01": {1, store.AttemptSuccess, 0},
		"2025-11-02": {1, store.AttemptFailed, 3},
		"2025-11-04": {1, store.AttemptFailed, 3},
		"2025-11-06": {1, store.AttemptSuccess, 0},
	}
	for ds, w := range want {
		as := byDS[ds]
		if len(as) != w.attempts || as[0].State != w.state || as[0].ExitCode == nil || *as[0].ExitCode != w.code {
			t.Errorf("%s: attempts %+v; want %d, %s with exit %d", ds, as, w.attempts, w.state, w.code)
		}
	}
	if as := byDS["2025-11-05"]; len(as) != 1 || as[0].State != store.AttemptFailed || as[0].Signal != "timeout" {
		t.Errorf("2025-11-05: attempts %+v; want one, failed by its timeout", as)
	}
	as := byDS["2025-11-03"]
	if len(as) != 2 || as[0].State != store.AttemptOOM || as[1].State != store.AttemptSuccess || as[1].Pool != "large" {
		t.Fatalf("2025-11-03: attempts %+v; want oom in small, then success in large", as)
	}
	if strings.Contains(as[1].JobID, "_") || as[1].JobID == "" {
		t.Errorf("the escalated attempt's job %q: want a job of its own, not an element", as[1].JobID)
	}
	if b, err := os.ReadFile(as[0].LogPath); err != nil || !strings.Contains(string(b), "ran out of memory") {
		t.Errorf("log of the oom element (%v):\n%s", err, b)
	}
	// Nothing but the escalated element ran twice: six elements, one more job.
	started := e.events("jobs.log")
	if len(started) != 7 {
		t.Errorf("%d starts, want 7 (six elements and the escalated one):\n%s", len(started), strings.Join(started, "\n"))
	}
	ended := map[string]int{}
	for _, l := range e.events("ended.log") {
		ended[l]++
	}
	for _, l := range []string{"2025-11-01 small done", "2025-11-03 large done", "2025-11-06 small done"} {
		if ended[l] != 1 {
			t.Errorf("%q ended %d times, want once (%v)", l, ended[l], ended)
		}
	}
	if len(ended) != 3 {
		t.Errorf("ended: %v; want the two successes and the escalated one", ended)
	}
	// The array's files are gone with its last element.
	if ents, err := os.ReadDir(filepath.Join(e.home, "slurm-arrays")); err == nil && len(ents) != 0 {
		t.Errorf("%d array directories left after the run", len(ents))
	}
}
