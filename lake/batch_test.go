package lake

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// A batch of the hours of a day replaces those 24 partitions in one commit,
// leaves the hours around it alone, and refuses a row at another time.
func TestReplaceIntervalsOfHours(t *testing.T) {
	l, dir := openHourly(t)
	ctx := context.Background()
	// Before: hours 23 of the day before, the whole day and 0 of the day after.
	around := []Interval{hour("2023-12-31", 23), hour("2024-01-02", 0)}
	for _, iv := range around {
		replaceHour(t, l, "main", iv, hourCSV(t, dir, iv.Start, 3, 1))
	}
	var day []Interval
	for h := range 24 {
		iv := hour("2024-01-01", h)
		day = append(day, iv)
		replaceHour(t, l, "main", iv, hourCSV(t, dir, iv.Start, 2, 1))
	}
	snaps, err := l.Snapshots(ctx, hourly.Table)
	if err != nil {
		t.Fatal(err)
	}
	// The batch writes every hour but hour 5 (a quiet hour: no rows).
	var files []string
	for h, iv := range day {
		if h != 5 {
			files = append(files, hourCSV(t, dir, iv.Start, h+1, 10))
		}
	}
	if _, err := l.ReplaceIntervals(ctx, hourly, "main", day, files, map[string]string{"rewind.run-id": "batch"}); err != nil {
		t.Fatal(err)
	}
	after, err := l.Snapshots(ctx, hourly.Table)
	if err != nil {
		t.Fatal(err)
	}
	if len(after) != len(snaps)+1 && len(after) != len(snaps)+2 { // +1 manifest compaction at most
		t.Errorf("%d snapshots after the batch, %d before: want one commit", len(after), len(snaps))
	}
	st := hourlyStats(t, l, "main")
	for h, iv := range day {
		if h == 5 {
			if _, ok := st[hourly.PartitionValue(iv)]; ok {
				t.Errorf("hour 5 kept its rows: the batch replaces it with none")
			}
			continue
		}
		checkHour(t, st, iv, int64(h+1), wantViews(h+1, 10))
	}
	for _, iv := range around {
		checkHour(t, st, iv, 3, wantViews(3, 1))
	}
	// A row outside the batch, or inside it off an interval's start: refused, nothing written.
	for _, bad := range []time.Time{day[0].Start.Add(-time.Hour), day[3].Start.Add(30 * time.Minute)} {
		f := hourCSV(t, dir, bad, 1, 7)
		_, err := l.ReplaceIntervals(ctx, hourly, "main", day, append(files[:3:3], f), nil)
		if !errors.Is(err, ErrBadInput) {
			t.Errorf("row at %s: %v; want ErrBadInput", bad, err)
		}
	}
	if got := hourlyStats(t, l, "main"); len(got) != len(st) {
		t.Errorf("a refused batch changed main: %d partitions, want %d", len(got), len(st))
	}
	// Intervals that do not follow each other are not a batch.
	if _, err := l.ReplaceIntervals(ctx, hourly, "main", []Interval{day[2], day[1]}, nil, nil); err == nil || !strings.Contains(err.Error(), "follow each other") {
		t.Errorf("intervals out of order: %v", err)
	}
}

// A batch of days of a date-partitioned output replaces those dates only.
func TestReplaceIntervalsOfDays(t *testing.T) {
	l, dir := openTest(t)
	ctx := context.Background()
	days := []string{"2024-03-01", "2024-03-02", "2024-03-03", "2024-03-04", "2024-03-05"}
	for _, ds := range days {
		replace(t, l, "main", ds, writeCSV(t, dir, ds, 4, 1))
	}
	var batch []Interval
	var files []string
	for _, ds := range days[1:4] {
		d, _ := time.Parse(time.DateOnly, ds)
		batch = append(batch, Interval{DS: ds, Start: d, End: d.AddDate(0, 0, 1)})
		files = append(files, writeCSV(t, dir, ds, 6, 100))
	}
	if _, err := l.ReplaceIntervals(ctx, revenue, "main", batch, files, nil); err != nil {
		t.Fatal(err)
	}
	st := stats(t, l, "main")
	checkStat(t, st, days[0], 4, wantSum(4, 1))
	checkStat(t, st, days[4], 4, wantSum(4, 1))
	for _, ds := range days[1:4] {
		checkStat(t, st, ds, 6, wantSum(6, 100))
	}
	bad := writeCSV(t, dir, days[4], 1, 9)
	if _, err := l.ReplaceIntervals(ctx, revenue, "main", batch, append(files, bad), nil); !errors.Is(err, ErrBadInput) {
		t.Errorf("a row of a date outside the batch: %v; want ErrBadInput", err)
	}
}
