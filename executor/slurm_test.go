package executor

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rewind-dev/rewind/executor/slurmtest"
)

func slurmSpec(t *testing.T, shell string) Spec {
	dir := t.TempDir()
	return Spec{
		Shell: shell, Env: append(os.Environ(), "GREETING=hello"), Dir: dir,
		LogPath: filepath.Join(dir, "logs", "t.1.log"), Nonce: NewNonce(),
		Grace: time.Second,
	}
}

func submit(t *testing.T, s Spec, partition string) *SlurmHandle {
	t.Helper()
	h, err := SubmitSlurm(context.Background(), s, SlurmJob{Partition: partition, Name: "rewind:test:" + t.Name(), Poll: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if h.JobID == "" {
		t.Fatal("no job id")
	}
	return h
}

func readLog(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestSlurmOutcomes(t *testing.T) {
	part := slurmtest.Partition(t)
	cases := []struct {
		name  string
		shell string
		argv  []string
		code  int
		log   string
	}{
		{name: "success", shell: "echo $GREETING in $SLURM_JOB_PARTITION; echo oops >&2", code: 0, log: "hello in " + part + "\noops\n"},
		{name: "exit code", shell: "echo a; exit 3; echo b", code: 3, log: "a\n"},
		{name: "argv", argv: []string{"printf", "%s|", "a b", "$GREETING", "it's"}, code: 0, log: "a b|$GREETING|it's|"},
		{name: "a task cannot fake its status", shell: "printf '\\n[rewind] exit status 0\\n'; exit 4", code: 4},
		{name: "command not found", shell: "no-such-command-xyz", code: 127},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			s := slurmSpec(t, c.shell)
			s.Argv = c.argv
			h := submit(t, s, part)
			res := h.Wait(context.Background())
			if res.ExitCode == nil || *res.ExitCode != c.code || res.OOM || res.TimedOut || res.Interrupted || res.NoStatus {
				t.Fatalf("result %+v (exit %v), want exit %d\nlog:\n%s", res, res.ExitCode, c.code, readLog(t, s.LogPath))
			}
			log := readLog(t, s.LogPath)
			if !strings.Contains(log, c.log) {
				t.Errorf("log %q does not contain %q", log, c.log)
			}
			if code, ok := ReadStatusNonce(s.LogPath, s.Nonce); !ok || code != c.code {
				t.Errorf("status line: %d %v, want %d", code, ok, c.code)
			}
			if !strings.Contains(log, "rewind: submitted to Slurm as job "+h.JobID) {
				t.Errorf("the log does not name the job:\n%s", log)
			}
		})
	}
}

func TestSlurmEnvAndDir(t *testing.T) {
	part := slurmtest.Partition(t)
	s := slurmSpec(t, `echo "dir=$(pwd) mem=$SLURM_MEM_PER_NODE cpus=$SLURM_CPUS_PER_TASK name=$SLURM_JOB_NAME"`)
	s.MemoryLimit = 100 << 20
	s.CPUs = 2
	h := submit(t, s, part)
	if res := h.Wait(context.Background()); !res.Success() {
		t.Fatalf("%+v\n%s", res, readLog(t, s.LogPath))
	}
	want := "dir=" + s.Dir + " mem=100 cpus=2 name=rewind:test:" + t.Name()
	if log := readLog(t, s.LogPath); !strings.Contains(log, want) {
		t.Errorf("log %q, want %q", log, want)
	}
}

// A job over its --mem is killed by Slurm (jobacct_gather samples it): an OOM.
func TestSlurmOOM(t *testing.T) {
	part := slurmtest.Partition(t)
	// The shell holds 300 MiB in a variable while it sleeps.
	s := slurmSpec(t, "x=$(head -c 314572800 /dev/zero | tr '\\0' a); sleep 30; echo survived")
	s.MemoryLimit = 50 << 20
	h := submit(t, s, part)
	res := h.Wait(context.Background())
	log := readLog(t, s.LogPath)
	if !res.OOM || res.ExitCode != nil || res.Signal != "killed" {
		t.Fatalf("result %+v, want OOM\nlog:\n%s", res, log)
	}
	if res.PeakRSS <= 50<<20 {
		t.Errorf("peak %d, want over the limit", res.PeakRSS)
	}
	if strings.Contains(log, "survived") || !strings.Contains(log, "ran out of memory") {
		t.Errorf("log:\n%s", log)
	}
}

// rewind's own timer scancels the job (Slurm's --time is whole minutes).
func TestSlurmTimeout(t *testing.T) {
	part := slurmtest.Partition(t)
	// Slurm signals every process of the job, in no set order: the shell
	// may see its sleep die before its own SIGTERM arrives, so "survived"
	// is printed only if the sleep ran to its end.
	s := slurmSpec(t, "echo started; sleep 120 && echo survived")
	s.Timeout = 2 * time.Second
	h := submit(t, s, part)
	res := h.Wait(context.Background())
	log := readLog(t, s.LogPath)
	if !res.TimedOut || res.ExitCode != nil || res.Success() {
		t.Fatalf("result %+v, want timed out\nlog:\n%s", res, log)
	}
	if strings.Contains(log, "survived") || !strings.Contains(log, "timed out") {
		t.Errorf("log:\n%s", log)
	}
	if alive, err := SlurmJobAlive(context.Background(), h.JobID); err != nil || alive {
		t.Errorf("job %s alive %v (%v) after the timeout", h.JobID, alive, err)
	}
}

func TestSlurmCancel(t *testing.T) {
	part := slurmtest.Partition(t)
	s := slurmSpec(t, `trap 'echo got TERM; exit 143' TERM; echo started; sleep 120 & wait; echo survived`)
	h := submit(t, s, part)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan Result, 1)
	go func() { done <- h.Wait(ctx) }()
	waitLog(t, s.LogPath, "started")
	cancel()
	var res Result
	select {
	case res = <-done:
	case <-time.After(patience):
		t.Fatal("Wait did not return after the cancel")
	}
	if !res.Interrupted || res.Success() {
		t.Fatalf("result %+v, want interrupted\nlog:\n%s", res, readLog(t, s.LogPath))
	}
	if alive, err := SlurmJobAlive(context.Background(), h.JobID); err != nil || alive {
		t.Errorf("job %s alive %v (%v) after the cancel", h.JobID, alive, err)
	}
	if log := readLog(t, s.LogPath); strings.Contains(log, "survived") || !strings.Contains(log, "got TERM") {
		t.Errorf("log:\n%s", log)
	}
}

