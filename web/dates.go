package web

import (
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/rewind-dev/rewind/timetable"
)

// apiDates is `rewind dates PIPELINE --recorded --json`: pipeline=
// (required), start= and end= (a date selects whole days by ds,
// inclusive, in the pipeline's timezone; an RFC 3339 timestamp an exact
// logical date) and now= (RFC 3339 or a date, UTC midnight; default the
// view's clock, at most MaxNowAhead after it). The probe values are those
// runs recorded: the view runs no probe. A window of more than MaxDates
// due intervals is a 400. Probe failures, which the command prints as
// warnings, come as X-Rewind-Warning headers.
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
	clock := s.o.Now()
	win := timetable.Window{StartDate: p.StartDate, EndDate: p.EndDate, Now: clock}
	if v := q.Get("now"); v != "" {
		if win.Now, err = parseNow(v); err != nil {
			s.fail(w, r, err)
			return
		}
		if limit := clock.Add(MaxNowAhead); win.Now.After(limit) {
			s.fail(w, r, errorf(http.StatusBadRequest, "now=%s: at most one year after the view's clock (%s)", v, limit.UTC().Format(time.RFC3339)))
			return
		}
	}
	if win.From, win.To, err = window(q.Get("start"), q.Get("end"), p.Timezone); err != nil {
		s.fail(w, r, err)
		return
	}
	out, warnings, err := RecordedDates(r.Context(), s.o.State, s.o.Workspace, p, win, MaxDates)
	var tooMany *TooManyDatesError
	if errors.As(err, &tooMany) {
		err = errorf(http.StatusBadRequest, "%v", err)
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	for _, msg := range warnings {
		w.Header().Add("X-Rewind-Warning", strings.ReplaceAll(s.o.Workspace.Redact(msg), "\n", " "))
	}
	s.sendJSON(w, r, out)
}

// MaxNowAhead is how far after the view's clock now= may be.
const MaxNowAhead = 366 * 24 * time.Hour

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
