package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rewind-dev/rewind/executor"
	"github.com/rewind-dev/rewind/store"
	"github.com/rewind-dev/rewind/store/pgtest"
)

// Two or more `rewind scheduler` processes on one PostgreSQL state: one
// leads, the others stand by; when the active one is killed, a standby
// takes over and finishes the work, and every task ran exactly once.

// haPipeline is 200 hourly runs of two tasks; each attempt writes "start"
// and "end" lines (run id, task, try, time) to ledger.log. Task a of the
// run of haSlow takes 8 s: the tests kill the active scheduler while it
// runs, so that there is always an attempt to take over.
const haPipeline = `
pipeline "p" {
  schedule        = "@hourly"
  start_date      = "2025-01-01"
  end_date        = "2025-01-09T07:00:00Z"
  max_active_runs = 8
  task "a" {
    command = "echo \"start $REWIND_RUN_ID $REWIND_TASK $REWIND_TRY_NUMBER $(date +%s%N)\" >> ledger.log; if [ $REWIND_RUN_ID = scheduled__2025-01-03T12:00:00Z ]; then sleep 8; else sleep 0.2; fi; echo \"end $REWIND_RUN_ID $REWIND_TASK $REWIND_TRY_NUMBER $(date +%s%N)\" >> ledger.log"
  }
  task "b" {
    depends_on = [task.a]
    command    = "echo \"start $REWIND_RUN_ID $REWIND_TASK $REWIND_TRY_NUMBER $(date +%s%N)\" >> ledger.log; sleep 0.1; echo \"end $REWIND_RUN_ID $REWIND_TASK $REWIND_TRY_NUMBER $(date +%s%N)\" >> ledger.log"
  }
}
`

const haRuns, haTasks = 200, 2

// haSlow is the run whose task a is slow.
const haSlow = "scheduled__2025-01-03T12:00:00Z"

// slowStarted says whether the slow attempt has started.
func (w *workspace) slowStarted() bool {
	for _, l := range w.ledger() {
		if l.event == "start" && l.run == haSlow && l.task == "a" {
			return true
		}
	}
	return false
}

// ledgerLine is one line of ledger.log.
type ledgerLine struct {
	event, run, task string
	try              int
	at               time.Time
}

func (w *workspace) ledger() []ledgerLine {
	w.t.Helper()
	var out []ledgerLine
	b, err := os.ReadFile(filepath.Join(w.dir, "ledger.log"))
	if err != nil && !os.IsNotExist(err) {
		w.t.Fatal(err)
	}
	// A line being appended may be read half-written (a read does not
	// wait for a write to the same file): only whole lines count.
	whole := string(b[:strings.LastIndexByte(string(b), '\n')+1])
	for _, l := range strings.Split(strings.TrimSuffix(whole, "\n"), "\n") {
		if l == "" {
			continue
		}
		f := strings.Fields(l)
		if len(f) != 5 {
			w.t.Fatalf("ledger.log: torn line %q", l)
		}
		try, err1 := strconv.Atoi(f[3])
		ns, err2 := strconv.ParseInt(f[4], 10, 64)
		if err1 != nil || err2 != nil {
			w.t.Fatalf("ledger.log: bad line %q", l)
		}
		out = append(out, ledgerLine{event: f[0], run: f[1], task: f[2], try: try, at: time.Unix(0, ns)})
	}
	return out
}

// ends counts the "end" lines of the ledger.
func ends(l []ledgerLine) int {
	n := 0
	for _, x := range l {
		if x.event == "end" {
			n++
		}
	}
	return n
}

// haScheduler starts `rewind scheduler` with a short lease for the test.
func (w *workspace) haScheduler(host string) *proc {
	w.t.Helper()
	var env []string
	if host != "" {
		env = append(env, "REWIND_HOST="+host)
	}
	return w.startEnv(env, "scheduler", "--poll", "100ms", "--lease-ttl", haTTL().String(), "--grace", "1s", "--pause-new-over", "0") // their catchups are the work under test
}

var leadsRE = regexp.MustCompile(`time=(\S+) level=INFO msg="active: this scheduler leads"`)

// leadsAt is when p logged that it became the active scheduler (zero: it did not).
func (p *proc) leadsAt() time.Time {
	m := leadsRE.FindStringSubmatch(p.stderr.String())
	if m == nil {
		return time.Time{}
	}
	t, _ := time.Parse(time.RFC3339Nano, m[1])
	return t
}

