package timetable

import (
	"testing"
	"time"

	"github.com/robfig/cron/v3"
)

// BenchmarkTenYearsOfMinutes enumerates ten years of "* * * * *"
// (5,260,320 intervals) per operation.
func BenchmarkTenYearsOfMinutes(b *testing.B) {
	tt, err := New("* * * * *", nil)
	if err != nil {
		b.Fatal(err)
	}
	w := tenYearsWindow()
	b.ReportAllocs()
	for b.Loop() {
		n := 0
		for range tt.Intervals(w) {
			n++
		}
		if n != tenYearsOfMinutes {
			b.Fatalf("count = %d, want %d", n, tenYearsOfMinutes)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/tenYearsOfMinutes, "ns/interval")
}

// BenchmarkLatestAfterTenYears is catchup=false on a minutely pipeline
// started ten years ago.
func BenchmarkLatestAfterTenYears(b *testing.B) {
	tt, err := New("* * * * *", nil)
	if err != nil {
		b.Fatal(err)
	}
	w := tenYearsWindow()
	b.ReportAllocs()
	for b.Loop() {
		if _, ok := tt.Latest(w); !ok {
			b.Fatal("no interval")
		}
	}
}

// BenchmarkTenYearsOfMinutesRobfigNext is the baseline: the same ticks from
// robfig/cron's own Schedule.Next, without data intervals or DST rules.
func BenchmarkTenYearsOfMinutesRobfigNext(b *testing.B) {
	sched, err := cron.ParseStandard("* * * * *")
	if err != nil {
		b.Fatal(err)
	}
	w := tenYearsWindow()
	b.ReportAllocs()
	for b.Loop() {
		n := 0
		for t := sched.Next(w.StartDate.Add(-time.Nanosecond)); t.Before(w.Now); t = sched.Next(t) {
			n++
		}
		if n != tenYearsOfMinutes { // ticks before Now: the interval starts
			b.Fatalf("count = %d, want %d", n, tenYearsOfMinutes)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/tenYearsOfMinutes, "ns/interval")
}
