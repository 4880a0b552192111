package timetable

import (
	"errors"
	"testing"
	"time"
)

// A window as the user types it: dates are whole days by ds in the
// pipeline's timezone, timestamps exact logical dates.
func TestParseRangeBounds(t *testing.T) {
	rome := ttLoc(t, "Europe/Rome")
	ny := ttLoc(t, "America/New_York")
	for _, c := range []struct {
		name, start, end string
		loc              *time.Location
		from, to         string // RFC 3339 with nanoseconds; "" for zero
	}{
		{"July by ds in UTC", "2025-07-01", "2025-07-31", time.UTC, "2025-07-01T00:00:00Z", "2025-07-31T23:59:59.999999999Z"},
		{"one day in Rome", "2025-07-03", "2025-07-03", rome, "2025-07-03T00:00:00+02:00", "2025-07-03T23:59:59.999999999+02:00"},
		{"spring-forward day is 23 h in Rome", "2025-03-30", "2025-03-30", rome, "2025-03-30T00:00:00+01:00", "2025-03-30T23:59:59.999999999+02:00"},
		{"fall-back day is 25 h in New York", "2025-11-02", "2025-11-02", ny, "2025-11-02T00:00:00-04:00", "2025-11-02T23:59:59.999999999-05:00"},
		{"exact logical dates, shown in the zone", "2025-11-28T15:00:00Z", "2025-11-28T18:00:00Z", ny, "2025-11-28T10:00:00-05:00", "2025-11-28T13:00:00-05:00"},
		{"a date and a timestamp", "2025-07-01", "2025-07-02T06:00:00+02:00", rome, "2025-07-01T00:00:00+02:00", "2025-07-02T06:00:00+02:00"},
		{"open end", "2025-07-01", "", time.UTC, "2025-07-01T00:00:00Z", ""},
		{"open start", "", "2025-07-01", time.UTC, "", "2025-07-01T23:59:59.999999999Z"},
		{"unbounded", "", "", time.UTC, "", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			r, err := ParseRange(c.start, c.end, c.loc)
			if err != nil {
				t.Fatal(err)
			}
			from, to := r.Bounds(c.loc)
			if got := format(from); got != c.from {
				t.Errorf("from = %s, want %s", got, c.from)
			}
			if got := format(to); got != c.to {
				t.Errorf("to = %s, want %s", got, c.to)
			}
			if r.Start != c.start || r.End != c.end {
				t.Errorf("as given = %q, %q", r.Start, r.End)
			}
		})
	}
}

func format(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.Format(time.RFC3339Nano)
}

// A date bound compares a run's ds (already in its pipeline's timezone);
// a timestamp bound its logical date.
func TestRangeContains(t *testing.T) {
	rome := ttLoc(t, "Europe/Rome")
	at := func(s string) time.Time { return ttTime(t, s, rome) }
	for _, c := range []struct {
		name, start, end string
		ds               string
		logical          time.Time
		want             bool
	}{
		{"first day included", "2025-07-01", "2025-07-31", "2025-07-01", at("2025-07-01"), true},
		{"last day included", "2025-07-01", "2025-07-31", "2025-07-31", at("2025-07-31T23:00"), true},
		{"day after excluded", "2025-07-01", "2025-07-31", "2025-08-01", at("2025-08-01"), false},
		{"day before excluded", "2025-07-01", "2025-07-31", "2025-06-30", at("2025-06-30T23:00"), false},
		// 00:30 in Rome is 22:30 UTC the day before: the ds decides.
		{"ds, not the UTC date", "2025-07-01", "2025-07-01", "2025-07-01", at("2025-07-01T00:30"), true},
		{"hourly run at the start", "2025-11-28T10:00:00Z", "2025-11-28T12:00:00Z", "2025-11-28", ttTime(t, "2025-11-28T10:00:00Z", nil), true},
		{"hourly run after the end", "2025-11-28T10:00:00Z", "2025-11-28T12:00:00Z", "2025-11-28", ttTime(t, "2025-11-28T13:00:00Z", nil), false},
		{"hourly run before the start", "2025-11-28T10:00:00Z", "", "2025-11-28", ttTime(t, "2025-11-28T09:00:00Z", nil), false},
		{"unbounded", "", "", "1999-12-31", at("1999-12-31"), true},
	} {
		t.Run(c.name, func(t *testing.T) {
			r, err := ParseRange(c.start, c.end, time.UTC)
			if err != nil {
				t.Fatal(err)
			}
			if got := r.Contains(c.ds, c.logical); got != c.want {
				t.Errorf("Contains(%s, %s) = %v, want %v", c.ds, c.logical.Format(time.RFC3339), got, c.want)
			}
		})
	}
}

