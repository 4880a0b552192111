package lake

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/apache/iceberg-go/table"
)

// refCreatedProp prefixes the table property that records when rewind
// created a branch or tag (Unix milliseconds); Expire ages refs by it.
// Iceberg refs carry no creation time of their own.
const refCreatedProp = "rewind.ref-created-ms."

// maxCommitAttempts bounds the reload-and-retry loop of ref commits.
const maxCommitAttempts = 8

// SnapshotInfo describes one snapshot of a table.
type SnapshotInfo struct {
	ID        int64
	ParentID  int64 // 0 when the snapshot has no parent
	Time      time.Time
	Operation string            // "append", "overwrite", "delete", "replace"
	Summary   map[string]string // the snapshot summary, rewind's keys included
}

// ExpireResult is what Expire removed.
type ExpireResult struct {
	RemovedRefs      []string // branches and tags, sorted
	RemovedSnapshots []int64  // snapshot ids, sorted
}

func findRef(md table.Metadata, name string) (table.SnapshotRef, bool) {
	for n, r := range md.Refs() {
		if n == name {
			return r, true
		}
	}
	return table.SnapshotRef{}, false
}

func lookup(md table.Metadata) table.SnapshotLookup {
	return func(id int64) *table.Snapshot { return md.SnapshotByID(id) }
}

func ptr(id int64) *int64 { return &id }

// errDone stops a commit loop without committing: the plan found the work
// already done.
var errDone = errors.New("done")

// plan computes, from fresh table metadata, the requirements and updates
// of one attempt of a commit.
type plan func(md table.Metadata) ([]table.Requirement, []table.Update, error)

