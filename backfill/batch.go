package backfill

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/rewind-dev/rewind/dsl"
	"github.com/rewind-dev/rewind/store"
)

// PlanBatch is one run of a batched backfill: the consecutive selected
// dates it covers, its data interval and its pool.
type PlanBatch struct {
	Start     string `json:"start"` // the logical date of its first interval (its run's)
	End       string `json:"end"`   // the end of its data interval
	Intervals int    `json:"intervals"`
	Pool      string `json:"pool"`
	// Split says why the batch ends before its span does ("" when it
	// ends at its span's end or at the window's).
	Split string `json:"split,omitempty"`
}

// batchKey numbers the span of batch b that t (in the pipeline's zone)
// falls in, counted from base (the window's start): hours from base,
// calendar days, weeks from the Monday of base's week, calendar months.
func batchKey(b dsl.Batch, base, t time.Time) int64 {
	civil := func(x time.Time) int64 {
		return time.Date(x.Year(), x.Month(), x.Day(), 0, 0, 0, 0, time.UTC).Unix() / 86400
	}
	n := int64(b.N)
	switch b.Unit {
	case dsl.BatchHours:
		return int64(math.Floor(t.Sub(base).Hours() / float64(n)))
	case dsl.BatchWeeks:
		monday := civil(base) - int64((base.Weekday()+6)%7)
		return floorDiv(civil(t)-monday, 7*n)
	case dsl.BatchMonths:
		return floorDiv(int64(t.Year()*12+int(t.Month()))-int64(base.Year()*12+int(base.Month())), n)
	default:
		return floorDiv(civil(t)-civil(base), n)
	}
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}

// makeBatches groups the plan's selected dates into batches: consecutive
// intervals of one span of b, on one pool. A batch ends early where a date
// of the window is not selected (it keeps its run) or where the pool
// changes (a hot date never shares a run with a date of another pool).
// ends[i] is the end of date i's interval.
func makeBatches(plan *Plan, b dsl.Batch, loc *time.Location, base time.Time, ends []time.Time) error {
	var cur *PlanBatch
	var curKey int64
	prevIn := false // the date before was in cur
	for i := range plan.Dates {
		d := &plan.Dates[i]
		if d.Action == "skip" {
			if cur != nil && prevIn {
				cur.Split = fmt.Sprintf("%s keeps its run (%s)", d.LogicalDate, d.State)
			}
			prevIn = false
			continue
		}
		at, err := time.Parse(time.RFC3339, d.LogicalDate)
		if err != nil {
			return err
		}
		key := batchKey(b, base.In(loc), at.In(loc))
		switch {
		case cur != nil && prevIn && key == curKey && d.Pool == cur.Pool:
			cur.Intervals++
			cur.End = ends[i].Format(time.RFC3339)
		default:
			if cur != nil && prevIn && key == curKey {
				cur.Split = fmt.Sprintf("%s runs on pool %s", d.LogicalDate, d.Pool)
			}
			plan.Batches = append(plan.Batches, PlanBatch{Start: d.LogicalDate, End: ends[i].Format(time.RFC3339), Intervals: 1, Pool: d.Pool})
			cur, curKey = &plan.Batches[len(plan.Batches)-1], key
		}
		d.Batch = cur.Start
		prevIn = true
	}
	return nil
}

// setBatches gives the backfill's runs the plan's batches, and makes a
// run that an earlier batched backfill left covering others (its data
// interval the batch's) a run of its own interval again.
func (a *applier) setBatches(ctx context.Context) error {
	runs, err := a.st.ListRuns(ctx, store.ListRunsParams{Pipelines: []string{a.def.Name}, From: a.b.From, To: a.b.To})
	if err != nil {
		return err
	}
	leads := map[int64]bool{}
	byDate := map[int64]store.Run{}
	for _, r := range runs {
		byDate[r.LogicalDate.Unix()] = r
		if r.BatchOf != 0 {
			leads[r.BatchOf] = true
		}
	}
	var batches []store.RunBatch
	for _, b := range a.runBatches() {
		r, ok := byDate[b.Start.Unix()]
		if len(b.Covered) > 0 || ok && (leads[r.ID] || !r.DataIntervalEnd.Equal(b.End)) {
			batches = append(batches, b)
		}
	}
	if len(batches) == 0 {
		return nil
	}
	return a.st.SetBatches(ctx, store.SetBatchesParams{Pipeline: a.def.Name, BackfillID: a.b.ID, Batches: batches, Now: time.Now()})
}

// runBatches are the plan's batches as the store sets them (the
// selected dates of a plan without batches are batches of one interval,
// their own).
func (a *applier) runBatches() []store.RunBatch {
	var out []store.RunBatch
	byStart := map[string]int{}
	for _, d := range a.selected() {
		at, err := time.Parse(time.RFC3339, d.LogicalDate)
		if err != nil {
			continue
		}
		lead := d.Batch
		if lead == "" {
			lead = d.LogicalDate
		}
		if i, ok := byStart[lead]; ok && lead != d.LogicalDate {
			out[i].Covered = append(out[i].Covered, at)
			continue
		}
		rv := a.runVars(d)
		byStart[lead] = len(out)
		out = append(out, store.RunBatch{Start: at, End: rv.DataIntervalEnd})
	}
	for _, pb := range a.plan.Batches {
		if i, ok := byStart[pb.Start]; ok {
			if end, err := time.Parse(time.RFC3339, pb.End); err == nil {
				out[i].End = end
			}
		}
	}
	return out
}
