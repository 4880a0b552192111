package timetable

import (
	"fmt"
	"time"
)

// The date windows that users type: --start/--end and --now on the command
// line, start=, end= and now= in the web view. One reading for both:
//
//   - A date-only bound (YYYY-MM-DD) selects whole days by ds, inclusive, in
//     the pipeline's timezone: --end 2025-07-31 includes every logical date
//     of that day.
//   - A timestamp bound (RFC 3339) selects exact logical dates.
//   - The clock is RFC 3339, or a date meaning UTC midnight.

// Forms a user may type, as the messages of InputError name them.
const (
	WantBound = "YYYY-MM-DD (whole days by ds) or RFC 3339 (an exact logical date)"
	WantNow   = "RFC 3339 (2025-07-01T00:00:00Z) or YYYY-MM-DD"
	WantDate  = "YYYY-MM-DD or RFC 3339"
)

// InputError is a value that does not parse. Input is the name of what
// was given ("start", "end", "now", or the name the caller passed): each
// front end spells it its own way (--start, start=).
type InputError struct {
	Input, Value string
	// Want says the forms accepted: WantBound, WantNow or WantDate.
	Want string
}

func (e *InputError) Error() string {
	return fmt.Sprintf("%s %q: want %s", e.Input, e.Value, e.Want)
}

// OrderError is a window whose end is before its start; Start and End are
// the bounds as given.
type OrderError struct{ Start, End string }

func (e *OrderError) Error() string {
	return fmt.Sprintf("end %s is before start %s", e.End, e.Start)
}

// Range is a window of logical dates as given by a start and an end bound,
// either of which may be missing (no limit on that side).
type Range struct {
	Start, End string // as given

	startDay, endDay   string // the YYYY-MM-DD of a date-only bound
	startTime, endTime time.Time
}

// IsDay reports whether s is a date without a time (YYYY-MM-DD).
func IsDay(s string) bool {
	_, err := time.Parse(time.DateOnly, s)
	return err == nil
}

// ParseRange reads a window's bounds (either may be empty). A bound that
// does not parse is an *InputError; an end before the start, with a date
// against a timestamp compared in loc, is an *OrderError.
func ParseRange(start, end string, loc *time.Location) (Range, error) {
	r := Range{Start: start, End: end}
	for _, b := range []struct {
		input, s string
		day      *string
		t        *time.Time
	}{{"start", start, &r.startDay, &r.startTime}, {"end", end, &r.endDay, &r.endTime}} {
		switch {
		case b.s == "":
		case IsDay(b.s):
			*b.day = b.s
		default:
			t, err := time.Parse(time.RFC3339, b.s)
			if err != nil {
				return r, &InputError{Input: b.input, Value: b.s, Want: WantBound}
			}
			*b.t = t
		}
	}
	if start != "" && end != "" {
		if from, to := r.Bounds(loc); to.Before(from) {
			return r, &OrderError{Start: start, End: end}
		}
	}
	return r, nil
}

// Bounds are the window's logical dates in loc, both inclusive (zero where
// unbounded): from the first moment of the start day to the last moment
// of the end day for dates. They are the From and To of a Window.
func (r Range) Bounds(loc *time.Location) (from, to time.Time) {
	if r.startDay != "" {
		from, _ = time.ParseInLocation(time.DateOnly, r.startDay, loc)
	} else if !r.startTime.IsZero() {
		from = r.startTime.In(loc)
	}
	if r.endDay != "" {
		d, _ := time.ParseInLocation(time.DateOnly, r.endDay, loc)
		to = time.Date(d.Year(), d.Month(), d.Day()+1, 0, 0, 0, 0, loc).Add(-time.Nanosecond)
	} else if !r.endTime.IsZero() {
		to = r.endTime.In(loc)
	}
	return from, to
}

// Contains reports whether a run, by its ds and its logical date, is in the
// window: a date-only bound compares the ds (already in the pipeline's
// timezone), a timestamp the logical date.
func (r Range) Contains(ds string, logical time.Time) bool {
	switch {
	case r.startDay != "" && ds < r.startDay:
		return false
	case !r.startTime.IsZero() && logical.Before(r.startTime):
		return false
	case r.endDay != "" && ds > r.endDay:
		return false
	case !r.endTime.IsZero() && logical.After(r.endTime):
		return false
	}
	return true
}

// ParseNow reads a clock: RFC 3339, or a date meaning UTC midnight. The
// empty string is the zero time (the caller's own clock). A value that
// does not parse is an *InputError for "now".
func ParseNow(s string) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t, nil
	}
	if t, err := time.Parse(time.DateOnly, s); err == nil {
		return t, nil
	}
	return time.Time{}, &InputError{Input: "now", Value: s, Want: WantNow}
}

// ParseDate reads one date, given as input: YYYY-MM-DD is midnight in loc,
// RFC 3339 that instant (shown in loc). A value that does not parse is an
// *InputError.
func ParseDate(input, s string, loc *time.Location) (time.Time, error) {
	if t, err := time.ParseInLocation(time.DateOnly, s, loc); err == nil {
		return t, nil
	}
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t.In(loc), nil
	}
	return time.Time{}, &InputError{Input: input, Value: s, Want: WantDate}
}
