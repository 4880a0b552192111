package backfill

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/rewind-dev/rewind/store"
)

// A recorded plan names the renamed pipeline under its new name wherever
// it named the old one (backfilled, consumer, watermark, rebuilt), and is
// otherwise what it was; a plan that does not name it is left as written.
func TestRenamePlan(t *testing.T) {
	plan := Plan{
		Pipeline: "orders", Start: "2025-07-01", End: "2025-07-02", Reprocess: "failed",
		Dates:      []PlanDate{{LogicalDate: "2025-07-01T00:00:00Z", DS: "2025-07-01", State: "failed", Action: "reprocess", Pool: "default"}},
		Watermarks: []WatermarkReset{{Pipeline: "orders", Current: "2025-07-02T00:00:00Z"}, {Pipeline: "kpis"}},
		Downstream: []string{"kpis", "orders_daily"}, Rebuilt: []string{"kpis"},
	}
	raw, _ := json.Marshal(plan)
	got, renamed, err := RenamePlan(string(raw), "orders", "sales")
	if err != nil || !renamed {
		t.Fatalf("RenamePlan = %v, %v", renamed, err)
	}
	want := strings.NewReplacer(`"pipeline":"orders"`, `"pipeline":"sales"`).Replace(string(raw))
	if got != want {
		t.Errorf("renamed plan:\n%s\nwant\n%s", got, want)
	}
	got, renamed, err = RenamePlan(string(raw), "kpis", "metrics")
	if err != nil || !renamed || !strings.Contains(got, `"downstream":["metrics","orders_daily"]`) ||
		!strings.Contains(got, `"rebuilt":["metrics"]`) || !strings.Contains(got, `{"pipeline":"metrics","current":"","reset_to":""}`) {
		t.Errorf("a consumer renamed: %s, %v, %v", got, renamed, err)
	}
	for _, raw := range []string{string(raw), ""} {
		if got, renamed, err := RenamePlan(raw, "orders_d", "x"); got != raw || renamed || err != nil {
			t.Errorf("a plan without the name = %q, %v, %v", got, renamed, err)
		}
	}
	if _, _, err := RenamePlan("{", "orders", "sales"); err == nil {
		t.Error("a plan that is not JSON was renamed")
	}
}

// A plan whose days hold several dates (a sub-daily schedule) names them,
// and its window, by logical date-time; a daily plan by day, as before.
// WindowOf names a recorded backfill's window the same way.
func TestPlanNamesSubDailyDatesByDateTime(t *testing.T) {
	daily := Plan{Start: "2025-07-01", End: "2025-07-02", Dates: []PlanDate{
		{LogicalDate: "2025-07-01T00:00:00+02:00", DS: "2025-07-01"},
		{LogicalDate: "2025-07-02T00:00:00+02:00", DS: "2025-07-02"},
	}}
	hourly := Plan{Start: "2026-11-26", End: "2026-11-26", Dates: []PlanDate{
		{LogicalDate: "2026-11-26T00:00:00+01:00", DS: "2026-11-26"},
		{LogicalDate: "2026-11-26T01:00:00+01:00", DS: "2026-11-26"},
		{LogicalDate: "2026-11-26T02:00:00+01:00", DS: "2026-11-26"},
	}}
	if daily.SubDaily() || daily.DateName(daily.Dates[1]) != "2025-07-02" {
		t.Errorf("daily: sub-daily %v, names %q", daily.SubDaily(), daily.DateName(daily.Dates[1]))
	}
	if from, to := daily.Window(); from != "2025-07-01" || to != "2025-07-02" {
		t.Errorf("daily window %s .. %s", from, to)
	}
	if !hourly.SubDaily() || hourly.DateName(hourly.Dates[1]) != "2026-11-26T01:00:00+01:00" {
		t.Errorf("hourly: sub-daily %v, names %q", hourly.SubDaily(), hourly.DateName(hourly.Dates[1]))
	}
	if from, to := hourly.Window(); from != "2026-11-26T00:00:00+01:00" || to != "2026-11-26T02:00:00+01:00" {
		t.Errorf("hourly window %s .. %s", from, to)
	}
	for _, c := range []struct {
		plan     Plan
		from, to string
	}{{daily, "2025-07-01", "2025-07-02"}, {hourly, "2026-11-26T00:00:00+01:00", "2026-11-26T02:00:00+01:00"}} {
		raw, _ := json.Marshal(c.plan)
		b := store.Backfill{Plan: string(raw), From: time.Date(2025, 7, 1, 0, 0, 0, 0, time.UTC), To: time.Date(2025, 7, 2, 0, 0, 0, 0, time.UTC)}
		if c.plan.SubDaily() {
			b.From, b.To = time.Date(2026, 11, 26, 0, 0, 0, 0, time.UTC), time.Date(2026, 11, 26, 2, 0, 0, 0, time.UTC)
		}
		if from, to := WindowOf(b); from != c.from || to != c.to {
			t.Errorf("WindowOf = %s .. %s; want %s .. %s", from, to, c.from, c.to)
		}
	}
}
