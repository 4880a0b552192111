package backfill

import (
	"context"
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/rewind-dev/rewind/dsl"
	"github.com/rewind-dev/rewind/lake"
	"github.com/rewind-dev/rewind/scheduler"
)

// TagName tags main's snapshot before a backfill's cutover.
func TagName(backfillID string) string { return "pre_backfill_" + backfillID }

// WindowValues are the partition values of output o that a backfill's
// dates cover, in their order: what its cutover and rollback replace
// (lake.ReplaceWindow) and its validation compares (Corrections). For an
// output partitioned by a date column they are the dates' ds; for one
// partitioned by a timestamp column, the start of each date's data
// interval (its logical date) in RFC 3339 UTC, lake.TimestampValue.
func WindowValues(o *dsl.Output, dates []PlanDate) ([]string, error) {
	lo := scheduler.LakeOutput(o)
	out := make([]string, 0, len(dates))
	for _, d := range dates {
		iv := lake.Interval{DS: d.DS}
		if lo.IntervalPartitioned() {
			start, err := time.Parse(time.RFC3339, d.LogicalDate)
			if err != nil {
				return nil, fmt.Errorf("output %s: logical date %q: %w", o.Name, d.LogicalDate, err)
			}
			iv.Start = start
		}
		out = append(out, lo.PartitionValue(iv))
	}
	return out, nil
}

// Correction is what a backfill changes in one partition of one output.
type Correction struct {
	Output string
	// DS is the partition: the date (YYYY-MM-DD) of an output partitioned
	// by date, the data interval's start (RFC 3339 UTC) of one partitioned
	// by a timestamp column (WindowValues).
	DS      string
	OldRows int64
	NewRows int64
	Column  string  // the summed column ("" for row counts only)
	Old     float64 // the column's sum on main before the cutover
	New     float64 // its sum on the backfill's branch
	Change  float64 // |new - old| / |old| (0 when old is 0 and new is 0, +Inf when only old is 0)
	Limit   float64 // max_change, 0 when none
	// FailedRules are the validate rules over old.* / new.* that are false
	// for this date (set on the date's first correction of the output).
	FailedRules []string
}

// Violates reports whether the correction is over its output's max_change
// (a date main did not have yet is new data, not a change).
func (c Correction) Violates() bool {
	return len(c.FailedRules) > 0 || c.Limit > 0 && c.OldRows > 0 && c.Change > c.Limit
}

// Corrections compares, per date of dates (a backfill's selected dates),
// each output's partition of that date on oldRef and newRef: row counts and
// the sums of the max_change columns. The partitions are the outputs'
// WindowValues of the dates.
func Corrections(ctx context.Context, lakes *scheduler.Lakes, def *dsl.Pipeline, oldRef, newRef string, dates []PlanDate) ([]Correction, error) {
	var out []Correction
	for _, o := range def.Outputs {
		lk, err := lakes.Get(ctx, o.Catalog)
		if err != nil {
			return nil, err
		}
		window, err := WindowValues(o, dates)
		if err != nil {
			return nil, err
		}
		cols := make([]string, 0, len(o.MaxChange))
		for c := range o.MaxChange {
			cols = append(cols, c)
		}
		sort.Strings(cols)
		fetch := append([]string(nil), cols...)
		for _, c := range o.RuleColumns() {
			if o.MaxChange[c] == 0 {
				fetch = append(fetch, c)
			}
		}
		oldStats, err := lk.PartitionStats(ctx, o.Table, oldRef, fetch)
		if err != nil {
			return nil, fmt.Errorf("output %s on %s: %w", o.Name, oldRef, err)
		}
		newStats, err := lk.PartitionStats(ctx, o.Table, newRef, fetch)
		if err != nil {
			return nil, fmt.Errorf("output %s on %s: %w", o.Name, newRef, err)
		}
		for _, ds := range window {
			ov, nv := oldStats[ds], newStats[ds]
			first := len(out)
			if len(cols) == 0 {
				out = append(out, Correction{Output: o.Name, DS: ds, OldRows: ov.Rows, NewRows: nv.Rows})
			}
			for _, c := range cols {
				old, nw := ov.Sums[c], nv.Sums[c]
				change := 0.0
				switch {
				case old != 0:
					change = math.Abs(nw-old) / math.Abs(old)
				case nw != 0:
					change = math.Inf(1)
				}
				out = append(out, Correction{Output: o.Name, DS: ds, OldRows: ov.Rows, NewRows: nv.Rows,
					Column: c, Old: old, New: nw, Change: change, Limit: o.MaxChange[c]})
			}
			if len(o.Rules) > 0 && ov.Rows > 0 {
				out[first].FailedRules = o.CheckRules(ruleValues(ov), ruleValues(nv))
			}
		}
	}
	return out, nil
}

// ruleValues are old.* or new.* of a validate rule: rows and column sums.
func ruleValues(st lake.PartitionStat) map[string]float64 {
	m := map[string]float64{"rows": float64(st.Rows)}
	for c, v := range st.Sums {
		m[c] = v
	}
	return m
}

// correctionsTable renders corrections as a Markdown table: one row per
// partition (a ds, or an interval's start when some output is partitioned
// by data interval) and column.
func correctionsTable(cs []Correction) string {
	var sb strings.Builder
	head := "ds"
	for _, c := range cs {
		if strings.Contains(c.DS, "T") {
			head = "partition"
		}
	}
	sb.WriteString("| output | " + head + " | rows old -> new | column | old | new | change | max_change |\n|---|---|---|---|---|---|---|---|\n")
	for _, c := range cs {
		limit, flag := "", ""
		if c.Limit > 0 {
			limit = fmt.Sprintf("%.4g", c.Limit)
		}
		if c.Violates() {
			flag = " **over**"
		}
		fmt.Fprintf(&sb, "| %s | %s | %d -> %d | %s | %.2f | %.2f | %.2f%%%s | %s |\n", c.Output, c.DS, c.OldRows, c.NewRows, c.Column, c.Old, c.New, 100*c.Change, flag, limit)
	}
	for _, c := range cs {
		for _, r := range c.FailedRules {
			fmt.Fprintf(&sb, "\nRule failed for %s %s: `%s`\n", c.Output, c.DS, r)
		}
	}
	return sb.String()
}
