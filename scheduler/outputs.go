package scheduler

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/rewind-dev/rewind/dsl"
	"github.com/rewind-dev/rewind/lake"
	"github.com/rewind-dev/rewind/store"
)

// BranchName is the Iceberg branch a backfill writes its outputs to.
func BranchName(backfillID string) string { return "backfill_" + backfillID }

// TagName tags main's snapshot before a backfill's cutover.
func TagName(backfillID string) string { return "pre_backfill_" + backfillID }

// Lakes opens the workspace's catalogs as they are needed.
type Lakes struct {
	ws   *dsl.Workspace
	open map[string]*lake.Lake
}

// NewLakes returns the catalogs of a workspace, none open yet.
func NewLakes(ws *dsl.Workspace) *Lakes { return &Lakes{ws: ws, open: map[string]*lake.Lake{}} }

// Get opens (once) the named catalog.
func (l *Lakes) Get(ctx context.Context, name string) (*lake.Lake, error) {
	if name == "" {
		name = lake.DefaultCatalogName
	}
	if lk := l.open[name]; lk != nil {
		return lk, nil
	}
	c := l.ws.Catalogs[name]
	if c == nil {
		return nil, fmt.Errorf("unknown catalog %q", name)
	}
	lk, err := lake.Open(ctx, lake.Config{Name: c.Name, Type: c.Type, URI: c.URI, Warehouse: c.Warehouse})
	if err != nil {
		return nil, err
	}
	l.open[name] = lk
	return lk, nil
}

// Close closes every opened catalog.
func (l *Lakes) Close() error {
	var errs []error
	for _, lk := range l.open {
		errs = append(errs, lk.Close())
	}
	l.open = map[string]*lake.Lake{}
	return errors.Join(errs...)
}

// LakeOutput is the table shape of an output.
func LakeOutput(o *dsl.Output) lake.Output {
	cols := make([]lake.Column, len(o.Columns))
	for i, c := range o.Columns {
		cols[i] = lake.Column{Name: c.Name, Type: c.Type}
	}
	return lake.Output{Table: o.Table, Columns: cols, Partition: o.Partition}
}

// commitOutputs replaces each output's partition of the run with the files
// the run wrote, in one Iceberg commit per output: on main for scheduled
// and manual runs, on the backfill's branch for backfill runs. The
// partition is the run's date (ds) for an output partitioned by a date
// column, its data interval for one partitioned by a timestamp column.
func commitOutputs(ctx context.Context, lakes *Lakes, def *dsl.Pipeline, run store.Run, rv dsl.RunVars) error {
	return commitOutputsOnce(ctx, lakes, def, run, rv, "")
}

// CommitKeyProperty is the snapshot summary key that carries the outbox
// entry a commit came from: a commit found with it is not made again.
const CommitKeyProperty = "rewind.commit"

// commitOutputsOnce is commitOutputs made idempotent by key (when not
// empty): an output whose table already has a snapshot carrying the key was
// committed by an earlier attempt at this commit (a crash between the
// Iceberg commit and the state's update) and is not written twice.
func commitOutputsOnce(ctx context.Context, lakes *Lakes, def *dsl.Pipeline, run store.Run, rv dsl.RunVars, key string) error {
	for _, o := range def.Outputs {
		lk, err := lakes.Get(ctx, o.Catalog)
		if err != nil {
			return fmt.Errorf("output %s: %w", o.Name, err)
		}
		lo := LakeOutput(o)
		if err := lk.EnsureTable(ctx, lo); err != nil {
			return fmt.Errorf("output %s: %w", o.Name, err)
		}
		files, err := o.Files(rv)
		if err != nil {
			return fmt.Errorf("output %s: %w", o.Name, err)
		}
		ref := lake.MainBranch
		if run.Kind == store.KindBackfill {
			ref = BranchName(run.BackfillID)
			if err := lk.CreateBranch(ctx, o.Table, ref, lake.MainBranch); err != nil && !errors.Is(err, lake.ErrRefExists) && !errors.Is(err, lake.ErrEmptyTable) {
				return fmt.Errorf("output %s: branch %s: %w", o.Name, ref, err)
			}
		}
		if key != "" {
			if done, err := committed(ctx, lk, o.Table, key); err != nil {
				return fmt.Errorf("output %s: %w", o.Name, err)
			} else if done {
				continue
			}
		}
		summary := map[string]string{"rewind.pipeline": def.Name, "rewind.run-id": rv.ID, "rewind.kind": rv.Kind}
		if key != "" {
			summary[CommitKeyProperty] = key
		}
		iv := lake.Interval{DS: rv.LogicalDate.Format(dateOnly), Start: rv.DataIntervalStart, End: rv.DataIntervalEnd}
		if _, err := lk.ReplaceInterval(ctx, lo, ref, iv, files, summary); err != nil {
			return fmt.Errorf("output %s: %w", o.Name, err)
		}
	}
	return nil
}

// committed says whether a snapshot of the table carries the commit key.
func committed(ctx context.Context, lk *lake.Lake, table, key string) (bool, error) {
	snaps, err := lk.Snapshots(ctx, table)
	if err != nil {
		return false, err
	}
	for i := len(snaps) - 1; i >= 0; i-- {
		if snaps[i].Summary[CommitKeyProperty] == key {
			return true, nil
		}
	}
	return false, nil
}

// WindowValues are the partition values of output o that a backfill's
// dates cover, in their order: what its cutover and rollback replace
// (lake.ReplaceWindow) and its validation compares (Corrections). For an
// output partitioned by a date column they are the dates' ds; for one
// partitioned by a timestamp column, the start of each date's data
// interval (its logical date) in RFC 3339 UTC, lake.TimestampValue.
func WindowValues(o *dsl.Output, dates []PlanDate) ([]string, error) {
	lo := LakeOutput(o)
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
func Corrections(ctx context.Context, lakes *Lakes, def *dsl.Pipeline, oldRef, newRef string, dates []PlanDate) ([]Correction, error) {
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
