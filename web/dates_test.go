package web

import (
	"errors"
	"net/http"
	"testing"
	"time"
	_ "time/tzdata" // the DST day must not depend on the machine's zoneinfo
)

// start=, end= and now= read as the CLI reads --start, --end and --now, and
// their errors name the query parameters: a bad request.
func TestWindowQuery(t *testing.T) {
	ny, err := time.LoadLocation("America/New_York")
	if err != nil {
		t.Fatal(err)
	}
	from, to, err := window("2025-11-02", "2025-11-02", ny)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := to.Sub(from), 25*time.Hour-time.Nanosecond; got != want {
		t.Errorf("the fall-back day lasts %s, want %s", got, want)
	}
	// An offset's + that the query left unescaped is a +.
	if from, _, err = window("2025-11-02T08:00:00 01:00", "", ny); err != nil || !from.Equal(time.Date(2025, 11, 2, 7, 0, 0, 0, time.UTC)) {
		t.Errorf("from = %s, %v", from, err)
	}
	if now, err := parseNow("2025-07-01T00:00:00 02:00"); err != nil || !now.Equal(time.Date(2025, 6, 30, 22, 0, 0, 0, time.UTC)) {
		t.Errorf("now = %s, %v", now, err)
	}
	for _, c := range []struct {
		start, end, now string
		want            string
	}{
		{"yesterday", "", "", `start="yesterday": want YYYY-MM-DD (whole days by ds) or RFC 3339 (an exact logical date)`},
		{"", "2025-02-30", "", `end="2025-02-30": want YYYY-MM-DD (whole days by ds) or RFC 3339 (an exact logical date)`},
		{"2025-03-05", "2025-03-04", "", "end=2025-03-04 is before start=2025-03-05"},
		// Judged in the pipeline's timezone: 02:00Z is still July 1st in New York.
		{"2025-07-02T02:00:00Z", "2025-07-01", "", ""},
		{"", "", "tomorrow", `now="tomorrow": want RFC 3339 (2025-07-01T00:00:00Z) or YYYY-MM-DD`},
	} {
		var err error
		if c.now != "" {
			_, err = parseNow(c.now)
		} else {
			_, _, err = window(c.start, c.end, ny)
		}
		if c.want == "" {
			if err != nil {
				t.Errorf("start=%s end=%s: %v", c.start, c.end, err)
			}
			continue
		}
		var he *httpError
		if !errors.As(err, &he) || he.code != http.StatusBadRequest || he.msg != c.want {
			t.Errorf("start=%q end=%q now=%q: %v, want 400 %s", c.start, c.end, c.now, err, c.want)
		}
	}
}
