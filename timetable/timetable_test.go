package timetable

import (
	"fmt"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"
	_ "time/tzdata" // the DST cases must not depend on the machine's zoneinfo
)

func ttLoc(t testing.TB, name string) *time.Location {
	t.Helper()
	if name == "" {
		return nil // New defaults to UTC
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatalf("load %s: %v", name, err)
	}
	return loc
}

// ttTime parses "" (zero), "2006-01-02" (local midnight), "2006-01-02T15:04"
// (local wall time) or RFC 3339.
func ttTime(t testing.TB, s string, loc *time.Location) time.Time {
	t.Helper()
	if loc == nil {
		loc = time.UTC
	}
	if s == "" {
		return time.Time{}
	}
	for _, layout := range []string{time.RFC3339, "2006-01-02T15:04", "2006-01-02"} {
		if v, err := time.ParseInLocation(layout, s, loc); err == nil {
			return v
		}
	}
	t.Fatalf("bad time %q", s)
	return time.Time{}
}

func ttFmt(iv Interval) string {
	return iv.Start.Format(time.RFC3339) + "|" + iv.End.Format(time.RFC3339)
}

type parityCase struct {
	name     string
	schedule string
	tz       string // "" = UTC default
	start    string
	end      string
	from, to string
	now      string

	wantErr  string   // substring of New's error
	want     []string // every interval, "logical|end" in RFC 3339
	count    int      // or: how many, and the first and last
	first    string
	last     string
	contains []string       // intervals that must be present
	hours    []float64      // lengths of `want`, in hours
	noEnum   bool           // only check Latest/Upcoming
	latest   string         // "" = unchecked, "none" = not found
	upcoming string         // likewise
	perDS    map[string]int // number of intervals per ds
}

