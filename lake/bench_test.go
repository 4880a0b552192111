package lake

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// benchDays and benchRows are the shape of BenchmarkCommit365Partitions:
// a year of daily partitions of 10,000 rows.
const (
	benchDays = 365
	benchRows = 10_000
)

// benchInputs writes one CSV file per day.
func benchInputs(b *testing.B, dir string) (dates, files []string) {
	b.Helper()
	day0 := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
	for d := range benchDays {
		ds := day0.AddDate(0, 0, d).Format(time.DateOnly)
		var sb strings.Builder
		sb.Grow(benchRows * 40)
		sb.WriteString("ds,currency,amount_usd,orders\n")
		for i := range benchRows {
			fmt.Fprintf(&sb, "%s,%s,%d.%02d,%d\n", ds, []string{"EUR", "USD", "JPY", "GBP"}[i%4], i%997, i%100, i%13)
		}
		p := filepath.Join(dir, ds+".csv")
		if err := os.WriteFile(p, []byte(sb.String()), 0o644); err != nil {
			b.Fatal(err)
		}
		dates = append(dates, ds)
		files = append(files, p)
	}
	return dates, files
}

// heapPeak samples the heap in use.
type heapPeak struct{ max uint64 }

func (h *heapPeak) sample() {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	h.max = max(h.max, ms.HeapInuse)
}

// BenchmarkCommit365Partitions commits 365 daily partitions of 10,000 rows,
// one ReplacePartition (one Iceberg commit) per day, and as a baseline the
// same 365 files appended in one single commit. Run it with
// -benchtime=1x; peak memory is the largest heap in use sampled after
// each commit (the process's peak RSS is /usr/bin/time -v's).
func BenchmarkCommit365Partitions(b *testing.B) {
	dates, files := benchInputs(b, b.TempDir())
	ctx := context.Background()
	summary := map[string]string{"rewind.pipeline": "bench", "rewind.kind": "scheduled"}

	b.Run("per_day_commits", func(b *testing.B) {
		for range b.N {
			b.StopTimer()
			l, _ := openTest(b)
			runtime.GC()
			var peak heapPeak
			var first, last time.Duration
			b.StartTimer()
			start := time.Now()
			for d, ds := range dates {
				t0 := time.Now()
				if _, err := l.ReplacePartition(ctx, revenue, "main", ds, files[d:d+1], summary); err != nil {
					b.Fatal(err)
				}
				el := time.Since(t0)
				if d < 30 {
					first += el
				}
				if d >= benchDays-30 {
					last += el
				}
				peak.sample()
			}
			total := time.Since(start)
			b.StopTimer()
			checkBench(b, l)
			b.ReportMetric(total.Seconds(), "total-s")
			b.ReportMetric(float64(total.Milliseconds())/benchDays, "ms/partition-commit")
			b.ReportMetric(float64(first.Milliseconds())/30, "first30-ms/commit")
			b.ReportMetric(float64(last.Milliseconds())/30, "last30-ms/commit")
			b.ReportMetric(float64(peak.max)/(1<<20), "peak-heap-MB")
			l.Close()
			b.StartTimer()
		}
	})

	b.Run("one_append_commit", func(b *testing.B) {
		for range b.N {
			b.StopTimer()
			l, _ := openTest(b)
			runtime.GC()
			var peak heapPeak
			b.StartTimer()
			start := time.Now()
			if _, err := l.appendFiles(ctx, revenue, "main", files, summary); err != nil {
				b.Fatal(err)
			}
			total := time.Since(start)
			peak.sample()
			b.StopTimer()
			checkBench(b, l)
			b.ReportMetric(total.Seconds(), "total-s")
			b.ReportMetric(float64(total.Milliseconds())/benchDays, "ms/partition")
			b.ReportMetric(float64(peak.max)/(1<<20), "peak-heap-MB")
			l.Close()
			b.StartTimer()
		}
	})
}

func checkBench(b *testing.B, l *Lake) {
	st, err := l.PartitionStats(context.Background(), revenue.Table, "main", nil)
	if err != nil {
		b.Fatal(err)
	}
	if len(st) != benchDays {
		b.Fatalf("%d partitions, want %d", len(st), benchDays)
	}
	for ds, s := range st {
		if s.Rows != benchRows {
			b.Fatalf("%s: %d rows, want %d", ds, s.Rows, benchRows)
		}
	}
}
