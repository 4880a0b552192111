package lake

import (
	"context"
	"fmt"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/iceberg-go/table"
)

// PartitionStat is what validation compares per date: the row count and the
// sums of the named numeric columns (nulls count as nothing).
type PartitionStat struct {
	Rows int64
	Sums map[string]float64
}

// PartitionStats reads the table at ref (a branch or tag) and returns, per
// date of its partition column (formatted YYYY-MM-DD), the row count and
// the sum of each of sumColumns. A table or ref without a snapshot has no
// partitions.
func (l *Lake) PartitionStats(ctx context.Context, tableName, ref string, sumColumns []string) (map[string]PartitionStat, error) {
	if ref == "" {
		ref = MainBranch
	}
	tbl, err := l.load(ctx, tableName)
	if err != nil {
		return nil, err
	}
	out := map[string]PartitionStat{}
	md := tbl.Metadata()
	r, ok := findRef(md, ref)
	if !ok {
		if ref == MainBranch {
			return out, nil
		}
		return nil, fmt.Errorf("%w: %s of %s", ErrNoSuchRef, ref, tableName)
	}
	spec := tbl.Spec()
	if spec.NumFields() != 1 {
		return nil, fmt.Errorf("lake: %s: want one identity partition on the date column", tableName)
	}
	pf, ok := tbl.Schema().FindFieldByID(spec.Field(0).SourceID())
	if !ok {
		return nil, fmt.Errorf("lake: %s: partition source column %d missing", tableName, spec.Field(0).SourceID())
	}
	part := pf.Name
	fields := append([]string{part}, sumColumns...)
	for _, c := range sumColumns {
		if _, ok := tbl.Schema().FindFieldByName(c); !ok {
			return nil, fmt.Errorf("lake: %s has no column %s", tableName, c)
		}
	}
	scan := tbl.Scan(table.WithSnapshotID(r.SnapshotID), table.WithSelectedFields(fields...))
	_, recs, err := scan.ToArrowRecords(ctx)
	if err != nil {
		return nil, fmt.Errorf("lake: scan %s at %s: %w", tableName, ref, err)
	}
	for rec, err := range recs {
		if err != nil {
			return nil, fmt.Errorf("lake: scan %s at %s: %w", tableName, ref, err)
		}
		err := addStats(out, rec, part, sumColumns)
		rec.Release()
		if err != nil {
			return nil, fmt.Errorf("lake: %s at %s: %w", tableName, ref, err)
		}
	}
	return out, nil
}

func addStats(out map[string]PartitionStat, rec arrow.RecordBatch, part string, sumColumns []string) error {
	idx := rec.Schema().FieldIndices(part)
	if len(idx) == 0 {
		return fmt.Errorf("scan returned no column %s", part)
	}
	dates, ok := rec.Column(idx[0]).(*array.Date32)
	if !ok {
		return fmt.Errorf("column %s is %s, want date", part, rec.Column(idx[0]).DataType())
	}
	cols := make([]arrow.Array, len(sumColumns))
	for i, c := range sumColumns {
		idx := rec.Schema().FieldIndices(c)
		if len(idx) == 0 {
			return fmt.Errorf("scan returned no column %s", c)
		}
		cols[i] = rec.Column(idx[0])
	}
	// Dates repeat in long runs: keep the last key's stat at hand.
	var lastDay arrow.Date32 = -1 << 31
	var key string
	for row := 0; row < int(rec.NumRows()); row++ {
		if dates.IsNull(row) {
			continue
		}
		if d := dates.Value(row); d != lastDay || key == "" {
			lastDay = d
			key = time.Unix(int64(d)*86400, 0).UTC().Format(time.DateOnly)
		}
		st, ok := out[key]
		if !ok {
			st = PartitionStat{Sums: map[string]float64{}}
			for _, c := range sumColumns {
				st.Sums[c] = 0
			}
		}
		st.Rows++
		for i, c := range cols {
			if c.IsNull(row) {
				continue
			}
			v, err := numeric(c, row)
			if err != nil {
				return fmt.Errorf("column %s: %w", sumColumns[i], err)
			}
			st.Sums[sumColumns[i]] += v
		}
		out[key] = st
	}
	return nil
}

func numeric(a arrow.Array, i int) (float64, error) {
	switch a := a.(type) {
	case *array.Float64:
		return a.Value(i), nil
	case *array.Float32:
		return float64(a.Value(i)), nil
	case *array.Int64:
		return float64(a.Value(i)), nil
	case *array.Int32:
		return float64(a.Value(i)), nil
	}
	return 0, fmt.Errorf("not numeric (%s)", a.DataType())
}