// commitRefs commits the result of p on the table, reloading the table and
// planning again when the commit fails (a requirement no longer holds, or
// the catalog's compare-and-swap lost a race). The plan decides on each
// attempt whether the operation is still valid against the fresh state; a
// plan that sees a ref it depends on moved returns ErrConcurrentCommit.
//
// It returns the table the committed plan was computed from, or nil when
// nothing was committed.
func (l *Lake) commitRefs(ctx context.Context, name string, p plan) (*table.Table, error) {
	id, err := ident(name)
	if err != nil {
		return nil, err
	}
	var last error
	for range maxCommitAttempts {
		tbl, err := l.cat.LoadTable(ctx, id)
		if err != nil {
			return nil, fmt.Errorf("lake: load %s: %w", name, err)
		}
		md := tbl.Metadata()
		reqs, ups, err := p(md)
		if errors.Is(err, errDone) {
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		if len(ups) == 0 {
			return nil, nil
		}
		reqs = append(reqs, table.AssertTableUUID(md.TableUUID()))
		_, _, err = l.cat.CommitTable(ctx, id, reqs, ups)
		if err == nil {
			return tbl, nil
		}
		last = err
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if !isConflict(err) {
			return nil, fmt.Errorf("lake: commit %s: %w", name, err)
		}
	}
	return nil, fmt.Errorf("%w: %s: gave up after %d attempts: %v", ErrConcurrentCommit, name, maxCommitAttempts, last)
}

// isConflict reports a failed requirement or a lost compare-and-swap of
// the catalog: nothing was committed and planning again is safe.
func isConflict(err error) bool {
	return errors.Is(err, table.ErrCommitFailed) ||
		strings.Contains(strings.ToLower(err.Error()), "requirement failed")
}

// commitRefsOnly is commitRefs for callers that need only the error.
func (l *Lake) commitRefsOnly(ctx context.Context, name string, p plan) error {
	_, err := l.commitRefs(ctx, name, p)
	return err
}

// CreateBranch creates the branch at the current snapshot of the branch or
// tag from (usually main). The branch must not exist, and from must have a
// snapshot.
func (l *Lake) CreateBranch(ctx context.Context, tableName, branch, from string) error {
	if branch == "" || branch == MainBranch {
		return fmt.Errorf("lake: cannot create branch %q", branch)
	}
	var seen *int64
	return l.commitRefsOnly(ctx, tableName, func(md table.Metadata) ([]table.Requirement, []table.Update, error) {
		src, ok := findRef(md, from)
		if !ok && from == MainBranch && md.SnapshotByName(MainBranch) == nil {
			return nil, nil, fmt.Errorf("%w: %s of %s", ErrEmptyTable, from, tableName)
		}
		if !ok {
			return nil, nil, fmt.Errorf("%w: %s of %s has no snapshot to branch from", ErrNoSuchRef, from, tableName)
		}
		if seen != nil && *seen != src.SnapshotID {
			return nil, nil, fmt.Errorf("%w: %s of %s moved while creating branch %s", ErrConcurrentCommit, from, tableName, branch)
		}
		seen = ptr(src.SnapshotID)
		if _, ok := findRef(md, branch); ok {
			return nil, nil, fmt.Errorf("%w: %s of %s", ErrRefExists, branch, tableName)
		}
		reqs := []table.Requirement{
			table.AssertRefSnapshotID(from, ptr(src.SnapshotID)),
			table.AssertRefSnapshotID(branch, nil),
		}
		ups := []table.Update{
			table.NewSetSnapshotRefUpdate(branch, src.SnapshotID, table.BranchRef, 0, 0, 0),
			table.NewSetPropertiesUpdate(map[string]string{refCreatedProp + branch: nowMs()}),
		}
		return reqs, ups, nil
	})
}

func nowMs() string { return strconv.FormatInt(time.Now().UnixMilli(), 10) }

// FastForward moves the branch to (main) to the snapshot of the branch from,
// and tags the snapshot to was at with tag (if tag is not empty), in one
// catalog commit. The commit requires that to is still at the snapshot read
// and that this snapshot is an ancestor of from's: if anything was
// committed to to since from was branched off (or during the call), nothing
// changes and the error wraps ErrConcurrentCommit. The tag must not exist.
// If to is already at from's snapshot and the tag exists, it does nothing
// (a cutover that completed before its process died).
func (l *Lake) FastForward(ctx context.Context, tableName, to, from, tag string) error {
	var seenTo, seenFrom *int64
	return l.commitRefsOnly(ctx, tableName, func(md table.Metadata) ([]table.Requirement, []table.Update, error) {
		src, ok := findRef(md, from)
		if !ok {
			return nil, nil, fmt.Errorf("%w: %s of %s", ErrNoSuchRef, from, tableName)
		}
		dst, dstOK := findRef(md, to)
		tagRef, tagOK := tagRefOf(md, tag)
		if dstOK && dst.SnapshotID == src.SnapshotID && (tag == "" || tagOK) {
			return nil, nil, errDone
		}
		if seenFrom != nil && *seenFrom != src.SnapshotID {
			return nil, nil, fmt.Errorf("%w: %s of %s moved during the fast-forward", ErrConcurrentCommit, from, tableName)
		}
		seenFrom = ptr(src.SnapshotID)
		var toID *int64
		if dstOK {
			if dst.SnapshotRefType != table.BranchRef {
				return nil, nil, fmt.Errorf("lake: %s of %s is a tag, cannot fast-forward it", to, tableName)
			}
			toID = ptr(dst.SnapshotID)
		}
		if seenTo != nil && (toID == nil || *toID != *seenTo) {
			return nil, nil, fmt.Errorf("%w: %s of %s moved during the fast-forward", ErrConcurrentCommit, to, tableName)
		}
		if toID != nil {
			seenTo = ptr(*toID)
			if !table.IsAncestorOf(src.SnapshotID, *toID, lookup(md)) {
				return nil, nil, fmt.Errorf("%w: %s of %s has commits that %s does not have (snapshot %d is not an ancestor of %d)",
					ErrConcurrentCommit, to, tableName, from, *toID, src.SnapshotID)
			}
		}
		if tagOK {
			return nil, nil, fmt.Errorf("%w: tag %s of %s (snapshot %d)", ErrRefExists, tag, tableName, tagRef.SnapshotID)
		}
		reqs := []table.Requirement{
			table.AssertRefSnapshotID(to, toID),
			table.AssertRefSnapshotID(from, ptr(src.SnapshotID)),
		}
		ups := []table.Update{
			table.NewSetSnapshotRefUpdate(to, src.SnapshotID, table.BranchRef, 0, 0, 0),
		}
		if tag != "" && toID != nil {
			reqs = append(reqs, table.AssertRefSnapshotID(tag, nil))
			ups = append(ups,
				table.NewSetSnapshotRefUpdate(tag, *toID, table.TagRef, 0, 0, 0),
				table.NewSetPropertiesUpdate(map[string]string{refCreatedProp + tag: nowMs()}))
		}
		return reqs, ups, nil
	})
}

func tagRefOf(md table.Metadata, tag string) (table.SnapshotRef, bool) {
	if tag == "" {
		return table.SnapshotRef{}, false
	}
	return findRef(md, tag)
}

// Rollback moves the branch ref (usually main) back to the snapshot of the
// tag. If ref moves while the rollback commits, the error wraps
// ErrConcurrentCommit and nothing changes.
func (l *Lake) Rollback(ctx context.Context, tableName, ref, tag string) error {
	var seen *int64
	return l.commitRefsOnly(ctx, tableName, func(md table.Metadata) ([]table.Requirement, []table.Update, error) {
		t, ok := findRef(md, tag)
		if !ok {
			return nil, nil, fmt.Errorf("%w: %s of %s", ErrNoSuchRef, tag, tableName)
		}
		r, ok := findRef(md, ref)
		if !ok {
			return nil, nil, fmt.Errorf("%w: %s of %s", ErrNoSuchRef, ref, tableName)
		}
		if r.SnapshotRefType != table.BranchRef {
			return nil, nil, fmt.Errorf("lake: %s of %s is a tag, cannot roll it back", ref, tableName)
		}
		if r.SnapshotID == t.SnapshotID {
			return nil, nil, errDone
		}
		if seen != nil && *seen != r.SnapshotID {
			return nil, nil, fmt.Errorf("%w: %s of %s moved during the rollback", ErrConcurrentCommit, ref, tableName)
		}
		seen = ptr(r.SnapshotID)
		reqs := []table.Requirement{
			table.AssertRefSnapshotID(ref, ptr(r.SnapshotID)),
			table.AssertRefSnapshotID(tag, ptr(t.SnapshotID)),
		}
		ups := []table.Update{table.NewSetSnapshotRefUpdate(ref, t.SnapshotID, table.BranchRef, 0, 0, 0)}
		return reqs, ups, nil
	})
}

// Refs returns the table's branches and tags with their snapshot ids.
func (l *Lake) Refs(ctx context.Context, tableName string) (map[string]int64, error) {
	tbl, err := l.load(ctx, tableName)
	if err != nil {
		return nil, err
	}
	out := map[string]int64{}
	for name, r := range tbl.Metadata().Refs() {
		out[name] = r.SnapshotID
	}
	return out, nil
}

// Snapshots returns the table's snapshots, oldest first.
func (l *Lake) Snapshots(ctx context.Context, tableName string) ([]SnapshotInfo, error) {
	tbl, err := l.load(ctx, tableName)
	if err != nil {
		return nil, err
	}
	var out []SnapshotInfo
	for _, s := range tbl.Metadata().Snapshots() {
		info := SnapshotInfo{ID: s.SnapshotID, Time: time.UnixMilli(s.TimestampMs), Summary: map[string]string{}}
		if s.ParentSnapshotID != nil {
			info.ParentID = *s.ParentSnapshotID
		}
		if s.Summary != nil {
			info.Operation = string(s.Summary.Operation)
			maps.Copy(info.Summary, s.Summary.Properties)
		}
		out = append(out, info)
	}
	slices.SortStableFunc(out, func(a, b SnapshotInfo) int { return a.Time.Compare(b.Time) })
	return out, nil
}

// Expire drops the table's tags and branches other than main that were
// created before olderThan (by rewind's record of their creation, or else
// by the time of the snapshot they point at), then expires the snapshots
// older than olderThan that no remaining branch or tag points at, and
// deletes the files only those snapshots used. Everything is one catalog
// commit; if a ref moves meanwhile, it is planned again.
func (l *Lake) Expire(ctx context.Context, tableName string, olderThan time.Time) (ExpireResult, error) {
	cutoff := olderThan.UnixMilli()
	var res ExpireResult
	var removeSnaps table.Update
	pre, err := l.commitRefs(ctx, tableName, func(md table.Metadata) ([]table.Requirement, []table.Update, error) {
		res = ExpireResult{}
		removeSnaps = nil
		props := md.Properties()
		var reqs []table.Requirement
		var ups []table.Update
		var dropProps []string
		heads := map[int64]bool{}
		for name, r := range md.Refs() {
			reqs = append(reqs, table.AssertRefSnapshotID(name, ptr(r.SnapshotID)))
			created := int64(-1)
			if v, ok := props[refCreatedProp+name]; ok {
				if n, err := strconv.ParseInt(v, 10, 64); err == nil {
					created = n
				}
			}
			if created < 0 {
				if s := md.SnapshotByID(r.SnapshotID); s != nil {
					created = s.TimestampMs
				}
			}
			if name != MainBranch && created < cutoff {
				res.RemovedRefs = append(res.RemovedRefs, name)
				ups = append(ups, table.NewRemoveSnapshotRefUpdate(name))
				if _, ok := props[refCreatedProp+name]; ok {
					dropProps = append(dropProps, refCreatedProp+name)
				}
				continue
			}
			heads[r.SnapshotID] = true
		}
		// Records of refs that no longer exist.
		for k := range props {
			if name, ok := strings.CutPrefix(k, refCreatedProp); ok {
				if _, exists := findRef(md, name); !exists {
					dropProps = append(dropProps, k)
				}
			}
		}
		if cur := md.CurrentSnapshot(); cur != nil {
			heads[cur.SnapshotID] = true
		}
		for _, s := range md.Snapshots() {
			if !heads[s.SnapshotID] && s.TimestampMs < cutoff {
				res.RemovedSnapshots = append(res.RemovedSnapshots, s.SnapshotID)
			}
		}
		if len(dropProps) > 0 {
			slices.Sort(dropProps)
			ups = append(ups, table.NewRemovePropertiesUpdate(dropProps))
		}
		if len(res.RemovedSnapshots) > 0 {
			slices.Sort(res.RemovedSnapshots)
			removeSnaps = table.NewRemoveSnapshotsUpdate(res.RemovedSnapshots, true)
			ups = append(ups, removeSnaps)
		}
		slices.Sort(res.RemovedRefs)
		return reqs, ups, nil
	})
	if err != nil {
		return ExpireResult{}, err
	}
	if pre == nil {
		return ExpireResult{}, nil
	}
	if removeSnaps != nil {
		// Delete the manifests, manifest lists and data files that only the
		// expired snapshots used.
		post, err := l.load(ctx, tableName)
		if err != nil {
			return res, err
		}
		if err := removeSnaps.PostCommit(ctx, pre, post); err != nil {
			return res, fmt.Errorf("lake: expire %s: committed, but deleting files failed: %w", tableName, err)
		}
	}
	return res, nil
}
