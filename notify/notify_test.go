package notify

import (
	"encoding/json"
	"os"
	"path/filepath"
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
