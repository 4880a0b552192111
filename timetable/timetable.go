// Package timetable turns cron schedules into Airflow data intervals: the
// ticks of a schedule in a time zone, the intervals between them, which are
// due, and the daylight-saving rules of the contract. It is pure: it reads no
// state, no files and no clock (callers pass Now), and starts nothing. The
// engine, the CLI and the web view all ask it which dates exist, and read
// the windows a user types (--start, --end, --now; start=, end=, now=) with
// the one parser of window.go.
//
// A schedule is parsed with robfig/cron's parser (5 fields or a preset), but
// the ticks are computed here, not by robfig's SpecSchedule.Next, because the
// DST rules of the contract (DESIGN.md, "Airflow's data intervals", which
// follows Airflow >= 2.8 and its TestCronIntervalDst) differ from robfig's:
//
//   - Ticks are found by walking naive wall-clock times (minute, hour,
//     day-of-month, month, day-of-week bit fields, with cron's rule that a
//     restricted day-of-month and a restricted day-of-week are OR-ed, exactly
//     as robfig's dayMatches does) and then mapping each wall time to
//     instants in the timetable's location.
//   - A wall time that does not exist (spring gap) moves forward by the size
//     of the gap: it is read with the UTC offset in force before the gap, so
//     02:30 on 2025-03-30 in Europe/Rome becomes 03:30 CEST. If that instant
//     is also a regular tick (03:30 for "30 2,3 * * *") it is one tick, never
//     two: no interval is ever empty.
//   - A wall time that happens twice (autumn fold) is taken at its second
//     occurrence (the one with the later, standard-time offset), for every
//     cron whose hour field does not cover all 24 hours ("30 2 * * *" on
//     2025-10-26 in Europe/Rome ticks at 02:30 CET, 01:30 UTC).
//   - Crons whose hour field covers every hour ("0 * * * *", "*/30 * * * *",
//     "* * * * *", "@hourly"; Airflow's _covers_every_hour) step in real
//     time: every instant whose wall clock matches is a tick, so both copies
//     of a repeated hour get one. A day therefore has 23 or 25 hourly ticks.
//   - Interval lengths are real elapsed time: the @daily interval of
//     2025-03-30 in Europe/Rome lasts 23 h, that of 2025-10-26 lasts 25 h, and
//     logical dates stay local midnights. No day is lost or doubled.
//
// The search runs over the zone's offset periods (time.Time.ZoneBounds), so it
// is exact for any number of transitions, including historical one-off jumps
// (Pacific/Apia skipped 2011-12-30) and zones that move by 30 minutes or
// 2 hours. Ticks are limited to the years 1 to 9999: Next returns the zero
// time beyond them, and an unbounded enumeration ends there.
//
// Enumeration (Intervals) streams: it keeps the current offset period cached
// and allocates nothing per interval. Latest and Upcoming step from Now
// (backwards or forwards) and never enumerate from StartDate, so catchup=false
// on a pipeline started ten years ago is as cheap as on one started yesterday.

package timetable

import (
	"fmt"
	"iter"
	"math"
	"math/bits"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
)

// Interval is one data interval [Start, End); its logical date is Start.
// Times are in the timetable's location.
type Interval struct{ Start, End time.Time }

// DS returns the logical date as YYYY-MM-DD in the timetable's location
// (Airflow's ds).
func (i Interval) DS() string { return i.Start.Format("2006-01-02") }

// Window bounds an enumeration of intervals.
type Window struct {
	// StartDate is the pipeline's start_date: the first interval starts at
	// the first tick at or after it.
	StartDate time.Time
	// EndDate is the pipeline's end_date, inclusive on logical dates: no
	// interval starts after it (an interval starting at or before it is
	// included even if it ends after it). Zero means none.
	EndDate time.Time
	// From and To filter logical dates, both inclusive. Zero means none.
	From, To time.Time
	// Now limits the enumeration to due intervals (End <= Now). Zero means
	// no due limit.
	Now time.Time
}

