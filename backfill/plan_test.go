package backfill

import (
	"encoding/json"
	"strings"
	"testing"
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
