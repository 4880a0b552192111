package daemon

import (
	"fmt"
	"math/bits"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/rewind-dev/rewind/dsl"
	"github.com/rewind-dev/rewind/timetable"
)

// CronLine is one crontab entry: the pipelines that share a schedule and a
// timezone, and when a cron daemon that schedules in the host's timezone
// must call `rewind run` for them.
type CronLine struct {
	// Schedule is the schedule of the pipelines, 5 fields (presets
	// spelled out), in their timezone.
	Schedule  string
	Timezone  string
	Pipelines []string
	// Host are the entries, in the host's timezone, that fire at every
	// tick of Schedule: one where the two zones keep one difference, more
	// where daylight saving time changes it (each fires once a day or
	// so; the run that is not due yet when one fires does nothing).
	Host []HostEntry
}

// HostEntry is the time fields of one crontab entry, in the timezone the
// cron daemon schedules in. Masks have bit i set for value i.
type HostEntry struct {
	Minute, Hour uint64
	// Dom, Month and Dow; DomStar (DowStar) is a "*" day of month (of
	// week), with cron's meaning: when neither is "*", a day matches
	// either of them.
	Dom, Month, Dow  uint64
	DomStar, DowStar bool
}

const (
	allMinutes = 1<<60 - 1
	allHours   = 1<<24 - 1
	allDoms    = 1<<32 - 2
	allMonths  = 1<<13 - 2
	allDows    = 1<<7 - 1
	starBit    = 1 << 63
)

var presets = map[string]string{
	"@yearly": "0 0 1 1 *", "@annually": "0 0 1 1 *", "@monthly": "0 0 1 * *",
	"@weekly": "0 0 * * 0", "@daily": "0 0 * * *", "@midnight": "0 0 * * *", "@hourly": "0 * * * *",
}

var cronParser = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// cronHorizon is how far ahead the ticks are translated: a year and a
// week holds every daylight saving time change of every zone once, and
// the rules repeat yearly. A schedule without a tick in it (February 29)
// is followed to its first tick, up to nine years ahead.
const cronHorizon = 373 * 24 * time.Hour

// CronLines groups a workspace's pipelines by schedule and timezone, so that
// one crontab entry per group calls `rewind run` when their intervals end,
// translated for a cron daemon that schedules in host (see CronLinesAt).
func CronLines(ws *dsl.Workspace, host *time.Location) []CronLine {
	lines, _ := cronLines(ws, time.Now(), host, false)
	return lines
}

// CronLinesAt is CronLines without the pipelines that have ended at now
// (their end_date has passed: no interval is left to become due), which it
// returns by name. The host entries of each line fire at every tick of its
// pipelines from now on, daylight saving time changes of both zones
// included, for a cron daemon that schedules in host: Debian's and
// Ubuntu's cron ignore CRON_TZ, so a line cannot carry its own zone.
func CronLinesAt(ws *dsl.Workspace, now time.Time, host *time.Location) ([]CronLine, []string) {
	return cronLines(ws, now, host, true)
}

func cronLines(ws *dsl.Workspace, now time.Time, host *time.Location, dropEnded bool) ([]CronLine, []string) {
	byKey := map[[2]string]*CronLine{}
	locs := map[*CronLine]*time.Location{}
	var out []*CronLine
	var ended []string
	for _, p := range ws.Pipelines {
		if dropEnded && !p.EndDate.IsZero() {
			if tt, err := timetable.New(p.Schedule, p.Timezone); err == nil {
				if _, ok := tt.Upcoming(timetable.Window{StartDate: p.StartDate, EndDate: p.EndDate, Now: now}); !ok {
					ended = append(ended, p.Name)
					continue
				}
			}
		}
		s := strings.TrimSpace(p.Schedule)
		if c, ok := presets[s]; ok {
			s = c
		}
		s = strings.Join(strings.Fields(s), " ")
		k := [2]string{s, p.Timezone.String()}
		l := byKey[k]
		if l == nil {
			l = &CronLine{Schedule: s, Timezone: k[1]}
			byKey[k] = l
			locs[l] = p.Timezone
			out = append(out, l)
		}
		l.Pipelines = append(l.Pipelines, p.Name)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Timezone != out[j].Timezone {
			return out[i].Timezone < out[j].Timezone
		}
		return out[i].Schedule < out[j].Schedule
	})
	res := make([]CronLine, len(out))
	for i, l := range out {
		l.Host = HostEntries(l.Schedule, locs[l], host, now)
		res[i] = *l
	}
	return res, ended
}