// Timetable turns a cron schedule into Airflow data intervals in one
// location. It is immutable and safe for concurrent use.
type Timetable struct {
	spec     string
	loc      *time.Location
	minute   uint64 // bits 0-59
	hour     uint64 // bits 0-23
	dom      uint64 // bits 1-31
	month    uint64 // bits 1-12
	dow      uint64 // bits 0-6
	domOrDow bool   // both day fields restricted: a day matches if either does
	everyHr  bool   // the hour field covers all 24 hours: step in real time
	possible bool   // at least one date can ever match
}

const ttStarBit = 1 << 63

var ttCronParser = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

var ttFieldNames = [5]string{"minute", "hour", "day-of-month", "month", "day-of-week"}

// New parses a 5-field cron expression or a preset (@hourly, @daily,
// @midnight, @weekly, @monthly, @yearly, @annually) evaluated in loc (UTC when
// nil). Seconds fields, @every, @reboot and TZ= prefixes are rejected.
func New(schedule string, loc *time.Location) (tt *Timetable, err error) {
	if loc == nil {
		loc = time.UTC
	}
	defer func() {
		// robfig's parser has had panics on odd input; never let one escape.
		if r := recover(); r != nil {
			tt, err = nil, fmt.Errorf("invalid cron %q: cannot parse", schedule)
		}
	}()
	spec := strings.TrimSpace(schedule)
	if spec == "" {
		return nil, fmt.Errorf("invalid cron %q: empty schedule", schedule)
	}
	if strings.HasPrefix(spec, "@") {
		switch spec {
		case "@hourly", "@daily", "@midnight", "@weekly", "@monthly", "@yearly", "@annually":
		default:
			if strings.HasPrefix(spec, "@every") {
				return nil, fmt.Errorf("invalid cron %q: @every is a fixed delay, not a cron schedule; use a cron expression", schedule)
			}
			return nil, fmt.Errorf("invalid cron %q: unknown preset (use @hourly, @daily, @weekly, @monthly or @yearly)", schedule)
		}
	} else {
		fields := strings.Fields(spec)
		if strings.Contains(fields[0], "=") {
			return nil, fmt.Errorf("invalid cron %q: time zone prefixes are not supported; set the pipeline's timezone", schedule)
		}
		switch n := len(fields); {
		case n == 6:
			return nil, fmt.Errorf("invalid cron %q: expected 5 fields, found 6 (a seconds field is not supported)", schedule)
		case n != 5:
			return nil, fmt.Errorf("invalid cron %q: expected 5 fields, found %d", schedule, n)
		}
		spec = strings.Join(fields, " ")
		if _, perr := ttCronParser.Parse(spec); perr != nil {
			return nil, ttFieldError(schedule, fields, perr)
		}
	}
	parsed, perr := ttCronParser.Parse(spec)
	if perr != nil {
		return nil, fmt.Errorf("invalid cron %q: %s", schedule, perr)
	}
	ss, ok := parsed.(*cron.SpecSchedule)
	if !ok {
		return nil, fmt.Errorf("invalid cron %q: not a cron schedule", schedule)
	}
	t := &Timetable{
		spec:   spec,
		loc:    loc,
		minute: ss.Minute &^ ttStarBit & (1<<60 - 1),
		hour:   ss.Hour &^ ttStarBit & (1<<24 - 1),
		dom:    ss.Dom &^ ttStarBit & (1<<32 - 2),
		month:  ss.Month &^ ttStarBit & (1<<13 - 2),
		dow:    ss.Dow &^ ttStarBit & (1<<7 - 1),
	}
	t.domOrDow = ss.Dom&ttStarBit == 0 && ss.Dow&ttStarBit == 0
	t.everyHr = t.hour == 1<<24-1
	t.possible = t.computePossible()
	return t, nil
}