// The messages name the input and what it wants; the CLI and the web view
// spell the input their own way (--start, start=).
func TestParseRangeErrors(t *testing.T) {
	ny := ttLoc(t, "America/New_York")
	for _, c := range []struct {
		name, start, end string
		loc              *time.Location
		input            string // of an *InputError
		order            bool   // an *OrderError
	}{
		{"start not a date", "yesterday", "2025-07-01", time.UTC, "start", false},
		{"end not a date", "2025-07-01", "2025-07-32", time.UTC, "end", false},
		{"timestamp without a zone", "2025-07-01T00:00:00", "", time.UTC, "start", false},
		{"end before start", "2025-07-02", "2025-07-01", time.UTC, "", true},
		{"timestamps reversed", "2025-07-02T00:00:00Z", "2025-07-01T23:00:00Z", time.UTC, "", true},
		// A timestamp against a date depends on the zone of the date.
		{"before the day in UTC", "2025-07-02T02:00:00Z", "2025-07-01", time.UTC, "", true},
		{"within the day in New York", "2025-07-02T02:00:00Z", "2025-07-01", ny, "", false},
		{"after the timestamp in New York", "2025-07-02", "2025-07-02T02:00:00Z", ny, "", true},
		{"same day", "2025-07-01", "2025-07-01", time.UTC, "", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := ParseRange(c.start, c.end, c.loc)
			var ie *InputError
			var oe *OrderError
			switch {
			case c.input != "":
				if !errors.As(err, &ie) || ie.Input != c.input || ie.Want != WantBound {
					t.Fatalf("err = %v, want an InputError for %s", err, c.input)
				}
			case c.order:
				if !errors.As(err, &oe) || oe.Start != c.start || oe.End != c.end {
					t.Fatalf("err = %v, want an OrderError", err)
				}
			case err != nil:
				t.Fatalf("err = %v, want none", err)
			}
		})
	}
	_, err := ParseRange("2025-07-01", "2025-07-32", time.UTC)
	if want := `end "2025-07-32": want YYYY-MM-DD (whole days by ds) or RFC 3339 (an exact logical date)`; err == nil || err.Error() != want {
		t.Errorf("err = %v, want %s", err, want)
	}
	_, err = ParseRange("2025-07-02", "2025-07-01", time.UTC)
	if want := "end 2025-07-01 is before start 2025-07-02"; err == nil || err.Error() != want {
		t.Errorf("err = %v, want %s", err, want)
	}
}

func TestParseNow(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"", ""},
		{"2025-07-11T00:00:00Z", "2025-07-11T00:00:00Z"},
		{"2025-03-31T00:00:00+02:00", "2025-03-31T00:00:00+02:00"},
		{"2025-07-11", "2025-07-11T00:00:00Z"}, // a date is UTC midnight
	} {
		got, err := ParseNow(c.in)
		if err != nil {
			t.Fatalf("ParseNow(%q): %v", c.in, err)
		}
		if format(got) != c.want {
			t.Errorf("ParseNow(%q) = %s, want %s", c.in, format(got), c.want)
		}
	}
	_, err := ParseNow("yesterday")
	if want := `now "yesterday": want RFC 3339 (2025-07-01T00:00:00Z) or YYYY-MM-DD`; err == nil || err.Error() != want {
		t.Errorf("err = %v, want %s", err, want)
	}
}

func TestParseDate(t *testing.T) {
	rome := ttLoc(t, "Europe/Rome")
	for _, c := range []struct{ in, want string }{
		{"2025-06-30", "2025-06-30T00:00:00+02:00"}, // midnight in the zone
		{"2025-06-30T00:00:00Z", "2025-06-30T02:00:00+02:00"},
	} {
		got, err := ParseDate("to", c.in, rome)
		if err != nil {
			t.Fatalf("ParseDate(%q): %v", c.in, err)
		}
		if format(got) != c.want {
			t.Errorf("ParseDate(%q) = %s, want %s", c.in, format(got), c.want)
		}
	}
	var ie *InputError
	if _, err := ParseDate("to", "June", rome); !errors.As(err, &ie) || ie.Input != "to" || ie.Want != WantDate {
		t.Errorf("err = %v, want an InputError for to", err)
	}
}
