package lake

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/iceberg-go"
	iceio "github.com/apache/iceberg-go/io"
	"github.com/apache/iceberg-go/table"
)

// WindowKey is the snapshot summary property in which ReplaceWindow records
// the operation it committed, so that the operation is done once.
const WindowKey = "rewind.window"

// ReplaceWindow makes the partitions of dates (the output's partition
// values: "2006-01-02" for a date partition column, the intervals' starts
// in RFC 3339 for a timestamp one, as PartitionValue names them; any
// offset, normalized to UTC) on the branch to (main) what they are on ref from
// (a backfill's branch for a cutover, a pre_backfill_ tag for a rollback),
// in one catalog commit:
//   - to's data files of those partitions are replaced by from's, by
//     reference (no data is read or rewritten); a date that from holds no
//     file for ends empty;
//   - every other partition of to keeps what it has, including what was
//     committed to it after from forked (the nightly runs of a backfill's
//     days);
//   - when tag is not empty, to's previous head is tagged tag, which must
//     not exist.
//
// key names the operation in the new snapshot's summary (WindowKey): when
// to's history already has a snapshot with key (a cutover whose process
// died after its commit), it does nothing and returns done true. A commit
// to to made while it plans is not lost: it plans again on the fresh head.
func (l *Lake) ReplaceWindow(ctx context.Context, tableName, to, from string, dates []string, tag, key string, summary map[string]string) (done bool, err error) {
	if key == "" {
		return false, errors.New("lake: replace window: no key")
	}
	id, err := ident(tableName)
	if err != nil {
		return false, err
	}
	var last error
	for range maxCommitAttempts {
		tbl, err := l.cat.LoadTable(ctx, id)
		if err != nil {
			return false, fmt.Errorf("lake: load %s: %w", tableName, err)
		}
		md := tbl.Metadata()
		head := md.SnapshotByName(to)
		if head != nil && hasKey(md, head.SnapshotID, key) {
			return true, nil
		}
		src, ok := findRef(md, from)
		if !ok {
			return false, fmt.Errorf("%w: %s of %s", ErrNoSuchRef, from, tableName)
		}
		if head == nil && tag != "" && to == MainBranch {
			// An empty main (the table's first data comes from this
			// window): it gets an empty snapshot first, so that the tag
			// names the "before" that a rollback restores. A crash after
			// it leaves main as empty as it was.
			if err := l.emptySnapshot(ctx, tbl, tag); err != nil {
				return false, err
			}
			continue
		}
		if dst, ok := findRef(md, to); ok && dst.SnapshotRefType != table.BranchRef {
			return false, fmt.Errorf("lake: %s of %s is a tag; only branches take commits", to, tableName)
		}
		tagRef, tagged := tagRefOf(md, tag)
		_, _, kind, err := partitionOf(md)
		if err != nil {
			return false, fmt.Errorf("lake: %s: %w", tableName, err)
		}
		window, err := windowKeys(dates, kind)
		if err != nil {
			return false, fmt.Errorf("lake: replace window of %s: %w", tableName, err)
		}
		reqs, ups, err := l.planWindow(ctx, tbl, to, src.SnapshotID, window, tag, key, summary)
		if err != nil {
			return false, err
		}
		switch {
		case tagged && len(ups) == 0:
			return true, nil // nothing differs, tag made: done before
		case tagged:
			return false, fmt.Errorf("%w: tag %s of %s (snapshot %d)", ErrRefExists, tag, tableName, tagRef.SnapshotID)
		case len(ups) == 0:
			return true, nil // nothing differs, no tag wanted
		}
		_, _, err = l.cat.CommitTable(ctx, id, reqs, ups)
		if err == nil {
			return false, nil
		}
		last = err
		if err := ctx.Err(); err != nil {
			return false, err
		}
		if !isConflict(err) {
			return false, fmt.Errorf("lake: commit %s: %w", tableName, err)
		}
	}
	return false, fmt.Errorf("%w: %s: gave up after %d attempts: %v", ErrConcurrentCommit, tableName, maxCommitAttempts, last)
}

// emptySnapshot commits a snapshot with no data file to main (which has
// none yet), its summary naming why.
func (l *Lake) emptySnapshot(ctx context.Context, tbl *table.Table, tag string) error {
	sc, err := arrowSchema(tbl)
	if err != nil {
		return err
	}
	rdr, err := array.NewRecordReader(sc, nil)
	if err != nil {
		return fmt.Errorf("lake: %w", err)
	}
	defer rdr.Release()
	txn := tbl.NewTransaction()
	if err := txn.Overwrite(ctx, rdr, iceberg.Properties{"rewind.empty-before": tag}, table.WithOverwriteFilter(iceberg.AlwaysTrue{})); err != nil {
		return fmt.Errorf("lake: empty snapshot of %s: %w", tbl.Identifier(), err)
	}
	if _, err := txn.Commit(ctx); err != nil && !isConflict(err) {
		return fmt.Errorf("lake: empty snapshot of %s: %w", tbl.Identifier(), err)
	}
	return nil
}

