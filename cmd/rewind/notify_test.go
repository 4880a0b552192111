package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rewind-dev/rewind/notify"
	"github.com/rewind-dev/rewind/store"
	"github.com/rewind-dev/rewind/store/pgtest"
)

// hook is a webhook receiver: it records every POST (its Idempotency-Key
// and body) and answers 503 until up is set.
type hook struct {
	srv  *httptest.Server
	mu   sync.Mutex
	up   bool
	hits []hookHit
}

type hookHit struct {
	key     string
	payload notify.Payload
	status  int
	at      time.Time
}

func newHook(t *testing.T, up bool) *hook {
	h := &hook{up: up}
	h.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var p notify.Payload
		if err := json.Unmarshal(body, &p); err != nil {
			t.Errorf("webhook body is not a payload: %v\n%s", err, body)
		}
		h.mu.Lock()
		status := http.StatusServiceUnavailable
		if h.up {
			status = http.StatusOK
		}
		h.hits = append(h.hits, hookHit{key: r.Header.Get("Idempotency-Key"), payload: p, status: status, at: time.Now()})
		h.mu.Unlock()
		w.WriteHeader(status)
	}))
	t.Cleanup(h.srv.Close)
	return h
}

func (h *hook) setUp(up bool) {
	h.mu.Lock()
	h.up = up
	h.mu.Unlock()
}

// delivered returns the payloads the hook accepted (200), by event.
func (h *hook) delivered(event string) []hookHit {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []hookHit
	for _, x := range h.hits {
		if x.status == http.StatusOK && x.payload.Event == event {
			out = append(out, x)
		}
	}
	return out
}

func (h *hook) all() []hookHit {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]hookHit(nil), h.hits...)
}

// notifyWorkspace is a pipeline of three hourly runs whose 01:00 run fails
// (task boom exits 3; task after is upstream_failed), reporting to a
// notify block that gets run_failed by webhook and by command (which
// appends each payload's key to delivered.log). cmdExtra goes before the
// command's append: a test makes it hang.
func notifyWorkspace(t *testing.T, url, cmdExtra, timeout string) map[string]string {
	return map[string]string{"main.hcl": fmt.Sprintf(`
notify "oncall" {
  on      = ["run_failed"]
  webhook = %q
  command = "%s key=$(sed -n 's/.*\"idempotency_key\":\"\\([^\"]*\\)\".*/\\1/p'); echo \"$key $REWIND_EVENT\" >> delivered.log"
  timeout = %q
}
notify "ops" {
  on      = ["scheduler_takeover"]
  command = "cat >> takeover.jsonl; echo >> takeover.jsonl"
}
pipeline "p" {
  schedule   = "@hourly"
  start_date = "2025-07-01T00:00:00Z"
  end_date   = "2025-07-01T02:00:00Z"
  notify     = [notify.oncall]
  task "boom" {
    command = "test $REWIND_LOGICAL_DATE != 2025-07-01T01:00:00Z || exit 3"
  }
  task "after" {
    depends_on = [task.boom]
    command    = "true"
  }
}
`, url, cmdExtra, timeout)}
}

// checkRunFailedPayload checks what a run_failed payload says of the
// failed run.
func checkRunFailedPayload(t *testing.T, p notify.Payload) {
	t.Helper()
	if p.Event != "run_failed" || p.Notify != "oncall" || p.Pipeline != "p" || p.RunID != "scheduled__2025-07-01T01:00:00Z" ||
		p.Kind != "scheduled" || p.LogicalDate != "2025-07-01T01:00:00Z" || p.DataIntervalEnd != "2025-07-01T02:00:00Z" || p.State != "failed" ||
		!strings.HasPrefix(p.IdempotencyKey, "run_failed:p:scheduled__2025-07-01T01:00:00Z:") {
		t.Errorf("payload %+v", p)
	}
	if len(p.Tasks) != 2 {
		t.Fatalf("payload tasks %+v, want after and boom", p.Tasks)
	}
	after, boom := p.Tasks[0], p.Tasks[1]
	if after.Task != "after" || after.State != "upstream_failed" || after.Outcome != "" {
		t.Errorf("task after: %+v", after)
	}
	if boom.Task != "boom" || boom.State != "failed" || boom.Outcome != "exit 3" || boom.ExitCode == nil || *boom.ExitCode != 3 ||
		boom.TryNumber != 1 || boom.Pool != "default" || !strings.HasSuffix(boom.LogPath, ".1.log") {
		t.Errorf("task boom: %+v", boom)
	}
	if _, err := os.Stat(boom.LogPath); err != nil {
		t.Errorf("the payload's log path: %v", err)
	}
}

