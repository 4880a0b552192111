package main

import (
	"bytes"
	crand "crypto/rand"
	"crypto/sha256"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	_ "github.com/mattn/go-sqlite3"
)

// Regression tests for "the store is the one source of truth": what
// rewind records must be what happened to the processes, whatever moment a
// signal, a crash or a full disk hits. They assert outcomes (rewind runs
// --json, the tasks' marker files, exit codes), never durations.

func init() {
	// The test binary stands in for a task that needs memory (see hog).
	if mib, err := strconv.Atoi(os.Getenv("REWIND_TEST_HOG_MIB")); err == nil {
		os.Exit(hog(mib))
	}
}

// hog is a task that takes memory gradually: it creates hog.started in its
// working directory, waits for hog.release, then takes mib MiB 10 MiB at a
// time (touching every page), creates hog.full, holds the memory for 15 s
// and exits 0 after creating hog.done. A memory watchdog kills it before.
func hog(mib int) int {
	if err := os.WriteFile("hog.started", nil, 0o644); err != nil {
		return 3
	}
	for deadline := time.Now().Add(liveness); ; time.Sleep(20 * time.Millisecond) {
		if _, err := os.Stat("hog.release"); err == nil {
			break
		}
		if time.Now().After(deadline) {
			return 3
		}
	}
	var held [][]byte
	for len(held)*10 < mib {
		b := make([]byte, 10<<20)
		for i := 0; i < len(b); i += 4096 {
			b[i] = 1
		}
		held = append(held, b)
		time.Sleep(20 * time.Millisecond)
	}
	_ = os.WriteFile("hog.full", nil, 0o644)
	time.Sleep(15 * time.Second)
	runtime.KeepAlive(held)
	_ = os.WriteFile("hog.done", nil, 0o644)
	return 0
}

// testSeed is $REWIND_TEST_SEED, or a new seed; the test logs it so that a
// failure can be replayed with the same moments.
func testSeed(t *testing.T) uint64 {
	t.Helper()
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("REWIND_TEST_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("REWIND_TEST_SEED=%q: %v", s, err)
		}
		seed = v
	}
	t.Logf("seed %d (REWIND_TEST_SEED=%d replays it)", seed, seed)
	return seed
}

// 400 hourly runs of two short tasks: one run per logical date
// 2025-07-01T00:00Z ... 2025-07-17T15:00Z.
const hourlyPipeline = `
pipeline "p" {
  schedule        = "@hourly"
  start_date      = "2025-07-01"
  end_date        = "2025-07-17T15:00:00Z"
  max_active_runs = 16
  task "a" {
    command = "echo \"start $REWIND_LOGICAL_DATE a\" >> events.log; h=$${REWIND_LOGICAL_DATE#*T}; h=$${h%%:*}; sleep 0.0$(( $${h#0} % 5 + 1 )); echo \"end $REWIND_LOGICAL_DATE a\" >> events.log"
  }
  task "b" {
    depends_on = [task.a]
    command    = "echo \"start $REWIND_LOGICAL_DATE b\" >> events.log; h=$${REWIND_LOGICAL_DATE#*T}; h=$${h%%:*}; sleep 0.0$(( ($${h#0} + 2) % 5 + 1 )); echo \"end $REWIND_LOGICAL_DATE b\" >> events.log"
  }
}
`

const hourlyRuns = 400