// HostEntries translates schedule, evaluated in loc as rewind evaluates it
// (timetable: a tick in a spring gap moves forward, an autumn fold is
// taken once or twice as the schedule says), into crontab entries for a
// daemon that schedules in host, firing at each of its ticks in the year
// after now (or its first tick, when it has none in that year). Each tick is taken at its wall time in host; the day fields
// are the schedule's own when the tick stays on its day, shifted when the
// difference of the zones moves it to the day before or after. Every tick
// is checked against the entries; should one be missed, the entries are
// replaced by one that fires every minute (rewind runs only what is due),
// which cannot miss one.
func HostEntries(schedule string, loc, host *time.Location, now time.Time) []HostEntry {
	parsed, err := cronParser.Parse(schedule)
	if err != nil {
		return []HostEntry{everyMinute}
	}
	spec, ok := parsed.(*cron.SpecSchedule)
	tt, err := timetable.New(schedule, loc)
	if !ok || err != nil {
		return []HostEntry{everyMinute}
	}
	own := HostEntry{
		Minute: spec.Minute & allMinutes, Hour: spec.Hour & allHours,
		Dom: spec.Dom & allDoms, Month: spec.Month & allMonths, Dow: spec.Dow & allDows,
		DomStar: spec.Dom&starBit != 0, DowStar: spec.Dow&starBit != 0,
	}
	anyDay := own.DomStar && own.DowStar && own.Month == allMonths
	// The minutes of each (day shift, hour) in host.
	type slot struct{ shift, hour int }
	minutes := map[slot]uint64{}
	var ticks []time.Time
	end, last := now.Add(cronHorizon), now.AddDate(9, 0, 0)
	for t := tt.Next(now); !t.IsZero() && (t.Before(end) || len(ticks) == 0 && t.Before(last)); t = tt.Next(t) {
		h := t.In(host)
		shift := 0
		if !anyDay {
			shift = civilDay(h) - civilDay(t.In(loc))
		}
		minutes[slot{shift, h.Hour()}] |= 1 << h.Minute()
		ticks = append(ticks, t)
	}
	// One entry per day fields and minutes, with the hours that share them.
	type key struct {
		days   HostEntry // day fields only
		minute uint64
	}
	hours := map[key]uint64{}
	for s, m := range minutes {
		hours[key{dayFields(own, s.shift), m}] |= 1 << s.hour
	}
	entries := make([]HostEntry, 0, len(hours))
	for k, h := range hours {
		e := k.days
		e.Minute, e.Hour = k.minute, h
		entries = append(entries, e)
	}
	sort.Slice(entries, func(i, j int) bool {
		a, b := entries[i], entries[j]
		if a.Hour != b.Hour {
			return bits.TrailingZeros64(a.Hour) < bits.TrailingZeros64(b.Hour)
		}
		return a.CronFields() < b.CronFields()
	})
	for _, t := range ticks {
		if !matchesAny(entries, t.In(host)) {
			return []HostEntry{everyMinute}
		}
	}
	if len(entries) == 0 {
		return []HostEntry{everyMinute}
	}
	return entries
}

var everyMinute = HostEntry{Minute: allMinutes, Hour: allHours, Dom: allDoms, Month: allMonths, Dow: allDows, DomStar: true, DowStar: true}

// dayFields are the day fields of the schedule own for a tick that host
// sees shift days after (or before, when negative) its own day.
func dayFields(own HostEntry, shift int) HostEntry {
	e := HostEntry{Dom: own.Dom, Month: own.Month, Dow: own.Dow, DomStar: own.DomStar, DowStar: own.DowStar}
	if shift == 0 {
		return e
	}
	if own.DomStar && own.Month == allMonths {
		// Only the day of the week restricts: it shifts with the tick.
		if !own.DowStar {
			e.Dow = rotate(own.Dow, shift, 7)
		}
		return e
	}
	// A day of the month or a month restricts: shifted across the end of
	// a month they are no longer one field. Any day of the months the
	// ticks fall in, in host; rewind runs only what is due.
	e.Dom, e.DomStar, e.Dow, e.DowStar = allDoms, true, allDows, true
	e.Month = own.Month
	if own.Month != allMonths {
		m := own.Month >> 1 // months 1..12 at bits 0..11
		e.Month |= rotate(m, shift/abs(shift), 12) << 1
	}
	return e
}