// deliveredOnce checks that the failure of 01:00 reached the command and
// the webhook once each, its payload complete.
func deliveredOnce(t *testing.T, w *workspace, h *hook) {
	t.Helper()
	lines := w.lines("delivered.log")
	if len(lines) != 1 || !strings.HasPrefix(lines[0], "run_failed:p:scheduled__2025-07-01T01:00:00Z:") {
		t.Errorf("the command recorded %q, want one run_failed", lines)
	}
	if got := h.delivered("run_failed"); len(got) != 1 {
		t.Errorf("webhook got %d run_failed, want 1", len(got))
	} else {
		checkRunFailedPayload(t, got[0].payload)
	}
}

// The same failed run, seen by rewind run from a cron-like loop, is
// notified exactly once: by webhook (its Idempotency-Key the payload's
// key) and by command, on both backends.
func TestNotifyRunFailedOnceFromCron(t *testing.T) { onBackends(t, testNotifyRunFailedOnceFromCron) }

func testNotifyRunFailedOnceFromCron(t *testing.T, b backend) {
	t.Parallel()
	h := newHook(t, true)
	w := b.workspace(t, notifyWorkspace(t, h.srv.URL+"/hooks/T0KEN", "", "10s"))
	for i := 0; i < 4; i++ {
		code, _, errs := w.rewind("run", "--quiet", ".")
		if want := map[bool]int{true: 1, false: 0}[i == 0]; code != want {
			t.Fatalf("run %d: exit %d, want %d\n%s", i, code, want, errs)
		}
	}
	got := h.delivered("run_failed")
	if len(got) != 1 || len(h.all()) != 1 {
		t.Fatalf("webhook got %d run_failed (%d requests), want exactly 1", len(got), len(h.all()))
	}
	checkRunFailedPayload(t, got[0].payload)
	if got[0].key != got[0].payload.IdempotencyKey {
		t.Errorf("Idempotency-Key %q, payload's key %q", got[0].key, got[0].payload.IdempotencyKey)
	}
	lines := w.lines("delivered.log")
	if len(lines) != 1 || lines[0] != got[0].key+" run_failed" {
		t.Errorf("the command got %q, want once %q", lines, got[0].key+" run_failed")
	}
}

// A rewind run killed (-9, with its notify command) while it delivers the
// failure: the next rewind run, once the claim of the dead one expires,
// delivers it, and only once; the run itself is not run again.
func TestNotifyAfterKill9(t *testing.T) {
	t.Parallel()
	h := newHook(t, true)
	// The first delivery's command hangs (and so never records it).
	w := newWorkspace(t, notifyWorkspace(t, h.srv.URL, `if [ ! -e hung ]; then touch hung; sleep 600; fi;`, "2s"))
	p := w.start("run", "--quiet", ".")
	waitFor(t, "the notify command to hang", func() bool { return w.exists("hung") })
	killTree(t, p.cmd.Process.Pid)
	<-p.done
	killed := time.Now()
	if n := len(w.lines("delivered.log")); n != 0 {
		t.Fatalf("%d deliveries before the kill, want 0", n)
	}
	// rewind run from cron, every second, until the notification is out.
	deadline := time.Now().Add(liveness)
	for len(w.lines("delivered.log")) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("not delivered %s after the kill", liveness)
		}
		if code, _, errs := w.rewind("run", "--quiet", "."); code != 0 {
			t.Fatalf("rewind run after the kill: exit %d\n%s", code, errs)
		}
		time.Sleep(time.Second)
	}
	t.Logf("delivered %s after the kill -9 (the claim of the killed rewind lasts 2 x its 2s timeout + 15s)", time.Since(killed).Round(time.Second))
	for i := 0; i < 2; i++ {
		w.rewind("run", "--quiet", ".")
	}
	deliveredOnce(t, w, h)
	if n := w.runsIn("failed"); n != 1 {
		t.Errorf("%d failed runs, want 1", n)
	}
}