// SIGINT at 40 random moments of one catchup (before the state is open,
// while runs are materialized, while attempts start, run and end): every
// time rewind exits 130 (or finishes, exit 0, when the signal came after
// the last run), never 1, never hangs, never complains of a cancelled
// context; a final catchup then completes, and every task of the 400 runs
// ended exactly once; a task started twice only where an attempt of it is
// recorded interrupted.
func TestInterruptAt40RandomMoments(t *testing.T) {
	rng := rand.New(rand.NewPCG(testSeed(t), 0x5851f42d4c957f2d))
	w := newWorkspace(t, map[string]string{"main.hcl": hourlyPipeline})
	const now = "2025-08-01T00:00:00Z"
	var interrupted, finished, diedBySIGINT int
	for round := range 40 {
		delay := time.Duration(rng.IntN(801)) * time.Millisecond
		before := w.fingerprint()
		p := w.start("run", "--catchup", "--quiet", "--now", now)
		time.Sleep(delay)
		sent := p.signal(syscall.SIGINT)
		code := p.wait()
		errs := p.stderr.String()
		if strings.Contains(errs, "context canceled") {
			t.Errorf("round %d (SIGINT after %s): stderr says \"context canceled\":\n%s", round, delay, tail(errs, 4000))
		}
		switch {
		case code == exitInterrupt:
			interrupted++
		case code == 0:
			// It finished before the signal could stop it: only right if
			// every run had succeeded.
			finished++
			if n := successRuns(w.runsJSON()); n != hourlyRuns {
				t.Errorf("round %d (SIGINT after %s, sent %v): exit 0 with %d of %d runs succeeded", round, delay, sent, n, hourlyRuns)
			}
		case code == -1 && strings.Contains(describe(p.err), "interrupt"):
			// Killed by the SIGINT itself: the signal came before rewind
			// had installed its handler (or after it removed it), which a
			// shell reports as exit status 130 as well. Then it must have
			// died before it changed anything.
			diedBySIGINT++
			if after := w.fingerprint(); after != before {
				t.Errorf("round %d: SIGINT after %s killed rewind (no exit 130) after it had changed the state\nstderr:\n%s", round, delay, tail(errs, 4000))
			}
		default:
			t.Errorf("round %d: SIGINT after %s: %s; want exit 130\nstderr:\n%s", round, delay, describe(p.err), tail(errs, 4000))
		}
	}
	t.Logf("40 rounds: %d exited 130, %d finished before the signal (exit 0), %d died of the SIGINT before rewind handled it; %d events so far",
		interrupted, finished, diedBySIGINT, len(w.lines("events.log")))
	if interrupted == 0 {
		t.Errorf("no round exited 130: the signal never hit a running catchup")
	}

	code, _, errs := w.rewind("run", "--catchup", "--quiet", "--now", now)
	if code != 0 {
		dumpRuns(t, w)
		t.Fatalf("final catchup: exit %d: %s", code, errs)
	}
	runs := w.runsJSON()
	if len(runs) != hourlyRuns {
		t.Errorf("%d runs; want %d", len(runs), hourlyRuns)
	}
	if n := successRuns(runs); n != len(runs) {
		t.Errorf("%d of %d runs succeeded", n, len(runs))
	}
	c := map[string]int{}
	for _, l := range w.lines("events.log") {
		f := strings.Fields(l)
		if len(f) != 3 {
			t.Errorf("malformed event %q", l)
			continue
		}
		ld, err := time.Parse(time.RFC3339, f[1])
		if err != nil {
			t.Errorf("event %q: %v", l, err)
			continue
		}
		c[f[0]+" "+ld.UTC().Format(time.RFC3339)+" "+f[2]]++
	}
	byDate := map[string]runJSON{}
	for _, r := range runs {
		ld, err := time.Parse(time.RFC3339, r.LogicalDate)
		if err != nil {
			t.Fatalf("run %q: %v", r.LogicalDate, err)
		}
		byDate[ld.UTC().Format(time.RFC3339)] = r
	}
	start := time.Date(2025, 7, 1, 0, 0, 0, 0, time.UTC)
	bad := 0
	for h := range hourlyRuns {
		ld := start.Add(time.Duration(h) * time.Hour).Format(time.RFC3339)
		r, ok := byDate[ld]
		if !ok {
			t.Errorf("no run of %s", ld)
			continue
		}
		for _, task := range []string{"a", "b"} {
			ends, starts := c["end "+ld+" "+task], c["start "+ld+" "+task]
			var states, logs []string
			stopped := 0
			for _, ti := range r.Tasks {
				if ti.Task == task {
					for _, a := range ti.Attempts {
						states = append(states, a.State)
						if a.State == "interrupted" {
							stopped++
						}
						b, _ := os.ReadFile(a.LogPath)
						logs = append(logs, fmt.Sprintf("try %d %s (exit %s, signal %q) %s:\n%s", a.TryNumber, a.State, intp(a.ExitCode), a.Signal, a.LogPath, tail(string(b), 400)))
					}
				}
			}
			// An attempt whose command had written its last line but whose
			// process had not exited when the SIGTERM came is (rightly)
			// interrupted and runs again: its "end" may then repeat, once
			// per such attempt. An attempt that exited is never repeated.
			if ends < 1 || ends > 1+stopped || starts > 1+stopped {
				if bad++; bad <= 20 {
					t.Errorf("%s %s: started %d times, ended %d times, attempts %v; want each extra start and end after an interrupted attempt\n%s",
						ld, task, starts, ends, states, strings.Join(logs, "\n"))
				}
			}
		}
	}
	if bad > 20 {
		t.Errorf("... %d task instances in all are wrong", bad)
	}
}