// active waits for one of ps to lead and returns it; the others must stand by.
func active(t *testing.T, ps ...*proc) (*proc, []*proc) {
	t.Helper()
	var leader *proc
	deadline := time.Now().Add(liveness)
	for leader == nil {
		for _, p := range ps {
			if !p.leadsAt().IsZero() {
				leader = p
			}
		}
		if leader == nil && (time.Now().After(deadline) || ps[0].exited() || ps[1].exited()) {
			t.Fatalf("no scheduler leads after %s:\n%s\n---\n%s", liveness, ps[0].stderr.String(), ps[1].stderr.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	var standbys []*proc
	for _, p := range ps {
		if p == leader {
			continue
		}
		standbys = append(standbys, p)
		waitFor(t, "the other scheduler to stand by", func() bool {
			return strings.Contains(p.stderr.String(), "standing by: another scheduler leads")
		})
	}
	// Exactly one leads: the others stand by and never led.
	for _, p := range standbys {
		if !p.leadsAt().IsZero() {
			t.Fatalf("two schedulers lead at once:\n%s\n---\n%s", leader.stderr.String(), p.stderr.String())
		}
	}
	return leader, standbys
}

// waitAllSucceeded waits until every run of haPipeline has succeeded and
// returns the runs.
func (w *workspace) waitAllSucceeded(t *testing.T, ps ...*proc) []runJSON {
	t.Helper()
	return w.waitRuns(t, haRuns, ps...)
}

// checkExactlyOnce checks that every task instance succeeded with exactly
// one successful attempt, whose run is in the ledger exactly once ("start"
// and "end" of that try), and that no try of a task instance was started
// twice. An attempt that is not a success must not have run to its end,
// unless it ended before died (a machine that died before its outcome was
// recorded). It returns the attempts that were not successes.
func checkExactlyOnce(t *testing.T, runs []runJSON, ledger []ledgerLine, died time.Time) []string {
	t.Helper()
	type key struct {
		run, task string
		try       int
	}
	starts, endsBy := map[key]int{}, map[key]int{}
	endedAt := map[key]time.Time{}
	for _, l := range ledger {
		k := key{l.run, l.task, l.try}
		if l.event == "start" {
			starts[k]++
		} else {
			endsBy[k]++
			endedAt[k] = l.at
		}
	}
	for k, n := range starts {
		if n != 1 {
			t.Errorf("%v started %d times", k, n)
		}
	}
	var others []string
	tis := 0
	for _, r := range runs {
		for _, ti := range r.Tasks {
			tis++
			if ti.State != "success" {
				t.Errorf("%s %s: %s", r.RunID, ti.Task, ti.State)
			}
			succ := 0
			for _, a := range ti.Attempts {
				k := key{r.RunID, ti.Task, a.TryNumber}
				if a.State != "success" {
					others = append(others, fmt.Sprintf("%s %s try %d: %s", r.RunID, ti.Task, a.TryNumber, a.State))
					if endsBy[k] != 0 && (died.IsZero() || endedAt[k].After(died)) {
						t.Errorf("%v: recorded %s, but it ran to its end", k, a.State)
					}
					continue
				}
				succ++
				if starts[k] != 1 || endsBy[k] != 1 {
					t.Errorf("%v: success recorded, but the ledger has %d starts and %d ends", k, starts[k], endsBy[k])
				}
			}
			if succ != 1 {
				t.Errorf("%s %s: %d successful attempts %+v, want exactly 1", r.RunID, ti.Task, succ, ti.Attempts)
			}
		}
	}
	if tis != haRuns*haTasks {
		t.Errorf("%d task instances, want %d", tis, haRuns*haTasks)
	}
	return others
}

// Two schedulers on one host: kill -9 of the active one mid-way; the
// standby takes over at once (the holder's pid is gone), adopts the
// attempts still running (they outlive the killed rewind) and finishes:
// every attempt ran exactly once, none was lost or run again.
func TestHASchedulersKillActive(t *testing.T) {
	t.Parallel()
	w := newWorkspace(t, map[string]string{"main.hcl": haPipeline})
	w.state = pgtest.DSN(t)
	a, b := w.haScheduler(""), w.haScheduler("")
	leader, standbys := active(t, a, b)
	waitFor(t, "the slow attempt", w.slowStarted)
	leader.kill9()
	killed := time.Now()
	standby := standbys[0]
	waitFor(t, "the standby to lead", func() bool { return !standby.leadsAt().IsZero() })
	t.Logf("the standby led %s after the kill -9", standby.leadsAt().Sub(killed).Round(time.Millisecond))

	runs := w.waitAllSucceeded(t, standby)
	ledger := w.ledger()
	// One that ran is adopted, or its outcome is read from its log.
	lostOnlyUnstarted(t, checkExactlyOnce(t, runs, ledger, time.Time{}), ledger, standby.stderr.String())
	adopted := regexp.MustCompile(`msg="adopting attempt of a previous rewind" pipeline=p task=a try=1 pid=\d+`).FindAllString(standby.stderr.String(), -1)
	if !strings.Contains(standby.stderr.String(), "adopting attempt of a previous rewind") {
		t.Errorf("the standby did not adopt the slow attempt of the killed scheduler:\n%s", tail(standby.stderr.String(), 4000))
	}
	t.Logf("the standby adopted %d running attempts", len(adopted))
	if t.Failed() {
		t.Logf("the killed scheduler's warnings:\n%s", warnings(leader.stderr.String()))
		t.Logf("the standby's warnings:\n%s", warnings(standby.stderr.String()))
	}
	standby.term()
}

// Two schedulers on two "hosts" (REWIND_HOST): the active one's machine
// dies (the rewind and every attempt it runs are killed at once). The
// standby cannot see the dead host's processes: it takes over once the
// leader lease expires (within --lease-ttl of the last renewal), settles
// the dead scheduler's attempts once their owner's heartbeat has expired
// (lost: run again, no retry used) and finishes. Every task instance has
// exactly one successful attempt, matching one run of it in the ledger,
// and no attempt ran on both machines.
func TestHAStandbyOnAnotherHost(t *testing.T) {
	t.Parallel()
	w := newWorkspace(t, map[string]string{"main.hcl": haPipeline})
	w.state = pgtest.DSN(t)
	a, b := w.haScheduler("alpha"), w.haScheduler("beta")
	leader, standbys := active(t, a, b)
	standby := standbys[0]
	waitFor(t, "the slow attempt", w.slowStarted)
	// The machine dies whole: its host agent (a session of its own, not a
	// child of the rewind) with it.
	host := "alpha"
	if leader == b {
		host = "beta"
	}
	killTree(t, leader.cmd.Process.Pid)
	for _, pid := range w.agentsOf(host) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	// And every attempt the state says ran there, by process group: one
	// the tree walk missed (started as the rewind was stopped) dies too.
	st, err := store.Open(context.Background(), w.state)
	if err != nil {
		t.Fatal(err)
	}
	running, err := st.RunningAttempts(context.Background())
	st.Close()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range running {
		if a.Host != host {
			continue
		}
		for _, pid := range []int{a.PID, executor.FindWrapper(a.LogPath)} {
			if pid > 1 {
				_ = syscall.Kill(-pid, syscall.SIGKILL)
			}
		}
	}
	<-leader.done
	killed := time.Now()
	deadLedger := len(w.ledger())

	waitFor(t, "the standby to lead", func() bool { return !standby.leadsAt().IsZero() })
	took := standby.leadsAt().Sub(killed)
	t.Logf("the standby on another host led %s after the machine died (lease TTL %s)", took.Round(time.Millisecond), haTTL())
	// Not a timing test: a generous bound that says the lease expired and
	// was taken, not that a long timeout (or a restart) let it through.
	if took > haTTL()+17*time.Second {
		t.Errorf("the standby led only %s after the active one died, with a %s lease", took, haTTL())
	}
	runs := w.waitAllSucceeded(t, standby)
	ledger := w.ledger()
	others := checkExactlyOnce(t, runs, ledger, killed)
	for _, o := range others {
		if !strings.HasSuffix(o, ": lost") {
			t.Errorf("attempt %s: want lost (its machine died) or success", o)
		}
	}
	if !slices.Contains(others, haSlow+" a try 1: lost") {
		t.Errorf("the slow attempt, killed with its machine, is not lost: %v", others)
	}
	t.Logf("%d attempts of the dead machine lost and run again: %v", len(others), others)
	// Nothing of the dead machine ran after it died; the standby started
	// every attempt of its own after it led.
	for _, l := range ledger[deadLedger:] {
		if l.event == "start" && l.at.Before(standby.leadsAt()) {
			t.Errorf("%+v started before the standby led", l)
		}
	}
	standby.term()
}

// killTree kills pid and all its descendants at once, as a machine that
// dies: every process is stopped first (none can fork or reap), then killed.
func killTree(t *testing.T, pid int) {
	t.Helper()
	seen := map[int]bool{}
	for {
		grew := false
		for _, p := range descendants(pid) {
			if !seen[p] {
				seen[p], grew = true, true
				_ = syscall.Kill(p, syscall.SIGSTOP)
			}
		}
		if !seen[pid] {
			seen[pid], grew = true, true
			_ = syscall.Kill(pid, syscall.SIGSTOP)
		}
		if !grew {
			break
		}
	}
	for p := range seen {
		_ = syscall.Kill(p, syscall.SIGKILL)
	}
}

// descendants are the processes whose parent chain reaches pid.
func descendants(pid int) []int {
	parent := map[int]int{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) < 2 {
			continue
		}
		pp, _ := strconv.Atoi(f[1])
		parent[p] = pp
	}
	var out []int
	for p := range parent {
		for q := parent[p]; q > 1; q = parent[q] {
			if q == pid {
				out = append(out, p)
				break
			}
		}
	}
	return out
}

// agentsOf lists the host agents of the "machine" host (REWIND_HOST) for
// the workspace's state (tests running beside it have agents of their own).
func (w *workspace) agentsOf(host string) []int {
	t := w.t
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var out []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, err1 := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		environ, err2 := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		if err1 != nil || err2 != nil {
			continue
		}
		args := strings.Split(string(cmdline), "\x00")
		env := strings.Split(string(environ), "\x00")
		if len(args) > 1 && args[1] == "agent" && slices.Contains(env, "REWIND_HOST="+host) && slices.Contains(env, "REWIND_STATE="+w.state) {
			out = append(out, pid)
		}
	}
	return out
}

// Two schedulers on two "hosts": kill -9 of the active scheduler alone; its
// machine is alive and its attempts run on. The standby leads after the
// lease expires, but the dead scheduler's machine has a live host agent:
// its attempts are not declared lost and run again while they still run,
// the agent records each one when it ends, and the standby goes on from
// there. Every try started once, the slow attempt ran once to its end and
// is recorded a success, and no attempt of the killed scheduler was lost.
func TestHAKillActiveOnLiveHost(t *testing.T) {
	t.Parallel()
	w := newWorkspace(t, map[string]string{"main.hcl": haPipeline})
	w.state = pgtest.DSN(t)
	a, b := w.haScheduler("alpha"), w.haScheduler("beta")
	leader, standbys := active(t, a, b)
	standby := standbys[0]
	host := "alpha"
	if leader == b {
		host = "beta"
	}
	waitFor(t, "the slow attempt", w.slowStarted)
	waitFor(t, "the host agent of the active scheduler's machine", func() bool { return len(w.agentsOf(host)) > 0 })
	leader.kill9()
	killed := time.Now()
	waitFor(t, "the standby to lead", func() bool { return !standby.leadsAt().IsZero() })
	t.Logf("the standby on another host led %s after the kill -9 of the active scheduler (lease TTL %s)", standby.leadsAt().Sub(killed).Round(time.Millisecond), haTTL())
	runs := w.waitAllSucceeded(t, standby)
	ledger := w.ledger()
	// One that ran was recorded by the host agent from its exit status.
	lostOnlyUnstarted(t, checkExactlyOnce(t, runs, ledger, time.Time{}), ledger, standby.stderr.String())
	slowEnds := 0
	for _, l := range ledger {
		if l.event == "end" && l.run == haSlow && l.task == "a" {
			slowEnds++
		}
	}
	if slowEnds != 1 {
		t.Errorf("the slow attempt ran to its end %d times, want once", slowEnds)
	}
	if t.Failed() {
		agentLog, _ := os.ReadFile(filepath.Join(w.dir, ".rewind", "agent.log"))
		t.Logf("agent.log:\n%s\n--- the standby:\n%s", agentLog, tail(standby.stderr.String(), 3000))
	}
	standby.term()
}

// haTTL is the schedulers' --lease-ttl in the HA and fault tests: 3s, or
// REWIND_TEST_LEASE_TTL (the README's takeover times with the default
// TTL are measured with REWIND_TEST_LEASE_TTL=30s).
func haTTL() time.Duration {
	if d, err := time.ParseDuration(os.Getenv("REWIND_TEST_LEASE_TTL")); err == nil && d > 0 {
		return d
	}
	return 3 * time.Second
}

// lostOnlyUnstarted checks the attempts that are not successes (as
// checkExactlyOnce returns them): each may only be lost, and only if it
// never started (claimed by a rewind killed before it launched it). One
// exception, which the logs must show: a scheduler that could not renew
// its lease in time (a loaded CI machine) steps down and stops its
// attempts, recorded interrupted (checkExactlyOnce has checked that none
// ran to its end); they run again without using a retry.
func lostOnlyUnstarted(t *testing.T, others []string, ledger []ledgerLine, logs ...string) {
	t.Helper()
	started := map[string]bool{}
	for _, l := range ledger {
		if l.event == "start" {
			started[l.run+" "+l.task+" try "+strconv.Itoa(l.try)] = true
		}
	}
	steppedDown := false
	for _, l := range logs {
		if strings.Contains(l, "lost the state lease") || strings.Contains(l, "lost the leadership") {
			steppedDown = true
		}
	}
	for _, o := range others {
		t.Logf("not a success: %s (started: %t)", o, started[o[:strings.LastIndex(o, ":")]])
		if _, ok := strings.CutSuffix(o, ": interrupted"); ok && steppedDown {
			continue
		}
		if attempt, ok := strings.CutSuffix(o, ": lost"); !ok || started[attempt] {
			t.Errorf("attempt %s: want success, or lost when it never started", o)
		}
	}
	if steppedDown {
		t.Logf("a scheduler stepped down for a lease it could not renew in time: its interrupted attempts run again")
	}
}