// ttFieldError names the field that robfig's parser rejected.
func ttFieldError(schedule string, fields []string, perr error) error {
	for i, f := range fields {
		probe := []string{"*", "*", "*", "*", "*"}
		probe[i] = f
		if _, err := ttCronParser.Parse(strings.Join(probe, " ")); err != nil {
			msg := err.Error()
			if strings.HasPrefix(msg, "failed to parse int from ") {
				msg = "not a number or a name"
			}
			if i == 4 && strings.Contains(msg, "above maximum (6)") {
				msg += " (use 0 for Sunday)"
			}
			return fmt.Errorf("invalid cron %q: %s field %q: %s", schedule, ttFieldNames[i], f, msg)
		}
	}
	return fmt.Errorf("invalid cron %q: %s", schedule, perr)
}

// String returns the normalized schedule.
func (t *Timetable) String() string { return t.spec }

// Location returns the timetable's location.
func (t *Timetable) Location() *time.Location { return t.loc }

func (t *Timetable) computePossible() bool {
	if t.minute == 0 || t.hour == 0 || t.month == 0 {
		return false
	}
	if t.domOrDow && t.dow != 0 {
		return true // every month has every weekday
	}
	if !t.domOrDow && t.dow == 0 {
		return false
	}
	for m := 1; m <= 12; m++ {
		if t.month&(1<<m) == 0 {
			continue
		}
		maxDay := ttDaysIn(2000, m) // a leap year: Feb 29 happens
		if t.dom&(1<<(maxDay+1)-1) != 0 {
			return true
		}
	}
	return false
}

// ---------------------------------------------------------------------------
// Naive wall-clock arithmetic (seconds since 1970-01-01T00:00 of the wall
// clock, as if it were UTC).

const (
	ttMinYear = 1
	ttMaxYear = 9999
	// unix seconds of 0001-01-01T00:00:00Z and 10000-01-01T00:00:00Z
	ttMinUnix = -62135596800
	ttMaxUnix = 253402300800
	// ttSearchYears bounds a search for the next matching date: any possible
	// schedule matches at least once in 8 consecutive years (Feb 29).
	ttSearchYears = 9
	// ttMaxPeriods bounds the offset periods one search may cross (a
	// possible schedule matches within 8 years, i.e. a few dozen periods).
	ttMaxPeriods = 10000
)

func ttFloorDiv(a, b int64) int64 {
	q := a / b
	if (a%b != 0) && ((a < 0) != (b < 0)) {
		q--
	}
	return q
}

// ttDaysFromCivil returns days since 1970-01-01 (H. Hinnant's algorithm).
func ttDaysFromCivil(y, m, d int) int64 {
	yy := int64(y)
	if m <= 2 {
		yy--
	}
	era := ttFloorDiv(yy, 400)
	yoe := yy - era*400
	mp := int64((m + 9) % 12)
	doy := (153*mp+2)/5 + int64(d) - 1
	doe := yoe*365 + yoe/4 - yoe/100 + doy
	return era*146097 + doe - 719468
}

func ttCivilFromDays(z int64) (y, m, d int) {
	z += 719468
	era := ttFloorDiv(z, 146097)
	doe := z - era*146097
	yoe := (doe - doe/1460 + doe/36524 - doe/146096) / 365
	yy := yoe + era*400
	doy := doe - (365*yoe + yoe/4 - yoe/100)
	mp := (5*doy + 2) / 153
	d = int(doy - (153*mp+2)/5 + 1)
	if mp < 10 {
		m = int(mp + 3)
	} else {
		m = int(mp - 9)
	}
	if m <= 2 {
		yy++
	}
	return int(yy), m, d
}

func ttIsLeap(y int) bool { return y%4 == 0 && (y%100 != 0 || y%400 == 0) }

func ttDaysIn(y, m int) int {
	switch m {
	case 2:
		if ttIsLeap(y) {
			return 29
		}
		return 28
	case 4, 6, 9, 11:
		return 30
	}
	return 31
}

// ttNextBit returns the lowest set bit >= from, or -1.
func ttNextBit(mask uint64, from int) int {
	if from > 63 {
		return -1
	}
	m := mask >> uint(from)
	if m == 0 {
		return -1
	}
	return from + bits.TrailingZeros64(m)
}

// ttPrevBit returns the highest set bit <= from, or -1.
func ttPrevBit(mask uint64, from int) int {
	if from < 0 {
		return -1
	}
	if from < 63 {
		mask &= 1<<uint(from+1) - 1
	}
	if mask == 0 {
		return -1
	}
	return 63 - bits.LeadingZeros64(mask)
}

