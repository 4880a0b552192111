package executor

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rewind-dev/rewind/executor/slurmtest"
)

// submitWave submits specs as one wave and checks that they went as one
// array, element i being specs[i].
func submitWave(t *testing.T, specs []Spec, partition, dir string) []*SlurmHandle {
	t.Helper()
	hs, errs := SubmitSlurmWave(context.Background(), specs, SlurmWave{Partition: partition, Name: "rewind:test:" + t.Name(), Dir: dir, Poll: 100 * time.Millisecond})
	array := ""
	for i, h := range hs {
		if errs[i] != nil {
			t.Fatalf("element %d: %v", i, errs[i])
		}
		base, idx, ok := splitElement(h.JobID)
		if !ok || idx != i || (array != "" && base != array) {
			t.Fatalf("element %d: job %q, want %s_%d", i, h.JobID, array, i)
		}
		array = base
	}
	return hs
}

func waitAll(t *testing.T, ctx context.Context, hs []*SlurmHandle) []Result {
	t.Helper()
	res := make([]Result, len(hs))
	done := make(chan int, len(hs))
	for i, h := range hs {
		go func() { res[i] = h.Wait(ctx); done <- i }()
	}
	for range hs {
		select {
		case <-done:
		case <-time.After(2 * patience):
			t.Fatal("an element's Wait did not return")
		}
	}
	return res
}

// Each element of an array is its own attempt: its directory, environment,
// log, exit status, memory kill and timeout.
func TestSlurmArrayOutcomes(t *testing.T) {
	part := slurmtest.Partition(t)
	shells := []string{
		"echo $GREETING from $SLURM_ARRAY_TASK_ID in $(pwd)",
		"echo a; exit 3; echo b",
		"",
		"x=$(head -c 314572800 /dev/zero | tr '\\0' a); sleep 30; echo survived",
		"echo started; sleep 120 && echo survived",
		"no-such-command-xyz",
	}
	specs := make([]Spec, len(shells))
	for i, sh := range shells {
		specs[i] = slurmSpec(t, sh)
		specs[i].MemoryLimit = 50 << 20
		// Long enough for Slurm to catch the memory hog on a loaded machine.
		specs[i].Timeout = 20 * time.Second
	}
	specs[2].Shell, specs[2].Argv = "", []string{"printf", "%s|", "a b", "$GREETING", "it's"}
	arrays := t.TempDir()
	hs := submitWave(t, specs, part, arrays)
	res := waitAll(t, context.Background(), hs)
	logs := make([]string, len(specs))
	for i := range specs {
		logs[i] = readLog(t, specs[i].LogPath)
	}
	exit := func(i, code int) {
		t.Helper()
		if res[i].ExitCode == nil || *res[i].ExitCode != code || res[i].TimedOut || res[i].OOM {
			t.Errorf("element %d: %+v, want exit %d\nlog:\n%s", i, res[i], code, logs[i])
		}
		if got, ok := ReadStatusNonce(specs[i].LogPath, specs[i].Nonce); !ok || got != code {
			t.Errorf("element %d: status line %d %v, want %d", i, got, ok, code)
		}
	}
	exit(0, 0)
	// After the line of its submission, the job's output.
	if want := "hello from 0 in " + specs[0].Dir + "\n"; !strings.Contains(logs[0], "\n"+want) {
		t.Errorf("element 0's log starts %q, want %q", logs[0], want)
	}
	exit(1, 3)
	if !strings.Contains(logs[1], "\na\n") || strings.Contains(logs[1], "\nb\n") {
		t.Errorf("element 1's log:\n%s", logs[1])
	}
	exit(2, 0)
	if !strings.Contains(logs[2], "\na b|$GREETING|it's|") {
		t.Errorf("element 2's log:\n%s", logs[2])
	}
	if !res[3].OOM || res[3].ExitCode != nil || res[3].PeakRSS <= 50<<20 || strings.Contains(logs[3], "survived") || !strings.Contains(logs[3], "ran out of memory") {
		t.Errorf("element 3: %+v, want OOM over 50MiB\nlog:\n%s", res[3], logs[3])
	}
	if !res[4].TimedOut || res[4].ExitCode != nil || strings.Contains(logs[4], "survived") || !strings.Contains(logs[4], "timed out") {
		t.Errorf("element 4: %+v, want timed out\nlog:\n%s", res[4], logs[4])
	}
	exit(5, 127)
	for i, h := range hs {
		if !strings.Contains(logs[i], "submitted to Slurm as job "+h.JobID+", element "+strconv.Itoa(i)+" of job array") {
			t.Errorf("element %d's log does not name its job %s:\n%s", i, h.JobID, logs[i])
		}
		if alive, err := SlurmJobAlive(context.Background(), h.JobID); err != nil || alive {
			t.Errorf("job %s alive %v (%v) after its end", h.JobID, alive, err)
		}
	}
	if ents, _ := os.ReadDir(arrays); len(ents) != 0 {
		t.Errorf("the array's files are left after its last element: %v", ents)
	}
}

