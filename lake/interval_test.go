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
)

// hourly is the output of an hourly pipeline: partitioned by the start of
// each run's data interval.
var hourly = Output{
	Table: "analytics.page_views_hourly",
	Columns: []Column{
		{Name: "hour", Type: "timestamp"},
		{Name: "page", Type: "string"},
		{Name: "views", Type: "long"},
	},
	Partition: "hour",
}

func openHourly(t testing.TB) (*Lake, string) {
	t.Helper()
	dir := t.TempDir()
	l := openAt(t, dir)
	if err := l.EnsureTable(context.Background(), hourly); err != nil {
		t.Fatal(err)
	}
	return l, dir
}

// hourCSV writes n rows of the interval starting at start (written as
// RFC 3339 with start's offset) whose views are scale*(i+1).
func hourCSV(t testing.TB, dir string, start time.Time, n int, scale int64) string {
	t.Helper()
	var b strings.Builder
	b.WriteString("hour,page,views\n")
	for i := 0; i < n; i++ {
		fmt.Fprintf(&b, "%s,/p%d,%d\n", start.Format(time.RFC3339), i, scale*int64(i+1))
	}
	p := filepath.Join(dir, fmt.Sprintf("%d-%d-%d.csv", start.Unix(), n, scale))
	if err := os.WriteFile(p, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func wantViews(n int, scale int64) float64 { return float64(scale) * float64(n*(n+1)/2) }

func hour(day string, h int) Interval {
	d, err := time.Parse(time.DateOnly, day)
	if err != nil {
		panic(err)
	}
	start := d.Add(time.Duration(h) * time.Hour)
	return Interval{DS: day, Start: start, End: start.Add(time.Hour)}
}

func replaceHour(t testing.TB, l *Lake, ref string, iv Interval, files ...string) int64 {
	t.Helper()
	id, err := l.ReplaceInterval(context.Background(), hourly, ref, iv, files, map[string]string{"rewind.run-id": "run-" + TimestampValue(iv.Start)})
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func hourlyStats(t testing.TB, l *Lake, ref string) map[string]PartitionStat {
	t.Helper()
	st, err := l.PartitionStats(context.Background(), hourly.Table, ref, []string{"views"})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func checkHour(t *testing.T, st map[string]PartitionStat, iv Interval, rows int64, sum float64) {
	t.Helper()
	key := hourly.PartitionValue(iv)
	got, ok := st[key]
	if !ok {
		t.Fatalf("no partition %s", key)
	}
	if got.Rows != rows || math.Abs(got.Sums["views"]-sum) > 1e-9 {
		t.Fatalf("partition %s: %d rows, %g views; want %d rows, %g", key, got.Rows, got.Sums["views"], rows, sum)
	}
}

// An hourly output keeps one partition per data interval: 24 runs of a day
// leave 24 partitions, and running an hour again replaces that hour only.
func TestHourlyOutputKeepsEveryInterval(t *testing.T) {
	l, dir := openHourly(t)
	for h := range 24 {
		iv := hour("2024-01-01", h)
		replaceHour(t, l, "main", iv, hourCSV(t, dir, iv.Start, h+1, 1))
	}
	st := hourlyStats(t, l, "main")
	if len(st) != 24 {
		t.Fatalf("%d partitions after 24 hourly runs, want 24: %v", len(st), st)
	}
	for h := range 24 {
		checkHour(t, st, hour("2024-01-01", h), int64(h+1), wantViews(h+1, 1))
	}
	if _, ok := st["2024-01-01T05:00:00Z"]; !ok {
		t.Fatalf("partitions are not named by the interval's start in RFC 3339 UTC: %v", st)
	}

	// The hour 05 again, corrected: only it changes.
	iv := hour("2024-01-01", 5)
	replaceHour(t, l, "main", iv, hourCSV(t, dir, iv.Start, 3, 10))
	st = hourlyStats(t, l, "main")
	checkHour(t, st, iv, 3, wantViews(3, 10))
	checkHour(t, st, hour("2024-01-01", 4), 5, wantViews(5, 1))
	checkHour(t, st, hour("2024-01-01", 6), 7, wantViews(7, 1))
	if len(st) != 24 {
		t.Fatalf("%d partitions after a re-run, want 24", len(st))
	}

	// The start written with another offset is the same instant.
	rome, _ := time.LoadLocation("Europe/Rome")
	replaceHour(t, l, "main", iv, hourCSV(t, dir, iv.Start.In(rome), 2, 1))
	checkHour(t, hourlyStats(t, l, "main"), iv, 2, wantViews(2, 1))

	// A run of another day adds its hours beside.
	next := hour("2024-01-02", 0)
	replaceHour(t, l, "main", next, hourCSV(t, dir, next.Start, 4, 1))
	if st := hourlyStats(t, l, "main"); len(st) != 25 {
		t.Fatalf("%d partitions, want 25", len(st))
	}
}

// Rows outside the run's interval, or inside it at another time, are bad
// input; writing an hourly output by date is refused. Nothing is committed.
func TestHourlyOutputRefusesOtherIntervals(t *testing.T) {
	ctx := context.Background()
	l, dir := openHourly(t)
	iv := hour("2024-01-01", 3)
	before := replaceHour(t, l, "main", iv, hourCSV(t, dir, iv.Start, 2, 1))
	good := hourCSV(t, dir, iv.Start, 1, 1)
	cases := map[string]struct{ content, want string }{
		"the next hour":      {"hour,page,views\n2024-01-01T04:00:00Z,/a,1\n", "outside the data interval [2024-01-01T03:00:00Z, 2024-01-01T04:00:00Z)"},
		"the hour before":    {"hour,page,views\n2024-01-01T02:59:59Z,/a,1\n", "outside the data interval"},
		"inside, not start":  {"hour,page,views\n2024-01-01T03:30:00Z,/a,1\n", "not at its start"},
		"a date":             {"hour,page,views\n2024-01-01,/a,1\n", "outside the data interval"},
		"empty":              {"hour,page,views\n,/a,1\n", "column hour: not a timestamp"},
		"not a timestamp":    {"hour,page,views\nthree,/a,1\n", "not a timestamp"},
		"local time of Rome": {"hour,page,views\n2024-01-01T03:00:00+01:00,/a,1\n", "outside the data interval"},
	}
	for name, c := range cases {
		f := write(t, dir, strings.ReplaceAll(name, " ", "_")+".csv", c.content)
		_, err := l.ReplaceInterval(ctx, hourly, "main", iv, []string{good, f}, nil)
		if !errors.Is(err, ErrBadInput) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want ErrBadInput with %q", name, err, c.want)
		}
	}
	if _, err := l.ReplacePartition(ctx, hourly, "main", "2024-01-01", []string{good}, nil); err == nil || !strings.Contains(err.Error(), "one partition per data interval") {
		t.Errorf("ReplacePartition of an hourly output: %v", err)
	}
	if _, err := l.ReplaceInterval(ctx, hourly, "main", Interval{Start: iv.Start, End: iv.Start}, []string{good}, nil); err == nil {
		t.Error("an empty interval was accepted")
	}
	refs, _ := l.Refs(ctx, hourly.Table)
	if refs["main"] != before {
		t.Fatalf("main moved after refused writes")
	}
	checkHour(t, hourlyStats(t, l, "main"), iv, 2, wantViews(2, 1))
}

// A daily output written by interval is written by its ds, as before.
func TestReplaceIntervalOfADailyOutput(t *testing.T) {
	l, dir := openTest(t)
	iv := Interval{DS: "2024-01-01", Start: time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC), End: time.Date(2024, 1, 2, 0, 0, 0, 0, time.UTC)}
	if revenue.IntervalPartitioned() || revenue.PartitionValue(iv) != "2024-01-01" || hourly.PartitionValue(iv) != "2024-01-01T00:00:00Z" {
		t.Fatalf("partition values: %q %q", revenue.PartitionValue(iv), hourly.PartitionValue(iv))
	}
	if _, err := l.ReplaceInterval(context.Background(), revenue, "main", iv, []string{writeCSV(t, dir, "2024-01-01", 10, 1)}, nil); err != nil {
		t.Fatal(err)
	}
	checkStat(t, stats(t, l, "main"), "2024-01-01", 10, wantSum(10, 1))
}

// The cutover of a backfill over some hours replaces exactly those hours
// on today's main; a rollback restores them from the tag. Window values
// are the intervals' starts, with any offset.
func TestReplaceWindowOverHours(t *testing.T) {
	ctx := context.Background()
	l, dir := openHourly(t)
	day := make([]Interval, 24)
	for h := range day {
		day[h] = hour("2024-01-01", h)
	}
	for _, iv := range day[:12] {
		replaceHour(t, l, "main", iv, hourCSV(t, dir, iv.Start, 10, 1))
	}
	if err := l.CreateBranch(ctx, hourly.Table, "backfill_7", "main"); err != nil {
		t.Fatal(err)
	}
	// The backfill rewrites 03:00..05:00, 04:00 with no rows.
	replaceHour(t, l, "backfill_7", day[3], hourCSV(t, dir, day[3].Start, 5, 3))
	replaceHour(t, l, "backfill_7", day[4])
	replaceHour(t, l, "backfill_7", day[5], hourCSV(t, dir, day[5].Start, 6, 3))
	// Meanwhile the hourly runs go on on main: 12:00, and 02:00 again.
	replaceHour(t, l, "main", day[12], hourCSV(t, dir, day[12].Start, 12, 1))
	replaceHour(t, l, "main", day[2], hourCSV(t, dir, day[2].Start, 2, 1))
	refsBefore, _ := l.Refs(ctx, hourly.Table)

	rome, _ := time.LoadLocation("Europe/Rome")
	window := []string{TimestampValue(day[3].Start), day[4].Start.In(rome).Format(time.RFC3339), hourly.PartitionValue(day[5])}
	if done, err := l.ReplaceWindow(ctx, hourly.Table, "main", "backfill_7", window, "pre_backfill_7", "cutover:7", nil); err != nil || done {
		t.Fatalf("cutover: done %v, err %v", done, err)
	}
	st := hourlyStats(t, l, "main")
	checkHour(t, st, day[2], 2, wantViews(2, 1))
	checkHour(t, st, day[3], 5, wantViews(5, 3))
	if _, ok := st[hourly.PartitionValue(day[4])]; ok {
		t.Fatalf("04:00 holds rows on main; the backfill emptied it")
	}
	checkHour(t, st, day[5], 6, wantViews(6, 3))
	for _, h := range []int{0, 1, 6, 7, 8, 9, 10, 11} {
		checkHour(t, st, day[h], 10, wantViews(10, 1))
	}
	checkHour(t, st, day[12], 12, wantViews(12, 1))
	if len(st) != 12 {
		t.Fatalf("%d partitions on main after the cutover, want 12 (13 hours, 04:00 emptied)", len(st))
	}
	if refs, _ := l.Refs(ctx, hourly.Table); refs["pre_backfill_7"] != refsBefore["main"] {
		t.Fatalf("tag at %d, want main's head before the cutover %d", refs["pre_backfill_7"], refsBefore["main"])
	}
	if done, err := l.ReplaceWindow(ctx, hourly.Table, "main", "backfill_7", window, "pre_backfill_7", "cutover:7", nil); err != nil || !done {
		t.Fatalf("repeated cutover: done %v, err %v", done, err)
	}

	// Rollback after another hourly run: the window as before, 13:00 kept.
	replaceHour(t, l, "main", day[13], hourCSV(t, dir, day[13].Start, 13, 1))
	if _, err := l.ReplaceWindow(ctx, hourly.Table, "main", "pre_backfill_7", window, "", "rollback:7", nil); err != nil {
		t.Fatal(err)
	}
	st = hourlyStats(t, l, "main")
	for _, h := range []int{3, 4, 5} {
		checkHour(t, st, day[h], 10, wantViews(10, 1))
	}
	checkHour(t, st, day[13], 13, wantViews(13, 1))
	if len(st) != 14 {
		t.Fatalf("%d partitions after the rollback, want 14", len(st))
	}

	// Dates are not values of an hourly table, nor hours of a daily one.
	if _, err := l.ReplaceWindow(ctx, hourly.Table, "main", "backfill_7", []string{"2024-01-01"}, "", "x", nil); err == nil || !strings.Contains(err.Error(), "partitioned by data interval") {
		t.Errorf("a date window on an hourly table: %v", err)
	}
	ld, _ := openTest(t)
	replace(t, ld, "main", "2024-01-01", writeCSV(t, dir, "2024-01-01", 1, 1))
	if _, err := ld.ReplaceWindow(ctx, revenue.Table, "main", "main", []string{"2024-01-01T00:00:00Z"}, "", "y", nil); err == nil || !strings.Contains(err.Error(), "partitioned by date") {
		t.Errorf("an hour window on a daily table: %v", err)
	}
}