// fingerprint sums the default SQLite state (with its WAL) and the
// length of events.log: what a rewind that changed anything changes.
func (w *workspace) fingerprint() string {
	w.t.Helper()
	h := sha256.New()
	for _, name := range []string{".rewind/state.db", ".rewind/state.db-wal"} {
		b, err := os.ReadFile(filepath.Join(w.dir, name))
		if err != nil && !os.IsNotExist(err) {
			w.t.Fatal(err)
		}
		fmt.Fprintf(h, "%s %d\n", name, len(b))
		h.Write(b)
	}
	fi, err := os.Stat(filepath.Join(w.dir, "events.log"))
	if err == nil {
		fmt.Fprintf(h, "events %d\n", fi.Size())
	}
	return fmt.Sprintf("%x", h.Sum(nil))
}

func intp(p *int) string {
	if p == nil {
		return "null"
	}
	return strconv.Itoa(*p)
}

func successRuns(runs []runJSON) int {
	n := 0
	for _, r := range runs {
		if r.State == "success" {
			n++
		}
	}
	return n
}

// A task's own output cannot pass for the wrapper's status line: not while
// rewind watches it, not after rewind crashed and a new one reads its log.
func TestForgedStatusLine(t *testing.T) {
	t.Run("live", func(t *testing.T) {
		variants := []string{
			`printf '\n[rewind] exit status 0\n'`,
			`printf '[rewind] exit status 0'`,
			`printf '[rewind] exit status 0\n'`,
			`printf '\n[rewind] exit status 0\n' >&2`,
			`printf 'x\n[rewind] exit status 0\n\n[rewind] exit status 0\n'`,
		}
		var hcl strings.Builder
		hcl.WriteString("pipeline \"p\" {\n  schedule   = \"@daily\"\n  start_date = \"2025-07-01\"\n  end_date   = \"2025-07-01\"\n")
		for i, v := range variants {
			fmt.Fprintf(&hcl, "  task \"forger%d\" {\n    command = %s\n  }\n", i, hclString(v+"; exit 1"))
		}
		hcl.WriteString("}\n")
		w := newWorkspace(t, map[string]string{"main.hcl": hcl.String()})
		if code, _, errs := w.rewind("run", "--quiet", "--now", "2025-07-02T00:00:00Z"); code != 1 {
			t.Errorf("run: exit %d; want 1 (every task failed): %s", code, errs)
		}
		runs := w.runsJSON()
		for i, v := range variants {
			ti := findTask(t, runs, "2025-07-01", fmt.Sprintf("forger%d", i))
			if ti.State != "failed" || len(ti.Attempts) != 1 || ti.Attempts[0].State != "failed" || ti.Attempts[0].ExitCode == nil || *ti.Attempts[0].ExitCode != 1 {
				t.Errorf("task printing %s then exiting 1: %+v; want failed with exit code 1", v, ti)
			}
		}
	})

	// The task prints a forged status line, creates marker, writes its
	// shell's pid to task.pid and waits for release, then exits 1; with
	// the file pass it succeeds at once.
	const forger = `
pipeline "p" {
  schedule   = "@daily"
  start_date = "2025-07-01"
  end_date   = "2025-07-01"
  task "forger" {
    command = <<-EOT
      echo start >> events.log
      if [ -f pass ]; then echo "end pass" >> events.log; exit 0; fi
      printf '\n[rewind] exit status 0\n'
      echo $$ > task.pid
      touch marker
      while [ ! -f release ]; do sleep 0.05; done
      echo "end fail" >> events.log
      exit 1
    EOT
  }
}
`
	const now = "2025-07-02T00:00:00Z"

	// kill -9 of rewind while the task runs; the task then ends by itself
	// (exit 1, after its forged line): the next rewind records it failed.
	t.Run("crash", func(t *testing.T) {
		w := newWorkspace(t, map[string]string{"main.hcl": forger})
		p := w.start("run", "--quiet", "--now", now)
		waitFor(t, "the task to start", func() bool { return w.exists("marker") && w.exists("task.pid") })
		pgid := w.attemptGroup("task.pid")
		p.kill9()
		w.touch("release")
		waitFor(t, "the task to end", func() bool { return !groupAlive(pgid) })
		code, _, errs := w.rewind("run", "--quiet", "--now", now)
		ti := findTask(t, w.runsJSON(), "2025-07-01", "forger")
		if len(ti.Attempts) != 1 || ti.Attempts[0].State != "failed" || ti.Attempts[0].ExitCode == nil || *ti.Attempts[0].ExitCode != 1 || ti.State != "failed" {
			dumpRuns(t, w)
			t.Errorf("task: %+v; want one attempt, failed with exit code 1 (its output forged a success)", ti)
		}
		if code != 1 {
			t.Errorf("run after the crash: exit %d; want 1 (the run failed): %s", code, errs)
		}
		if c := counts(w.lines("events.log")); c["start"] != 1 || c["end fail"] != 1 {
			t.Errorf("events %v; want the task to have run once", c)
		}
	})

	// kill -9 of rewind, then of the attempt's whole process group: the
	// wrapper never wrote a status, and the last line of the log is the
	// forged one. The attempt must not be success; the task runs again.
	t.Run("crash_and_group_killed", func(t *testing.T) {
		w := newWorkspace(t, map[string]string{"main.hcl": forger})
		p := w.start("run", "--quiet", "--now", now)
		waitFor(t, "the task to start", func() bool { return w.exists("marker") && w.exists("task.pid") })
		pgid := w.attemptGroup("task.pid")
		p.kill9()
		killGroup(t, pgid)
		w.touch("pass")
		code, _, errs := w.rewind("run", "--quiet", "--now", now)
		ti := findTask(t, w.runsJSON(), "2025-07-01", "forger")
		if len(ti.Attempts) < 2 || ti.Attempts[0].State == "success" || ti.Attempts[len(ti.Attempts)-1].State != "success" || ti.State != "success" {
			dumpRuns(t, w)
			t.Errorf("task: %+v; want the killed attempt recorded not success (lost), then a new attempt that succeeds", ti)
		} else if ti.Attempts[0].State != "lost" {
			t.Logf("the killed attempt is recorded %s (lost expected; anything but success is accepted)", ti.Attempts[0].State)
		}
		if code != 0 {
			t.Errorf("run after the crash: exit %d; want 0: %s", code, errs)
		}
		if c := counts(w.lines("events.log")); c["start"] != 2 || c["end pass"] != 1 || c["end fail"] != 0 {
			t.Errorf("events %v; want the task started twice and passed the second time", c)
		}
	})
}