func abs(n int) int {
	if n < 0 {
		return -n
	}
	return n
}

// rotate moves the bits of mask (values 0..n-1) by k, modulo n.
func rotate(mask uint64, k, n int) uint64 {
	var out uint64
	for i := 0; i < n; i++ {
		if mask&(1<<i) != 0 {
			out |= 1 << (((i+k)%n + n) % n)
		}
	}
	return out
}

// civilDay is t's date as a day number in t's own location.
func civilDay(t time.Time) int {
	y, m, d := t.Date()
	return int(time.Date(y, m, d, 0, 0, 0, 0, time.UTC).Unix() / 86400)
}

func matchesAny(entries []HostEntry, t time.Time) bool {
	for _, e := range entries {
		if e.Matches(t) {
			return true
		}
	}
	return false
}

// Matches reports whether the entry fires at t's wall time (cron's
// reading of day of month and day of week included).
func (e HostEntry) Matches(t time.Time) bool {
	if e.Minute&(1<<t.Minute()) == 0 || e.Hour&(1<<t.Hour()) == 0 || e.Month&(1<<int(t.Month())) == 0 {
		return false
	}
	dom, dow := e.Dom&(1<<t.Day()) != 0, e.Dow&(1<<int(t.Weekday())) != 0
	if e.DomStar || e.DowStar {
		return dom && dow
	}
	return dom || dow
}

// CronFields is the entry's five crontab fields.
func (e HostEntry) CronFields() string {
	dom, dow := "*", "*"
	if !e.DomStar {
		dom = cronList(e.Dom, 1, 31)
	}
	if !e.DowStar {
		dow = cronList(e.Dow, 0, 6)
	}
	return strings.Join([]string{cronList(e.Minute, 0, 59), cronList(e.Hour, 0, 23), dom, cronList(e.Month, 1, 12), dow}, " ")
}

// cronList is mask as a crontab field: "*" when every value of lo..hi is
// set, else a list of values and ranges ("0,15,30", "1-5").
func cronList(mask uint64, lo, hi int) string {
	return list(mask, lo, hi, "*", "-", strconv.Itoa)
}

// list is mask as a list of the names of its values lo..hi: all when every
// one is set, else values and ranges (a-b written with dash; none when
// dash is "").

func list(mask uint64, lo, hi int, all, dash string, name func(int) string) string {
	full := true
	for i := lo; i <= hi; i++ {
		full = full && mask&(1<<i) != 0
	}
	if full {
		return all
	}
	var parts []string
	for i := lo; i <= hi; i++ {
		if mask&(1<<i) == 0 {
			continue
		}
		j := i
		for dash != "" && j+1 <= hi && mask&(1<<(j+1)) != 0 {
			j++
		}
		switch {
		case j >= i+2:
			parts = append(parts, name(i)+dash+name(j))
		case j == i+1:
			parts = append(parts, name(i), name(j))
		default:
			parts = append(parts, name(i))
		}
		i = j
	}
	return strings.Join(parts, ",")
}

var weekdays = [7]string{"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"}

// OnCalendar is the entry as the values of systemd timer OnCalendar=
// settings, in zone (a timezone suffix systemd reads): one, or two when
// both the day of the month and the day of the week restrict (cron fires
// on either, an OnCalendar expression on both).
func (e HostEntry) OnCalendar(zone string) []string {
	// Lists rather than ranges but for the weekdays: older systemd reads
	// ranges in weekdays only.
	two := func(n int) string { return fmt.Sprintf("%02d", n) }
	tm := list(e.Hour, 0, 23, "*", "", two) + ":" + list(e.Minute, 0, 59, "*", "", two) + ":00 " + zone
	month := list(e.Month, 1, 12, "*", "", two)
	dom := list(e.Dom, 1, 31, "*", "", two)
	dow := list(e.Dow, 0, 6, "", "..", func(i int) string { return weekdays[i] })
	switch {
	case e.DomStar && e.DowStar:
		return []string{"*-" + month + "-* " + tm}
	case e.DomStar:
		return []string{dow + " *-" + month + "-* " + tm}
	case e.DowStar:
		return []string{"*-" + month + "-" + dom + " " + tm}
	default:
		return []string{"*-" + month + "-" + dom + " " + tm, dow + " *-" + month + "-* " + tm}
	}
}