// The cases are written from Airflow's documented behaviour (data intervals,
// catchup, start_date/end_date) and its TestCronIntervalDst /
// TestCronIntervalDstNonTrivial / test_fold_scheduling tests.
var parityCases = []parityCase{
	{
		name: "daily UTC default", schedule: "@daily", start: "2025-07-01", now: "2025-07-04T00:00:00Z",
		want: []string{
			"2025-07-01T00:00:00Z|2025-07-02T00:00:00Z",
			"2025-07-02T00:00:00Z|2025-07-03T00:00:00Z",
			"2025-07-03T00:00:00Z|2025-07-04T00:00:00Z",
		},
	},
	{
		name: "daily Rome spring forward 23h", schedule: "@daily", tz: "Europe/Rome", start: "2025-03-29", now: "2025-04-01",
		want: []string{
			"2025-03-29T00:00:00+01:00|2025-03-30T00:00:00+01:00",
			"2025-03-30T00:00:00+01:00|2025-03-31T00:00:00+02:00",
			"2025-03-31T00:00:00+02:00|2025-04-01T00:00:00+02:00",
		},
		hours: []float64{24, 23, 24},
	},
	{
		name: "daily Rome fall back 25h", schedule: "@daily", tz: "Europe/Rome", start: "2025-10-25", now: "2025-10-28",
		want: []string{
			"2025-10-25T00:00:00+02:00|2025-10-26T00:00:00+02:00",
			"2025-10-26T00:00:00+02:00|2025-10-27T00:00:00+01:00",
			"2025-10-27T00:00:00+01:00|2025-10-28T00:00:00+01:00",
		},
		hours: []float64{24, 25, 24},
	},
	{
		name: "02:30 in the spring gap moves to 03:30", schedule: "30 2 * * *", tz: "Europe/Rome", start: "2025-03-28", now: "2025-04-01",
		want: []string{
			"2025-03-28T02:30:00+01:00|2025-03-29T02:30:00+01:00",
			"2025-03-29T02:30:00+01:00|2025-03-30T03:30:00+02:00",
			"2025-03-30T03:30:00+02:00|2025-03-31T02:30:00+02:00",
		},
		hours: []float64{24, 24, 23},
		perDS: map[string]int{"2025-03-29": 1, "2025-03-30": 1},
	},
	{
		name: "02:30 in the autumn fold is the second one", schedule: "30 2 * * *", tz: "Europe/Rome", start: "2025-10-24", now: "2025-10-28",
		want: []string{
			"2025-10-24T02:30:00+02:00|2025-10-25T02:30:00+02:00",
			"2025-10-25T02:30:00+02:00|2025-10-26T02:30:00+01:00",
			"2025-10-26T02:30:00+01:00|2025-10-27T02:30:00+01:00",
		},
		hours: []float64{24, 25, 24},
	},
	{
		// Airflow TestCronIntervalDst.test_entering_exact
		name: "Zurich 0 3 entering DST", schedule: "0 3 * * *", tz: "Europe/Zurich", start: "2023-03-24T00:00:00Z", now: "2023-03-27T01:00:00Z",
		want: []string{
			"2023-03-24T03:00:00+01:00|2023-03-25T03:00:00+01:00",
			"2023-03-25T03:00:00+01:00|2023-03-26T03:00:00+02:00",
			"2023-03-26T03:00:00+02:00|2023-03-27T03:00:00+02:00",
		},
	},
	{
		// Airflow TestCronIntervalDst.test_entering_skip
		name: "Zurich 0 2 entering DST", schedule: "0 2 * * *", tz: "Europe/Zurich", start: "2023-03-24T00:00:00Z", now: "2023-03-27T00:00:00Z",
		want: []string{
			"2023-03-24T02:00:00+01:00|2023-03-25T02:00:00+01:00",
			"2023-03-25T02:00:00+01:00|2023-03-26T03:00:00+02:00",
			"2023-03-26T03:00:00+02:00|2023-03-27T02:00:00+02:00",
		},
	},
	{
		// Airflow TestCronIntervalDst.test_exiting_exact
		name: "Zurich 0 3 exiting DST", schedule: "0 3 * * *", tz: "Europe/Zurich", start: "2023-10-27T00:00:00Z", now: "2023-10-30T02:00:00Z",
		want: []string{
			"2023-10-27T03:00:00+02:00|2023-10-28T03:00:00+02:00",
			"2023-10-28T03:00:00+02:00|2023-10-29T03:00:00+01:00",
			"2023-10-29T03:00:00+01:00|2023-10-30T03:00:00+01:00",
		},
	},
	{
		// Airflow TestCronIntervalDst.test_exiting_fold
		name: "Zurich 0 2 exiting DST fold", schedule: "0 2 * * *", tz: "Europe/Zurich", start: "2023-10-27T00:00:00Z", now: "2023-10-30T01:00:00Z",
		want: []string{
			"2023-10-27T02:00:00+02:00|2023-10-28T02:00:00+02:00",
			"2023-10-28T02:00:00+02:00|2023-10-29T02:00:00+01:00",
			"2023-10-29T02:00:00+01:00|2023-10-30T02:00:00+01:00",
		},
	},
	{
		// Airflow test_fold_scheduling: every-hour crons tick in both copies.
		name: "Zurich */30 through the fold", schedule: "*/30 * * * *", tz: "Europe/Zurich", start: "2023-10-28T23:30:00Z", now: "2023-10-29T02:00:00Z",
		want: []string{
			"2023-10-29T01:30:00+02:00|2023-10-29T02:00:00+02:00",
			"2023-10-29T02:00:00+02:00|2023-10-29T02:30:00+02:00",
			"2023-10-29T02:30:00+02:00|2023-10-29T02:00:00+01:00",
			"2023-10-29T02:00:00+01:00|2023-10-29T02:30:00+01:00",
			"2023-10-29T02:30:00+01:00|2023-10-29T03:00:00+01:00",
		},
	},
	{
		// Airflow TestCronIntervalDstNonTrivial.test_7_and_9_entering
		name: "Los Angeles 0 7,9 entering DST", schedule: "0 7,9 * * *", tz: "America/Los_Angeles", start: "2020-03-07T00:00:00Z", now: "2020-03-08T16:00:00Z",
		want: []string{
			"2020-03-07T07:00:00-08:00|2020-03-07T09:00:00-08:00",
			"2020-03-07T09:00:00-08:00|2020-03-08T07:00:00-07:00",
			"2020-03-08T07:00:00-07:00|2020-03-08T09:00:00-07:00",
		},
		hours: []float64{2, 21, 2},
	},
	{
		name: "hourly Rome spring: 23 ticks", schedule: "@hourly", tz: "Europe/Rome", start: "2025-03-30", now: "2025-03-31",
		count: 23, first: "2025-03-30T00:00:00+01:00|2025-03-30T01:00:00+01:00", last: "2025-03-30T23:00:00+02:00|2025-03-31T00:00:00+02:00",
		contains: []string{"2025-03-30T01:00:00+01:00|2025-03-30T03:00:00+02:00"},
		perDS:    map[string]int{"2025-03-30": 23},
	},
	{
		name: "hourly Rome autumn: 25 ticks, both 02:00", schedule: "0 * * * *", tz: "Europe/Rome", start: "2025-10-26", now: "2025-10-27",
		count: 25, first: "2025-10-26T00:00:00+02:00|2025-10-26T01:00:00+02:00", last: "2025-10-26T23:00:00+01:00|2025-10-27T00:00:00+01:00",
		contains: []string{
			"2025-10-26T02:00:00+02:00|2025-10-26T02:00:00+01:00",
			"2025-10-26T02:00:00+01:00|2025-10-26T03:00:00+01:00",
		},
		perDS: map[string]int{"2025-10-26": 25},
	},
	{
		name: "hourly New York spring: 23 ticks", schedule: "@hourly", tz: "America/New_York", start: "2025-03-09", now: "2025-03-10",
		count: 23, first: "2025-03-09T00:00:00-05:00|2025-03-09T01:00:00-05:00", last: "2025-03-09T23:00:00-04:00|2025-03-10T00:00:00-04:00",
		contains: []string{"2025-03-09T01:00:00-05:00|2025-03-09T03:00:00-04:00"},
	},
	{
		name: "hourly New York autumn: 25 ticks, both 01:00", schedule: "0 * * * *", tz: "America/New_York", start: "2025-11-02", now: "2025-11-03",
		count: 25, first: "2025-11-02T00:00:00-04:00|2025-11-02T01:00:00-04:00", last: "2025-11-02T23:00:00-05:00|2025-11-03T00:00:00-05:00",
		contains: []string{
			"2025-11-02T01:00:00-04:00|2025-11-02T01:00:00-05:00",
			"2025-11-02T01:00:00-05:00|2025-11-02T02:00:00-05:00",
		},
	},
	{
		name: "every two hours is a fixed-hour cron: fold taken once", schedule: "0 */2 * * *", tz: "Europe/Rome", start: "2025-10-26", now: "2025-10-27",
		count: 12, first: "2025-10-26T00:00:00+02:00|2025-10-26T02:00:00+01:00", last: "2025-10-26T22:00:00+01:00|2025-10-27T00:00:00+01:00",
	},
	{
		name: "non-aligned start_date", schedule: "@daily", start: "2025-07-01T10:00", now: "2025-07-04",
		want: []string{
			"2025-07-02T00:00:00Z|2025-07-03T00:00:00Z",
			"2025-07-03T00:00:00Z|2025-07-04T00:00:00Z",
		},
	},
	{
		name: "end_date is inclusive", schedule: "@daily", tz: "Europe/Rome", start: "2025-07-01", end: "2025-07-05", now: "2025-08-01",
		count: 5, first: "2025-07-01T00:00:00+02:00|2025-07-02T00:00:00+02:00", last: "2025-07-05T00:00:00+02:00|2025-07-06T00:00:00+02:00",
		latest: "2025-07-05T00:00:00+02:00|2025-07-06T00:00:00+02:00", upcoming: "none",
	},
	{
		name: "end_date inside an interval keeps that interval", schedule: "@weekly", start: "2025-06-01", end: "2025-06-18T12:00", now: "2025-07-01",
		want: []string{
			"2025-06-01T00:00:00Z|2025-06-08T00:00:00Z",
			"2025-06-08T00:00:00Z|2025-06-15T00:00:00Z",
			"2025-06-15T00:00:00Z|2025-06-22T00:00:00Z",
		},
	},
	{
		name: "last interval before end_date not due yet", schedule: "@daily", start: "2025-07-01", end: "2025-07-05T12:00", now: "2025-07-05T18:00",
		count: 4, first: "2025-07-01T00:00:00Z|2025-07-02T00:00:00Z", last: "2025-07-04T00:00:00Z|2025-07-05T00:00:00Z",
		upcoming: "2025-07-05T00:00:00Z|2025-07-06T00:00:00Z",
	},
	{
		name: "start_date in the future: nothing due", schedule: "@daily", tz: "Europe/Rome", start: "2030-01-01", now: "2025-07-01",
		want: []string{}, latest: "none", upcoming: "2030-01-01T00:00:00+01:00|2030-01-02T00:00:00+01:00",
	},
	{
		name: "weekly is Sunday midnight", schedule: "@weekly", start: "2025-07-01", now: "2025-07-21",
		want: []string{
			"2025-07-06T00:00:00Z|2025-07-13T00:00:00Z",
			"2025-07-13T00:00:00Z|2025-07-20T00:00:00Z",
		},
	},
	{
		name: "monthly", schedule: "@monthly", start: "2025-01-15", now: "2025-06-01",
		want: []string{
			"2025-02-01T00:00:00Z|2025-03-01T00:00:00Z",
			"2025-03-01T00:00:00Z|2025-04-01T00:00:00Z",
			"2025-04-01T00:00:00Z|2025-05-01T00:00:00Z",
			"2025-05-01T00:00:00Z|2025-06-01T00:00:00Z",
		},
		hours: []float64{28 * 24, 31 * 24, 30 * 24, 31 * 24},
	},
	{
		name: "monthly Rome spans DST", schedule: "@monthly", tz: "Europe/Rome", start: "2025-03-01", now: "2025-04-01",
		want:  []string{"2025-03-01T00:00:00+01:00|2025-04-01T00:00:00+02:00"},
		hours: []float64{31*24 - 1},
	},
	{
		name: "yearly", schedule: "@yearly", start: "2020-06-01", now: "2025-03-01",
		want: []string{
			"2021-01-01T00:00:00Z|2022-01-01T00:00:00Z",
			"2022-01-01T00:00:00Z|2023-01-01T00:00:00Z",
			"2023-01-01T00:00:00Z|2024-01-01T00:00:00Z",
			"2024-01-01T00:00:00Z|2025-01-01T00:00:00Z",
		},
		hours: []float64{365 * 24, 365 * 24, 365 * 24, 366 * 24},
	},
	{
		name: "weekdays: Friday's interval ends on Monday", schedule: "0 0 * * 1-5", start: "2025-07-03", now: "2025-07-09",
		want: []string{
			"2025-07-03T00:00:00Z|2025-07-04T00:00:00Z",
			"2025-07-04T00:00:00Z|2025-07-07T00:00:00Z",
			"2025-07-07T00:00:00Z|2025-07-08T00:00:00Z",
			"2025-07-08T00:00:00Z|2025-07-09T00:00:00Z",
		},
	},
	{
		name: "every 15 minutes", schedule: "*/15 * * * *", start: "2025-07-01", now: "2025-07-02",
		count: 96, first: "2025-07-01T00:00:00Z|2025-07-01T00:15:00Z", last: "2025-07-01T23:45:00Z|2025-07-02T00:00:00Z",
	},
	{
		name: "day-of-month OR day-of-week (13th or Friday)", schedule: "0 0 13 * 5", start: "2025-07-01", now: "2025-08-01",
		want: []string{
			"2025-07-04T00:00:00Z|2025-07-11T00:00:00Z",
			"2025-07-11T00:00:00Z|2025-07-13T00:00:00Z",
			"2025-07-13T00:00:00Z|2025-07-18T00:00:00Z",
			"2025-07-18T00:00:00Z|2025-07-25T00:00:00Z",
			"2025-07-25T00:00:00Z|2025-08-01T00:00:00Z",
		},
	},
	{
		name: "impossible date 30 Feb: enumeration ends", schedule: "0 0 30 2 *", start: "2025-01-01",
		want: []string{}, latest: "none", upcoming: "none",
	},
	{
		name: "From/To filter logical dates inclusively", schedule: "@daily", start: "2025-01-01", from: "2025-03-10", to: "2025-03-12", now: "2025-12-31",
		want: []string{
			"2025-03-10T00:00:00Z|2025-03-11T00:00:00Z",
			"2025-03-11T00:00:00Z|2025-03-12T00:00:00Z",
			"2025-03-12T00:00:00Z|2025-03-13T00:00:00Z",
		},
		latest: "2025-03-12T00:00:00Z|2025-03-13T00:00:00Z",
	},
	{
		name: "catchup=false after ten years of minutes steps back from now", schedule: "* * * * *", start: "2015-01-01", now: "2025-06-15T10:30:30Z",
		noEnum: true,
		latest: "2025-06-15T10:29:00Z|2025-06-15T10:30:00Z", upcoming: "2025-06-15T10:30:00Z|2025-06-15T10:31:00Z",
	},
	{
		name: "latest and upcoming across the Rome fold", schedule: "@daily", tz: "Europe/Rome", start: "2025-01-01", now: "2025-10-26T12:00",
		noEnum: true,
		latest: "2025-10-25T00:00:00+02:00|2025-10-26T00:00:00+02:00", upcoming: "2025-10-26T00:00:00+02:00|2025-10-27T00:00:00+01:00",
	},
	{
		name: "latest hourly inside the New York repeated hour", schedule: "@hourly", tz: "America/New_York", start: "2025-01-01", now: "2025-11-02T05:30:00Z",
		noEnum: true,
		latest: "2025-11-02T00:00:00-04:00|2025-11-02T01:00:00-04:00", upcoming: "2025-11-02T01:00:00-04:00|2025-11-02T01:00:00-05:00",
	},
	{name: "L is not supported", schedule: "0 0 L * *", wantErr: `invalid cron "0 0 L * *": day-of-month field "L"`},
	{name: "one field", schedule: "x", wantErr: `invalid cron "x": expected 5 fields, found 1`},
	{name: "seconds field rejected", schedule: "0 0 0 * * *", wantErr: "expected 5 fields, found 6"},
	{name: "@every rejected", schedule: "@every 1h", wantErr: "@every"},
	{name: "unknown preset", schedule: "@fortnightly", wantErr: "unknown preset"},
	{name: "TZ prefix rejected", schedule: "TZ=UTC 0 0 * *", wantErr: "time zone"},
	{name: "hour out of range", schedule: "0 24 * * *", wantErr: `hour field "24"`},
	{name: "empty", schedule: "  ", wantErr: "empty schedule"},
}