// hclString quotes s as an HCL string literal (no interpolation).
func hclString(s string) string {
	q := strconv.Quote(s)
	q = strings.ReplaceAll(q, "${", "$${")
	return strings.ReplaceAll(q, "%{", "%%{")
}

// An attempt adopted by a new rewind after kill -9 keeps what the first
// rewind enforced: its timeout (from its start), its pool's memory limit,
// and an interrupt of the adopting rewind stops it.
func TestAdoptedAttemptKeepsTimeoutAndMemory(t *testing.T) {
	const now = "2025-07-02T00:00:00Z"

	t.Run("timeout", func(t *testing.T) {
		w := newWorkspace(t, map[string]string{"main.hcl": `
pipeline "p" {
  schedule   = "@daily"
  start_date = "2025-07-01"
  end_date   = "2025-07-01"
  task "slow" {
    timeout = "3s"
    command = "echo start >> events.log; touch marker; sleep 8; echo end >> events.log"
  }
}
`})
		p := w.start("run", "--quiet", "--grace", "1s", "--now", now)
		waitFor(t, "the task to start", func() bool { return w.exists("marker") })
		p.kill9()
		code, _, errs := w.rewind("run", "--quiet", "--grace", "1s", "--now", now)
		ti := findTask(t, w.runsJSON(), "2025-07-01", "slow")
		if len(ti.Attempts) != 1 || ti.Attempts[0].State != "failed" || ti.Attempts[0].Signal != "timeout" {
			dumpRuns(t, w)
			t.Errorf("task: %+v; want its one attempt failed with signal timeout", ti)
		}
		if code != 1 {
			t.Errorf("run after the crash: exit %d; want 1: %s", code, errs)
		}
		if c := counts(w.lines("events.log")); c["start"] != 1 || c["end"] != 0 {
			t.Errorf("events %v; want started once and killed before its end", c)
		}
	})

	t.Run("memory", func(t *testing.T) {
		exe, err := os.Executable()
		if err != nil {
			t.Fatal(err)
		}
		w := newWorkspace(t, map[string]string{"main.hcl": fmt.Sprintf(`
pool "small" {
  slots  = 1
  memory = "100MiB"
}

pipeline "p" {
  schedule   = "@daily"
  start_date = "2025-07-01"
  end_date   = "2025-07-01"
  task "hog" {
    pool    = "small"
    command = [%s]
    env     = { REWIND_TEST_HOG_MIB = "500" }
  }
}
`, hclString(exe))})
		p := w.start("run", "--quiet", "--grace", "1s", "--now", now)
		waitFor(t, "the hog to start", func() bool { return w.exists("hog.started") })
		p.kill9()
		p2 := w.start("run", "--quiet", "--grace", "1s", "--now", now)
		w.touch("hog.release") // it now takes 500 MiB, under the new rewind
		code := p2.wait()
		ti := findTask(t, w.runsJSON(), "2025-07-01", "hog")
		if len(ti.Attempts) == 0 {
			t.Fatalf("task: %+v; want an attempt", ti)
		}
		a := ti.Attempts[0]
		t.Logf("adopted hog: %s, signal %q, exit %s, peak RSS %d MiB", a.State, a.Signal, intp(a.ExitCode), a.PeakRSS>>20)
		if a.State != "oom" && (a.State != "failed" || a.PeakRSS <= 100<<20) {
			dumpRuns(t, w)
			t.Errorf("attempt %+v; want oom (or failed with a peak RSS over the 100 MiB limit)", a)
		}
		if w.exists("hog.done") {
			t.Errorf("the hog held 500 MiB to its end in a pool of 100 MiB")
		}
		if code != 1 {
			t.Errorf("run after the crash: exit %d; want 1: %s", code, p2.stderr.String())
		}
	})

	t.Run("interrupt", func(t *testing.T) {
		w := newWorkspace(t, map[string]string{"main.hcl": `
pipeline "p" {
  schedule   = "@daily"
  start_date = "2025-07-01"
  end_date   = "2025-07-01"
  task "wait" {
    command = "echo start >> events.log; echo $$ > task.pid; touch marker; while [ ! -f release ]; do sleep 0.05; done; echo end >> events.log"
  }
}
`})
		p := w.start("run", "--quiet", "--now", now)
		waitFor(t, "the task to start", func() bool { return w.exists("marker") && w.exists("task.pid") })
		pgid := w.attemptGroup("task.pid")
		p.kill9()
		// Not --quiet: the first progress line says that the new rewind is
		// past recovery, so it has adopted the attempt.
		p2 := w.start("run", "--grace", "1s", "--now", now)
		adopted := false
		for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline) && !p2.exited(); time.Sleep(20 * time.Millisecond) {
			if strings.Contains(p2.stderr.String(), "progress:") {
				adopted = true
				break
			}
		}
		if !adopted {
			t.Logf("no progress line from the adopting rewind (exited %v): sending SIGTERM anyway\nstderr: %s", p2.exited(), p2.stderr.String())
		}
		p2.signal(syscall.SIGTERM)
		if code := p2.wait(); code != exitInterrupt {
			t.Errorf("adopting rewind after SIGTERM: %s; want exit 130\nstderr: %s", describe(p2.err), p2.stderr.String())
		}
		ti := findTask(t, w.runsJSON(), "2025-07-01", "wait")
		if len(ti.Attempts) != 1 || ti.Attempts[0].State != "interrupted" {
			dumpRuns(t, w)
			t.Errorf("task: %+v; want its one attempt interrupted", ti)
		}
		if groupAlive(pgid) {
			t.Errorf("the adopted attempt (process group %d) still runs after the adopting rewind exited: recorded %q, not stopped", pgid, ti.Attempts[0].State)
			killGroup(t, pgid)
		}
		w.touch("release")
		if code, _, errs := w.rewind("run", "--quiet", "--now", now); code != 0 {
			dumpRuns(t, w)
			t.Fatalf("run after the interrupt: exit %d; want 0: %s", code, errs)
		}
		ti = findTask(t, w.runsJSON(), "2025-07-01", "wait")
		if n := len(ti.Attempts); ti.State != "success" || n != 2 || ti.Attempts[n-1].State != "success" {
			t.Errorf("task: %+v; want the interrupted attempt, then a successful one", ti)
		}
		if c := counts(w.lines("events.log")); c["start"] != 2 || c["end"] != 1 {
			t.Errorf("events %v; want started twice (interrupted once), ended once", c)
		}
	})
}

