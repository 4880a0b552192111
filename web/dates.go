package web

import (
	"net/http"
	"strings"
	"time"

	"github.com/rewind-dev/rewind/timetable"
)

// apiDates is `rewind dates PIPELINE --json`: pipeline= (required),
// start= and end= (a date selects whole days by ds, inclusive, in the
// pipeline's timezone; an RFC 3339 timestamp an exact logical date) and
// now= (RFC 3339 or a date, UTC midnight; default the view's clock).
// Probe failures, which the command prints as warnings, come as
// X-Rewind-Warning headers.
func (s *Server) apiDates(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if q.Get("pipeline") == "" {
		s.fail(w, r, errorf(http.StatusBadRequest, "pipeline= is required"))
		return
	}
	p, err := s.pipeline(q.Get("pipeline"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	win := timetable.Window{StartDate: p.StartDate, EndDate: p.EndDate, Now: s.o.Now()}
	if v := q.Get("now"); v != "" {
		if win.Now, err = parseNow(v); err != nil {
			s.fail(w, r, err)
			return
		}
	}
	if win.From, win.To, err = window(q.Get("start"), q.Get("end"), p.Timezone); err != nil {
		s.fail(w, r, err)
		return
	}
	s.datesMu.Lock()
	out, warnings, err := Dates(r.Context(), p, win)
	s.datesMu.Unlock()
	if err != nil {
		s.fail(w, r, err)
		return
	}
	for _, msg := range warnings {
		w.Header().Add("X-Rewind-Warning", strings.ReplaceAll(s.o.Workspace.Redact(msg), "\n", " "))
	}
	s.sendJSON(w, r, out)
}

// parseNow reads now= as the CLI reads --now.
func parseNow(s string) (time.Time, error) {
	s = strings.ReplaceAll(s, " ", "+") // an offset's + unescaped in a query
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t, nil
	}
	if t, err := time.Parse(time.DateOnly, s); err == nil {
		return t, nil
	}
	return time.Time{}, errorf(http.StatusBadRequest, "now=%q: want RFC 3339 (2025-07-01T00:00:00Z) or YYYY-MM-DD", s)
}

// window reads start= and end= as the CLI reads --start and --end: the
// logical dates in loc, both inclusive (zero where unbounded), from the
// first moment of a start day to the last moment of an end day.
func window(start, end string, loc *time.Location) (from, to time.Time, err error) {
	bound := func(name, s string, last bool) (time.Time, error) {
		s = strings.ReplaceAll(s, " ", "+")
		switch d, derr := time.ParseInLocation(time.DateOnly, s, loc); {
		case s == "":
			return time.Time{}, nil
		case derr == nil && last:
			return time.Date(d.Year(), d.Month(), d.Day()+1, 0, 0, 0, 0, loc).Add(-time.Nanosecond), nil
		case derr == nil:
			return d, nil
		}
		t, err := time.Parse(time.RFC3339, s)
		if err != nil {
			return time.Time{}, errorf(http.StatusBadRequest, "%s=%q: want YYYY-MM-DD (whole days by ds) or RFC 3339 (an exact logical date)", name, s)
		}
		return t.In(loc), nil
	}
	if from, err = bound("start", start, false); err != nil {
		return
	}
	if to, err = bound("end", end, true); err != nil {
		return
	}
	if !from.IsZero() && !to.IsZero() && to.Before(from) {
		err = errorf(http.StatusBadRequest, "end=%s is before start=%s", end, start)
	}
	return
}
