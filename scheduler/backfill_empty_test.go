package scheduler_test

import (
	"context"
	"testing"

	"github.com/rewind-dev/rewind/backfill"
	"github.com/rewind-dev/rewind/scheduler"
	"github.com/rewind-dev/rewind/store"
)

// A backfill that gives an output its first data (main was empty: the
// pipeline never ran) can be rolled back like any other: main holds its
// cutover, and the rollback empties the window again.
func TestRollbackOfTheFirstData(t *testing.T) {
	e := newEnv(t, revenueHCL)
	e.setFactor("1")
	now := utc("2025-07-03T00:00:00Z")
	plan := e.plan(backfill.PlanParams{Pipeline: "revenue", Start: utc("2025-07-01T00:00:00Z"), End: utc("2025-07-02T00:00:00Z"), Now: now})
	res, err := e.apply(backfill.ApplyOptions{Plan: plan, Now: now})
	if err != nil || res.State != store.BackfillSuccess {
		t.Fatalf("apply: %v (%s)", err, res.State)
	}
	if got := e.stats("main"); len(got) != 2 || got["2025-07-01"].Sums["amount_usd"] != 150 {
		t.Fatalf("main after the cutover: %v", got)
	}
	lakes := scheduler.NewLakes(e.ws)
	held, _, err := backfill.Cutover(context.Background(), lakes, e.ws.Pipeline("revenue"), res.ID)
	lakes.Close()
	if err != nil || !held {
		t.Fatalf("main holds the cutover of the first data: %v %v; want true", held, err)
	}
	if err := e.rollback(res.ID, now); err != nil {
		t.Fatalf("rollback: %v", err)
	}
	if got := e.stats("main"); len(got) != 0 {
		t.Errorf("main after the rollback: %v; want the window empty again", got)
	}
}
