package main

import (
	"context"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rewind-dev/rewind/store"
	"github.com/rewind-dev/rewind/store/pgtest"
)

// The fault harness: faults of a real cluster injected into real rewind
// processes on PostgreSQL (an outage and a restart of the server, a
// partition that drops packets, a scheduler frozen past its lease), each
// checked against the ledger the tasks write and against the state:
// every task instance succeeds exactly once, no try starts twice, no two
// executions of a task instance overlap, nothing stays running.

// faultPipeline is haPipeline's shape with a ledger that also records a
// SIGTERM ("term"): the end of an execution that was stopped. The slow
// attempt runs 8 s (faultPipelineSlow: as long as given).
const faultPipeline = `
pipeline "p" {
  schedule        = "@hourly"
  start_date      = "2025-01-01"
  end_date        = "2025-01-02T23:00:00Z"
  max_active_runs = 4
  task "a" {
    command = <<-EOT
      trap 't=; while [ -z "$t" ]; do t=$(date +%s%N); done; echo "term $REWIND_RUN_ID $REWIND_TASK $REWIND_TRY_NUMBER $t" >> ledger.log; exit 143' TERM
      t=; while [ -z "$t" ]; do t=$(date +%s%N); done; echo "start $REWIND_RUN_ID $REWIND_TASK $REWIND_TRY_NUMBER $t" >> ledger.log
      if [ $REWIND_RUN_ID = scheduled__2025-01-01T12:00:00Z ]; then sleep SLOW & wait $!; else sleep 0.2 & wait $!; fi
      t=; while [ -z "$t" ]; do t=$(date +%s%N); done; echo "end $REWIND_RUN_ID $REWIND_TASK $REWIND_TRY_NUMBER $t" >> ledger.log
    EOT
  }
  task "b" {
    depends_on = [task.a]
    command    = "echo \"start $REWIND_RUN_ID $REWIND_TASK $REWIND_TRY_NUMBER $(date +%s%N)\" >> ledger.log; echo \"end $REWIND_RUN_ID $REWIND_TASK $REWIND_TRY_NUMBER $(date +%s%N)\" >> ledger.log"
  }
}
`

// faultPipelineSlow is faultPipeline with a slow attempt of d.
func faultPipelineSlow(d string) string {
	return strings.Replace(faultPipeline, "sleep SLOW", "sleep "+d, 1)
}

const faultRuns, faultSlow = 48, "scheduled__2025-01-01T12:00:00Z"

// faultSlowStarted says whether the slow attempt has started.
func (w *workspace) faultSlowStarted() bool {
	for _, l := range w.ledger() {
		if l.event == "start" && l.run == faultSlow && l.task == "a" {
			return true
		}
	}
	return false
}

// waitRuns waits until the state has n runs, all succeeded.
func (w *workspace) waitRuns(t *testing.T, n int, ps ...*proc) []runJSON {
	t.Helper()
	deadline := time.Now().Add(2 * liveness)
	for {
		runs := w.runsJSON()
		ok := len(runs) == n
		for _, r := range runs {
			ok = ok && r.State == "success"
		}
		if ok {
			return runs
		}
		if time.Now().After(deadline) {
			var b strings.Builder
			for _, p := range ps {
				b.WriteString(tail(p.stderr.String(), 3000) + "\n---\n")
			}
			t.Fatalf("after %s, %d runs, not all succeeded (ledger: %d ends)\n%s", 2*liveness, len(runs), ends(w.ledger()), b.String())
		}
		time.Sleep(300 * time.Millisecond)
	}
}

// checkInvariants checks the ledger and the state: every task instance is
// a success with exactly one successful attempt, whose try has one start
// and one end in the ledger; no try started twice; no attempt that is not
// a success ran to its end (finished work run again); no two executions of
// a task instance overlap (an execution lasts from its start to its end or
// its "term"; one with neither lasts for ever); no attempt is running. It
// returns the attempts that are not successes.
func checkInvariants(t *testing.T, runs []runJSON, ledger []ledgerLine, wantTIs int) []string {
	return checkLedger(t, runs, ledger, wantTIs, true)
}