// The state on a filesystem that fills up: rewind exits 4 (the state
// could not be written) instead of hanging or going on blind, and once
// there is space again the next catchup completes without re-running a
// task that had ended.
func TestFullDisk(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the full disk is a 3 MiB tmpfs mounted for the test")
	}
	dir := filepath.Join(t.TempDir(), "fs")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("mount -t tmpfs -o size=3m tmpfs %s failed (no CAP_SYS_ADMIN in this container?): %v: %s", dir, err, bytes.TrimSpace(out))
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", dir, err, out)
		}
	})
	// 20 daily runs; while the file flood exists (outside the tmpfs) each
	// task writes 512 KiB to its log, which lives beside the state.
	const dates = 20
	w := newWorkspace(t, map[string]string{"main.hcl": `
pipeline "p" {
  schedule        = "@daily"
  start_date      = "2025-07-01"
  end_date        = "2025-07-20"
  max_active_runs = 2
  task "t" {
    command = "echo \"start $REWIND_DS\" >> events.log; if [ -f flood ]; then head -c 524288 /dev/zero | tr '\\0' x || true; fi; echo done; echo \"end $REWIND_DS\" >> events.log"
  }
}
`})
	// Every command of the workspace gets the state on the tmpfs, in
	// REWIND_STATE and as --state.
	state := "sqlite:" + filepath.Join(dir, "state.db")
	w.state = state
	const now = "2025-08-01T00:00:00Z"
	// The filler leaves about 1 MiB for the state and the logs.
	filler := filepath.Join(dir, "filler")
	if err := os.WriteFile(filler, bytes.Repeat([]byte{'f'}, 2<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	w.touch("flood")
	p := w.start("run", "--catchup", "--quiet", "--state", state, "--now", now)
	code := p.wait()
	t.Logf("run on the full disk: %s, %d events\nstderr: %s", describe(p.err), len(w.lines("events.log")), tail(p.stderr.String(), 3000))
	if out, err := exec.Command("df", "-k", dir).CombinedOutput(); err == nil {
		t.Logf("df after it:\n%s", out)
	}
	if code != exitState {
		t.Errorf("run on the full disk: %s; want exit 4 (the state could not be written)", describe(p.err))
	}

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(w.dir, "flood")); err != nil {
		t.Fatal(err)
	}
	ended := counts(w.lines("events.log"))
	code, _, errs := w.rewind("run", "--catchup", "--quiet", "--state", state, "--now", now)
	if code != 0 {
		dumpRuns(t, w)
		if out, err := exec.Command("df", "-k", dir).CombinedOutput(); err == nil {
			t.Logf("df after it:\n%s", out)
		}
		t.Errorf("catchup once there is space again: exit %d; want 0: %s", code, errs)
	}
	c := counts(w.lines("events.log"))
	runs := w.runsJSON()
	// attempts describes the attempts of ds, with the end of each log.
	attempts := func(ds string) string {
		var b strings.Builder
		for _, r := range runs {
			if r.DS != ds {
				continue
			}
			for _, ti := range r.Tasks {
				for _, a := range ti.Attempts {
					log, _ := os.ReadFile(a.LogPath)
					fmt.Fprintf(&b, "\n  try %d: %s (exit %s, signal %q), log of %d bytes ending %q", a.TryNumber, a.State, intp(a.ExitCode), a.Signal, len(log), tail(strings.TrimLeft(string(log), "x"), 120))
				}
			}
		}
		return b.String()
	}
	for d := 1; d <= dates; d++ {
		ds := time.Date(2025, 7, d, 0, 0, 0, 0, time.UTC).Format("2006-01-02")
		switch {
		case ended["end "+ds] > 0 && c["end "+ds] != ended["end "+ds]:
			// Its status reached neither the state nor its log (the task
			// kept filling the disk); the outcome journal beside the
			// state must have kept it.
			t.Errorf("%s had ended on the full disk; it ran again once there was space (ended %d times, started %d times):%s", ds, c["end "+ds], c["start "+ds], attempts(ds))
		case c["end "+ds] != 1:
			t.Errorf("%s: ended %d times (started %d times); want once", ds, c["end "+ds], c["start "+ds])
		}
	}
	if code == 0 {
		if len(runs) != dates || successRuns(runs) != dates {
			t.Errorf("%d runs, %d succeeded; want %d successes", len(runs), successRuns(runs), dates)
		}
	}
}