func (t *Timetable) dayMatches(days int64, d int) bool {
	wd := int(days + 4 - ttFloorDiv(days+4, 7)*7) // 1970-01-01 was a Thursday
	domMatch := t.dom&(1<<uint(d)) != 0
	dowMatch := t.dow&(1<<uint(wd)) != 0
	if t.domOrDow {
		return domMatch || dowMatch
	}
	return domMatch && dowMatch
}

// nextNaive returns the first matching wall time W > x.
func (t *Timetable) nextNaive(x int64) (int64, bool) {
	if !t.possible || x >= ttMaxUnix+86400 {
		return 0, false
	}
	if x < ttMinUnix-2*86400 {
		x = ttMinUnix - 2*86400
	}
	min := ttFloorDiv(x, 60) + 1
	days := ttFloorDiv(min, 1440)
	rem := int(min - days*1440)
	h, mi := rem/60, rem%60
	y, mo, d := ttCivilFromDays(days)
	limit := y + ttSearchYears
	for y <= limit {
		if t.month&(1<<uint(mo)) == 0 {
			nm := ttNextBit(t.month, mo+1)
			if nm < 0 {
				y++
				nm = ttNextBit(t.month, 1)
			}
			mo, d, h, mi = nm, 1, 0, 0
			days = ttDaysFromCivil(y, mo, d)
			continue
		}
		if !t.dayMatches(days, d) {
			d++
			days++
			h, mi = 0, 0
			if d > ttDaysIn(y, mo) {
				d = 1
				if mo++; mo > 12 {
					mo = 1
					y++
				}
			}
			continue
		}
		nh := ttNextBit(t.hour, h)
		if nh < 0 {
			h, mi = 24, 0
		} else if nh > h {
			h, mi = nh, 0
		}
		if h < 24 {
			if nmi := ttNextBit(t.minute, mi); nmi >= 0 {
				if y > ttMaxYear {
					return 0, false
				}
				return (days*1440 + int64(h*60+nmi)) * 60, true
			}
			h, mi = h+1, 0
			if h < 24 {
				continue
			}
		}
		// next day
		d++
		days++
		h, mi = 0, 0
		if d > ttDaysIn(y, mo) {
			d = 1
			if mo++; mo > 12 {
				mo = 1
				y++
			}
		}
	}
	return 0, false
}

// prevNaive returns the last matching wall time W < x.
func (t *Timetable) prevNaive(x int64) (int64, bool) {
	if !t.possible || x <= ttMinUnix-86400 {
		return 0, false
	}
	if x > ttMaxUnix+2*86400 {
		x = ttMaxUnix + 2*86400
	}
	min := ttFloorDiv(x+59, 60) - 1 // last minute start < x
	days := ttFloorDiv(min, 1440)
	rem := int(min - days*1440)
	h, mi := rem/60, rem%60
	y, mo, d := ttCivilFromDays(days)
	// prevDay steps to the last minute of the previous day.
	prevDay := func() {
		d--
		days--
		h, mi = 23, 59
		if d < 1 {
			if mo--; mo < 1 {
				mo = 12
				y--
			}
			d = ttDaysIn(y, mo)
		}
	}
	limit := y - ttSearchYears
	for y >= limit {
		if t.month&(1<<uint(mo)) == 0 {
			pm := ttPrevBit(t.month, mo-1)
			if pm < 1 {
				y--
				pm = ttPrevBit(t.month, 12)
			}
			mo = pm
			d, h, mi = ttDaysIn(y, mo), 23, 59
			days = ttDaysFromCivil(y, mo, d)
			continue
		}
		if !t.dayMatches(days, d) {
			prevDay()
			continue
		}
		ph := ttPrevBit(t.hour, h)
		if ph < 0 {
			h = -1
		} else if ph < h {
			h, mi = ph, 59
		}
		if h >= 0 {
			if pmi := ttPrevBit(t.minute, mi); pmi >= 0 {
				if y < ttMinYear {
					return 0, false
				}
				return (days*1440 + int64(h*60+pmi)) * 60, true
			}
			h, mi = h-1, 59
			if h >= 0 {
				continue
			}
		}
		prevDay()
	}
	return 0, false
}