func TestTimetableAirflowParity(t *testing.T) {
	if n := len(parityCases); n < 24 {
		t.Fatalf("only %d cases", n)
	}
	for _, tc := range parityCases {
		t.Run(tc.name, func(t *testing.T) {
			loc := ttLoc(t, tc.tz)
			tt, err := New(tc.schedule, loc)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("New(%q) error = %v, want it to contain %q", tc.schedule, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("New(%q): %v", tc.schedule, err)
			}
			w := Window{
				StartDate: ttTime(t, tc.start, loc), EndDate: ttTime(t, tc.end, loc),
				From: ttTime(t, tc.from, loc), To: ttTime(t, tc.to, loc), Now: ttTime(t, tc.now, loc),
			}
			if !tc.noEnum {
				var got []string
				var ivs []Interval
				perDS := map[string]int{}
				for iv := range tt.Intervals(w) {
					if tt.loc != iv.Start.Location() || tt.loc != iv.End.Location() {
						t.Errorf("%s not in the timetable's location", ttFmt(iv))
					}
					got = append(got, ttFmt(iv))
					ivs = append(ivs, iv)
					perDS[iv.DS()]++
					if len(got) > 100000 {
						t.Fatal("runaway enumeration")
					}
				}
				if tc.want != nil && !slices.Equal(got, tc.want) {
					t.Errorf("intervals:\n got  %q\n want %q", got, tc.want)
				}
				if tc.count > 0 {
					if len(got) != tc.count {
						t.Errorf("count = %d, want %d", len(got), tc.count)
					}
					if len(got) > 0 && (got[0] != tc.first || got[len(got)-1] != tc.last) {
						t.Errorf("first/last = %s / %s, want %s / %s", got[0], got[len(got)-1], tc.first, tc.last)
					}
				}
				for _, c := range tc.contains {
					if !slices.Contains(got, c) {
						t.Errorf("missing interval %s", c)
					}
				}
				for ds, n := range tc.perDS {
					if perDS[ds] != n {
						t.Errorf("ds %s has %d intervals, want %d", ds, perDS[ds], n)
					}
				}
				if tc.hours != nil {
					for i, h := range tc.hours {
						if i >= len(ivs) {
							break
						}
						if d := ivs[i].End.Sub(ivs[i].Start).Hours(); d != h {
							t.Errorf("interval %s lasts %vh, want %vh", ttFmt(ivs[i]), d, h)
						}
					}
				}
			}
			check := func(what, want string, iv Interval, ok bool) {
				if want == "" {
					return
				}
				got := "none"
				if ok {
					got = ttFmt(iv)
				}
				if got != want {
					t.Errorf("%s = %s, want %s", what, got, want)
				}
			}
			iv, ok := tt.Latest(w)
			check("Latest", tc.latest, iv, ok)
			iv, ok = tt.Upcoming(w)
			check("Upcoming", tc.upcoming, iv, ok)
		})
	}
}