// rewind scheduler notifies a failed run once; a webhook down for a minute
// (503) gets it after it comes back, every try with the same key.
func TestNotifySchedulerWebhookDownForAMinute(t *testing.T) {
	t.Parallel()
	h := newHook(t, false)
	w := newWorkspace(t, notifyWorkspace(t, h.srv.URL, "", "10s"))
	p := w.start("scheduler", "--poll", "100ms", "--grace", "1s")
	waitFor(t, "the first try of the webhook", func() bool { return len(h.all()) > 0 })
	down := time.Now()
	time.Sleep(time.Minute)
	h.setUp(true)
	up := time.Now()
	waitFor(t, "the delivery after the webhook came back", func() bool { return len(h.delivered("run_failed")) > 0 })
	t.Logf("delivered %s after the webhook came back (down for %s)", time.Since(up).Round(time.Millisecond), up.Sub(down).Round(time.Second))
	time.Sleep(3 * time.Second) // a second delivery would come now
	p.term()
	hits := h.all()
	if len(hits) < 3 {
		t.Errorf("%d tries in a minute down, want retries with backoff", len(hits))
	}
	for _, x := range hits {
		if x.key != hits[0].key || x.payload.IdempotencyKey != hits[0].key {
			t.Errorf("try with key %q, the first had %q", x.key, hits[0].key)
		}
	}
	got := h.delivered("run_failed")
	if len(got) != 1 {
		t.Fatalf("%d deliveries, want 1", len(got))
	}
	checkRunFailedPayload(t, got[0].payload)
	if !strings.Contains(p.stderr.String(), `msg="notification not delivered: trying again"`) {
		t.Errorf("the scheduler did not log the failed tries:\n%s", tail(p.stderr.String(), 3000))
	}
	// The command is a channel of its own: it ran once, though the
	// webhook was tried again and again.
	if lines := w.lines("delivered.log"); len(lines) != 1 {
		t.Errorf("the command recorded %q, want one delivery", lines)
	}
	st, err := store.Open(context.Background(), "sqlite:"+filepath.Join(w.dir, ".rewind", "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ns, err := st.ListNotifications(context.Background(), store.ListNotificationsParams{})
	if err != nil || len(ns) != 2 {
		t.Fatalf("notifications in the state: %+v, %v; want the command's and the webhook's", ns, err)
	}
	for _, n := range ns {
		want := 1
		if n.Channel == "webhook" {
			want = len(hits)
		}
		if n.DeliveredAt.IsZero() || n.Tries != want {
			t.Errorf("%s: delivered at %s after %d tries, want delivered after %d", n.Key, n.DeliveredAt, n.Tries, want)
		}
	}
}

// Two schedulers on PostgreSQL: the active one is killed (-9, its whole
// tree) while it delivers a failure; the standby takes over and delivers
// it once the dead one's claim expires. Exactly one delivery.
func TestNotifyHATakeover(t *testing.T) {
	t.Parallel()
	h := newHook(t, true)
	w := newWorkspace(t, notifyWorkspace(t, h.srv.URL, `if [ ! -e hung ]; then touch hung; sleep 600; fi;`, "2s"))
	w.state = pgtest.DSN(t)
	a, b := w.haScheduler(""), w.haScheduler("")
	leader, standbys := active(t, a, b)
	waitFor(t, "the notify command to hang", func() bool { return w.exists("hung") })
	killTree(t, leader.cmd.Process.Pid)
	<-leader.done
	standby := standbys[0]
	waitFor(t, "the standby to lead", func() bool { return !standby.leadsAt().IsZero() })
	waitFor(t, "the delivery by the standby", func() bool { return len(w.lines("delivered.log")) > 0 })
	time.Sleep(3 * time.Second) // a second delivery would come now
	standby.term()
	deliveredOnce(t, w, h)
	if !strings.Contains(standby.stderr.String(), `msg="notification delivered"`) {
		t.Errorf("the standby did not deliver:\n%s", tail(standby.stderr.String(), 3000))
	}
	// The takeover itself, once, to the block that asks for it.
	var takeovers []notify.Payload
	for _, l := range w.lines("takeover.jsonl") {
		if l == "" {
			continue
		}
		var p notify.Payload
		if err := json.Unmarshal([]byte(l), &p); err != nil {
			t.Fatalf("takeover.jsonl: %v: %q", err, l)
		}
		takeovers = append(takeovers, p)
	}
	if len(takeovers) != 1 || takeovers[0].Event != "scheduler_takeover" || takeovers[0].Notify != "ops" ||
		takeovers[0].Generation < 2 || takeovers[0].Host == "" || takeovers[0].PreviousLeader == "" || takeovers[0].Host == takeovers[0].PreviousLeader {
		t.Errorf("scheduler_takeover notifications: %+v, want one naming the new and the previous leader", takeovers)
	}
}