// ---------------------------------------------------------------------------
// Offset periods of the location.

// ttPeriod is a span [s, e) of instants (unix seconds) with one UTC offset o;
// op and on are the offsets of the periods before and after it.
type ttPeriod struct {
	s, e       int64 // math.MinInt64 / math.MaxInt64 when unbounded
	o, op, on  int64
	okS, valid bool
}

func (t *Timetable) periodAt(u int64) ttPeriod {
	tm := time.Unix(u, 0).In(t.loc)
	_, off := tm.Zone()
	start, end := tm.ZoneBounds()
	p := ttPeriod{s: math.MinInt64, e: math.MaxInt64, o: int64(off), valid: true}
	p.op, p.on = p.o, p.o
	if !start.IsZero() {
		p.s = start.Unix()
		_, o := time.Unix(p.s-1, 0).In(t.loc).Zone()
		p.op = int64(o)
	}
	if !end.IsZero() {
		p.e = end.Unix()
		_, o := end.In(t.loc).Zone()
		p.on = int64(o)
	}
	if u < p.s || u >= p.e {
		// ZoneBounds can be wrong: with Go 1.26, in the years ruled by the
		// zone's TZ string (after 2037), the period that ends at the end of a
		// leap year is reported to end one day early, so it does not contain
		// the last day's instants. Find the offset changes around u by probing.
		p = t.probePeriod(u)
	}
	// Keep spans sane far outside the supported years.
	if p.s < ttMinUnix-86400*400 {
		p.s = math.MinInt64
	}
	if p.e > ttMaxUnix+86400*400 {
		p.e = math.MaxInt64
	}
	return p
}

func (t *Timetable) offsetAt(u int64) int64 {
	_, o := time.Unix(u, 0).In(t.loc).Zone()
	return int64(o)
}

// probePeriod builds the period around u from offsets alone: it looks for an
// offset change up to two days away on either side (in 15-minute steps, then
// to the second); without one, the period is cut there with no transition.
func (t *Timetable) probePeriod(u int64) ttPeriod {
	const step, reach = 900, 2 * 86400
	o := t.offsetAt(u)
	p := ttPeriod{s: u - reach, e: u + reach, o: o, valid: true}
	for v := u + step; v <= u+reach; v += step {
		if t.offsetAt(v) != o {
			lo, hi := v-step, v // offset o at lo, not at hi
			for hi-lo > 1 {
				if mid := lo + (hi-lo)/2; t.offsetAt(mid) == o {
					lo = mid
				} else {
					hi = mid
				}
			}
			p.e = hi
			break
		}
	}
	for v := u - step; v >= u-reach; v -= step {
		if t.offsetAt(v) != o {
			lo, hi := v, v+step // offset o at hi, not at lo
			for hi-lo > 1 {
				if mid := lo + (hi-lo)/2; t.offsetAt(mid) == o {
					hi = mid
				} else {
					lo = mid
				}
			}
			p.s = hi
			break
		}
	}
	p.op, p.on = t.offsetAt(p.s-1), t.offsetAt(p.e)
	return p
}

func (p *ttPeriod) contains(u int64) bool { return p.valid && u >= p.s && u < p.e }

// ttCursor caches the offset period around the last lookup; it is what makes
// streaming enumeration cheap.
type ttCursor struct {
	t *Timetable
	p ttPeriod
}

func (c *ttCursor) at(u int64) *ttPeriod {
	if !c.p.contains(u) {
		c.p = c.t.periodAt(u)
	}
	return &c.p
}