func TestTimetableNext(t *testing.T) {
	rome := ttLoc(t, "Europe/Rome")
	cases := []struct {
		schedule string
		loc      *time.Location
		after    string
		want     string // "" = zero time
	}{
		{"0 0 30 2 *", nil, "2025-01-01T00:00:00Z", ""},
		{"0 0 31 4,6,9,11 *", nil, "2025-01-01T00:00:00Z", ""},
		{"0 0 29 2 *", nil, "2097-01-01T00:00:00Z", "2104-02-29T00:00:00Z"},
		{"@daily", nil, "2025-07-01T00:00:00Z", "2025-07-02T00:00:00Z"},
		{"@daily", nil, "2025-07-01T23:59:59.999Z", "2025-07-02T00:00:00Z"},
		{"30 2 * * *", rome, "2025-03-30T01:00:00+01:00", "2025-03-30T03:30:00+02:00"},
		{"30 2 * * *", rome, "2025-10-26T02:30:00+02:00", "2025-10-26T02:30:00+01:00"},
		{"30 2 * * *", rome, "2025-10-26T01:00:00+02:00", "2025-10-26T02:30:00+01:00"},
		{"30 2,3 * * *", rome, "2025-03-30T01:00:00+01:00", "2025-03-30T03:30:00+02:00"},
		{"30 2,3 * * *", rome, "2025-03-30T03:30:00+02:00", "2025-03-31T02:30:00+02:00"},
		{"30 * * * *", rome, "2025-10-26T02:30:00+02:00", "2025-10-26T02:30:00+01:00"},
		{"@yearly", nil, "9999-06-01T00:00:00Z", ""},
		{"* * * * *", nil, "0001-01-01T00:00:00Z", "0001-01-01T00:01:00Z"},
	}
	for _, c := range cases {
		tt, err := New(c.schedule, c.loc)
		if err != nil {
			t.Fatal(err)
		}
		after, err := time.Parse(time.RFC3339Nano, c.after)
		if err != nil {
			t.Fatal(err)
		}
		got := tt.Next(after)
		gs := ""
		if !got.IsZero() {
			gs = got.Format(time.RFC3339)
		}
		if gs != c.want {
			t.Errorf("%q.Next(%s) = %q, want %q", c.schedule, c.after, gs, c.want)
		}
		if c.want != "" {
			if p := tt.Prev(got); !p.IsZero() && !p.Before(after.Add(time.Nanosecond)) && !p.Equal(after) {
				t.Errorf("%q.Prev(%s) = %s, not at or before %s", c.schedule, gs, p, c.after)
			}
		}
	}
}

