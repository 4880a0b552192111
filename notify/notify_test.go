package notify

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rewind-dev/rewind/dsl"
	"github.com/rewind-dev/rewind/store"
)

func TestRetryBackoff(t *testing.T) {
	for tries, want := range map[int]time.Duration{1: 5 * time.Second, 2: 10 * time.Second, 3: 20 * time.Second, 4: 40 * time.Second, 5: time.Minute, 50: time.Minute} {
		if got := Retry(tries); got != want {
			t.Errorf("Retry(%d) = %s, want %s", tries, got, want)
		}
	}
}

// Queue makes one notification per channel of each block the pipeline
// names that gets the event, with the block's key in the payload, and
// none for a block that does not get it.
func TestQueueByBlockAndChannel(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "main.hcl"), []byte(`
notify "both" {
  on      = ["run_failed"]
  command = "true"
  webhook = "https://hooks.example/T0KEN"
}
notify "reports" {
  command = "true"
}
notify "late" {
  on      = ["deadline_missed"]
  webhook = "https://hooks.example/x"
}
pipeline "p" {
  schedule   = "@hourly"
  start_date = "2025-01-01"
  timezone   = "Europe/Rome"
  notify     = [notify.both, notify.reports, notify.late]
  task "a" { command = "true" }
}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	ws, diags := dsl.Load(dir, dsl.LoadOptions{})
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	p := ws.Pipeline("p")
	ld := time.Date(2025, 3, 30, 1, 0, 0, 0, time.UTC)
	ns, err := Queue(ws, Event{Name: dsl.EventRunFailed, Key: "run_failed:p:x", Pipeline: p, State: "failed", At: ld,
		Run: store.Run{ID: 7, Kind: store.KindScheduled, LogicalDate: ld, DataIntervalStart: ld, DataIntervalEnd: ld.Add(time.Hour)}})
	if err != nil {
		t.Fatal(err)
	}
	if len(ns) != 2 || ns[0].Channel != ChannelCommand || ns[1].Channel != ChannelWebhook || ns[0].Key != "run_failed:p:x:both/command" || ns[1].Key != "run_failed:p:x:both/webhook" {
		t.Fatalf("queued %+v", ns)
	}
	var pl Payload
	if err := json.Unmarshal(ns[1].Payload, &pl); err != nil {
		t.Fatal(err)
	}
	if pl.IdempotencyKey != "run_failed:p:x:both" || payloadKey(ns[1]) != pl.IdempotencyKey || pl.LogicalDate != "2025-03-30T03:00:00+02:00" || pl.RunID != "scheduled__2025-03-30T01:00:00Z" {
		t.Errorf("payload %+v", pl)
	}
	if !Wanted(ws, p, dsl.EventDeadlineMissed) || Wanted(ws, p, "scheduler_takeover") {
		t.Error("Wanted")
	}
	if linked := withLink(ns[1].Payload, "https://rewind.example.com"); !json.Valid(linked) {
		t.Fatal("withLink broke the JSON")
	} else if json.Unmarshal(linked, &pl); pl.Link != "https://rewind.example.com/pipelines/p/runs/scheduled__2025-03-30T01:00:00Z" {
		t.Errorf("link %q", pl.Link)
	}
}

// A block whose webhook hangs (a listener that never answers) does not
// starve the others: in one round, the healthy command block gets every
// one of its notifications while the hanging one costs a timeout per
// turn; and a redirect is not taken for a delivery.
func TestRoundRobinOverBlocks(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close() // accepted by the kernel, never answered
	redirect := httptest.NewServer(http.RedirectHandler("http://127.0.0.1:1/elsewhere", http.StatusFound))
	defer redirect.Close()
	dir := t.TempDir()
	hcl := fmt.Sprintf(`
notify "a_hangs" {
  on      = ["run_failed"]
  webhook = "http://%s/hook"
  timeout = "1s"
}
notify "b_mail" {
  on      = ["run_failed"]
  command = "cat >> mail.log; echo >> mail.log"
}
notify "c_moved" {
  on      = ["run_failed"]
  webhook = %q
}
pipeline "p" {
  schedule   = "@daily"
  start_date = "2025-01-01"
  notify     = [notify.a_hangs, notify.b_mail, notify.c_moved]
  task "a" { command = "true" }
}
`, ln.Addr(), redirect.URL)
	if err := os.WriteFile(filepath.Join(dir, "main.hcl"), []byte(hcl), 0o644); err != nil {
		t.Fatal(err)
	}
	ws, diags := dsl.Load(dir, dsl.LoadOptions{})
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	st, err := store.Open(context.Background(), "sqlite:"+filepath.Join(dir, "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	p := ws.Pipeline("p")
	for day := 1; day <= 5; day++ {
		ld := time.Date(2025, 1, day, 0, 0, 0, 0, time.UTC)
		ns, err := Queue(ws, Event{Name: dsl.EventRunFailed, Key: fmt.Sprintf("run_failed:p:%d", day), Pipeline: p, State: "failed", At: ld,
			Run: store.Run{ID: int64(day), Kind: store.KindScheduled, LogicalDate: ld, DataIntervalStart: ld, DataIntervalEnd: ld.AddDate(0, 0, 1)}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.EnqueueNotifications(context.Background(), ns); err != nil {
			t.Fatal(err)
		}
	}
	// A round cut after six claims (a, b, c, the blocks no longer
	// declared, a, b) has delivered two of the healthy block's: block by
	// block, it would have spent them all on the hanging one.
	counting := &claimCounter{Store: st}
	d := &Deliverer{Store: counting, Workspace: ws, Owner: "test", Stopping: func() bool { return counting.n.Load() >= 6 }}
	res, err := d.Round(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if res.Delivered != 2 || res.Retried != 3 {
		t.Errorf("six claims: %+v, want 2 delivered (b_mail) and 3 retried (a_hangs twice, c_moved)", res)
	}
	d.Stopping = nil
	more, err := d.Round(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	res.Delivered += more.Delivered
	res.Retried += more.Retried
	mail, err := os.ReadFile(filepath.Join(dir, "mail.log"))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(mail), `"event":"run_failed"`); n != 5 || res.Delivered != 5 {
		t.Errorf("the healthy block got %d of 5 (round: %+v)", n, res)
	}
	// Each of the others failed once per notification, and waits to retry.
	if res.Retried != 10 {
		t.Errorf("round: %+v, want 10 retried (5 hanging, 5 redirected)", res)
	}
	ns, err := st.ListNotifications(context.Background(), store.ListNotificationsParams{Pending: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range ns {
		if n.Notify == "b_mail" || n.Tries != 1 || !strings.Contains(n.LastError, "webhook") {
			t.Errorf("pending %s after one try: %q", n.Key, n.LastError)
		}
	}
}

// claimCounter counts the claims of a deliverer.
type claimCounter struct {
	store.Store
	n atomic.Int32
}

func (c *claimCounter) ClaimNotifications(ctx context.Context, p store.ClaimNotificationsParams) ([]store.Notification, error) {
	c.n.Add(1)
	return c.Store.ClaimNotifications(ctx, p)
}
