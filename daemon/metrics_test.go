package daemon_test

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/rewind-dev/rewind/daemon"
	"github.com/rewind-dev/rewind/dsl"
	"github.com/rewind-dev/rewind/lease"
	"github.com/rewind-dev/rewind/metrics"
	"github.com/rewind-dev/rewind/metrics/metricstest"
	"github.com/rewind-dev/rewind/store"
)

// lockedBuffer is a log that two goroutines write and the test reads.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// eventually polls cond until it holds, for at most a minute.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("waited a minute for %s", what)
		}
	}
}

// Two schedulers on one SQLite state, each with its own metrics: the
// first leads and executes, the second stands by; when the first stops,
// the second takes over, and only its rewind_scheduler_takeovers_total
// counts it.
func TestTakeoverCounted(t *testing.T) {
	dir := t.TempDir()
	// Nothing is due before 2100: each execution materializes nothing.
	hcl := "pipeline \"p\" {\n  schedule   = \"@daily\"\n  start_date = \"2100-01-01\"\n  task \"t\" { command = \"true\" }\n}\n"
	if err := os.WriteFile(filepath.Join(dir, "main.hcl"), []byte(hcl), 0o644); err != nil {
		t.Fatal(err)
	}
	type sched struct {
		m    *metrics.Scheduler
		reg  *prometheus.Registry
		log  *lockedBuffer
		stop context.CancelFunc
		done chan error
	}
	start := func(host string) *sched {
		st, err := store.Open(context.Background(), "sqlite:"+filepath.Join(dir, "state.db"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		h := lease.Self()
		h.Host, h.ID = host, host+":"+h.ID
		s := &sched{m: metrics.NewScheduler(), log: &lockedBuffer{}, done: make(chan error, 1)}
		s.reg = prometheus.NewRegistry()
		s.reg.MustRegister(s.m)
		ctx, cancel := context.WithCancel(context.Background())
		s.stop = cancel
		go func() {
			s.done <- daemon.Serve(ctx, daemon.ServeOptions{Store: st, Path: dir, LoadOptions: dsl.LoadOptions{}, Home: filepath.Join(dir, ".rewind"),
				Holder: &h, LeaseTTL: 2 * time.Second, PollEvery: 50 * time.Millisecond, Metrics: s.m,
				Log: slog.New(slog.NewTextHandler(s.log, nil))})
		}()
		t.Cleanup(func() {
			cancel()
			<-s.done
		})
		return s
	}
	value := func(s *sched, name string, labels ...string) float64 {
		v, _ := metricstest.Gather(t, s.reg).Value(name, labels...)
		return v
	}

	a := start("alpha")
	eventually(t, "alpha to lead and execute", func() bool { return value(a, "rewind_scheduler_executions_total", "result", "ok") >= 1 })
	b := start("beta")
	eventually(t, "beta to stand by", func() bool { return strings.Contains(b.log.String(), "standing by: another scheduler leads") })
	if value(a, "rewind_scheduler_leading") != 1 || value(b, "rewind_scheduler_leading") != 0 {
		t.Fatalf("leading: alpha %v, beta %v; want 1, 0", value(a, "rewind_scheduler_leading"), value(b, "rewind_scheduler_leading"))
	}
	if n := value(a, "rewind_scheduler_takeovers_total"); n != 0 {
		t.Errorf("alpha, the first leader: %v takeovers, want 0", n)
	}

	a.stop()
	if err := <-a.done; err != nil {
		t.Fatal(err)
	}
	a.done <- nil // for the cleanup
	eventually(t, "beta to take over", func() bool { return value(b, "rewind_scheduler_leading") == 1 })
	if n := value(b, "rewind_scheduler_takeovers_total"); n != 1 {
		t.Errorf("beta: %v takeovers, want 1", n)
	}
	if v := value(a, "rewind_scheduler_leading"); v != 0 {
		t.Errorf("alpha stopped: rewind_scheduler_leading %v, want 0", v)
	}
	eventually(t, "beta to execute", func() bool { return value(b, "rewind_scheduler_executions_total", "result", "ok") >= 1 })
	if n := value(b, "rewind_scheduler_execution_duration_seconds"); n < 1 {
		t.Errorf("beta's execution histogram counts %v executions, want at least 1", n)
	}
}