func TestIntervalDS(t *testing.T) {
	rome := ttLoc(t, "Europe/Rome")
	tt, err := New("@daily", rome)
	if err != nil {
		t.Fatal(err)
	}
	// UTC 2025-06-30T22:00 is local midnight of 2025-07-01.
	iv, ok := tt.Latest(Window{StartDate: time.Date(2025, 6, 1, 0, 0, 0, 0, rome), Now: time.Date(2025, 7, 1, 22, 30, 0, 0, time.UTC)})
	if !ok || iv.DS() != "2025-07-01" {
		t.Fatalf("Latest = %v %v (ds %s), want ds 2025-07-01", iv, ok, iv.DS())
	}
}

// TestTimetableIntervalsMatchBruteForce compares the enumeration with a
// minute-by-minute scan of real time around DST transitions of many zones.
func TestTimetableIntervalsMatchBruteForce(t *testing.T) {
	schedules := []string{"@daily", "@hourly", "30 2 * * *", "0 2 * * *", "0 1 * * *", "0 3 * * *", "*/30 * * * *",
		"15,45 * * * *", "0 */2 * * *", "30 0 * * *", "0 0 * * 0", "59 23 * * *", "0 2,3 * * *", "*/20 1-3 * * *", "0 0 1 * *"}
	for _, zone := range ttFuzzZones {
		loc := ttLoc(t, zone)
		anchors := ttTransitionsNear(loc, time.Date(2021, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
		if zone == "Pacific/Apia" { // skipped 2011-12-30 entirely
			anchors = append(anchors, ttTransitionsNear(loc, time.Date(2011, 12, 1, 0, 0, 0, 0, time.UTC), time.Date(2012, 1, 1, 0, 0, 0, 0, time.UTC))...)
		}
		// Go's ZoneBounds is off by a day at the end of leap years after 2037.
		anchors = append(anchors, time.Date(2040, 12, 31, 12, 0, 0, 0, time.UTC), time.Date(2041, 1, 1, 3, 0, 0, 0, time.UTC))
		for _, anchor := range anchors {
			for _, s := range schedules {
				tt, err := New(s, loc)
				if err != nil {
					t.Fatal(err)
				}
				a := anchor.Add(-30 * time.Hour)
				ttCompareBrute(t, tt, a, a.Add(60*time.Hour))
			}
		}
	}
}

// ttTransitionsNear returns the zone's offset changes in [from, to), at most 40.
func ttTransitionsNear(loc *time.Location, from, to time.Time) []time.Time {
	var out []time.Time
	for t := from.In(loc); t.Before(to) && len(out) < 40; {
		_, end := t.ZoneBounds()
		if end.IsZero() || !end.Before(to) {
			break
		}
		if !end.After(t) { // see probePeriod in timetable.go
			t = t.Add(time.Hour)
			continue
		}
		_, o1 := end.Add(-time.Second).Zone()
		_, o2 := end.Zone()
		if o1 != o2 {
			out = append(out, end)
		}
		t = end
	}
	return out
}

// ttBruteTicks lists the ticks in [a, b] by scanning every minute of real
// time, independently of the period-walking code: a minute t is a tick when
// its wall clock matches the cron (unless it is the first copy of a repeated
// wall time of a fixed-hour cron), or when it lies within the first `gap` of
// a forward jump and its wall time minus the gap matches.
// It reports false when the zone has non-whole-minute offsets in the range.
func ttBruteTicks(tt *Timetable, a, b time.Time) ([]int64, bool) {
	const look = 27 * 3600
	lo := a.Unix()/60*60 - look
	hi := b.Unix()/60*60 + look + 60
	n := int((hi - lo) / 60)
	offs := make([]int64, n)
	seen := map[int64]bool{}
	for i := range offs {
		_, o := time.Unix(lo+int64(i)*60, 0).In(tt.loc).Zone()
		if o%60 != 0 {
			return nil, false
		}
		offs[i] = int64(o)
		seen[int64(o)] = true
	}
	runStart := make([]int, n) // index where the run of equal offsets containing i begins
	for i := 1; i < n; i++ {
		if offs[i] == offs[i-1] {
			runStart[i] = runStart[i-1]
		} else {
			runStart[i] = i
		}
	}
	off := func(u int64) int64 {
		if u >= lo && u < hi && (u-lo)%60 == 0 {
			return offs[(u-lo)/60]
		}
		_, o := time.Unix(u, 0).In(tt.loc).Zone()
		return int64(o)
	}
	matches := func(w int64) bool {
		c := time.Unix(w, 0).UTC()
		if c.Second() != 0 || tt.minute&(1<<c.Minute()) == 0 || tt.hour&(1<<c.Hour()) == 0 || tt.month&(1<<int(c.Month())) == 0 {
			return false
		}
		dm := tt.dom&(1<<c.Day()) != 0
		wm := tt.dow&(1<<int(c.Weekday())) != 0
		if tt.domOrDow {
			return dm || wm
		}
		return dm && wm
	}
	var ticks []int64
	start := (a.Unix() + 59) / 60 * 60
	for u := start; u <= b.Unix(); u += 60 {
		o1 := off(u)
		w := u + o1
		tick := false
		if matches(w) {
			tick = true
			if !tt.everyHr {
				for o2 := range seen {
					if t2 := w - o2; t2 > u && off(t2) == o2 {
						tick = false // a later instant shows the same wall time
					}
				}
			}
		}
		if !tick {
			// The start T of the current offset run.
			j := runStart[(u-lo)/60]
			if j > 0 {
				T, op := lo+int64(j)*60, offs[j-1]
				if op < o1 && u-T < o1-op && matches(u+op) {
					tick = true
				}
			}
		}
		if tick {
			ticks = append(ticks, u)
		}
	}
	return ticks, true
}

func ttCompareBrute(t *testing.T, tt *Timetable, a, b time.Time) {
	t.Helper()
	want, ok := ttBruteTicks(tt, a, b)
	if !ok {
		return
	}
	var got []int64
	for iv := range tt.Intervals(Window{StartDate: a, Now: b}) {
		if len(got) == 0 {
			got = append(got, iv.Start.Unix())
		}
		got = append(got, iv.End.Unix())
		if len(got) > 10000 {
			break
		}
	}
	if len(want) < 2 {
		want = nil
	}
	if !slices.Equal(got, want) {
		f := func(us []int64) string {
			var s []string
			for _, u := range us {
				s = append(s, tt.at(u).Format(time.RFC3339))
			}
			return strings.Join(s, " ")
		}
		t.Fatalf("%q in %s, [%s, %s]:\n got  %s\n want %s", tt.spec, tt.loc, a.In(tt.loc), b.In(tt.loc), f(got), f(want))
	}
	for i := 0; i+1 < len(want); i++ {
		if n := tt.Next(tt.at(want[i])); n.Unix() != want[i+1] {
			t.Fatalf("%q in %s: Next(%s) = %s, want %s", tt.spec, tt.loc, tt.at(want[i]), n, tt.at(want[i+1]))
		}
		if p := tt.Prev(tt.at(want[i+1])); p.Unix() != want[i] {
			t.Fatalf("%q in %s: Prev(%s) = %s, want %s", tt.spec, tt.loc, tt.at(want[i+1]), p, tt.at(want[i]))
		}
	}
}

// TestIntervalsAllocateNothingPerInterval checks streaming: enumerating
// 10,000 intervals allocates a constant, not per interval.
func TestIntervalsAllocateNothingPerInterval(t *testing.T) {
	tt, err := New("* * * * *", ttLoc(t, "Europe/Rome"))
	if err != nil {
		t.Fatal(err)
	}
	w := Window{StartDate: time.Date(2025, 3, 28, 0, 0, 0, 0, time.UTC)}
	allocs := testing.AllocsPerRun(5, func() {
		n := 0
		for range tt.Intervals(w) {
			if n++; n == 10000 {
				break
			}
		}
	})
	if allocs > 50 {
		t.Fatalf("%v allocations for 10,000 intervals", allocs)
	}
}

const tenYearsOfMinutes = 3653 * 1440 // 2015-01-01 .. 2025-01-01 (2016, 2020, 2024 are leap)

func tenYearsWindow() Window {
	return Window{StartDate: time.Date(2015, 1, 1, 0, 0, 0, 0, time.UTC), Now: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)}
}

func TestTenYearsOfMinutesBoundedMemory(t *testing.T) {
	tt, err := New("* * * * *", nil)
	if err != nil {
		t.Fatal(err)
	}
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	base, peak := ms.HeapAlloc, ms.HeapAlloc
	n := 0
	var last Interval
	for iv := range tt.Intervals(tenYearsWindow()) {
		n++
		last = iv
		if n%100000 == 0 {
			runtime.ReadMemStats(&ms)
			peak = max(peak, ms.HeapAlloc)
		}
	}
	runtime.ReadMemStats(&ms)
	peak = max(peak, ms.HeapAlloc)
	if n != tenYearsOfMinutes {
		t.Fatalf("count = %d, want %d", n, tenYearsOfMinutes)
	}
	if want := "2024-12-31T23:59:00Z|2025-01-01T00:00:00Z"; ttFmt(last) != want {
		t.Fatalf("last = %s, want %s", ttFmt(last), want)
	}
	const limit = 16 << 20
	if peak > base+limit {
		t.Fatalf("heap grew from %d to %d bytes while enumerating", base, peak)
	}
	t.Logf("%d intervals; HeapAlloc before %s, max during %s", n, ttMiB(base), ttMiB(peak))
}

func ttMiB(b uint64) string { return fmt.Sprintf("%.2f MiB", float64(b)/(1<<20)) }