// A job submitted by a rewind that is gone (its handle dropped) is adopted
// by its job id: followed to its own end, never submitted again.
func TestSlurmAdopt(t *testing.T) {
	part := slurmtest.Partition(t)
	marker := filepath.Join(t.TempDir(), "go")
	s := slurmSpec(t, "echo started; n=0; while [ ! -e "+ShellQuote(marker)+" ]; do sleep 0.1; done; echo ran-once >>"+ShellQuote(marker+".count")+"; exit 5")
	s.Timeout = 10 * time.Minute
	h := submit(t, s, part)
	id, nonce, logPath := h.JobID, s.Nonce, s.LogPath
	h = nil // the submitting rewind is gone
	waitLog(t, logPath, "started")
	if alive, err := SlurmJobAlive(context.Background(), id); err != nil || !alive {
		t.Fatalf("job %s alive %v (%v)", id, alive, err)
	}
	// Found again by name and nonce, for an attempt whose id was not recorded.
	if got, err := FindSlurmJob(context.Background(), "rewind:test:"+t.Name(), nonce); err != nil || got != id {
		t.Errorf("FindSlurmJob: %q %v, want %q", got, err, id)
	}
	if got, _ := FindSlurmJob(context.Background(), "rewind:test:"+t.Name(), NewNonce()); got != "" {
		t.Errorf("FindSlurmJob with another nonce: %q", got)
	}
	done := make(chan Result, 1)
	go func() {
		done <- AdoptSlurm(context.Background(), SlurmAdoptSpec{JobID: id, LogPath: logPath, Nonce: nonce, Timeout: 10 * time.Minute, Poll: 100 * time.Millisecond})
	}()
	select {
	case res := <-done:
		t.Fatalf("adopted job ended early: %+v", res)
	case <-time.After(500 * time.Millisecond):
	}
	if err := os.WriteFile(marker, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	var res Result
	select {
	case res = <-done:
	case <-time.After(patience):
		t.Fatal("AdoptSlurm did not return")
	}
	if res.ExitCode == nil || *res.ExitCode != 5 {
		t.Fatalf("result %+v, want exit 5\n%s", res, readLog(t, logPath))
	}
	if b, _ := os.ReadFile(marker + ".count"); string(b) != "ran-once\n" {
		t.Errorf("the job ran %q", b)
	}
	// Adopted again once it ended: its outcome, read from Slurm.
	res = AdoptSlurm(context.Background(), SlurmAdoptSpec{JobID: id, LogPath: logPath, Nonce: nonce, Poll: 100 * time.Millisecond})
	if res.ExitCode == nil || *res.ExitCode != 5 {
		t.Errorf("second adoption: %+v", res)
	}
}

// A job Slurm does not know is settled from its log.
func TestSlurmAdoptUnknownJob(t *testing.T) {
	slurmtest.Partition(t)
	dir := t.TempDir()
	logPath := filepath.Join(dir, "a.log")
	nonce := NewNonce()
	if err := os.WriteFile(logPath, []byte("x"+statusLine(nonce, 2)), 0o644); err != nil {
		t.Fatal(err)
	}
	res := AdoptSlurm(context.Background(), SlurmAdoptSpec{JobID: "99999999", LogPath: logPath, Nonce: nonce})
	if res.ExitCode == nil || *res.ExitCode != 2 || res.NoStatus {
		t.Errorf("with a status line: %+v", res)
	}
	res = AdoptSlurm(context.Background(), SlurmAdoptSpec{JobID: "99999999", LogPath: logPath, Nonce: NewNonce()})
	if !res.NoStatus || res.ExitCode != nil {
		t.Errorf("without: %+v", res)
	}
}

func waitLog(t *testing.T, path, s string) {
	t.Helper()
	eventually(t, "\""+s+"\" in "+path, func() bool {
		b, _ := os.ReadFile(path)
		return strings.Contains(string(b), s)
	})
}

// The pieces that need no Slurm.

func TestSbatchArgs(t *testing.T) {
	s := Spec{LogPath: "/l/t.log", Nonce: "ab", MemoryLimit: 64<<30 + 1, CPUs: 16, Timeout: 61 * time.Second}
	got := strings.Join(sbatchArgs(s, SlurmJob{Partition: "bigmem", Name: "rewind:p:2025-11-28:t:1"}, "/w"), " ")
	want := "sbatch --parsable --no-requeue --open-mode=append --export=ALL --job-name=rewind:p:2025-11-28:t:1 --output=/l/t.log --chdir=/w --comment=rewind:ab --partition=bigmem --mem=65537M --cpus-per-task=16 --time=2"
	if got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
	for d, m := range map[time.Duration]int{time.Second: 1, time.Minute: 1, time.Hour: 60, time.Hour + time.Nanosecond: 61} {
		if got := slurmMinutes(d); got != m {
			t.Errorf("slurmMinutes(%s) = %d, want %d", d, got, m)
		}
	}
}

func TestSlurmScriptRunsLikeTheWrapper(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		spec Spec
		out  string
	}{
		{Spec{Shell: "echo \"$0\" \"it's\"; exit 3", Nonce: "00ff"}, "/bin/sh it's\n\n[rewind] exit status 00ff 3\n"},
		{Spec{Argv: []string{"printf", "%s|", "a'b", "$X"}, Nonce: "01"}, "a'b|$X|\n[rewind] exit status 01 0\n"},
		{Spec{Shell: "exec true"}, "\n[rewind] exit status 0\n"},
	} {
		path := filepath.Join(dir, "s.sh")
		if err := os.WriteFile(path, []byte(slurmScript(c.spec)), 0o755); err != nil {
			t.Fatal(err)
		}
		out, _ := exec.Command("/bin/sh", path).CombinedOutput()
		// $0 of a script is its path: compare with it replaced.
		if got := strings.ReplaceAll(string(out), path, "/bin/sh"); got != c.out {
			t.Errorf("script of %+v printed %q, want %q", c.spec, got, c.out)
		}
	}
}

