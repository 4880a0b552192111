package web

import (
	"errors"
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
	t, err := timetable.ParseNow(unescapePlus(s))
	return t, queryError(err, "", "")
}

// window reads start= and end= as the CLI reads --start and --end: the
// logical dates in loc, both inclusive (zero where unbounded), from the
// first moment of a start day to the last moment of an end day.
func window(start, end string, loc *time.Location) (from, to time.Time, err error) {
	r, err := timetable.ParseRange(unescapePlus(start), unescapePlus(end), loc)
	if err != nil {
		return from, to, queryError(err, start, end)
	}
	from, to = r.Bounds(loc)
	return from, to, nil
}

// unescapePlus puts back the + of an offset that a query left unescaped.
func unescapePlus(s string) string { return strings.ReplaceAll(s, " ", "+") }

// queryError spells a window error of package timetable as the query
// parameters were given (start and end as given): a bad request.
func queryError(err error, start, end string) error {
	var bad *timetable.InputError
	var order *timetable.OrderError
	switch {
	case errors.As(err, &bad):
		return errorf(http.StatusBadRequest, "%s=%q: want %s", bad.Input, bad.Value, bad.Want)
	case errors.As(err, &order):
		return errorf(http.StatusBadRequest, "end=%s is before start=%s", end, start)
	}
	return err
}
