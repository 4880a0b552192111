package lake

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"
)

// Interval is the data interval of one run, [Start, End), with its ds (the
// logical date as YYYY-MM-DD in the pipeline's timezone): what the run's
// commit replaces in each of its pipeline's outputs.
type Interval struct {
	DS         string
	Start, End time.Time
}

// IntervalPartitioned reports whether the output is partitioned by data
// interval (its partition column is a timestamp) rather than by date.
func (o Output) IntervalPartitioned() bool {
	for _, c := range o.Columns {
		if c.Name == o.Partition {
			return c.Type == "timestamp"
		}
	}
	return false
}

// PartitionValue names the partition of the interval iv in the output, as
// PartitionStats, ReplaceWindow and `rewind lake show` do: iv.DS for a
// date partition column, TimestampValue(iv.Start) for a timestamp one.
func (o Output) PartitionValue(iv Interval) string {
	if o.IntervalPartitioned() {
		return TimestampValue(iv.Start)
	}
	return iv.DS
}

// TimestampValue formats the value of a timestamp partition: RFC 3339 in
// UTC, such as "2025-07-01T03:00:00Z" (fractions of a second only when
// there are some). Values of one table sort as their times do.
func TimestampValue(t time.Time) string {
	return t.UTC().Format(time.RFC3339Nano)
}

// ReplaceInterval replaces, on ref ("main" or an existing branch), the
// partition of the run whose data interval is iv with the rows of files, in
// one Iceberg commit.
//
// For an output partitioned by a date column it is ReplacePartition of
// iv.DS. For an output partitioned by a timestamp column it is an
// overwrite filtered on iv.Start <= column < iv.End: exactly the rows of
// the interval are replaced, the other intervals of the day keep theirs.
// Every row must hold iv.Start in that column (the interval's one partition
// value, run.data_interval_start); a row outside the interval, or inside
// it at another time, is an error (ErrBadInput) and nothing is committed.
// Files, conversions and summary are as for ReplacePartition.
func (l *Lake) ReplaceInterval(ctx context.Context, o Output, ref string, iv Interval, files []string, summary map[string]string) (int64, error) {
	if !o.IntervalPartitioned() {
		return l.ReplacePartition(ctx, o, ref, iv.DS, files, summary)
	}
	check, err := intervalCheck(iv)
	if err != nil {
		return 0, err
	}
	conv := converterFor(o, check)
	write := func(ctx context.Context, txn *table.Transaction, rdr array.RecordReader, props iceberg.Properties) error {
		col := iceberg.Reference(o.Partition)
		filter := iceberg.NewAnd(
			iceberg.GreaterThanEqual(col, iceberg.Timestamp(check.start)),
			iceberg.LessThan(col, iceberg.Timestamp(check.end)))
		return txn.Overwrite(ctx, rdr, props, table.WithOverwriteFilter(filter))
	}
	return l.write(ctx, o, ref, files, summary, conv, write)
}