// checkLedger is checkInvariants; with finishedOnce false, an attempt that
// ran to its end may be recorded lost (and run again): the machine it ran
// on was cut off, and nobody could read its log then.
func checkLedger(t *testing.T, runs []runJSON, ledger []ledgerLine, wantTIs int, finishedOnce bool) []string {
	t.Helper()
	type key struct {
		run, task string
		try       int
	}
	type span struct {
		try        int
		start, end time.Time
	}
	starts, ends := map[key]int{}, map[key]int{}
	spans := map[key]*span{}
	for _, l := range ledger {
		k := key{l.run, l.task, l.try}
		switch l.event {
		case "start":
			starts[k]++
			spans[k] = &span{try: l.try, start: l.at}
		case "end", "term":
			if l.event == "end" {
				ends[k]++
			}
			if s := spans[k]; s != nil {
				s.end = l.at
			}
		}
	}
	for k, n := range starts {
		if n != 1 {
			t.Errorf("%v started %d times", k, n)
		}
	}
	byTI := map[[2]string][]*span{}
	for k, s := range spans {
		byTI[[2]string{k.run, k.task}] = append(byTI[[2]string{k.run, k.task}], s)
	}
	for ti, ss := range byTI {
		sort.Slice(ss, func(i, j int) bool { return ss[i].start.Before(ss[j].start) })
		for i := 1; i < len(ss); i++ {
			prev := ss[i-1]
			if prev.end.IsZero() || ss[i].start.Before(prev.end) {
				t.Errorf("%v: try %d started at %s while try %d ran (%s to %s)", ti, ss[i].try,
					ss[i].start.Format(time.StampMilli), prev.try, prev.start.Format(time.StampMilli), prev.end.Format(time.StampMilli))
			}
		}
	}
	var others []string
	tis := 0
	for _, r := range runs {
		for _, ti := range r.Tasks {
			tis++
			succ := 0
			for _, a := range ti.Attempts {
				k := key{r.RunID, ti.Task, a.TryNumber}
				if a.State == "running" {
					t.Errorf("%v is still running in the state", k)
				}
				if a.State != "success" {
					others = append(others, r.RunID+" "+ti.Task+" try "+strconv.Itoa(a.TryNumber)+": "+a.State)
					if ends[k] != 0 && finishedOnce {
						t.Errorf("%v: recorded %s, but it ran to its end", k, a.State)
					}
					continue
				}
				succ++
				if starts[k] != 1 || ends[k] != 1 {
					t.Errorf("%v: success recorded, but the ledger has %d starts and %d ends", k, starts[k], ends[k])
				}
			}
			if succ != 1 || ti.State != "success" {
				t.Errorf("%s %s: %s with %d successful attempts, want success with exactly 1", r.RunID, ti.Task, ti.State, succ)
			}
		}
	}
	if tis != wantTIs {
		t.Errorf("%d task instances, want %d", tis, wantTIs)
	}
	return others
}

// poolsIdle checks that no pool of the state has a slot in use or work
// queued: slots are counted from the running attempts, so a stranded
// attempt would hold one.
func (w *workspace) poolsIdle(t *testing.T) {
	t.Helper()
	st, err := store.Open(context.Background(), w.state)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	rows, err := st.Usage(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		if r.Running != 0 || r.Queued != 0 {
			t.Errorf("pool %s: %d slots in use, %d queued (%s %s), want none", r.Pool, r.Running, r.Queued, r.Pipeline, r.Task)
		}
	}
}

// pgProxy is a TCP proxy between rewind and PostgreSQL, on loopback, that
// can refuse and cut every connection (an outage, a restart) or stop
// forwarding without closing anything (a partition that drops packets).
type pgProxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	mode   proxyMode
	conns  map[net.Conn]bool
	resume chan struct{} // closed when a blackhole ends
}

type proxyMode int

const (
	proxyPass proxyMode = iota
	proxyDown
	proxyBlackhole
)

func startProxy(t *testing.T, target string) *pgProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &pgProxy{ln: ln, target: target, conns: map[net.Conn]bool{}, resume: make(chan struct{})}
	t.Cleanup(func() {
		ln.Close()
		p.set(proxyDown)
	})
	go p.serve()
	return p
}

// dsn is dsn with its server replaced by the proxy.
func (p *pgProxy) dsn(t *testing.T, dsn string) string {
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	u.Host = p.ln.Addr().String()
	return u.String()
}

func (p *pgProxy) set(m proxyMode) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.mode == proxyBlackhole && m != proxyBlackhole {
		close(p.resume)
		p.resume = make(chan struct{})
	}
	p.mode = m
	if m == proxyDown {
		for c := range p.conns {
			c.Close()
		}
		clear(p.conns)
	}
}

func (p *pgProxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		mode := p.mode
		p.mu.Unlock()
		if mode == proxyDown {
			c.Close() // refused, as a server that is down
			continue
		}
		go p.forward(c)
	}
}

func (p *pgProxy) forward(c net.Conn) {
	p.hold() // a connection made during a partition waits for its end
	s, err := net.Dial("tcp", p.target)
	if err != nil {
		c.Close()
		return
	}
	p.mu.Lock()
	if p.mode == proxyDown {
		p.mu.Unlock()
		c.Close()
		s.Close()
		return
	}
	p.conns[c], p.conns[s] = true, true
	p.mu.Unlock()
	go p.pipe(s, c)
	p.pipe(c, s)
}

