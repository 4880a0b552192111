package lake

import (
	"context"
	"errors"
	"testing"
)

// The cutover of a backfill replaces only its window's partitions on
// today's main: what the nightly runs committed meanwhile stays, the old
// main is tagged, a repeat does nothing, and a rollback restores the window
// from the tag without undoing the nightly runs made after the cutover.
func TestReplaceWindow(t *testing.T) {
	ctx := context.Background()
	l, dir := openTest(t)
	d := []string{"2024-01-01", "2024-01-02", "2024-01-03", "2024-01-04", "2024-01-05", "2024-01-06", "2024-01-07"}
	for _, ds := range d[:5] {
		replace(t, l, "main", ds, writeCSV(t, dir, ds, 10, 1))
	}
	if err := l.CreateBranch(ctx, revenue.Table, "backfill_9", "main"); err != nil {
		t.Fatal(err)
	}
	// The backfill rewrites 01-02..01-04 (01-03 with no rows at all).
	replace(t, l, "backfill_9", d[1], writeCSV(t, dir, d[1], 11, 2))
	replace(t, l, "backfill_9", d[3], writeCSV(t, dir, d[3], 13, 2))
	if _, err := l.ReplacePartition(ctx, revenue, "backfill_9", d[2], nil, nil); err != nil {
		t.Fatal(err)
	}
	// Meanwhile the nightly run commits 01-06 to main, and re-runs 01-05.
	replace(t, l, "main", d[5], writeCSV(t, dir, d[5], 16, 1))
	replace(t, l, "main", d[4], writeCSV(t, dir, d[4], 15, 1))
	refsBefore, _ := l.Refs(ctx, revenue.Table)

	window := d[1:4]
	done, err := l.ReplaceWindow(ctx, revenue.Table, "main", "backfill_9", window, "pre_backfill_9", "cutover:9", map[string]string{"rewind.backfill": "9"})
	if err != nil || done {
		t.Fatalf("cutover: done %v, err %v", done, err)
	}
	st := stats(t, l, "main")
	checkStat(t, st, d[0], 10, wantSum(10, 1))
	checkStat(t, st, d[1], 11, wantSum(11, 2))
	if _, ok := st[d[2]]; ok {
		t.Fatalf("%s holds rows on main; the backfill emptied it", d[2])
	}
	checkStat(t, st, d[3], 13, wantSum(13, 2))
	checkStat(t, st, d[4], 15, wantSum(15, 1))
	checkStat(t, st, d[5], 16, wantSum(16, 1))
	refs, _ := l.Refs(ctx, revenue.Table)
	if refs["pre_backfill_9"] != refsBefore["main"] {
		t.Fatalf("tag at %d, want main's head before the cutover %d", refs["pre_backfill_9"], refsBefore["main"])
	}

	// A repeat (a process that died after the commit) changes nothing.
	done, err = l.ReplaceWindow(ctx, revenue.Table, "main", "backfill_9", window, "pre_backfill_9", "cutover:9", nil)
	if err != nil || !done {
		t.Fatalf("repeated cutover: done %v, err %v", done, err)
	}
	if again, _ := l.Refs(ctx, revenue.Table); again["main"] != refs["main"] {
		t.Fatalf("a repeated cutover moved main")
	}

	// The nightly run goes on after the cutover; then a rollback.
	replace(t, l, "main", d[6], writeCSV(t, dir, d[6], 17, 1))
	done, err = l.ReplaceWindow(ctx, revenue.Table, "main", "pre_backfill_9", window, "", "rollback:9", nil)
	if err != nil || done {
		t.Fatalf("rollback: done %v, err %v", done, err)
	}
	st = stats(t, l, "main")
	for _, ds := range d[:4] {
		checkStat(t, st, ds, 10, wantSum(10, 1))
	}
	checkStat(t, st, d[4], 15, wantSum(15, 1))
	checkStat(t, st, d[5], 16, wantSum(16, 1))
	checkStat(t, st, d[6], 17, wantSum(17, 1))

	// Errors: a missing source; a tag that exists while files differ.
	if _, err := l.ReplaceWindow(ctx, revenue.Table, "main", "nosuch", window, "", "x", nil); !errors.Is(err, ErrNoSuchRef) {
		t.Fatalf("missing source: %v", err)
	}
	if _, err := l.ReplaceWindow(ctx, revenue.Table, "main", "backfill_9", window, "pre_backfill_9", "cutover:9b", nil); !errors.Is(err, ErrRefExists) {
		t.Fatalf("existing tag: %v", err)
	}
}

// A window whose partitions the source holds as main does (nothing to
// change) still gets its tag, once.
func TestReplaceWindowNothingDiffers(t *testing.T) {
	ctx := context.Background()
	l, dir := openTest(t)
	replace(t, l, "main", "2024-01-01", writeCSV(t, dir, "2024-01-01", 10, 1))
	if err := l.CreateBranch(ctx, revenue.Table, "b", "main"); err != nil {
		t.Fatal(err)
	}
	head, _ := l.Refs(ctx, revenue.Table)
	done, err := l.ReplaceWindow(ctx, revenue.Table, "main", "b", []string{"2024-01-01"}, "pre_b", "cutover:b", nil)
	if err != nil || done {
		t.Fatalf("done %v err %v", done, err)
	}
	refs, _ := l.Refs(ctx, revenue.Table)
	if refs["pre_b"] != head["main"] || refs["main"] != head["main"] {
		t.Fatalf("refs %v, want the tag at main %d and main unchanged", refs, head["main"])
	}
	if done, err := l.ReplaceWindow(ctx, revenue.Table, "main", "b", []string{"2024-01-01"}, "pre_b", "cutover:b", nil); err != nil || !done {
		t.Fatalf("repeat: done %v err %v", done, err)
	}
}

// A table whose first data comes from a backfill: the first commit to the
// branch creates it, and the cutover fills the empty main, tagging the
// empty snapshot it first gives main (what was there before: nothing), so
// that a rollback empties the window again.
func TestBackfillOfAnEmptyTable(t *testing.T) {
	ctx := context.Background()
	l, dir := openTest(t)
	if err := l.CreateBranch(ctx, revenue.Table, "backfill_1", "main"); !errors.Is(err, ErrEmptyTable) {
		t.Fatalf("branch of an empty table: %v", err)
	}
	replace(t, l, "backfill_1", "2024-01-01", writeCSV(t, dir, "2024-01-01", 10, 2))
	if len(stats(t, l, "main")) != 0 {
		t.Fatal("the branch write reached main")
	}
	if _, err := l.ReplaceWindow(ctx, revenue.Table, "main", "backfill_1", []string{"2024-01-01"}, "pre_backfill_1", "cutover:1", nil); err != nil {
		t.Fatal(err)
	}
	checkStat(t, stats(t, l, "main"), "2024-01-01", 10, wantSum(10, 2))
	if got := stats(t, l, "pre_backfill_1"); len(got) != 0 {
		t.Fatalf("the tag of the empty main holds %v", got)
	}
	if _, err := l.ReplaceWindow(ctx, revenue.Table, "main", "pre_backfill_1", []string{"2024-01-01"}, "", "rollback:1", nil); err != nil {
		t.Fatal(err)
	}
	if got := stats(t, l, "main"); len(got) != 0 {
		t.Fatalf("after the rollback main holds %v; want it empty again", got)
	}
}