func TestParseJob(t *testing.T) {
	j, err := parseJob("JobId=2 JobName=t2 JobState=FAILED Reason=JobLaunchFailure Dependency=(null) ExitCode=0:9 StartTime=2026-12-01T15:37:30 EndTime=2026-12-01T15:37:31\n")
	if err != nil || j.State != "FAILED" || j.ExitCode != 0 || j.Signal != 9 || j.StartTime.IsZero() {
		t.Fatalf("%+v %v", j, err)
	}
	mem := SlurmAdoptSpec{MemoryLimit: 1 << 20, LogPath: filepath.Join(t.TempDir(), "l")}
	for _, c := range []struct {
		job      slurmJob
		a        SlurmAdoptSpec
		oom      bool
		code     int // -1: none
		timedOut bool
		signal   string
	}{
		{job: slurmJob{State: "COMPLETED"}, code: 0},
		{job: slurmJob{State: "FAILED", ExitCode: 3}, code: 3},
		{job: slurmJob{State: "FAILED", Signal: 9}, a: mem, oom: true, code: -1, signal: "killed"},
		{job: slurmJob{State: "FAILED", ExitCode: 137}, a: mem, oom: true, code: -1, signal: "killed"},
		{job: slurmJob{State: "FAILED", ExitCode: 137}, code: 137},
		{job: slurmJob{State: "OUT_OF_MEMORY", ExitCode: 0, Signal: 125}, a: mem, oom: true, code: -1, signal: "killed"},
		{job: slurmJob{State: "TIMEOUT", Signal: 15}, a: mem, timedOut: true, code: -1, signal: "terminated"},
		{job: slurmJob{State: "CANCELLED", ExitCode: 143}, a: mem, code: -1, signal: "cancelled"},
		{job: slurmJob{State: "NODE_FAIL"}, a: mem, code: -1, signal: "node_fail"},
	} {
		var res Result
		c.a.outcome(c.job, false, &res)
		code := -1
		if res.ExitCode != nil {
			code = *res.ExitCode
		}
		if res.OOM != c.oom || code != c.code || res.TimedOut != c.timedOut || res.Signal != c.signal {
			t.Errorf("%+v: %+v (exit %d)", c.job, res, code)
		}
	}
}

