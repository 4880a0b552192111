package scheduler_test

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rewind-dev/rewind/daemon"
	"github.com/rewind-dev/rewind/dsl"
	"github.com/rewind-dev/rewind/lease"
	"github.com/rewind-dev/rewind/scheduler"
	"github.com/rewind-dev/rewind/store"
)

// serveLiveness bounds every wait of the Serve tests: generous, a liveness
// bound only.
const serveLiveness = 60 * time.Second

// fakeClock is a logical clock the test moves.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Set(t time.Time) {
	c.mu.Lock()
	c.t = t
	c.mu.Unlock()
}

// lockedBuffer is a log that Serve writes while the test reads.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// served is one Serve running in the background.
type served struct {
	cancel  context.CancelFunc
	done    chan error
	stopped bool
}

func (e *env) serve(clock *fakeClock, log *lockedBuffer) *served {
	e.t.Helper()
	return e.serveWith(clock, log, nil)
}

// serveWith is serve with the options changed by opt.
func (e *env) serveWith(clock *fakeClock, log *lockedBuffer, opt func(*daemon.ServeOptions)) *served {
	e.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	s := &served{cancel: cancel, done: make(chan error, 1)}
	o := daemon.ServeOptions{
		Store: e.st, Path: e.dir, Home: e.home, Clock: clock.Now,
		PollEvery: 10 * time.Millisecond, Grace: 5 * time.Second,
		Log: slog.New(slog.NewTextHandler(log, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
	if opt != nil {
		opt(&o)
	}
	go func() {
		s.done <- daemon.Serve(ctx, o)
	}()
	e.t.Cleanup(func() {
		s.stop(e.t)
		if e.t.Failed() {
			e.t.Logf("scheduler log:\n%s", log.String())
		}
	})
	return s
}

func (s *served) stop(t *testing.T) {
	t.Helper()
	if s.stopped {
		return
	}
	s.stopped = true
	s.cancel()
	select {
	case err := <-s.done:
		if err != nil {
			t.Fatalf("serve: %v", err)
		}
	case <-time.After(serveLiveness):
		t.Fatal("Serve did not stop")
	}
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(serveLiveness); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// succeeded are the logical dates of p's successful runs, with their tasks.
func (e *env) succeeded(p string) map[string][]string {
	e.t.Helper()
	out := map[string][]string{}
	for _, r := range e.runs(p) {
		if r.State != store.RunSuccess {
			continue
		}
		var tasks []string
		for _, ti := range r.Tasks {
			tasks = append(tasks, ti.Task)
		}
		slices.Sort(tasks)
		out[r.LogicalDate.UTC().Format(time.RFC3339)] = tasks
	}
	return out
}

const minutely = `
pipeline "p" {
  schedule   = "* * * * *"
  start_date = "2025-07-01"
  catchup    = true
  task "t" {
    command = "echo \"t $REWIND_LOGICAL_DATE\" >> events.log"
  }
}
`

// A per-minute pipeline under a fake clock: each tick starts its run;
// between ticks the scheduler holds no lease (a `rewind run` from cron
// beside it runs at once); stopped for 3 ticks and restarted, it catches
// them up; an edited file is reloaded (the next run has the new task); a
// broken edit keeps the old definition and the log names file:line.
func TestServe(t *testing.T) {
	e := newEnv(t, minutely)
	clock := &fakeClock{t: utc("2025-07-01T00:00:30Z")}
	var log lockedBuffer
	s := e.serve(clock, &log)
	eventually(t, "the scheduler to start", func() bool { return strings.Contains(log.String(), "scheduler started") })
	if n := len(e.runs("p")); n != 0 {
		t.Fatalf("%d runs before the first tick", n)
	}

	for i, at := range []string{"2025-07-01T00:01:00Z", "2025-07-01T00:02:00Z"} {
		clock.Set(utc(at))
		eventually(t, "the run of tick "+at, func() bool { return len(e.succeeded("p")) == i+1 })
	}
	if got := e.succeeded("p"); got["2025-07-01T00:00:00Z"] == nil || got["2025-07-01T00:01:00Z"] == nil {
		t.Fatalf("runs %v", got)
	}

	// Between ticks the lease is free: cron's rewind run does not wait.
	eventually(t, "the lease to be free", func() bool {
		_, err := scheduler.Run(context.Background(), scheduler.Options{
			Store: e.st, Workspace: e.ws, Home: e.home, Now: clock.Now(),
		})
		return err == nil
	})

	// Stopped for 3 ticks, restarted: they are caught up.
	s.stop(t)
	clock.Set(utc("2025-07-01T00:05:00Z"))
	var log2 lockedBuffer
	e.serve(clock, &log2)
	eventually(t, "the catchup of 3 ticks", func() bool { return len(e.succeeded("p")) == 5 })

	// An edit is reloaded: the next run has the new task.
	edited := strings.Replace(minutely, "  task \"t\" {", `  task "u" {
    command = "echo \"u $REWIND_LOGICAL_DATE\" >> events.log"
  }
  task "t" {`, 1)
	write(t, filepath.Join(e.dir, "main.hcl"), edited)
	eventually(t, "the reload", func() bool { return strings.Contains(log2.String(), "msg=reloaded") })
	clock.Set(utc("2025-07-01T00:06:00Z"))
	eventually(t, "the run of 00:05", func() bool { return len(e.succeeded("p")) == 6 })
	if got := e.succeeded("p")["2025-07-01T00:05:00Z"]; !slices.Equal(got, []string{"t", "u"}) {
		t.Fatalf("tasks of the run after the reload: %v, want [t u]", got)
	}
	if got := e.succeeded("p")["2025-07-01T00:04:00Z"]; !slices.Equal(got, []string{"t"}) {
		t.Fatalf("tasks of the run before the reload: %v, want [t]", got)
	}

	// A broken edit: the log names file:line, the old definition runs on.
	write(t, filepath.Join(e.dir, "main.hcl"), strings.Replace(edited, `catchup    = true`, `catchup    = true
  no_such_attribute = 1`, 1))
	want := filepath.Join(e.dir, "main.hcl") + ":6:"
	eventually(t, "the diagnostics of the broken edit", func() bool { return strings.Contains(log2.String(), want) })
	if !strings.Contains(log2.String(), "keeping the previous definition") {
		t.Fatalf("log:\n%s", log2.String())
	}
	clock.Set(utc("2025-07-01T00:07:00Z"))
	eventually(t, "the run of 00:06", func() bool { return len(e.succeeded("p")) == 7 })
	if got := e.succeeded("p")["2025-07-01T00:06:00Z"]; !slices.Equal(got, []string{"t", "u"}) {
		t.Fatalf("tasks of the run after the broken edit: %v, want [t u]", got)
	}

	// Every task of every run ran exactly once.
	events := e.events("events.log")
	seen := map[string]int{}
	for _, ev := range events {
		seen[ev]++
	}
	for ev, n := range seen {
		if n != 1 {
			t.Fatalf("%q ran %d times\n%s", ev, n, strings.Join(events, "\n"))
		}
	}
	if len(events) != 7+2 {
		t.Fatalf("%d task events, want 9:\n%s", len(events), strings.Join(events, "\n"))
	}
}

// A pipeline with catchup = false that was down for 3 ticks gets only the
// latest interval at restart.
func TestServeNoCatchup(t *testing.T) {
	e := newEnv(t, strings.Replace(minutely, "catchup    = true", "catchup    = false", 1))
	clock := &fakeClock{t: utc("2025-07-01T00:05:00Z")}
	var log lockedBuffer
	e.serve(clock, &log)
	eventually(t, "the latest interval", func() bool { return len(e.succeeded("p")) == 1 })
	if e.succeeded("p")["2025-07-01T00:04:00Z"] == nil {
		t.Fatalf("runs %v, want 00:04 only", e.succeeded("p"))
	}
	clock.Set(utc("2025-07-01T00:06:00Z"))
	eventually(t, "the next tick", func() bool { return len(e.succeeded("p")) == 2 })

	// An operator's clear (it bumps the store's epoch) is run without
	// waiting for a tick.
	if _, err := e.st.ClearTasks(context.Background(), store.ClearTasksParams{
		Pipeline: "p", From: utc("2025-07-01T00:04:00Z"), To: utc("2025-07-01T00:04:00Z"), Now: time.Now(),
	}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the cleared run to run again", func() bool {
		n := 0
		for _, ev := range e.events("events.log") {
			if strings.HasSuffix(ev, "00:04:00Z") {
				n++
			}
		}
		return n == 2
	})
}

// Serve with a workspace that does not load ends with its diagnostics.
func TestServeBrokenAtStart(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "main.hcl"), "pipeline \"p\" {\n  bogus = 1\n}\n")
	st, err := store.Open(context.Background(), "sqlite:"+filepath.Join(dir, "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	err = daemon.Serve(context.Background(), daemon.ServeOptions{Store: st, Path: dir, LoadOptions: dsl.LoadOptions{}})
	if err == nil || !strings.Contains(err.Error(), "main.hcl:2:") {
		t.Fatalf("err %v, want the diagnostics with main.hcl:2:", err)
	}
}

// write replaces the file at path with body in one rename, as editors save:
// a scheduler polling every 10 ms on a loaded machine could otherwise load
// the file truncated (an empty workspace) between the truncation and the
// write, and a broken edit after it would keep that empty definition.
func write(t *testing.T, path, body string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// Two schedulers on one state: exactly one leads and runs the ticks, the
// other stands by; when the active one stops, the standby leads at once
// (the lease is released) and runs the next tick; when its leadership is
// taken from it (as a standby does once the lease has expired), it stops
// leading, stands by, and leads again once the lease is free.
func TestServeLeadership(t *testing.T) {
	e := newEnv(t, minutely)
	clock := &fakeClock{t: utc("2025-07-01T00:02:30Z")}
	holder := func(host string) *lease.Holder {
		h := lease.Self()
		h.Host, h.ID = host, host+":"+h.ID
		return &h
	}
	ha, hb := holder("alpha"), holder("beta")
	// recorded waits until the run of the minute has succeeded in the
	// state: a task's event is written before its attempt ends, and a
	// scheduler stopped in between rightly runs it again.
	recorded := func(minute string) {
		t.Helper()
		eventually(t, "the run of "+minute+" recorded", func() bool {
			_, ok := e.succeeded("p")["2025-07-01T"+minute+":00Z"]
			return ok
		})
	}
	la, lb := &lockedBuffer{}, &lockedBuffer{}
	ttl := 2 * time.Second
	a := e.serveWith(clock, la, func(o *daemon.ServeOptions) { o.Holder, o.LeaseTTL = ha, ttl })
	eventually(t, "alpha to lead", func() bool { return strings.Contains(la.String(), "active: this scheduler leads") })
	b := e.serveWith(clock, lb, func(o *daemon.ServeOptions) { o.Holder, o.LeaseTTL = hb, ttl })
	eventually(t, "beta to stand by", func() bool { return strings.Contains(lb.String(), "standing by: another scheduler leads") })
	eventually(t, "the catchup of 2 ticks", func() bool { return len(e.events("events.log")) == 2 })

	clock.Set(utc("2025-07-01T00:03:00Z"))
	eventually(t, "the tick of 00:02", func() bool { return len(e.events("events.log")) == 3 })
	recorded("00:02")
	if strings.Contains(lb.String(), "active: this scheduler leads") || strings.Contains(lb.String(), "run finished") {
		t.Fatalf("the standby ran something:\n%s", lb.String())
	}

	// The active one stops: the standby leads without waiting for the TTL.
	a.stop(t)
	stopped := time.Now()
	eventually(t, "beta to lead", func() bool { return strings.Contains(lb.String(), "active: this scheduler leads") })
	if d := time.Since(stopped); d >= ttl {
		t.Logf("beta led %s after alpha stopped (the lease was released; slow machine?)", d)
	}
	clock.Set(utc("2025-07-01T00:04:00Z"))
	eventually(t, "the tick of 00:03, by beta", func() bool { return len(e.events("events.log")) == 4 })
	recorded("00:03")

	// Another holder takes beta's lease (as a standby would once it expired).
	thief := store.AcquireLeaseParams{Name: lease.Leader, Holder: "thief", Host: "gamma", PID: 1, TTL: ttl, Now: time.Now(), Stale: hb.ID}
	if l, ok, err := e.st.AcquireLease(context.Background(), thief); err != nil || !ok {
		t.Fatalf("take the lease: %v %v %+v", ok, err, l)
	}
	eventually(t, "beta to lose the leadership", func() bool { return strings.Contains(lb.String(), "lost the leadership: standing by") })
	// The thief never renews: beta leads again once its lease has expired.
	eventually(t, "beta to lead again", func() bool { return strings.Count(lb.String(), "active: this scheduler leads") == 2 })
	clock.Set(utc("2025-07-01T00:05:00Z"))
	eventually(t, "the tick of 00:04", func() bool { return len(e.events("events.log")) == 5 })
	recorded("00:04")
	b.stop(t)
	if got := counts(e.events("events.log")); len(got) != 5 {
		t.Fatalf("events %v: want each of the 5 minutes once", got)
	}
}
