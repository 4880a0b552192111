package scheduler_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"testing"
	"time"

	"github.com/rewind-dev/rewind/notify"
	"github.com/rewind-dev/rewind/scheduler"
	"github.com/rewind-dev/rewind/store"
)

const deadlineHCL = `
notify "oncall" {
  on      = ["deadline_missed"]
  command = "true"
}
pipeline "hourly" {
  schedule   = "@hourly"
  start_date = "2025-07-01T00:00:00Z"
  notify     = [notify.oncall]
  deadline   = "30m"
  task "t" { command = "true" }
}
pipeline "latest" {
  schedule   = "@hourly"
  start_date = "2025-07-01T00:00:00Z"
  catchup    = false
  notify     = [notify.oncall]
  deadline   = "30m"
  task "t" { command = "true" }
}
`

// deadlines returns the logical dates of the queued deadline_missed
// notifications of a pipeline, oldest first.
func deadlines(t *testing.T, st store.Store, pipeline string) []string {
	t.Helper()
	ns, err := st.ListNotifications(context.Background(), store.ListNotificationsParams{Pipeline: pipeline, Event: "deadline_missed"})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, n := range ns {
		var p notify.Payload
		if err := json.Unmarshal(n.Payload, &p); err != nil {
			t.Fatal(err)
		}
		if p.State != "missing" || p.Deadline == "" {
			t.Errorf("payload %+v: want a missing run and its deadline", p)
		}
		out = append(out, p.LogicalDate)
	}
	return out
}

// CheckDeadlines, looked at from outside the engine: the first look only
// records when it looked; a later one finds each interval whose deadline
// passed since, once; a paused pipeline is looked at without
// notifications (unpausing it does not page for the pause); a catchup =
// false pipeline is paged only for its latest interval; one look pages at
// most 50 intervals of a pipeline.
func TestCheckDeadlines(t *testing.T) {
	e := newEnv(t, deadlineHCL)
	ctx := context.Background()
	log := slog.New(slog.DiscardHandler)
	at := func(s string) time.Time {
		v, err := time.Parse(time.RFC3339, s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	check := func(now string, want int) {
		t.Helper()
		n, err := scheduler.CheckDeadlines(ctx, e.st, e.ws, at(now), log)
		if err != nil || n != want {
			t.Fatalf("CheckDeadlines at %s = %d, %v; want %d", now, n, err, want)
		}
	}
	for _, p := range []string{"hourly", "latest"} {
		if _, err := e.st.UpsertPipeline(ctx, store.UpsertPipelineParams{Name: p, Hash: e.ws.Pipeline(p).Hash, Now: at("2025-07-01T10:00:00Z")}); err != nil {
			t.Fatal(err)
		}
	}
	pause := func(paused bool) {
		t.Helper()
		for _, p := range []string{"hourly", "latest"} {
			if err := e.st.SetPaused(ctx, store.SetPausedParams{Name: p, Paused: paused, Now: time.Now()}); err != nil {
				t.Fatal(err)
			}
		}
	}
	check("2025-07-01T10:00:00Z", 0) // the first look: nothing reported
	// 10:00..13:00: the intervals of 09:00, 10:00 and 11:00 ended at
	// 10:00, 11:00, 12:00: their deadlines (+30m) passed; 12:00's not yet.
	check("2025-07-01T13:00:00Z", 4)
	if got := deadlines(t, e.st, "hourly"); len(got) != 3 || got[0] != "2025-07-01T09:00:00Z" || got[2] != "2025-07-01T11:00:00Z" {
		t.Errorf("hourly: deadlines of %v", got)
	}
	// catchup = false: only the latest interval whose deadline passed
	// (11:00, due at 12:30), not the ones before it.
	if got := deadlines(t, e.st, "latest"); len(got) != 1 || got[0] != "2025-07-01T11:00:00Z" {
		t.Errorf("latest: deadlines of %v, want only 2025-07-01T11:00:00Z", got)
	}
	check("2025-07-01T13:00:00Z", 0) // looked again: nothing twice

	// A deadline taken away and put back: its look starts over, nothing
	// is paged for the time without it.
	hourly := e.ws.Pipeline("hourly")
	hourly.Deadline = 0
	check("2025-07-01T18:00:00Z", 1) // latest's 16:00
	hourly.Deadline = 30 * time.Minute
	check("2025-07-01T18:00:00Z", 0)

	// Paused from 13:00 to 20:00: nothing is paged, nor after the unpause.
	pause(true)
	check("2025-07-01T20:00:00Z", 0)
	pause(false)
	check("2025-07-01T20:00:00Z", 0)

	// Down for five days: hourly pages the latest 50 of its 120
	// intervals, latest only its latest one.
	check("2025-07-06T20:45:00Z", 51)
	got := deadlines(t, e.st, "latest")
	if len(got) == 0 || got[len(got)-1] != "2025-07-06T19:00:00Z" {
		t.Errorf("latest: deadlines of %v, want 2025-07-06T19:00:00Z last", got)
	}
	if got := deadlines(t, e.st, "hourly"); got[len(got)-1] != "2025-07-06T19:00:00Z" || got[len(got)-50] != "2025-07-04T18:00:00Z" {
		t.Errorf("hourly: the last 50 deadlines are %v, want 2025-07-04T18:00 to 2025-07-06T19:00", got[len(got)-50:])
	}
}