// A state file that is empty or not a rewind state is refused (exit 4) and
// left as it is: never initialised over, never truncated.
func TestZeroByteAndForeignState(t *testing.T) {
	random := make([]byte, 64<<10)
	if _, err := crand.Read(random); err != nil {
		t.Fatal(err)
	}
	copy(random, "not a database: ") // never SQLite's magic header
	cases := []struct {
		name  string
		write func(t *testing.T, path string)
	}{
		{"zero_bytes", func(t *testing.T, path string) {
			if err := os.WriteFile(path, nil, 0o644); err != nil {
				t.Fatal(err)
			}
		}},
		{"random_bytes", func(t *testing.T, path string) {
			if err := os.WriteFile(path, random, 0o644); err != nil {
				t.Fatal(err)
			}
		}},
		{"foreign_sqlite", func(t *testing.T, path string) {
			db, err := sql.Open("sqlite3", path)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			if _, err := db.Exec(`CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT); INSERT INTO notes (body) VALUES ('someone else''s data')`); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorkspace(t, map[string]string{"main.hcl": markerPipeline})
			if err := os.Mkdir(filepath.Join(w.dir, ".rewind"), 0o755); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(w.dir, ".rewind", "state.db")
			tc.write(t, path)
			before, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			for _, args := range [][]string{
				{"run", "--catchup", "--quiet", "--now", "2025-08-01T00:00:00Z"},
				{"runs"},
				{"runs", "--json"},
			} {
				code, out, errs := w.rewind(args...)
				if code != exitState {
					t.Errorf("rewind %s: exit %d; want 4\nstdout: %s\nstderr: %s", strings.Join(args, " "), code, tail(out, 2000), errs)
				}
				after, err := os.ReadFile(path)
				if err != nil {
					t.Fatalf("after rewind %s: %v", strings.Join(args, " "), err)
				}
				if !bytes.Equal(before, after) {
					t.Fatalf("rewind %s changed the state file: %d bytes before, %d after", strings.Join(args, " "), len(before), len(after))
				}
			}
			if n := len(w.lines("events.log")); n != 0 {
				t.Errorf("%d task events on a refused state", n)
			}
			entries, _ := os.ReadDir(filepath.Join(w.dir, ".rewind"))
			var names []string
			for _, e := range entries {
				names = append(names, e.Name())
			}
			if !slices.Equal(names, []string{"state.db"}) {
				t.Logf(".rewind holds %v afterwards", names)
			}
		})
	}
}