// next returns the first tick instant T > a (unix seconds).
func (c *ttCursor) next(a int64) (int64, bool) {
	t := c.t
	if !t.possible || a >= ttMaxUnix {
		return 0, false
	}
	if a < ttMinUnix-86400 {
		a = ttMinUnix - 86400
	}
	for range ttMaxPeriods {
		p := c.at(a + 1)
		best, found := int64(0), false
		// Regular ticks of this period.
		if w, ok := t.nextNaive(a + p.o); ok {
			inst := w - p.o
			firstCopy := !t.everyHr && p.on < p.o && p.e != math.MaxInt64 && w >= p.e+p.on
			if inst < p.e && !firstCopy {
				best, found = inst, true
			}
		} else {
			return 0, false
		}
		// Ticks of the spring gap just before this period, moved forward.
		if p.op < p.o && p.s != math.MinInt64 && a+p.op < p.s+p.o-1 {
			if w, ok := t.nextNaive(max(p.s+p.op-1, a+p.op)); ok && w < p.s+p.o {
				if inst := w - p.op; !found || inst < best {
					best, found = inst, true
				}
			}
		}
		if found {
			if best >= ttMaxUnix {
				return 0, false
			}
			return best, true
		}
		if p.e == math.MaxInt64 || p.e <= a+1 {
			return 0, false
		}
		a = p.e - 1
	}
	return 0, false
}

// prev returns the last tick instant T < b (unix seconds).
func (c *ttCursor) prev(b int64) (int64, bool) {
	t := c.t
	if !t.possible || b <= ttMinUnix {
		return 0, false
	}
	if b > ttMaxUnix+86400 {
		b = ttMaxUnix + 86400
	}
	for range ttMaxPeriods {
		p := c.at(b - 1)
		best, found := int64(0), false
		x := b + p.o
		if p.on < p.o && p.e != math.MaxInt64 && !t.everyHr {
			x = min(x, p.e+p.on) // skip the first copy of a fold
		}
		if w, ok := t.prevNaive(x); ok {
			if inst := w - p.o; inst >= p.s {
				best, found = inst, true
			}
		}
		if p.op < p.o && p.s != math.MinInt64 && b+p.op > p.s+p.op {
			if w, ok := t.prevNaive(min(p.s+p.o, b+p.op)); ok && w >= p.s+p.op {
				if inst := w - p.op; !found || inst > best {
					best, found = inst, true
				}
			}
		}
		if found {
			if best < ttMinUnix {
				return 0, false
			}
			return best, true
		}
		if p.s == math.MinInt64 || p.s <= ttMinUnix || p.s >= b {
			return 0, false
		}
		b = p.s
	}
	return 0, false
}

func (t *Timetable) at(u int64) time.Time { return time.Unix(u, 0).In(t.loc) }

// ttCeilUnix returns the smallest whole second >= x.
func ttCeilUnix(x time.Time) int64 {
	s := x.Unix()
	if x.Nanosecond() != 0 {
		s++
	}
	return s
}

// ---------------------------------------------------------------------------
// Public API.

// Next returns the first tick strictly after `after`, in the timetable's
// location, or the zero time when there is none (e.g. "0 0 30 2 *", or past
// the year 9999).
func (t *Timetable) Next(after time.Time) time.Time {
	c := ttCursor{t: t}
	if u, ok := c.next(after.Unix()); ok {
		return t.at(u)
	}
	return time.Time{}
}

// Prev returns the last tick strictly before `before`, or the zero time when
// there is none.
func (t *Timetable) Prev(before time.Time) time.Time {
	c := ttCursor{t: t}
	if u, ok := c.prev(ttCeilUnix(before)); ok {
		return t.at(u)
	}
	return time.Time{}
}

// ttBounds is a Window reduced to unix seconds: logical dates in [lo, hi],
// interval ends <= due.
type ttBounds struct {
	lo      int64 // first tick must be >= lo
	hi      int64 // logical dates <= hi
	due     int64 // ends <= due
	bounded bool  // hi or due is finite
}

