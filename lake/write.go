package lake

import (
	"context"
	"fmt"
	"maps"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"
)

// ReplacePartition replaces the rows of the date ds of the output's table on
// ref ("main" or an existing branch) with the rows of files, in one Iceberg
// commit: an overwrite filtered on partition = ds. Each file is CSV with a
// header line, JSON lines, or Parquet, chosen by its extension (.csv,
// .jsonl or .json, .parquet); its columns must be exactly the declared
// columns, and values are converted to the declared types. A row whose
// partition column is not ds is an error, and so is any unreadable value;
// on error nothing is committed. summary goes into the snapshot summary
// (rewind records the pipeline, run id and kind there). Running it again
// for the same ds leaves one copy of the rows. It returns the id of the new
// snapshot, the head of ref.
//
// It is for outputs partitioned by a date column; an output partitioned by
// a timestamp column is written by interval (ReplaceInterval).
func (l *Lake) ReplacePartition(ctx context.Context, o Output, ref, ds string, files []string, summary map[string]string) (int64, error) {
	if o.IntervalPartitioned() {
		return 0, fmt.Errorf("lake: output %s: the partition column %s is a timestamp, one partition per data interval: write it by interval, not by date %s", o.Table, o.Partition, ds)
	}
	check, err := dateCheck(ds)
	if err != nil {
		return 0, err
	}
	conv := converterFor(o, check)
	write := func(ctx context.Context, txn *table.Transaction, rdr array.RecordReader, props iceberg.Properties) error {
		filter := iceberg.EqualTo(iceberg.Reference(o.Partition), iceberg.Date(check.days))
		return txn.Overwrite(ctx, rdr, props, table.WithOverwriteFilter(filter))
	}
	return l.write(ctx, o, ref, files, summary, conv, write)
}

// appendFiles appends the rows of files (of any dates) to ref in one
// commit, without replacing anything. It is the baseline of the commit
// benchmark.
func (l *Lake) appendFiles(ctx context.Context, o Output, ref string, files []string, summary map[string]string) (int64, error) {
	conv := converterFor(o, partCheck{kind: checkNone})
	write := func(ctx context.Context, txn *table.Transaction, rdr array.RecordReader, props iceberg.Properties) error {
		return txn.Append(ctx, rdr, props)
	}
	return l.write(ctx, o, ref, files, summary, conv, write)
}

// converterFor returns the converter of o's files for a table, checking
// each row's partition value as check says.
func converterFor(o Output, check partCheck) func(*table.Table) (*converter, error) {
	return func(tbl *table.Table) (*converter, error) {
		sc, err := arrowSchema(tbl)
		if err != nil {
			return nil, err
		}
		return newConverter(o, sc, check), nil
	}
}

func arrowSchema(tbl *table.Table) (*arrow.Schema, error) {
	sc, err := table.SchemaToArrowSchema(tbl.Schema(), nil, true, false)
	if err != nil {
		return nil, fmt.Errorf("lake: arrow schema of %s: %w", tbl.Identifier(), err)
	}
	return sc, nil
}

func (l *Lake) write(ctx context.Context, o Output, ref string, files []string, summary map[string]string,
	conv func(*table.Table) (*converter, error),
	write func(context.Context, *table.Transaction, array.RecordReader, iceberg.Properties) error,
) (int64, error) {
	if ref == "" {
		ref = MainBranch
	}
	if _, _, err := o.schema(); err != nil {
		return 0, err
	}
	tbl, err := l.load(ctx, o.Table)
	if err != nil {
		return 0, err
	}
	if err := o.check(tbl); err != nil {
		return 0, err
	}
	if ref != MainBranch {
		r, ok := findRef(tbl.Metadata(), ref)
		switch {
		case !ok && tbl.Metadata().SnapshotByName(MainBranch) == nil:
			// Nothing to branch from yet (the table's first data comes
			// from a backfill): this commit creates the branch.
		case !ok:
			return 0, fmt.Errorf("%w: %s of %s", ErrNoSuchRef, ref, o.Table)
		case r.SnapshotRefType != table.BranchRef:
			return 0, fmt.Errorf("lake: %s of %s is a tag; only branches take commits", ref, o.Table)
		}
	}
	c, err := conv(tbl)
	if err != nil {
		return 0, err
	}
	recs, err := c.readFiles(ctx, files)
	if err != nil {
		return 0, err
	}
	defer func() {
		for _, r := range recs {
			r.Release()
		}
	}()
	rdr, err := array.NewRecordReader(c.schema, recs)
	if err != nil {
		return 0, fmt.Errorf("lake: %w", err)
	}
	defer rdr.Release()

	txn, err := tbl.NewTransactionOnBranchWithError(ref)
	if err != nil {
		return 0, fmt.Errorf("lake: %s of %s: %w", ref, o.Table, err)
	}
	if err := compactManifests(ctx, tbl, txn, ref); err != nil {
		return 0, fmt.Errorf("lake: compact manifests of %s of %s: %w", ref, o.Table, err)
	}
	props := iceberg.Properties{}
	maps.Copy(props, summary)
	if err := write(ctx, txn, rdr, props); err != nil {
		return 0, fmt.Errorf("lake: write %s of %s: %w", ref, o.Table, err)
	}
	out, err := txn.Commit(ctx)
	if err != nil {
		return 0, fmt.Errorf("lake: commit %s of %s: %w", ref, o.Table, err)
	}
	snap := out.Metadata().SnapshotByName(ref)
	if snap == nil {
		return 0, fmt.Errorf("lake: commit %s of %s: no snapshot after commit", ref, o.Table)
	}
	return snap.SnapshotID, nil
}

// compactManifestsAt is the number of manifests of a branch head above which
// a write first merges them. Every partition commit adds a manifest, and an
// overwrite reads every manifest of its parent, so without merging the cost
// of a commit grows with the number of commits made before it.
const compactManifestsAt = 32

// compactManifests stages, in the write's transaction, a rewrite of the
// head's manifests into few target-sized ones when there are many: the
// catalog commit then carries a "replace" snapshot (same data) followed by
// the write's snapshot.
func compactManifests(ctx context.Context, tbl *table.Table, txn *table.Transaction, ref string) error {
	head := tbl.Metadata().SnapshotByName(ref)
	if head == nil {
		return nil
	}
	fs, err := tbl.FS(ctx)
	if err != nil {
		return err
	}
	mans, err := head.Manifests(fs)
	if err != nil {
		return err
	}
	if len(mans) < compactManifestsAt {
		return nil
	}
	_, err = txn.RewriteManifests(ctx)
	return err
}
