package backfill

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/rewind-dev/rewind/dsl"
	"github.com/rewind-dev/rewind/skew"
	"github.com/rewind-dev/rewind/store"
	"github.com/rewind-dev/rewind/timetable"
)

// PlanRoutes sets the pool and reason of every date of plan to those its
// run will use: the skew block's rules, and for a date that has a run, the
// history of its tasks' attempts (an OOM escalation, a slow date), as the
// engine routes them. A probe that fails for a date of the plan is an
// error (ErrProbe) naming the date and what the probe printed.
func PlanRoutes(ctx context.Context, st store.Store, ws *dsl.Workspace, plan *Plan) error {
	def := ws.Pipeline(plan.Pipeline)
	if def == nil || len(plan.Dates) == 0 {
		return nil
	}
	tt, err := timetable.New(def.Schedule, def.Timezone)
	if err != nil {
		return err
	}
	ivs := make([]timetable.Interval, len(plan.Dates))
	for i, d := range plan.Dates {
		start, err := time.Parse(time.RFC3339, d.LogicalDate)
		if err != nil {
			return fmt.Errorf("plan date %q: %w", d.LogicalDate, err)
		}
		start = start.In(def.Timezone)
		ivs[i] = timetable.Interval{Start: start, End: tt.Next(start)}
	}
	routes, failures := skew.DateRoutesChecked(ctx, def, ivs)
	if len(failures) > 0 {
		return fmt.Errorf("%w: %s", skew.ErrProbe, ws.Redact(strings.Join(failures, "; ")))
	}
	runs, err := st.ListRuns(ctx, store.ListRunsParams{Pipelines: []string{def.Name}, From: ivs[0].Start, To: ivs[len(ivs)-1].Start, WithTasks: true, WithAttempts: true})
	if err != nil {
		return err
	}
	byDate := map[int64]store.Run{}
	for _, r := range runs {
		byDate[r.LogicalDate.Unix()] = r
	}
	var medians map[string][]time.Duration
	var probe *skew.Probes
	if def.Skew.HasProbe() {
		probe = skew.Measure(ctx, def, def.Skew, nil) // memoized: no probe runs again
	}
	for i := range plan.Dates {
		plan.Dates[i].Pool, plan.Dates[i].Reason, plan.Dates[i].Detector = routes[i].Pool, ws.Redact(routes[i].Reason), routes[i].Detector
		r, ok := byDate[ivs[i].Start.Unix()]
		if !ok {
			continue
		}
		if medians == nil {
			if medians, err = st.TaskDurations(ctx, store.TaskDurationsParams{Pipeline: def.Name, Limit: 500}); err != nil {
				return err
			}
		}
		rv := dsl.RunVars{ID: store.RunID(r.Kind, ivs[i].Start), Pipeline: def.Name, LogicalDate: ivs[i].Start,
			DataIntervalStart: ivs[i].Start, DataIntervalEnd: ivs[i].End, Kind: string(store.KindBackfill)}
		if rt, ok := skew.RunRoute(ws, def, r, rv, probe, medians); ok {
			plan.Dates[i].Pool, plan.Dates[i].Reason, plan.Dates[i].Detector = rt.Pool, ws.Redact(rt.Reason), rt.Detector
		}
	}
	return nil
}
