package lake

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
	"github.com/apache/iceberg-go/catalog"
	"github.com/apache/iceberg-go/table"
)

var revenue = Output{
	Table: "analytics.fct_daily_revenue",
	Columns: []Column{
		{Name: "ds", Type: "date"},
		{Name: "currency", Type: "string"},
		{Name: "amount_usd", Type: "double"},
		{Name: "orders", Type: "long"},
	},
	Partition: "ds",
}

// openTest opens a fresh SQL catalog in a temporary directory and creates
// the revenue table.
func openTest(t testing.TB) (*Lake, string) {
	t.Helper()
	dir := t.TempDir()
	l := openAt(t, dir)
	if err := l.EnsureTable(context.Background(), revenue); err != nil {
		t.Fatal(err)
	}
	return l, dir
}

func openAt(t testing.TB, dir string) *Lake {
	t.Helper()
	l, err := Open(context.Background(), Config{
		Type:      "sql",
		URI:       filepath.Join(dir, ".rewind", "catalog.db"),
		Warehouse: filepath.Join(dir, ".rewind", "warehouse"),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// writeCSV writes n rows of date ds whose amount_usd is scale*(i+1) and
// returns the file name.
func writeCSV(t testing.TB, dir, ds string, n int, scale float64) string {
	t.Helper()
	var b strings.Builder
	b.WriteString("ds,currency,amount_usd,orders\n")
	for i := 0; i < n; i++ {
		fmt.Fprintf(&b, "%s,%s,%g,%d\n", ds, []string{"EUR", "USD", "JPY"}[i%3], scale*float64(i+1), i%7)
	}
	p := filepath.Join(dir, fmt.Sprintf("%s-%d-%g.csv", ds, n, scale))
	if err := os.WriteFile(p, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// wantSum is the amount_usd sum of writeCSV's rows.
func wantSum(n int, scale float64) float64 { return scale * float64(n*(n+1)/2) }

func replace(t testing.TB, l *Lake, ref, ds string, files ...string) int64 {
	t.Helper()
	id, err := l.ReplacePartition(context.Background(), revenue, ref, ds, files,
		map[string]string{"rewind.pipeline": "daily_revenue", "rewind.run-id": "run-" + ds, "rewind.kind": "scheduled"})
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func stats(t testing.TB, l *Lake, ref string) map[string]PartitionStat {
	t.Helper()
	st, err := l.PartitionStats(context.Background(), revenue.Table, ref, []string{"amount_usd", "orders"})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func checkStat(t *testing.T, st map[string]PartitionStat, ds string, rows int64, sum float64) {
	t.Helper()
	got, ok := st[ds]
	if !ok {
		t.Fatalf("no partition %s in %v", ds, st)
	}
	if got.Rows != rows || math.Abs(got.Sums["amount_usd"]-sum) > 1e-6 {
		t.Fatalf("partition %s: got %d rows, sum %v; want %d rows, sum %v", ds, got.Rows, got.Sums["amount_usd"], rows, sum)
	}
}

func TestEnsureTable(t *testing.T) {
	ctx := context.Background()
	l, dir := openTest(t)
	// Idempotent, and survives reopening.
	if err := l.EnsureTable(ctx, revenue); err != nil {
		t.Fatal(err)
	}
	l.Close()
	l = openAt(t, dir)
	if err := l.EnsureTable(ctx, revenue); err != nil {
		t.Fatal(err)
	}
	refs, err := l.Refs(ctx, revenue.Table)
	if err != nil || len(refs) != 0 {
		t.Fatalf("new table refs = %v, %v; want none", refs, err)
	}
	if _, err := os.Stat(filepath.Join(dir, ".rewind", "warehouse", "analytics.db", "fct_daily_revenue", "metadata")); err != nil {
		t.Fatalf("table metadata not under the warehouse: %v", err)
	}

	conflicts := []Output{
		{Table: revenue.Table, Partition: "ds", Columns: []Column{{"ds", "date"}, {"currency", "string"}, {"amount_usd", "long"}, {"orders", "long"}}},
		{Table: revenue.Table, Partition: "ds", Columns: []Column{{"ds", "date"}, {"currency", "string"}, {"amount_usd", "double"}}},
		{Table: revenue.Table, Partition: "ds", Columns: []Column{{"ds", "date"}, {"currency", "string"}, {"amount_usd", "double"}, {"orders", "long"}, {"extra", "int"}}},
	}
	for i, o := range conflicts {
		if err := l.EnsureTable(ctx, o); !errors.Is(err, ErrSchemaConflict) {
			t.Errorf("conflict %d: err = %v, want ErrSchemaConflict", i, err)
		}
	}
	bad := []Output{
		{Table: "nonamespace", Partition: "ds", Columns: revenue.Columns},
		{Table: "a.b", Partition: "day", Columns: revenue.Columns},
		{Table: "a.b", Partition: "currency", Columns: revenue.Columns},
		{Table: "a.b", Partition: "ds", Columns: []Column{{"ds", "date"}, {"x", "decimal"}}},
	}
	for i, o := range bad {
		if err := l.EnsureTable(ctx, o); err == nil {
			t.Errorf("bad output %d accepted", i)
		}
	}

	// Every column type.
	all := Output{Table: "other.all_types", Partition: "day", Columns: []Column{
		{"day", "date"}, {"s", "string"}, {"d", "double"}, {"l", "long"}, {"i", "int"}, {"b", "boolean"}, {"ts", "timestamp"},
	}}
	if err := l.EnsureTable(ctx, all); err != nil {
		t.Fatal(err)
	}
	in := filepath.Join(t.TempDir(), "all.csv")
	os.WriteFile(in, []byte("day,s,d,l,i,b,ts\n"+
		"2024-03-01,x,1.5,10000000000,7,true,2024-03-01T10:00:00Z\n"+
		"2024-03-01,,,,,,\n"), 0o644)
	if _, err := l.ReplacePartition(ctx, all, "main", "2024-03-01", []string{in}, nil); err != nil {
		t.Fatal(err)
	}
	st, err := l.PartitionStats(ctx, all.Table, "main", []string{"d", "l", "i"})
	if err != nil {
		t.Fatal(err)
	}
	if s := st["2024-03-01"]; s.Rows != 2 || s.Sums["d"] != 1.5 || s.Sums["l"] != 1e10 || s.Sums["i"] != 7 {
		t.Fatalf("all types stats = %+v", s)
	}
}

func TestReplacePartitionTwiceLeavesOneCopy(t *testing.T) {
	ctx := context.Background()
	l, dir := openTest(t)
	f1 := writeCSV(t, dir, "2024-01-01", 100, 1)
	f2 := writeCSV(t, dir, "2024-01-02", 50, 1)
	replace(t, l, "main", "2024-01-01", f1)
	replace(t, l, "main", "2024-01-02", f2)
	first := stats(t, l, "main")
	id := replace(t, l, "main", "2024-01-01", f1) // re-run of the same date
	st := stats(t, l, "main")
	checkStat(t, st, "2024-01-01", 100, wantSum(100, 1))
	checkStat(t, st, "2024-01-02", 50, wantSum(50, 1))
	if len(st) != 2 || st["2024-01-01"].Rows != first["2024-01-01"].Rows {
		t.Fatalf("stats after re-run %v, before %v", st, first)
	}
	// A corrected re-run replaces the rows.
	replace(t, l, "main", "2024-01-01", writeCSV(t, dir, "2024-01-01", 80, 2))
	st = stats(t, l, "main")
	checkStat(t, st, "2024-01-01", 80, wantSum(80, 2))
	checkStat(t, st, "2024-01-02", 50, wantSum(50, 1))

	snaps, err := l.Snapshots(ctx, revenue.Table)
	if err != nil {
		t.Fatal(err)
	}
	if len(snaps) != 4 {
		t.Fatalf("%d snapshots, want 4 (one per commit)", len(snaps))
	}
	var found bool
	for _, s := range snaps {
		if s.ID == id {
			found = true
			if s.Operation != "overwrite" || s.Summary["rewind.pipeline"] != "daily_revenue" ||
				s.Summary["rewind.run-id"] != "run-2024-01-01" || s.Summary["rewind.kind"] != "scheduled" {
				t.Fatalf("snapshot %d: operation %q summary %v", s.ID, s.Operation, s.Summary)
			}
			if s.ParentID == 0 {
				t.Fatalf("snapshot %d has no parent", s.ID)
			}
		}
	}
	if !found {
		t.Fatalf("snapshot %d not listed", id)
	}
}

func TestInputFormats(t *testing.T) {
	l, dir := openTest(t)

	csvFile := filepath.Join(dir, "in.csv")
	os.WriteFile(csvFile, []byte("currency,ds,amount_usd,orders\nEUR,2024-02-01,1.25,1\n\"US,D\",2024-02-01,2.75,2\n"), 0o644)
	jsonFile := filepath.Join(dir, "in.jsonl")
	os.WriteFile(jsonFile, []byte(`{"ds":"2024-02-02","currency":"EUR","amount_usd":10,"orders":3}`+"\n\n"+
		`{"ds":"2024-02-02","currency":null,"amount_usd":0.5,"orders":null}`+"\n"), 0o644)
	pqFile := filepath.Join(dir, "in.parquet")
	writeParquet(t, pqFile, "2024-02-03", 1000)

	replace(t, l, "main", "2024-02-01", csvFile)
	replace(t, l, "main", "2024-02-02", jsonFile)
	replace(t, l, "main", "2024-02-03", pqFile)
	// Several files, of mixed formats, make one partition.
	pq2 := filepath.Join(dir, "in2.parquet")
	writeParquet(t, pq2, "2024-02-04", 10)
	json2 := filepath.Join(dir, "in2.json")
	os.WriteFile(json2, []byte(`{"ds":"2024-02-04","currency":"EUR","amount_usd":100,"orders":1}`+"\n"), 0o644)
	replace(t, l, "main", "2024-02-04", pq2, json2)

	st := stats(t, l, "main")
	checkStat(t, st, "2024-02-01", 2, 4)
	checkStat(t, st, "2024-02-02", 2, 10.5)
	checkStat(t, st, "2024-02-03", 1000, wantSum(1000, 0.5))
	checkStat(t, st, "2024-02-04", 11, wantSum(10, 0.5)+100)
	if st["2024-02-02"].Sums["orders"] != 3 {
		t.Fatalf("orders sum with a null = %v, want 3", st["2024-02-02"].Sums["orders"])
	}
}

// writeParquet writes n rows of ds with Arrow types that differ from the
// table's (int32 orders, float32 amounts, a date32 ds) to check conversion.
func writeParquet(t testing.TB, path, ds string, n int) {
	t.Helper()
	day, err := parseDate(ds)
	if err != nil {
		t.Fatal(err)
	}
	sc := arrow.NewSchema([]arrow.Field{
		{Name: "ds", Type: arrow.FixedWidthTypes.Date32},
		{Name: "currency", Type: arrow.BinaryTypes.String},
		{Name: "amount_usd", Type: arrow.PrimitiveTypes.Float32},
		{Name: "orders", Type: arrow.PrimitiveTypes.Int32},
	}, nil)
	b := array.NewRecordBuilder(memory.DefaultAllocator, sc)
	defer b.Release()
	for i := 0; i < n; i++ {
		b.Field(0).(*array.Date32Builder).Append(arrow.Date32(day))
		b.Field(1).(*array.StringBuilder).Append("EUR")
		b.Field(2).(*array.Float32Builder).Append(0.5 * float32(i+1))
		b.Field(3).(*array.Int32Builder).Append(int32(i % 5))
	}
	rec := b.NewRecordBatch()
	defer rec.Release()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w, err := pqarrow.NewFileWriter(sc, f, nil, pqarrow.DefaultWriterProps())
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Write(rec); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestBadInputIsRefused(t *testing.T) {
	ctx := context.Background()
	l, dir := openTest(t)
	good := writeCSV(t, dir, "2024-01-01", 10, 1)
	before := replace(t, l, "main", "2024-01-01", good)

	wrongDS := writeCSV(t, dir, "2024-01-02", 3, 1)
	cases := map[string]string{
		"wrong ds":       wrongDS,
		"missing column": write(t, dir, "missing.csv", "ds,currency,amount_usd\n2024-01-01,EUR,1\n"),
		"extra column":   write(t, dir, "extra.csv", "ds,currency,amount_usd,orders,x\n2024-01-01,EUR,1,1,1\n"),
		"bad number":     write(t, dir, "num.csv", "ds,currency,amount_usd,orders\n2024-01-01,EUR,abc,1\n"),
		"bad date":       write(t, dir, "date.csv", "ds,currency,amount_usd,orders\n01/01/2024,EUR,1,1\n"),
		"empty ds":       write(t, dir, "nods.csv", "ds,currency,amount_usd,orders\n,EUR,1,1\n"),
		"wrong ds json":  write(t, dir, "ds.jsonl", `{"ds":"2023-12-31","currency":"EUR","amount_usd":1,"orders":1}`+"\n"),
		"unknown format": write(t, dir, "x.txt", "ds\n2024-01-01\n"),
	}
	for name, f := range cases {
		_, err := l.ReplacePartition(ctx, revenue, "main", "2024-01-01", []string{good, f}, nil)
		if !errors.Is(err, ErrBadInput) {
			t.Errorf("%s: err = %v, want ErrBadInput", name, err)
		}
	}
	if _, err := l.ReplacePartition(ctx, revenue, "main", "2024-01-01", []string{filepath.Join(dir, "absent.csv")}, nil); err == nil {
		t.Error("absent file accepted")
	}
	if _, err := l.ReplacePartition(ctx, revenue, "nobranch", "2024-01-01", []string{good}, nil); !errors.Is(err, ErrNoSuchRef) {
		t.Errorf("unknown branch: err = %v, want ErrNoSuchRef", err)
	}
	refs, _ := l.Refs(ctx, revenue.Table)
	if refs["main"] != before {
		t.Fatalf("main moved to %d after refused writes, want %d", refs["main"], before)
	}
	checkStat(t, stats(t, l, "main"), "2024-01-01", 10, wantSum(10, 1))
}

func write(t testing.TB, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

var days = []string{"2024-01-01", "2024-01-02", "2024-01-03"}

// threeDaysAndBranch writes three dates on main, creates the branch and
// replaces the second date on it (amounts doubled).
func threeDaysAndBranch(t testing.TB, l *Lake, dir, branch string) (mainID, branchID int64) {
	t.Helper()
	for i, ds := range days {
		mainID = replace(t, l, "main", ds, writeCSV(t, dir, ds, 100+i, 1))
	}
	if err := l.CreateBranch(context.Background(), revenue.Table, branch, "main"); err != nil {
		t.Fatal(err)
	}
	branchID = replace(t, l, branch, days[1], writeCSV(t, dir, days[1], 101, 2))
	return mainID, branchID
}

func TestBranchWriteLeavesMainUntouched(t *testing.T) {
	ctx := context.Background()
	l, dir := openTest(t)
	mainID, branchID := threeDaysAndBranch(t, l, dir, "backfill_1")

	refs, err := l.Refs(ctx, revenue.Table)
	if err != nil {
		t.Fatal(err)
	}
	if refs["main"] != mainID || refs["backfill_1"] != branchID || mainID == branchID {
		t.Fatalf("refs = %v; want main %d, backfill_1 %d", refs, mainID, branchID)
	}
	m := stats(t, l, "main")
	b := stats(t, l, "backfill_1")
	for i, ds := range days {
		checkStat(t, m, ds, int64(100+i), wantSum(100+i, 1))
	}
	checkStat(t, b, days[0], 100, wantSum(100, 1))
	checkStat(t, b, days[1], 101, wantSum(101, 2))
	checkStat(t, b, days[2], 102, wantSum(102, 1))

	if err := l.CreateBranch(ctx, revenue.Table, "backfill_1", "main"); !errors.Is(err, ErrRefExists) {
		t.Fatalf("second CreateBranch: err = %v, want ErrRefExists", err)
	}
	if err := l.CreateBranch(ctx, revenue.Table, "x", "nosuch"); !errors.Is(err, ErrNoSuchRef) {
		t.Fatalf("CreateBranch from a missing ref: err = %v, want ErrNoSuchRef", err)
	}
}

func TestFastForwardAndRollback(t *testing.T) {
	ctx := context.Background()
	l, dir := openTest(t)
	mainID, branchID := threeDaysAndBranch(t, l, dir, "backfill_7")
	before := stats(t, l, "main")

	if err := l.FastForward(ctx, revenue.Table, "main", "backfill_7", "pre_backfill_7"); err != nil {
		t.Fatal(err)
	}
	refs, _ := l.Refs(ctx, revenue.Table)
	if refs["main"] != branchID || refs["pre_backfill_7"] != mainID || refs["backfill_7"] != branchID {
		t.Fatalf("after fast-forward refs = %v; want main=branch=%d, tag=%d", refs, branchID, mainID)
	}
	after := stats(t, l, "main")
	checkStat(t, after, days[1], 101, wantSum(101, 2))
	checkStat(t, after, days[0], 100, wantSum(100, 1))
	// The tag reads the old main.
	tagged := stats(t, l, "pre_backfill_7")
	checkStat(t, tagged, days[1], 101, wantSum(101, 1))

	// Repeating the finished cutover is a no-op; a reused tag is refused.
	if err := l.FastForward(ctx, revenue.Table, "main", "backfill_7", "pre_backfill_7"); err != nil {
		t.Fatalf("repeated fast-forward: %v", err)
	}

	if err := l.Rollback(ctx, revenue.Table, "main", "pre_backfill_7"); err != nil {
		t.Fatal(err)
	}
	refs, _ = l.Refs(ctx, revenue.Table)
	if refs["main"] != mainID {
		t.Fatalf("after rollback main = %d, want %d", refs["main"], mainID)
	}
	restored := stats(t, l, "main")
	for _, ds := range days {
		if restored[ds].Rows != before[ds].Rows || restored[ds].Sums["amount_usd"] != before[ds].Sums["amount_usd"] {
			t.Fatalf("rollback: %s is %+v, want %+v", ds, restored[ds], before[ds])
		}
	}
	if err := l.Rollback(ctx, revenue.Table, "main", "nosuchtag"); !errors.Is(err, ErrNoSuchRef) {
		t.Fatalf("rollback to a missing tag: err = %v", err)
	}

	// Main can take commits after a rollback.
	replace(t, l, "main", "2024-01-04", writeCSV(t, dir, "2024-01-04", 5, 1))
	checkStat(t, stats(t, l, "main"), "2024-01-04", 5, wantSum(5, 1))
	if err := l.FastForward(ctx, revenue.Table, "main", "backfill_7", "pre_backfill_7"); !errors.Is(err, ErrConcurrentCommit) {
		t.Fatalf("fast-forward over a diverged main: err = %v, want ErrConcurrentCommit", err)
	}
}

func TestFastForwardDetectsConcurrentCommit(t *testing.T) {
	ctx := context.Background()
	l, dir := openTest(t)
	_, branchID := threeDaysAndBranch(t, l, dir, "backfill_2")
	// A scheduled run commits to main after the branch was written.
	late := replace(t, l, "main", "2024-01-05", writeCSV(t, dir, "2024-01-05", 7, 1))

	err := l.FastForward(ctx, revenue.Table, "main", "backfill_2", "pre_backfill_2")
	if !errors.Is(err, ErrConcurrentCommit) {
		t.Fatalf("err = %v, want ErrConcurrentCommit", err)
	}
	refs, _ := l.Refs(ctx, revenue.Table)
	if refs["main"] != late || refs["backfill_2"] != branchID {
		t.Fatalf("refs = %v; want main %d (the late commit), branch %d", refs, late, branchID)
	}
	if _, ok := refs["pre_backfill_2"]; ok {
		t.Fatal("tag created by a refused fast-forward")
	}
	checkStat(t, stats(t, l, "main"), "2024-01-05", 7, wantSum(7, 1))
}

// TestFastForwardRace runs a cutover while another process' commit lands
// between its read and its commit: the requirement on main catches it.
func TestFastForwardRace(t *testing.T) {
	ctx := context.Background()
	l, dir := openTest(t)
	_, _ = threeDaysAndBranch(t, l, dir, "backfill_3")
	var lateID int64
	// Another process' commit to main lands after the cutover read main
	// and before its catalog commit.
	l2 := *l
	l2.cat = &raceCatalog{Catalog: l.cat, before: func() {
		lateID = replace(t, l, "main", "2024-01-07", writeCSV(t, dir, "2024-01-07", 4, 1))
	}}
	err := l2.FastForward(ctx, revenue.Table, "main", "backfill_3", "pre_backfill_3")
	if !errors.Is(err, ErrConcurrentCommit) {
		t.Fatalf("err = %v, want ErrConcurrentCommit", err)
	}
	refs, _ := l.Refs(ctx, revenue.Table)
	if refs["main"] != lateID {
		t.Fatalf("main = %d, want the concurrent commit %d", refs["main"], lateID)
	}
	if _, ok := refs["pre_backfill_3"]; ok {
		t.Fatal("tag created by a refused fast-forward")
	}
	checkStat(t, stats(t, l, "main"), "2024-01-07", 4, wantSum(4, 1))
}

func TestExpire(t *testing.T) {
	ctx := context.Background()
	l, dir := openTest(t)
	mainID, branchID := threeDaysAndBranch(t, l, dir, "backfill_9")
	if err := l.FastForward(ctx, revenue.Table, "main", "backfill_9", "pre_backfill_9"); err != nil {
		t.Fatal(err)
	}
	snaps, _ := l.Snapshots(ctx, revenue.Table)
	if len(snaps) != 4 {
		t.Fatalf("%d snapshots, want 4", len(snaps))
	}

	// Nothing is older than a time before everything.
	res, err := l.Expire(ctx, revenue.Table, time.UnixMilli(snaps[0].Time.UnixMilli()))
	if err != nil {
		t.Fatal(err)
	}
	if len(res.RemovedRefs) != 0 || len(res.RemovedSnapshots) != 0 {
		t.Fatalf("early expire removed %+v", res)
	}
	refs, _ := l.Refs(ctx, revenue.Table)
	if len(refs) != 3 {
		t.Fatalf("refs = %v", refs)
	}

	// Everything before a moment after the last commit is past retention.
	cutoff := time.Now().Add(time.Second)
	res, err = l.Expire(ctx, revenue.Table, cutoff)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(res.RemovedRefs, ",") != "backfill_9,pre_backfill_9" {
		t.Fatalf("removed refs %v", res.RemovedRefs)
	}
	if len(res.RemovedSnapshots) != 3 {
		t.Fatalf("removed snapshots %v, want the 3 that are not main's head", res.RemovedSnapshots)
	}
	for _, id := range res.RemovedSnapshots {
		if id == branchID {
			t.Fatal("expired main's head")
		}
	}
	refs, _ = l.Refs(ctx, revenue.Table)
	if len(refs) != 1 || refs["main"] != branchID {
		t.Fatalf("refs after expire = %v, want only main at %d", refs, branchID)
	}
	snaps, _ = l.Snapshots(ctx, revenue.Table)
	if len(snaps) != 1 || snaps[0].ID != branchID {
		t.Fatalf("snapshots after expire = %+v", snaps)
	}
	// Main still reads the same data, and the files of the replaced
	// partition of the old main are gone.
	st := stats(t, l, "main")
	checkStat(t, st, days[1], 101, wantSum(101, 2))
	checkStat(t, st, days[0], 100, wantSum(100, 1))
	dataFiles := countFiles(t, filepath.Join(dir, ".rewind", "warehouse", "analytics.db", "fct_daily_revenue", "data"))
	if dataFiles != 3 {
		t.Fatalf("%d data files left, want 3 (one per date)", dataFiles)
	}
	if err := l.Rollback(ctx, revenue.Table, "main", "pre_backfill_9"); !errors.Is(err, ErrNoSuchRef) {
		t.Fatalf("rollback to an expired tag: %v", err)
	}
	_ = mainID
	// A second expire has nothing left to do.
	res, err = l.Expire(ctx, revenue.Table, cutoff)
	if err != nil || len(res.RemovedRefs)+len(res.RemovedSnapshots) != 0 {
		t.Fatalf("second expire: %+v, %v", res, err)
	}
}

func countFiles(t testing.TB, dir string) int {
	t.Helper()
	n := 0
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.HasSuffix(p, ".parquet") {
			n++
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// raceCatalog runs before once, just before the first CommitTable.
type raceCatalog struct {
	catalog.Catalog
	before func()
	done   bool
}

func (c *raceCatalog) CommitTable(ctx context.Context, id table.Identifier, reqs []table.Requirement, ups []table.Update) (table.Metadata, string, error) {
	if !c.done {
		c.done = true
		c.before()
	}
	return c.Catalog.CommitTable(ctx, id, reqs, ups)
}

// TestManyCommitsCompactManifests makes more partition commits than
// compactManifestsAt: the manifests are merged along the way and every
// date still reads its latest rows.
func TestManyCommitsCompactManifests(t *testing.T) {
	ctx := context.Background()
	l, dir := openTest(t)
	day0 := time.Date(2024, 5, 1, 0, 0, 0, 0, time.UTC)
	n := compactManifestsAt + 8
	for d := range n {
		ds := day0.AddDate(0, 0, d).Format(time.DateOnly)
		replace(t, l, "main", ds, writeCSV(t, dir, ds, 10+d, 1))
	}
	// Re-run old dates with new rows, on main and on a branch.
	if err := l.CreateBranch(ctx, revenue.Table, "b", "main"); err != nil {
		t.Fatal(err)
	}
	for _, d := range []int{0, 3, n - 1} {
		ds := day0.AddDate(0, 0, d).Format(time.DateOnly)
		replace(t, l, "main", ds, writeCSV(t, dir, ds, 5, 3))
		replace(t, l, "b", ds, writeCSV(t, dir, ds, 6, 4))
	}
	m, b := stats(t, l, "main"), stats(t, l, "b")
	if len(m) != n || len(b) != n {
		t.Fatalf("%d and %d partitions, want %d", len(m), len(b), n)
	}
	for d := range n {
		ds := day0.AddDate(0, 0, d).Format(time.DateOnly)
		switch d {
		case 0, 3, n - 1:
			checkStat(t, m, ds, 5, wantSum(5, 3))
			checkStat(t, b, ds, 6, wantSum(6, 4))
		default:
			checkStat(t, m, ds, int64(10+d), wantSum(10+d, 1))
			checkStat(t, b, ds, int64(10+d), wantSum(10+d, 1))
		}
	}
	tbl, err := l.load(ctx, revenue.Table)
	if err != nil {
		t.Fatal(err)
	}
	fs, _ := tbl.FS(ctx)
	for _, ref := range []string{"main", "b"} {
		mans, err := tbl.Metadata().SnapshotByName(ref).Manifests(fs)
		if err != nil {
			t.Fatal(err)
		}
		if len(mans) >= compactManifestsAt {
			t.Fatalf("%s has %d manifests after %d commits; want them merged", ref, len(mans), n+3)
		}
	}
	snaps, _ := l.Snapshots(ctx, revenue.Table)
	replaces := 0
	for _, s := range snaps {
		if s.Operation == "replace" {
			replaces++
		}
	}
	if replaces == 0 {
		t.Fatal("no manifest rewrite snapshot")
	}
}