// Reading the state while a catchup commits Iceberg partitions: every
// `rewind runs --json` and `rewind backfill list` answers, none says the
// database is locked.
func TestRunsWhileCommitting(t *testing.T) {
	w := newWorkspace(t, map[string]string{"main.hcl": `
pipeline "p" {
  schedule        = "@daily"
  start_date      = "2025-07-01"
  end_date        = "2025-08-29"
  max_active_runs = 8
  task "t" {
    command = ["sh", "-c", "printf 'ds,item,amount\\n%s,a,10\\n%s,b,20\\n' $REWIND_DS $REWIND_DS > $REWIND_RUN_DIR/sales.csv"]
  }
  output "sales" {
    table   = "analytics.sales"
    from    = "${run.dir}/sales.csv"
    columns = { ds = "date", item = "string", amount = "double" }
  }
}
`})
	const dates = 60
	p := w.start("run", "--catchup", "--quiet", "--now", "2025-09-01T00:00:00Z")
	// Reading commands never create a state: they start once the catchup
	// has created it.
	for !w.exists(".rewind/state.db") && !p.exited() {
		time.Sleep(10 * time.Millisecond)
	}
	readers := [][]string{{"runs", "--json"}, {"backfill", "list"}}
	slowest := map[string]time.Duration{}
	answers := 0
	for deadline := time.Now().Add(liveness); !p.exited(); {
		if time.Now().After(deadline) {
			break // p.wait reports the hang
		}
		for _, args := range readers {
			name := strings.Join(args, " ")
			t0 := time.Now()
			code, out, errs := w.rewind(args...)
			d := time.Since(t0)
			answers++
			slowest[name] = max(slowest[name], d)
			if code != 0 {
				t.Errorf("rewind %s during the catchup: exit %d: %s", name, code, errs)
			}
			if strings.Contains(out+errs, "database is locked") {
				t.Errorf("rewind %s during the catchup says the database is locked: %s", name, tail(out+errs, 2000))
			}
		}
	}
	if code := p.wait(); code != 0 {
		t.Errorf("catchup: %s; want exit 0\nstderr: %s", describe(p.err), p.stderr.String())
	}
	t.Logf("%d answers during the catchup; slowest: runs --json %s, backfill list %s",
		answers, slowest["runs --json"].Round(time.Millisecond), slowest["backfill list"].Round(time.Millisecond))
	runs := w.runsJSON()
	if len(runs) != dates || successRuns(runs) != dates {
		t.Errorf("%d runs, %d succeeded; want %d successes", len(runs), successRuns(runs), dates)
	}
	code, out, errs := w.rewind("lake", "show", "analytics.sales")
	if code != 0 {
		t.Fatalf("lake show: exit %d: %s", code, errs)
	}
	if n := strings.Count(out, ": 2 rows\n"); n != dates {
		t.Errorf("lake show: %d partitions of 2 rows; want %d\n%s", n, dates, out)
	}
}