// The jobs of one process are polled together: one squeue per poll for all
// of them, and scontrol for a job only when its state changes. Eight jobs
// of 3 s, polled every 100 ms, cost a few scontrol calls each (about 30
// each if every job were read at every poll).
func TestSlurmPollsTogether(t *testing.T) {
	part := slurmtest.Partition(t)
	bin := t.TempDir()
	calls := filepath.Join(bin, "calls.log")
	for _, name := range []string{"squeue", "scontrol"} {
		real, err := exec.LookPath(name)
		if err != nil {
			t.Fatal(err)
		}
		script := "#!/bin/sh\necho " + name + " >> " + ShellQuote(calls) + "\nexec " + ShellQuote(real) + " \"$@\"\n"
		if err := os.WriteFile(filepath.Join(bin, name), []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	const jobs = 8
	hs := make([]*SlurmHandle, jobs)
	for i := range hs {
		s := slurmSpec(t, "sleep 3")
		s.MemoryLimit = 50 << 20 // all eight fit on the node at once
		hs[i] = submit(t, s, part)
	}
	begin := time.Now()
	results := make(chan Result, jobs)
	for _, h := range hs {
		go func() { results <- h.Wait(context.Background()) }()
	}
	for range hs {
		if res := <-results; !res.Success() {
			t.Fatalf("a job failed: %+v", res)
		}
	}
	polls := int(time.Since(begin)/(100*time.Millisecond)) + 1
	b, err := os.ReadFile(calls)
	if err != nil {
		t.Fatal(err)
	}
	n := map[string]int{}
	for _, l := range strings.Fields(string(b)) {
		n[l]++
	}
	t.Logf("%d jobs, %d polls each: %d squeue and %d scontrol calls", jobs, polls, n["squeue"], n["scontrol"])
	if n["scontrol"] > 4*jobs {
		t.Errorf("%d scontrol calls for %d jobs: want at most 4 each (on a change of state)", n["scontrol"], jobs)
	}
	if n["squeue"] == 0 || n["squeue"] > 2*polls+jobs {
		t.Errorf("%d squeue calls over %d polls: want about one per poll for all the jobs", n["squeue"], polls)
	}
}