// hold blocks while the proxy blackholes traffic.
func (p *pgProxy) hold() {
	for {
		p.mu.Lock()
		mode, resume := p.mode, p.resume
		p.mu.Unlock()
		if mode != proxyBlackhole {
			return
		}
		<-resume
	}
}

// pipe copies from src to dst, holding what it read while the proxy
// blackholes traffic (nothing goes through, nothing is closed).
func (p *pgProxy) pipe(dst, src net.Conn) {
	defer dst.Close()
	defer src.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.hold()
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			if err != io.EOF {
				return
			}
			return
		}
	}
}

// faultScheduler starts `rewind scheduler` on dsn as host.
func (w *workspace) faultScheduler(dsn, host, ttl string) *proc {
	w.t.Helper()
	env := []string{"REWIND_STATE=" + dsn}
	if host != "" {
		env = append(env, "REWIND_HOST="+host)
	}
	return w.startEnv(env, "scheduler", "--poll", "100ms", "--lease-ttl", ttl, "--grace", "1s", "--pause-new-over", "0") // their catchups are the work under test
}

// The state goes away for 3 s (every connection cut, new ones refused)
// while attempts run, and comes back: a blip shorter than half the lease
// TTL. The scheduler's execution fails on it and leaves its attempts
// running; the next execution takes them over. Nothing is killed or run
// twice: every attempt that started is a success, the slow one ran once
// (one claimed as the state went away, never started, may be lost).
func TestFaultStateOutage(t *testing.T) {
	t.Parallel()
	w := newWorkspace(t, map[string]string{"main.hcl": faultPipelineSlow("8")})
	w.state = pgtest.DSN(t)
	proxy := startProxy(t, pgAddr(t, w.state))
	s := w.faultScheduler(proxy.dsn(t, w.state), "", "10s")
	waitFor(t, "the slow attempt", w.faultSlowStarted)
	proxy.set(proxyDown)
	time.Sleep(3 * time.Second)
	proxy.set(proxyPass)
	runs := w.waitRuns(t, faultRuns, s)
	ledger := w.ledger()
	others := checkInvariants(t, runs, ledger, faultRuns*2)
	w.poolsIdle(t)
	// Every attempt that started is a success; one claimed as the state
	// went away and never started may be recorded lost (and run again).
	lostOnlyUnstarted(t, others, ledger)
	if !strings.Contains(s.stderr.String(), "leaving attempts running") && !strings.Contains(s.stderr.String(), "adopting attempt") {
		t.Logf("the blip did not reach an execution with attempts running:\n%s", tail(s.stderr.String(), 3000))
	}
	s.term()
}

// pgAddr is the host:port of a postgres:// DSN.
func pgAddr(t *testing.T, dsn string) string {
	u, err := url.Parse(dsn)
	if err != nil || u.Host == "" {
		t.Fatalf("not a TCP postgres DSN: %v", err)
	}
	return u.Host
}

// A partition: the leader (alpha) reaches PostgreSQL through a proxy that
// stops forwarding without closing anything (no RST, as a network that
// drops packets), for four lease TTLs; the standby (beta) reaches it
// directly. The leader steps down on its own timer at half the TTL and
// stops its attempts before the standby can lead; the standby runs them
// again after it leads. No two executions of a task instance overlap: the
// slow attempt (20 s) outlasts the partition (12 s), so that a leader that
// did not stop it would still run it when the standby runs it again.
func TestFaultPartition(t *testing.T) {
	t.Parallel()
	w := newWorkspace(t, map[string]string{"main.hcl": faultPipelineSlow("20")})
	w.state = pgtest.DSN(t)
	proxy := startProxy(t, pgAddr(t, w.state))
	a := w.faultScheduler(proxy.dsn(t, w.state), "alpha", haTTL().String())
	waitFor(t, "alpha to lead", func() bool { return !a.leadsAt().IsZero() })
	b := w.faultScheduler(w.state, "beta", haTTL().String())
	waitFor(t, "beta to stand by", func() bool {
		return strings.Contains(b.stderr.String(), "standing by: another scheduler leads")
	})
	waitFor(t, "the slow attempt", w.faultSlowStarted)
	proxy.set(proxyBlackhole)
	cut := time.Now()
	waitFor(t, "beta to lead", func() bool { return !b.leadsAt().IsZero() })
	t.Logf("beta led %s after the partition began (lease TTL %s)", b.leadsAt().Sub(cut).Round(time.Millisecond), haTTL())
	time.Sleep(time.Until(cut.Add(4 * haTTL())))
	proxy.set(proxyPass)
	runs := w.waitRuns(t, faultRuns, a, b)
	// The attempts that ended during the partition ran to their end, but
	// nobody could read their logs on the cut-off machine: they ran again.
	others := checkLedger(t, runs, w.ledger(), faultRuns*2, false)
	w.poolsIdle(t)
	t.Logf("attempts stopped or cut off by the partition and run again: %v", others)
	if !strings.Contains(a.stderr.String(), "half its TTL") {
		t.Errorf("alpha never said it stepped down:\n%s", tail(a.stderr.String(), 3000))
	}
	for _, p := range []*proc{a, b} {
		p.term()
	}
}

