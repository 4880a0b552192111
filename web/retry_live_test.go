package web_test

import (
	"context"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rewind-dev/rewind/store"
)

// Retry now, against a live engine: a task failed and waits an hour for
// its retry under a running `rewind scheduler`; retry now from the view
// makes the scheduler run the retry at once, and it succeeds. Without the
// action the task would stay up_for_retry for the hour.
func TestRetryNowUnderALiveScheduler(t *testing.T) {
	e := newEnv(t, `
pipeline "r" {
  schedule   = "@daily"
  start_date = "2025-03-01"
  end_date   = "2025-03-01"
  task "t" {
    retries     = 1
    retry_delay = "1h"
    command     = "echo try; if [ -e broken ]; then echo boom >&2; exit 1; fi"
  }
}
`)
	e.write("broken", "")
	e.startScheduler()
	ctx := context.Background()
	task := func() store.TaskInstance {
		runs, err := e.st.ListRuns(ctx, store.ListRunsParams{WithTasks: true})
		if err != nil {
			t.Fatal(err)
		}
		if len(runs) != 1 || len(runs[0].Tasks) != 1 {
			return store.TaskInstance{}
		}
		return runs[0].Tasks[0]
	}
	waitFor := func(what string, ok func(store.TaskInstance) bool) store.TaskInstance {
		t.Helper()
		deadline := time.Now().Add(90 * time.Second)
		for time.Now().Before(deadline) {
			if ti := task(); ok(ti) {
				return ti
			}
			time.Sleep(100 * time.Millisecond)
		}
		t.Fatalf("%s: not so after 90 s; the task instance is %+v", what, task())
		return store.TaskInstance{}
	}
	ti := waitFor("the first try fails, a retry waits", func(ti store.TaskInstance) bool { return ti.State == store.TaskUpForRetry })
	if wait := time.Until(ti.NextTryAt); wait < 50*time.Minute {
		t.Fatalf("the retry is due in %v; want about an hour (retry_delay)", wait)
	}
	if err := os.Remove(filepath.Join(e.dir, "broken")); err != nil {
		t.Fatal(err)
	}
	srv := e.writeServer(uiToken)
	code, body := post(t, srv, "/api/pipelines/r/retry", url.Values{"start": {"2025-03-01"}, "end": {"2025-03-01"}, "task": {"t"}},
		"Authorization", "Bearer "+uiToken)
	if code != 200 || !strings.Contains(body, "retry now") {
		t.Fatalf("retry now: %d %s", code, body)
	}
	ti = waitFor("the scheduler runs the retry at once and it succeeds", func(ti store.TaskInstance) bool { return ti.State == store.TaskSuccess })
	if ti.TryNumber != 2 {
		t.Errorf("the task succeeded after %d tries; want 2 (the failure, then the retry)", ti.TryNumber)
	}
}
