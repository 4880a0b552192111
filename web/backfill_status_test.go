package web_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/rewind-dev/rewind/backfill"
	"github.com/rewind-dev/rewind/store"
	"github.com/rewind-dev/rewind/web"
)

// statusOf is `backfill status --json` of a backfill of plan in state and
// phase, without runs.
func statusOf(t *testing.T, plan backfill.Plan, state store.BackfillState, phase string) web.BackfillStatusJSON {
	t.Helper()
	raw, err := json.Marshal(plan)
	if err != nil {
		t.Fatal(err)
	}
	b := store.Backfill{ID: "p_1", Pipeline: "p", State: state, Phase: phase, Plan: string(raw),
		CreatedAt: time.Date(2025, 7, 2, 0, 0, 0, 0, time.UTC), UpdatedAt: time.Date(2025, 7, 2, 0, 1, 0, 0, time.UTC)}
	return web.BackfillStatus(b, nil)
}

// A backfill of a pipeline without outputs passed validate and cutover
// without anything to do: its phases say skipped, and why; their state
// stays what it was (done). One with outputs did them.
func TestBackfillPhasesSkippedWithoutOutputs(t *testing.T) {
	for _, c := range []struct {
		name    string
		plan    backfill.Plan
		skipped string
	}{
		{"no outputs", backfill.Plan{Pipeline: "p", Selected: 1}, "no outputs"},
		{"outputs", backfill.Plan{Pipeline: "p", Outputs: true, Selected: 1}, ""},
		{"no date selected", backfill.Plan{Pipeline: "p", Outputs: true}, "no date selected"},
	} {
		t.Run(c.name, func(t *testing.T) {
			st := statusOf(t, c.plan, store.BackfillSuccess, backfill.PhaseDone)
			got := map[string]web.PhaseJSON{}
			for _, p := range st.Phases {
				got[p.Name] = p
			}
			for _, name := range []string{backfill.PhaseValidate, backfill.PhaseCutover} {
				if p := got[name]; p.State != "done" || p.Skipped != c.skipped {
					t.Errorf("%s: %+v; want done, skipped %q", name, p, c.skipped)
				}
			}
			if p := got[backfill.PhaseRun]; p.State != "done" || p.Skipped != "" {
				t.Errorf("run: %+v; want done, not skipped", p)
			}
		})
	}
	// Not reached yet: pending, whatever it will do.
	st := statusOf(t, backfill.Plan{Pipeline: "p", Selected: 1}, store.BackfillRunning, backfill.PhaseRun)
	for _, p := range st.Phases {
		if p.Name == backfill.PhaseValidate && (p.State != "pending" || p.Skipped != "") {
			t.Errorf("validate before the run ends: %+v", p)
		}
	}
}