// A leader frozen (SIGSTOP) for four lease TTLs, then thawed: the standby
// on another host leads after the TTL; the frozen leader's attempts run on
// (only the rewind is frozen) and its machine's host agent keeps them from
// being run again; the thawed leader finds its lease gone and stands by.
// No try starts twice and no two executions of a task instance overlap.
func TestFaultFrozenLeader(t *testing.T) {
	t.Parallel()
	w := newWorkspace(t, map[string]string{"main.hcl": faultPipelineSlow("8")})
	w.state = pgtest.DSN(t)
	a := w.faultScheduler(w.state, "alpha", haTTL().String())
	waitFor(t, "alpha to lead", func() bool { return !a.leadsAt().IsZero() })
	b := w.faultScheduler(w.state, "beta", haTTL().String())
	waitFor(t, "beta to stand by", func() bool {
		return strings.Contains(b.stderr.String(), "standing by: another scheduler leads")
	})
	waitFor(t, "the slow attempt", w.faultSlowStarted)
	waitFor(t, "alpha's host agent", func() bool { return len(w.agentsOf("alpha")) > 0 })
	a.signal(syscall.SIGSTOP)
	frozen := time.Now()
	waitFor(t, "beta to lead", func() bool { return !b.leadsAt().IsZero() })
	t.Logf("beta led %s after alpha froze (lease TTL %s)", b.leadsAt().Sub(frozen).Round(time.Millisecond), haTTL())
	time.Sleep(time.Until(frozen.Add(4 * haTTL())))
	a.signal(syscall.SIGCONT)
	runs := w.waitRuns(t, faultRuns, a, b)
	others := checkInvariants(t, runs, w.ledger(), faultRuns*2)
	w.poolsIdle(t)
	t.Logf("attempts not a success: %v", others)
	for _, p := range []*proc{a, b} {
		p.term()
	}
}

// PostgreSQL itself restarted (pg_ctl restart -m fast) while attempts run,
// on a server of the test's own: the scheduler goes on without a restart
// of its own, every attempt is a success and none ran twice.
func TestFaultPostgresRestart(t *testing.T) {
	t.Parallel()
	pg := privatePostgres(t)
	w := newWorkspace(t, map[string]string{"main.hcl": faultPipelineSlow("8")})
	w.state = pg.dsn
	s := w.faultScheduler(w.state, "", "30s")
	waitFor(t, "the slow attempt", w.faultSlowStarted)
	restarted := time.Now()
	pg.restart(t)
	t.Logf("PostgreSQL restarted in %s", time.Since(restarted).Round(time.Millisecond))
	runs := w.waitRuns(t, faultRuns, s)
	others := checkInvariants(t, runs, w.ledger(), faultRuns*2)
	w.poolsIdle(t)
	for _, o := range others {
		t.Errorf("attempt %s: want every attempt a success after a restart of the server", o)
	}
	s.term()
}

// privatePG is a PostgreSQL server of one test (.ci/postgres.sh), which it
// may stop and start.
type privatePG struct {
	dir, dsn string
}

func privatePostgres(t *testing.T) *privatePG {
	t.Helper()
	pgtest.Server(t) // skips where no server is configured (outside CI)
	script, err := filepath.Abs("../../.ci/postgres.sh")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "bash", script, "start", "--owner", strconv.Itoa(os.Getpid())).Output()
	if err != nil {
		t.Fatalf("postgres.sh start: %v", err)
	}
	pg := &privatePG{}
	for _, line := range strings.Split(string(out), "\n") {
		k, v, ok := strings.Cut(strings.TrimPrefix(line, "export "), "=")
		if !ok {
			continue
		}
		v = strings.ReplaceAll(v, `\`, "")
		switch k {
		case "REWIND_PG_DIR":
			pg.dir = v
		case "REWIND_TEST_POSTGRES":
			pg.dsn = v
		}
	}
	if pg.dir == "" || pg.dsn == "" {
		t.Fatalf("postgres.sh start said %q", out)
	}
	t.Cleanup(func() { _ = exec.Command("bash", script, "stop", pg.dir).Run() })
	return pg
}

// restart restarts the server (pg_ctl restart -m fast: every connection
// is cut, then the server is back at the same address).
func (pg *privatePG) restart(t *testing.T) {
	t.Helper()
	script, _ := filepath.Abs("../../.ci/postgres.sh")
	if out, err := exec.Command("bash", script, "restart", pg.dir).CombinedOutput(); err != nil {
		t.Fatalf("postgres.sh restart: %v\n%s", err, out)
	}
}