// planWindow stages, in a transaction on to, the replacement of the
// window's files by those of snapshot from, and returns it as requirements
// and updates, with the tag of to's head added.
func (l *Lake) planWindow(ctx context.Context, tbl *table.Table, to string, from int64, window map[string]bool, tag, key string, summary map[string]string) ([]table.Requirement, []table.Update, error) {
	md := tbl.Metadata()
	fieldID, _, kind, err := partitionOf(md)
	if err != nil {
		return nil, nil, fmt.Errorf("lake: %s: %w", tbl.Identifier(), err)
	}
	fs, err := tbl.FS(ctx)
	if err != nil {
		return nil, nil, err
	}
	add, err := windowFiles(fs, md.SnapshotByID(from), fieldID, kind, window)
	if err != nil {
		return nil, nil, fmt.Errorf("lake: files of %s: %w", tbl.Identifier(), err)
	}
	head := md.SnapshotByName(to)
	var drop []iceberg.DataFile
	if head != nil {
		if drop, err = windowFiles(fs, head, fieldID, kind, window); err != nil {
			return nil, nil, fmt.Errorf("lake: files of %s of %s: %w", to, tbl.Identifier(), err)
		}
	}
	add, drop = withoutCommon(add, drop)

	props := iceberg.Properties{WindowKey: key}
	for k, v := range summary {
		props[k] = v
	}
	var reqs []table.Requirement
	var ups []table.Update
	if len(add) > 0 || len(drop) > 0 {
		txn, err := tbl.NewTransactionOnBranchWithError(to)
		if err != nil {
			return nil, nil, err
		}
		if err := txn.ReplaceDataFilesWithDataFiles(ctx, drop, add, props); err != nil {
			return nil, nil, fmt.Errorf("lake: replace window of %s: %w", tbl.Identifier(), err)
		}
		tc, err := txn.TableCommit()
		if err != nil {
			return nil, nil, err
		}
		reqs, ups = tc.Requirements, tc.Updates
	} else if head == nil {
		return nil, nil, nil
	} else {
		// Nothing differs: only the tag, on the head read.
		reqs = []table.Requirement{table.AssertRefSnapshotID(to, ptr(head.SnapshotID))}
	}
	if tag != "" && head != nil && !refExists(md, tag) {
		reqs = append(reqs, table.AssertRefSnapshotID(tag, nil))
		ups = append(ups,
			table.NewSetSnapshotRefUpdate(tag, head.SnapshotID, table.TagRef, 0, 0, 0),
			table.NewSetPropertiesUpdate(map[string]string{refCreatedProp + tag: nowMs()}))
	}
	return reqs, ups, nil
}

func refExists(md table.Metadata, name string) bool {
	_, ok := findRef(md, name)
	return ok
}

// hasKey reports whether snapshot id or one of its ancestors carries key in
// its summary.
func hasKey(md table.Metadata, id int64, key string) bool {
	for _, s := range table.AncestorsOf(id, lookup(md)) {
		if s.Summary != nil && s.Summary.Properties[WindowKey] == key {
			return true
		}
	}
	return false
}

// windowFiles lists the data files of snap whose partition (named as kind
// says) is in window.
// A delete file in the window is an error: rewind writes none, and a
// replacement by reference would resurrect or lose the rows it deletes.
func windowFiles(fs iceio.IO, snap *table.Snapshot, fieldID int, kind partitionKind, window map[string]bool) ([]iceberg.DataFile, error) {
	if snap == nil {
		return nil, nil
	}
	mans, err := snap.Manifests(fs)
	if err != nil {
		return nil, err
	}
	var out []iceberg.DataFile
	for _, m := range mans {
		entries, err := m.FetchEntries(fs, true)
		if err != nil {
			return nil, err
		}
		for _, e := range entries {
			df := e.DataFile()
			ds, ok := partitionKey(df.Partition()[fieldID], kind)
			if !ok || !window[ds] {
				continue
			}
			if m.ManifestContent() != iceberg.ManifestContentData || df.ContentType() != iceberg.EntryContentData {
				return nil, fmt.Errorf("delete file %s in partition %s: not supported", df.FilePath(), ds)
			}
			out = append(out, df)
		}
	}
	return out, nil
}

// withoutCommon removes from add and drop the files both hold (a partition
// the source did not change).
func withoutCommon(add, drop []iceberg.DataFile) ([]iceberg.DataFile, []iceberg.DataFile) {
	inDrop := make(map[string]bool, len(drop))
	for _, f := range drop {
		inDrop[f.FilePath()] = true
	}
	common := map[string]bool{}
	var a []iceberg.DataFile
	for _, f := range add {
		if inDrop[f.FilePath()] {
			common[f.FilePath()] = true
			continue
		}
		a = append(a, f)
	}
	var d []iceberg.DataFile
	for _, f := range drop {
		if !common[f.FilePath()] {
			d = append(d, f)
		}
	}
	return a, d
}

// partitionDS is a partition value of a date column as "2006-01-02".
func partitionDS(v any) (string, bool) {
	var days int64
	switch x := v.(type) {
	case iceberg.Date:
		days = int64(x)
	case int32:
		days = int64(x)
	case int64:
		days = x
	case int:
		days = int64(x)
	case string:
		return x, true
	case time.Time:
		return x.UTC().Format(time.DateOnly), true
	default:
		return "", false
	}
	return time.Unix(days*86400, 0).UTC().Format(time.DateOnly), true
}

// Holds reports whether the history of branch (its head and the head's
// ancestors) has the snapshot that ReplaceWindow committed with key
// (false for a table without the branch).
func (l *Lake) Holds(ctx context.Context, tableName, branch, key string) (bool, error) {
	tbl, err := l.load(ctx, tableName)
	if err != nil {
		return false, err
	}
	md := tbl.Metadata()
	head := md.SnapshotByName(branch)
	return head != nil && hasKey(md, head.SnapshotID, key), nil
}
