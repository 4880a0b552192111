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
// value of its partition column, the row count and the sum of each of
// sumColumns. The values are named as PartitionValue names them: a date
// as YYYY-MM-DD, a timestamp (the start of a data interval) as RFC 3339
// in UTC (TimestampValue). A table or ref without a snapshot has no
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
	_, part, kind, err := partitionOf(md)
	if err != nil {
		return nil, fmt.Errorf("lake: %s: %w", tableName, err)
	}
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
		err := addStats(out, rec, part, kind, sumColumns)
		rec.Release()
		if err != nil {
			return nil, fmt.Errorf("lake: %s at %s: %w", tableName, ref, err)
		}
	}
	return out, nil
}

func addStats(out map[string]PartitionStat, rec arrow.RecordBatch, part string, kind partitionKind, sumColumns []string) error {
	idx := rec.Schema().FieldIndices(part)
	if len(idx) == 0 {
		return fmt.Errorf("scan returned no column %s", part)
	}
	keyOf, err := partitionKeys(rec.Column(idx[0]), kind)
	if err != nil {
		return fmt.Errorf("column %s: %w", part, err)
	}
	partCol := rec.Column(idx[0])
	cols := make([]arrow.Array, len(sumColumns))
	for i, c := range sumColumns {
		idx := rec.Schema().FieldIndices(c)
		if len(idx) == 0 {
			return fmt.Errorf("scan returned no column %s", c)
		}
		cols[i] = rec.Column(idx[0])
	}
	for row := 0; row < int(rec.NumRows()); row++ {
		if partCol.IsNull(row) {
			continue
		}
		key := keyOf(row)
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

// partitionKeys returns the function that names the partition value of a
// row of col, a date or a timestamp column.
func partitionKeys(col arrow.Array, kind partitionKind) (func(row int) string, error) {
	switch c := col.(type) {
	case *array.Date32:
		if kind != byDate {
			break
		}
		// Values repeat in long runs: keep the last key at hand.
		var last arrow.Date32
		key := ""
		return func(row int) string {
			if d := c.Value(row); d != last || key == "" {
				last = d
				key = time.Unix(int64(d)*86400, 0).UTC().Format(time.DateOnly)
			}
			return key
		}, nil
	case *array.Timestamp:
		if kind != byTimestamp {
			break
		}
		unit := c.DataType().(*arrow.TimestampType).Unit
		var last arrow.Timestamp
		key := ""
		return func(row int) string {
			if t := c.Value(row); t != last || key == "" {
				last = t
				key = TimestampValue(t.ToTime(unit))
			}
			return key
		}, nil
	}
	return nil, fmt.Errorf("is %s, want a date or a timestamp", col.DataType())
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