// A cancelled wave scancels every element (scancel ARRAYID_i).
func TestSlurmArrayCancel(t *testing.T) {
	part := slurmtest.Partition(t)
	specs := make([]Spec, 3)
	for i := range specs {
		specs[i] = slurmSpec(t, `trap 'echo got TERM; exit 143' TERM; echo started; sleep 120 & wait; echo survived`)
		specs[i].MemoryLimit = 50 << 20
	}
	hs := submitWave(t, specs, part, t.TempDir())
	for _, s := range specs {
		waitLog(t, s.LogPath, "started")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	res := waitAll(t, ctx, hs)
	for i, h := range hs {
		log := readLog(t, specs[i].LogPath)
		if !res[i].Interrupted || res[i].Success() {
			t.Errorf("element %d: %+v, want interrupted\nlog:\n%s", i, res[i], log)
		}
		if alive, err := SlurmJobAlive(context.Background(), h.JobID); err != nil || alive {
			t.Errorf("job %s alive %v (%v) after the cancel", h.JobID, alive, err)
		}
		if strings.Contains(log, "survived") || !strings.Contains(log, "got TERM") {
			t.Errorf("element %d's log:\n%s", i, log)
		}
	}
}

// The elements of an array whose submitter is gone are found by their
// nonces (an attempt whose job id was not recorded) and adopted by
// ARRAYID_i, each with its own outcome, none run again.
func TestSlurmArrayAdopt(t *testing.T) {
	part := slurmtest.Partition(t)
	marker := filepath.Join(t.TempDir(), "go")
	specs := make([]Spec, 3)
	for i := range specs {
		specs[i] = slurmSpec(t, "echo started; while [ ! -e "+ShellQuote(marker)+" ]; do sleep 0.1; done; echo $SLURM_ARRAY_TASK_ID >>"+ShellQuote(marker+".count")+"; exit $((SLURM_ARRAY_TASK_ID + 4))")
		specs[i].MemoryLimit = 50 << 20
		specs[i].Timeout = 10 * time.Minute
	}
	hs := submitWave(t, specs, part, t.TempDir())
	ids := make([]string, len(hs))
	for i, h := range hs {
		ids[i] = h.JobID
	}
	hs = nil // the submitting rewind is gone
	for i, s := range specs {
		waitLog(t, s.LogPath, "started")
		if got, err := FindSlurmJob(context.Background(), "", s.Nonce); err != nil || got != ids[i] {
			t.Errorf("FindSlurmJob of element %d: %q %v, want %q", i, got, err, ids[i])
		}
	}
	if got, _ := FindSlurmJob(context.Background(), "", NewNonce()); got != "" {
		t.Errorf("FindSlurmJob with another nonce: %q", got)
	}
	done := make(chan int, len(specs))
	res := make([]Result, len(specs))
	for i, s := range specs {
		go func() {
			res[i] = AdoptSlurm(context.Background(), SlurmAdoptSpec{JobID: ids[i], LogPath: s.LogPath, Nonce: s.Nonce, Timeout: 10 * time.Minute, Poll: 100 * time.Millisecond})
			done <- i
		}()
	}
	select {
	case i := <-done:
		t.Fatalf("adopted element %d ended early: %+v", i, res[i])
	case <-time.After(500 * time.Millisecond):
	}
	if err := os.WriteFile(marker, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for range specs {
		select {
		case <-done:
		case <-time.After(patience):
			t.Fatal("AdoptSlurm did not return")
		}
	}
	for i := range specs {
		if res[i].ExitCode == nil || *res[i].ExitCode != i+4 {
			t.Errorf("element %d: %+v, want exit %d\n%s", i, res[i], i+4, readLog(t, specs[i].LogPath))
		}
	}
	b, _ := os.ReadFile(marker + ".count")
	if got := strings.Fields(string(b)); len(got) != len(specs) {
		t.Errorf("the elements ran %q, want each once", got)
	}
}

// The pieces that need no Slurm.

func TestSlurmParseSqueueLine(t *testing.T) {
	id, j, ok := parseSqueueLine("636_4|641|FAILED|768|2026-12-03T13:38:28|NonZeroExitCode")
	if !ok || id != "636_4" || j.ID != "641" || j.State != "FAILED" || j.ExitCode != 3 || j.Signal != 0 || j.Reason != "NonZeroExitCode" || j.StartTime.IsZero() {
		t.Errorf("%q %+v %v", id, j, ok)
	}
	if _, j, _ := parseSqueueLine("12|12|FAILED|9|N/A|OutOfMemory (a reason)"); j.Signal != 9 || j.ExitCode != 0 || j.Reason != "OutOfMemory (a reason)" || !j.StartTime.IsZero() {
		t.Errorf("signal 9: %+v", j)
	}
	if _, _, ok := parseSqueueLine(""); ok {
		t.Error("an empty line parsed")
	}
}

func TestSlurmElementScript(t *testing.T) {
	p := preparedSlurm{spec: Spec{Shell: "echo $A", Nonce: "ab"}, env: []string{"A=it's", "PATH=/bin"}, dir: "/w d"}
	got := elementScript(p)
	for _, want := range []string{"cd '/w d' || {", "export A='it'\\''s'\n", "export PATH='/bin'\n", "(eval 'echo $A')", "' 'ab ' \"$rc\""} {
		if !strings.Contains(got, want) {
			t.Errorf("script lacks %q:\n%s", want, got)
		}
	}
	if arrayable(preparedSlurm{env: []string{"A-B=1"}}) {
		t.Error("an environment name that is no shell name in an array")
	}
}