func (t *Timetable) ttBounds(w Window) ttBounds {
	b := ttBounds{lo: math.MinInt64, hi: math.MaxInt64, due: math.MaxInt64}
	if !w.StartDate.IsZero() {
		b.lo = ttCeilUnix(w.StartDate)
	}
	if !w.From.IsZero() {
		b.lo = max(b.lo, ttCeilUnix(w.From))
	}
	if !w.EndDate.IsZero() {
		b.hi = w.EndDate.Unix() // ticks are whole seconds: T <= x iff T <= floor(x)
		b.bounded = true
	}
	if !w.To.IsZero() {
		b.hi = min(b.hi, w.To.Unix())
		b.bounded = true
	}
	if !w.Now.IsZero() {
		b.due = w.Now.Unix()
		b.bounded = true
	}
	return b
}

// first returns the first tick >= lo.
func (c *ttCursor) first(lo int64) (int64, bool) {
	if lo == math.MinInt64 {
		return c.next(math.MinInt64)
	}
	return c.next(lo - 1)
}

// Intervals streams, in order, the intervals whose logical date is at or
// after the first tick at or after StartDate (and From), at or before EndDate
// (and To), and that are due at Now (End <= Now). Zero bounds are no bounds:
// with Now, To and EndDate all zero the sequence is infinite (up to the year
// 9999) and the caller breaks. An interval is yielded only once its end is
// known, so a schedule with a single remaining tick yields nothing.
func (t *Timetable) Intervals(w Window) iter.Seq[Interval] {
	b := t.ttBounds(w)
	return func(yield func(Interval) bool) {
		c := ttCursor{t: t}
		start, ok := c.first(b.lo)
		if !ok {
			return
		}
		startT := t.at(start)
		for start <= b.hi {
			end, ok := c.next(start)
			if !ok || end > b.due {
				return
			}
			endT := t.at(end)
			if !yield(Interval{Start: startT, End: endT}) {
				return
			}
			start, startT = end, endT
		}
	}
}

// Latest returns the latest due interval (End <= Now) within w: what a
// catchup=false pipeline runs. It steps back from Now (or from the last
// logical date allowed by EndDate/To), so its cost does not depend on how far
// StartDate lies in the past. It reports false when there is no such interval
// or when w has no upper bound at all (Now, To and EndDate zero).
func (t *Timetable) Latest(w Window) (Interval, bool) {
	b := t.ttBounds(w)
	if !b.bounded {
		return Interval{}, false
	}
	c := ttCursor{t: t}
	var start, end int64
	ok := false
	if b.due != math.MaxInt64 {
		// The latest end <= Now, and the tick before it.
		if end, ok = c.prev(b.due + 1); ok {
			start, ok = c.prev(end)
		}
		if ok && start > b.hi {
			ok = false // cut by EndDate/To: fall through
		}
	}
	if !ok {
		if b.hi == math.MaxInt64 {
			return Interval{}, false
		}
		if start, ok = c.prev(b.hi + 1); !ok {
			return Interval{}, false
		}
		if end, ok = c.next(start); !ok {
			// The last tick ever (year 9999) opens no interval: take the one before.
			end = start
			if start, ok = c.prev(end); !ok {
				return Interval{}, false
			}
		}
		if end > b.due {
			return Interval{}, false
		}
	}
	if start < b.lo {
		return Interval{}, false
	}
	return Interval{Start: t.at(start), End: t.at(end)}, true
}

// Upcoming returns the first interval that is not yet due (End > Now) and
// respects StartDate, EndDate, From and To: what `rewind list` shows as the
// next run. It may have already started (Start <= Now < End). It reports false
// when there is none, or when Now is zero (then every interval counts as due).
func (t *Timetable) Upcoming(w Window) (Interval, bool) {
	if w.Now.IsZero() {
		return Interval{}, false
	}
	b := t.ttBounds(w)
	c := ttCursor{t: t}
	end, ok := c.next(b.due)
	if !ok {
		return Interval{}, false
	}
	start, ok := c.prev(end)
	if !ok || start < b.lo {
		// The interval around Now starts too early: take the first one.
		if start, ok = c.first(b.lo); !ok {
			return Interval{}, false
		}
		if end, ok = c.next(start); !ok {
			return Interval{}, false
		}
	}
	if start > b.hi {
		return Interval{}, false
	}
	return Interval{Start: t.at(start), End: t.at(end)}, true
}