// ReplaceIntervals replaces, on ref, the partitions of the consecutive
// intervals ivs (the intervals of a batch, one run for all of them) with
// the rows of files, in one Iceberg commit: an overwrite filtered on the
// batch's whole span (the intervals' starts for a timestamp partition
// column, their dates for a date one). Every row must hold one of those
// values; otherwise nothing is committed (ErrBadInput). One interval is
// ReplaceInterval.
func (l *Lake) ReplaceIntervals(ctx context.Context, o Output, ref string, ivs []Interval, files []string, summary map[string]string) (int64, error) {
	switch len(ivs) {
	case 0:
		return 0, fmt.Errorf("lake: output %s: a batch of no interval", o.Table)
	case 1:
		return l.ReplaceInterval(ctx, o, ref, ivs[0], files, summary)
	}
	first, last := ivs[0], ivs[len(ivs)-1]
	check := partCheck{kind: checkBatch, iv: Interval{DS: first.DS, Start: first.Start, End: last.End},
		start: first.Start.UnixMicro(), end: last.End.UnixMicro(), values: map[int64]bool{}, dates: !o.IntervalPartitioned()}
	lo, hi := int32(0), int32(0)
	for i, iv := range ivs {
		if !iv.End.After(iv.Start) || i > 0 && iv.Start.Before(ivs[i-1].End) {
			return 0, fmt.Errorf("lake: output %s: the intervals of a batch follow each other; [%s, %s) does not", o.Table, TimestampValue(iv.Start), TimestampValue(iv.End))
		}
		if !check.dates {
			check.values[iv.Start.UnixMicro()] = true
			continue
		}
		d, err := parseDate(iv.DS)
		if err != nil {
			return 0, fmt.Errorf("lake: ds %q: %w", iv.DS, err)
		}
		check.values[int64(d)] = true
		if i == 0 || d < lo {
			lo = d
		}
		if i == 0 || d > hi {
			hi = d
		}
	}
	conv := converterFor(o, check)
	write := func(ctx context.Context, txn *table.Transaction, rdr array.RecordReader, props iceberg.Properties) error {
		col := iceberg.Reference(o.Partition)
		filter := iceberg.NewAnd(
			iceberg.GreaterThanEqual(col, iceberg.Timestamp(check.start)),
			iceberg.LessThan(col, iceberg.Timestamp(check.end)))
		if check.dates {
			filter = iceberg.NewAnd(
				iceberg.GreaterThanEqual(col, iceberg.Date(lo)),
				iceberg.LessThanEqual(col, iceberg.Date(hi)))
		}
		return txn.Overwrite(ctx, rdr, props, table.WithOverwriteFilter(filter))
	}
	return l.write(ctx, o, ref, files, summary, conv, write)
}

// partitionKind is how the values of a table's partition are named: by
// date ("2006-01-02") or by timestamp (TimestampValue).
type partitionKind int

const (
	byDate partitionKind = iota
	byTimestamp
)

// partitionOf returns the partition field id and the source column of the
// table's one identity partition, and how its values are named.
func partitionOf(md table.Metadata) (fieldID int, column string, kind partitionKind, err error) {
	spec := md.PartitionSpec()
	if spec.NumFields() != 1 {
		return 0, "", 0, fmt.Errorf("%d partition fields; a rewind output has one", spec.NumFields())
	}
	pf := spec.Field(0)
	src, ok := md.CurrentSchema().FindFieldByID(pf.SourceID())
	if !ok {
		return 0, "", 0, fmt.Errorf("partition source column %d missing", pf.SourceID())
	}
	switch src.Type.(type) {
	case iceberg.DateType:
		kind = byDate
	case iceberg.TimestampType, iceberg.TimestampTzType:
		kind = byTimestamp
	default:
		return 0, "", 0, fmt.Errorf("partition column %s is %s; want date or timestamp", src.Name, src.Type)
	}
	return pf.FieldID, src.Name, kind, nil
}

// windowKeys returns the window's values as the partition values of a
// table of kind: dates as given, timestamps (RFC 3339, any offset)
// normalized to TimestampValue.
func windowKeys(values []string, kind partitionKind) (map[string]bool, error) {
	keys := make(map[string]bool, len(values))
	for _, v := range values {
		switch kind {
		case byTimestamp:
			t, err := time.Parse(time.RFC3339Nano, strings.TrimSpace(v))
			if err != nil {
				return nil, fmt.Errorf("window value %q: the table is partitioned by data interval: want the interval's start, RFC 3339 (such as 2025-07-01T03:00:00Z)", v)
			}
			keys[TimestampValue(t)] = true
		default:
			if _, err := parseDate(v); err != nil {
				return nil, fmt.Errorf("window value %q: the table is partitioned by date: want YYYY-MM-DD", v)
			}
			keys[strings.TrimSpace(v)] = true
		}
	}
	return keys, nil
}

// partitionKey names a partition value of a data file's partition tuple as
// PartitionStats does.
func partitionKey(v any, kind partitionKind) (string, bool) {
	if kind == byDate {
		return partitionDS(v)
	}
	switch x := v.(type) {
	case iceberg.Timestamp:
		return TimestampValue(time.UnixMicro(int64(x))), true
	case int64:
		return TimestampValue(time.UnixMicro(x)), true
	case time.Time:
		return TimestampValue(x), true
	case string:
		t, err := time.Parse(time.RFC3339Nano, x)
		if err != nil {
			return "", false
		}
		return TimestampValue(t), true
	}
	return "", false
}
