package storetest

import (
	"testing"
	"time"

	"github.com/rewind-dev/rewind/store"
)

// testProbes: probe results are saved per pipeline, task and logical date,
// a later measurement replacing an earlier one, and read back by window,
// oldest first, with their offsets, values, failures and routes intact.
func testProbes(t *testing.T, st store.Store) {
	rome, err := time.LoadLocation("Europe/Rome")
	if err != nil {
		t.Fatal(err)
	}
	day := func(d int) time.Time { return time.Date(2025, 11, d, 0, 0, 0, 0, rome) }
	if got, err := st.ListProbes(ctx, store.ListProbesParams{Pipeline: "p"}); err != nil || len(got) != 0 {
		t.Fatalf("ListProbes of an empty state = %v, %v", got, err)
	}
	rows := []store.ProbeResult{
		{Pipeline: "p", LogicalDate: day(28), Value: 5000.5, Median: 100, Pool: "large", Reason: "probe: 5000.5 > 3 x median 100", MeasuredAt: now},
		{Pipeline: "p", LogicalDate: day(27), Value: 100, Median: 100, Pool: "default", MeasuredAt: now},
		{Pipeline: "p", LogicalDate: day(29), Error: "probe of 2025-11-29 exited 3", Pool: "default", Reason: "probe failed, not treated as hot: probe of 2025-11-29 exited 3", MeasuredAt: now},
		{Pipeline: "p", Task: "t", LogicalDate: day(28), Value: 7, Median: 7, Pool: "default", MeasuredAt: now},
		{Pipeline: "q", LogicalDate: day(28), Value: 1, Median: 1, Pool: "default", MeasuredAt: now},
	}
	if err := st.RecordProbes(ctx, rows); err != nil {
		t.Fatal(err)
	}
	got, err := st.ListProbes(ctx, store.ListProbesParams{Pipeline: "p"})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 {
		t.Fatalf("ListProbes(p) = %d rows, want 3 (the pipeline's block only): %+v", len(got), got)
	}
	want := []store.ProbeResult{rows[1], rows[0], rows[2]}
	for i, g := range got {
		w := want[i]
		if !g.LogicalDate.Equal(w.LogicalDate) || g.LogicalDate.Format(time.RFC3339) != w.LogicalDate.Format(time.RFC3339) ||
			g.Value != w.Value || g.Median != w.Median || g.Error != w.Error || g.Pool != w.Pool || g.Reason != w.Reason ||
			g.Pipeline != "p" || g.Task != "" || !g.MeasuredAt.Equal(now) {
			t.Errorf("row %d = %+v, want %+v", i, g, w)
		}
	}
	// A window, inclusive; a task's own block.
	got, err = st.ListProbes(ctx, store.ListProbesParams{Pipeline: "p", From: day(28), To: day(29)})
	if err != nil || len(got) != 2 || !got[0].LogicalDate.Equal(day(28)) {
		t.Errorf("ListProbes(p, 28..29) = %+v, %v", got, err)
	}
	got, err = st.ListProbes(ctx, store.ListProbesParams{Pipeline: "p", Limit: 1})
	if err != nil || len(got) != 1 || !got[0].LogicalDate.Equal(day(27)) {
		t.Errorf("ListProbes(p, limit 1) = %+v, %v", got, err)
	}
	got, err = st.ListProbes(ctx, store.ListProbesParams{Pipeline: "p", Task: "t"})
	if err != nil || len(got) != 1 || got[0].Value != 7 || got[0].Task != "t" {
		t.Errorf("ListProbes(p, task t) = %+v, %v", got, err)
	}
	// A later measurement replaces the row.
	later := now.Add(time.Hour)
	if err := st.RecordProbes(ctx, []store.ProbeResult{{Pipeline: "p", LogicalDate: day(29), Value: 90, Median: 100, Pool: "default", MeasuredAt: later}}); err != nil {
		t.Fatal(err)
	}
	got, err = st.ListProbes(ctx, store.ListProbesParams{Pipeline: "p", From: day(29), To: day(29)})
	if err != nil || len(got) != 1 || got[0].Value != 90 || got[0].Error != "" || got[0].Reason != "" || !got[0].MeasuredAt.Equal(later) {
		t.Errorf("after a new measurement = %+v, %v", got, err)
	}
	// Bad rows are refused, and nothing of their batch is saved.
	for _, bad := range []store.ProbeResult{
		{LogicalDate: day(1), MeasuredAt: now},
		{Pipeline: "p", MeasuredAt: now},
		{Pipeline: "p", LogicalDate: day(1)},
	} {
		if err := st.RecordProbes(ctx, []store.ProbeResult{{Pipeline: "p", LogicalDate: day(2), MeasuredAt: now}, bad}); err == nil {
			t.Errorf("RecordProbes(%+v) = nil, want an error", bad)
		}
	}
	if got, _ := st.ListProbes(ctx, store.ListProbesParams{Pipeline: "p", To: day(2)}); len(got) != 0 {
		t.Errorf("a refused batch saved %+v", got)
	}
}
