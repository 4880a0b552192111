package main

import (
	"database/sql"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// planJSON is what these tests read of `backfill plan --json`.
type planJSON struct {
	Dates []struct {
		LogicalDate string `json:"logical_date"`
		Action      string `json:"action"`
		Pool        string `json:"pool"`
		Detector    string `json:"detector"`
		Reason      string `json:"reason"`
	} `json:"dates"`
}

func (w *workspace) plan(args ...string) planJSON {
	w.t.Helper()
	code, out, errs := w.rewind(append([]string{"backfill", "plan", "--json"}, args...)...)
	if code != 0 {
		w.t.Fatalf("backfill plan: exit %d: %s", code, errs)
	}
	var p planJSON
	if err := json.Unmarshal([]byte(out), &p); err != nil {
		w.t.Fatalf("backfill plan --json: %v\n%s", err, out)
	}
	return p
}

// recordedHot are the dates `dates --recorded --json` routes to another
// pool than default, by logical date, with the detector and reason.
func (w *workspace) recordedHot(args ...string) map[string]string {
	w.t.Helper()
	code, out, errs := w.rewind(append([]string{"dates", "--recorded", "--json"}, args...)...)
	if code != 0 {
		w.t.Fatalf("dates --recorded: exit %d: %s", code, errs)
	}
	var dates []struct {
		LogicalDate string `json:"logical_date"`
		Pool        string `json:"pool"`
		Detector    string `json:"detector"`
		Reason      string `json:"reason"`
	}
	if err := json.Unmarshal([]byte(out), &dates); err != nil {
		w.t.Fatalf("dates --json: %v\n%s", err, out)
	}
	hot := map[string]string{}
	for _, d := range dates {
		if d.Pool != "default" {
			hot[d.LogicalDate] = d.Pool + " " + d.Detector + " " + d.Reason
		}
	}
	return hot
}

// hotHours are the dates of a plan routed to the pool large, by logical
// date, with the detector and reason of each.
func (p planJSON) hotHours() map[string]string {
	hot := map[string]string{}
	for _, d := range p.Dates {
		if d.Pool != "default" {
			hot[d.LogicalDate] = d.Pool + " " + d.Detector + " " + d.Reason
		}
	}
	return hot
}

// hourlySkew is an hourly pipeline whose skew block sends hot hours to
// the pool large; floor is the block's history_min_duration ("": unset,
// the default of a minute).
func hourlySkew(floor, command string) string {
	attr := ""
	if floor != "" {
		attr = "\n    history_min_duration = \"" + floor + "\""
	}
	return `
pool "large" { slots = 2 }
pipeline "hourly" {
  schedule        = "@hourly"
  start_date      = "2025-11-01"
  max_active_runs = 8
  skew {
    pool = "large"` + attr + `
  }
  task "t" {
    command = <<-EOT
      ` + command + `
      echo "$REWIND_LOGICAL_DATE $REWIND_POOL" >> pools.log
    EOT
  }
}
`
}

// The report of issue 23: an hourly task whose tries take 6 ms, ten hours
// of which took 32 ms once, had those ten ordinary hours routed to the big
// pool by history (32 ms > 3 x 6 ms). The state holds exactly those
// durations (48 hours of real runs, their attempts' durations set to the
// report's); with the default history_min_duration of a minute, the plan
// and the backfill keep every hour on its own pool. The same state under
// history_min_duration = "0s" (no floor) routes the ten hours to large:
// what the report saw.
func TestHistoryFloorKeepsMillisecondTriesHome(t *testing.T) {
	t.Parallel()
	w := newWorkspace(t, map[string]string{"main.hcl": hourlySkew("", "true")})
	const now = "2025-11-03T00:00:00Z"
	if code, _, errs := w.rewind("run", "--quiet", "--now", now); code != 0 {
		t.Fatalf("run: exit %d: %s", code, errs)
	}
	db, err := sql.Open("sqlite3", filepath.Join(w.dir, ".rewind", "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	// Every try took 6 ms, but for the tries of 10 hours that took 32 ms.
	res, err := db.Exec(`UPDATE attempts SET ended_at = started_at + CASE
	    WHEN (SELECT r.logical_unix / 3600000000000 % 48 FROM task_instances ti JOIN runs r ON r.id = ti.run_id
	          WHERE ti.id = attempts.task_instance_id) IN (3, 7, 11, 15, 19, 23, 27, 31, 35, 39) THEN 32000000
	    ELSE 6000000 END`)
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := res.RowsAffected(); n != 48 {
		t.Fatalf("%d attempts in the state, want 48", n)
	}
	db.Close()

	window := []string{"hourly", "--start", "2025-11-01", "--end", "2025-11-02", "--reprocess", "completed", "--now", now}

	// Without a floor, the report's routing: 10 of the 48 hours to large.
	if err := os.WriteFile(filepath.Join(w.dir, "main.hcl"), []byte(hourlySkew("0s", "true")), 0o644); err != nil {
		t.Fatal(err)
	}
	p := w.plan(window...)
	if len(p.Dates) != 48 {
		t.Fatalf("%d dates in the plan, want 48", len(p.Dates))
	}
	hot := p.hotHours()
	if len(hot) != 10 {
		t.Fatalf("without a floor, %d hours routed to large, want the report's 10: %v", len(hot), hot)
	}
	for ld, why := range hot {
		if !strings.HasPrefix(why, "large history task t: history: try 1 ran 32ms, over 3 x the median 6ms") {
			t.Errorf("without a floor, %s: %q", ld, why)
		}
	}
	if got := w.recordedHot("hourly", "--now", now); len(got) != 10 {
		t.Errorf("without a floor, dates --recorded routes %d hours to large, want the plan's 10: %v", len(got), got)
	}

	// With the default floor (a minute), no hour is hot by history.
	if err := os.WriteFile(filepath.Join(w.dir, "main.hcl"), []byte(hourlySkew("", "true")), 0o644); err != nil {
		t.Fatal(err)
	}
	if hot := w.plan(window...).hotHours(); len(hot) != 0 {
		t.Errorf("with the default floor, hours routed to large: %v", hot)
	}
	if hot := w.recordedHot("hourly", "--now", now); len(hot) != 0 {
		t.Errorf("with the default floor, dates --recorded routes hours to large: %v", hot)
	}
	if code, _, errs := w.rewind(append([]string{"backfill", "apply", "--quiet"}, window...)...); code != 0 {
		t.Fatalf("backfill apply: exit %d: %s", code, errs)
	}
	lines := w.lines("pools.log")
	if len(lines) != 96 {
		t.Fatalf("%d attempts in pools.log, want 48 and 48 again", len(lines))
	}
	for _, l := range lines {
		if !strings.HasSuffix(l, " default") {
			t.Errorf("an attempt ran outside its pool: %q", l)
		}
	}
}

// A real try above the floor is still hot by history: one hour of six
// sleeps 2 s (history_min_duration = "1s"), the others take milliseconds;
// the plan routes that hour to large by history, and the backfill runs it
// there.
func TestHistoryRoutesLongTryAboveFloor(t *testing.T) {
	t.Parallel()
	w := newWorkspace(t, map[string]string{"main.hcl": hourlySkew("1s",
		`case "$REWIND_LOGICAL_DATE" in *T03:00:00*) sleep 2;; esac`)})
	const now = "2025-11-01T06:00:00Z"
	if code, _, errs := w.rewind("run", "--quiet", "--now", now); code != 0 {
		t.Fatalf("run: exit %d: %s", code, errs)
	}
	window := []string{"hourly", "--start", "2025-11-01T00:00:00Z", "--end", "2025-11-01T05:00:00Z", "--reprocess", "completed", "--now", now}
	p := w.plan(window...)
	if len(p.Dates) != 6 {
		t.Fatalf("%d dates in the plan, want 6", len(p.Dates))
	}
	hot := p.hotHours()
	why, ok := hot["2025-11-01T03:00:00Z"]
	if len(hot) != 1 || !ok || !strings.HasPrefix(why, "large history task t: history: try 1 ran ") || !strings.HasSuffix(why, "(history_min_duration 1s)") {
		t.Fatalf("hot hours %v, want 03:00 alone, by history", hot)
	}
	if got := w.recordedHot("hourly", "--now", now); len(got) != 1 || got["2025-11-01T03:00:00Z"] != why {
		t.Errorf("dates --recorded: hot hours %v, want the plan's %q", got, why)
	}
	if code, _, errs := w.rewind(append([]string{"backfill", "apply", "--quiet"}, window...)...); code != 0 {
		t.Fatalf("backfill apply: exit %d: %s", code, errs)
	}
	lines := w.lines("pools.log")
	if len(lines) != 12 {
		t.Fatalf("pools.log: %q, want 6 attempts and 6 again", lines)
	}
	for _, l := range lines[6:] {
		want := " default"
		if strings.HasPrefix(l, "2025-11-01T03:00:00") {
			want = " large"
		}
		if !strings.HasSuffix(l, want) {
			t.Errorf("backfill attempt %q, want pool%s", l, want)
		}
	}
}
