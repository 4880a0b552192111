package web_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/rewind-dev/rewind/web"
)

// The pipelines page and /api/pipelines: each pipeline's last run and
// last failure, read from the state without listing every run.
func TestAPIPipelinesLastFailure(t *testing.T) {
	e := dailyEnv(t) // 2025-03-01 .. 03-06; 03-04 failed
	srv := e.server("")
	_, body := get(t, srv, "/api/pipelines")
	var ps []web.PipelineJSON
	if err := json.Unmarshal([]byte(body), &ps); err != nil || len(ps) != 1 {
		t.Fatalf("%v %s", err, body)
	}
	p := ps[0]
	if p.LastRun == nil || p.LastRun.DS != "2025-03-06" || p.LastFailure == nil || p.LastFailure.DS != "2025-03-04" || p.LastFailure.State != "failed" {
		t.Errorf("last run %+v, last failure %+v", p.LastRun, p.LastFailure)
	}
	if p.Runs["success"] != 5 || p.Runs["failed"] != 1 {
		t.Errorf("runs %v", p.Runs)
	}
	_, page := get(t, srv, "/")
	if !strings.Contains(page, `<th>last failure</th>`) || !strings.Contains(page, `/runs/4">2025-03-04</a>`) {
		t.Error("the page does not show the last failure")
	}
	if !strings.Contains(page, `<table class="list" id="pipelines" data-live="true">`) {
		t.Error("the pipelines table is not live")
	}
}
