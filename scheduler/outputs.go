package scheduler

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/rewind-dev/rewind/dsl"
	"github.com/rewind-dev/rewind/lake"
	"github.com/rewind-dev/rewind/store"
	"github.com/rewind-dev/rewind/timetable"
)

// BranchName is the Iceberg branch a backfill writes its outputs to.
func BranchName(backfillID string) string { return "backfill_" + backfillID }

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
func commitOutputsOnce(ctx context.Context, lakes *Lakes, def *dsl.Pipeline, run store.Run, rv dsl.RunVars, key string) (err error) {
	var landed []string
	defer func() {
		if err != nil && len(landed) > 0 {
			err = fmt.Errorf("%w (committed before it: %s; a retry commits only the others)", err, strings.Join(landed, ", "))
		}
	}()
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
			return fmt.Errorf("output %s: %w", o.Name, noOutputFiles{err})
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
				landed = append(landed, o.Name)
				continue
			}
		}
		summary := map[string]string{"rewind.pipeline": def.Name, "rewind.run-id": rv.ID, "rewind.kind": rv.Kind}
		if key != "" {
			summary[CommitKeyProperty] = key
		}
		if _, err := lk.ReplaceIntervals(ctx, lo, ref, RunIntervals(def, rv), files, summary); err != nil {
			return fmt.Errorf("output %s: %w", o.Name, err)
		}
		landed = append(landed, o.Name)
	}
	return nil
}

// RunIntervals are the schedule's intervals that a run's data interval
// holds: one for a run of its own, every interval of its batch for the
// leader of a batch (which writes all of their partitions).
func RunIntervals(def *dsl.Pipeline, rv dsl.RunVars) []lake.Interval {
	one := []lake.Interval{{DS: rv.LogicalDate.Format("2006-01-02"), Start: rv.DataIntervalStart, End: rv.DataIntervalEnd}}
	tt, err := timetable.New(def.Schedule, def.Timezone)
	if err != nil {
		return one
	}
	var out []lake.Interval
	for at := rv.DataIntervalStart.In(def.Timezone); at.Before(rv.DataIntervalEnd); {
		next := tt.Next(at)
		if next.IsZero() || next.After(rv.DataIntervalEnd) || len(out) == 0 && !next.Before(rv.DataIntervalEnd) {
			break
		}
		out = append(out, lake.Interval{DS: at.Format("2006-01-02"), Start: at, End: next})
		at = next
	}
	if len(out) < 2 || !out[len(out)-1].End.Equal(rv.DataIntervalEnd) {
		return one // a run of one interval, or one not on the schedule's ticks
	}
	return out
}

// noOutputFiles: an output's files could not be listed (its glob found
// none, or is invalid): trying again cannot help. Its text is err's.
type noOutputFiles struct{ err error }

func (e noOutputFiles) Error() string { return e.err.Error() }
func (e noOutputFiles) Unwrap() error { return e.err }

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
