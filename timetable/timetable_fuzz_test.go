package timetable

import (
	"testing"
	"time"
)

// ttFuzzZones are the locations the fuzz target (and the brute-force test)
// draw from: plain DST zones, 30-minute and 2-hour DST shifts, half-hour
// offsets, midnight transitions, a skipped day (Apia 2011), Ramadan DST.
var ttFuzzZones = []string{
	"UTC", "Europe/Rome", "America/New_York", "Europe/Zurich", "America/Los_Angeles",
	"Australia/Lord_Howe", "Asia/Kathmandu", "Pacific/Apia", "America/Sao_Paulo",
	"America/Santiago", "Africa/Casablanca", "Antarctica/Troll", "America/St_Johns",
	"Asia/Tehran", "Pacific/Chatham", "America/Havana",
}

const ttFuzzMaxIntervals = 2000

func FuzzTimetable(f *testing.F) {
	seeds := []string{
		"@daily", "@hourly", "@weekly", "@monthly", "@yearly", "@midnight", "@annually",
		"* * * * *", "*/15 * * * *", "0 * * * *", "30 2 * * *", "0 2 * * *", "0 0 * * 1-5",
		"0 0 13 * 5", "0 0 30 2 *", "0 0 29 2 *", "0 0 L * *", "0 0 0 * * *", "@every 1h",
		"TZ=UTC 0 0 * * *", "0 */2 * * *", "5,35 1-3 * * *", "0 0 1 jan,jul *", "0 12 * * sun",
		"*/7 */5 */3 */2 */4", "59 23 31 12 *", "0 0 ? * ?", "1-2-3 * * * *", "*/0 * * * *",
	}
	for i, s := range seeds {
		f.Add(s, uint8(i), int32(i*7919), int32(1440*(i+1)), int32(-1), uint8(i))
	}
	// Windows anchored on DST transitions.
	f.Add("30 2 * * *", uint8(1), int32(0), int32(3*1440), int32(2*1440), uint8(16))
	f.Add("*/30 * * * *", uint8(5), int32(-600), int32(2*1440), int32(1440), uint8(16|8))
	f.Add("0 * * * *", uint8(7), int32(-300), int32(2*1440), int32(1440), uint8(16|8))

	base := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, schedule string, zone uint8, startMin, spanMin, endMin int32, flags uint8) {
		loc, err := time.LoadLocation(ttFuzzZones[int(zone)%len(ttFuzzZones)])
		if err != nil {
			t.Fatal(err)
		}
		tt, err := New(schedule, loc)
		if err != nil {
			if err.Error() == "" {
				t.Fatal("empty error message")
			}
			return
		}
		const year = 525960 // minutes
		start := base.Add(time.Duration(startMin%(60*year)) * time.Minute)
		if flags&16 != 0 {
			// Anchor the window on the next offset change of the zone.
			if _, end := start.In(loc).ZoneBounds(); !end.IsZero() {
				start = end.Add(time.Duration(startMin%1440) * time.Minute)
			}
		}
		w := Window{StartDate: start, Now: start.Add(time.Duration(spanMin%(3*year)) * time.Minute)}
		if flags&1 != 0 {
			w.EndDate = start.Add(time.Duration(endMin%(3*year)) * time.Minute)
		}
		if flags&2 != 0 {
			w.From = start.Add(time.Duration(endMin%(year/2)) * time.Minute)
		}
		if flags&4 != 0 {
			w.To = start.Add(time.Duration(spanMin%(2*year)) * time.Minute)
		}
		if flags&32 != 0 {
			w.Now = time.Time{}
		}

		var prev Interval
		n := 0
		seen := make(map[int64]bool)
		for iv := range tt.Intervals(w) {
			if !iv.End.After(iv.Start) {
				t.Fatalf("empty interval %s", ttFmt(iv))
			}
			if n > 0 {
				if !iv.Start.Equal(prev.End) {
					t.Fatalf("gap or overlap: %s then %s", ttFmt(prev), ttFmt(iv))
				}
				if !iv.Start.After(prev.Start) {
					t.Fatalf("not increasing: %s then %s", ttFmt(prev), ttFmt(iv))
				}
			}
			if seen[iv.Start.Unix()] {
				t.Fatalf("interval %s yielded twice", ttFmt(iv))
			}
			seen[iv.Start.Unix()] = true
			if iv.Start.Before(w.StartDate) || (!w.From.IsZero() && iv.Start.Before(w.From)) {
				t.Fatalf("%s starts before the window %+v", ttFmt(iv), w)
			}
			if (!w.EndDate.IsZero() && iv.Start.After(w.EndDate)) || (!w.To.IsZero() && iv.Start.After(w.To)) {
				t.Fatalf("%s starts after the window %+v", ttFmt(iv), w)
			}
			if !w.Now.IsZero() && iv.End.After(w.Now) {
				t.Fatalf("%s is not due at %s", ttFmt(iv), w.Now)
			}
			if iv.Start.Location() != loc || iv.End.Location() != loc {
				t.Fatalf("%s not in %s", ttFmt(iv), loc)
			}
			if nx := tt.Next(iv.Start); !nx.Equal(iv.End) {
				t.Fatalf("Next(%s) = %s, want %s", iv.Start, nx, iv.End)
			}
			if n == 0 {
				// The first interval starts at the first tick at or after the lower bound.
				lo := w.StartDate
				if w.From.After(lo) {
					lo = w.From
				}
				if p := tt.Prev(iv.Start); !p.IsZero() && !p.Before(lo) {
					t.Fatalf("tick %s at or after %s precedes the first interval %s", p, lo, ttFmt(iv))
				}
			}
			prev = iv
			if n++; n >= ttFuzzMaxIntervals {
				break
			}
		}

		latest, lok := tt.Latest(w)
		up, uok := tt.Upcoming(w)
		if lok && !w.Now.IsZero() && latest.End.After(w.Now) {
			t.Fatalf("Latest %s not due at %s", ttFmt(latest), w.Now)
		}
		if uok && !up.End.After(w.Now) {
			t.Fatalf("Upcoming %s already due at %s", ttFmt(up), w.Now)
		}
		if n < ttFuzzMaxIntervals && (!w.Now.IsZero() || !w.EndDate.IsZero() || !w.To.IsZero()) {
			// The enumeration finished: Latest must be its last interval.
			if lok != (n > 0) || (lok && latest != prev) {
				t.Fatalf("Latest = %s %v, enumeration ended with %s (n=%d) for %+v", ttFmt(latest), lok, ttFmt(prev), n, w)
			}
		}
		if lok && uok && w.EndDate.IsZero() && w.To.IsZero() && !up.Start.Equal(latest.End) {
			t.Fatalf("Upcoming %s does not follow Latest %s", ttFmt(up), ttFmt(latest))
		}

		if flags&8 != 0 && start.Year() > 1980 && start.Year() < 2090 {
			ttCompareBrute(t, tt, start, start.Add(40*time.Hour))
		}
	})
}
