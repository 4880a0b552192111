package daemon

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/rewind-dev/rewind/timetable"
)

func zone(t *testing.T, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

// The entries of a schedule for a daemon in another zone, as printed.
func TestHostEntriesTranslate(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	cases := []struct {
		schedule, loc, host string
		want                []string
	}{
		{"0 0 * * *", "UTC", "UTC", []string{"0 0 * * *"}},
		{"0 0 * * *", "UTC", "Asia/Tokyo", []string{"0 9 * * *"}},
		// No daylight saving time in India: one hour, the day before in UTC.
		{"30 1 * * *", "Asia/Kolkata", "UTC", []string{"0 20 * * *"}},
		// Rome moves by an hour against UTC: both hours fire.
		{"0 6 * * 1-5", "Europe/Rome", "UTC", []string{"0 4,5 * * 1-5"}},
		// Late in New York is the next day in UTC: the weekdays shift.
		{"0 22 * * 1-5", "America/New_York", "UTC", []string{"0 2,3 * * 2-6"}},
		// Every hour stays every hour.
		{"0 * * * *", "Europe/Rome", "UTC", []string{"0 * * * *"}},
		{"*/15 * * * *", "Asia/Kathmandu", "UTC", []string{"0,15,30,45 * * * *"}},
		// Same rules on both sides: the schedule as it is, and 03:30 for
		// the spring day, when 02:30 does not exist and the tick moves
		// forward by the gap.
		{"30 2 * * *", "Europe/Rome", "Europe/Berlin", []string{"30 2,3 * * *"}},
		{"0 9 * * *", "Europe/Rome", "Europe/Berlin", []string{"0 9 * * *"}},
		// February 29 in Tokyo is February 28 or 29 in UTC.
		{"0 0 29 2 *", "Asia/Tokyo", "UTC", []string{"0 15 * 1,2 *"}},
		// The first of the month in Tokyo is the last of the month before
		// in UTC: any day of the month, at that hour.
		{"0 0 1 * *", "Asia/Tokyo", "UTC", []string{"0 15 * * *"}},
		{"0 0 1 1 *", "Asia/Tokyo", "UTC", []string{"0 15 * 1,12 *"}},
	}
	for _, c := range cases {
		var got []string
		for _, e := range HostEntries(c.schedule, zone(t, c.loc), zone(t, c.host), now) {
			got = append(got, e.CronFields())
		}
		if strings.Join(got, " | ") != strings.Join(c.want, " | ") {
			t.Errorf("%s in %s for a daemon in %s: %q, want %q", c.schedule, c.loc, c.host, got, c.want)
		}
	}
}

// Every tick of three years, in every pair of zones (with and without
// daylight saving time, half and quarter hours, both hemispheres), is one
// the printed entries fire at, read back by cron's own parser (robfig's,
// which reads day of month and day of week as cron does): the entries
// are computed from a year's ticks, and hold for the years after.
func TestHostEntriesFireAtEveryTick(t *testing.T) {
	zones := []string{"UTC", "Europe/Rome", "America/New_York", "Asia/Tokyo", "Asia/Kolkata",
		"Asia/Kathmandu", "Australia/Lord_Howe", "America/Sao_Paulo", "Pacific/Kiritimati", "Pacific/Pago_Pago"}
	schedules := []string{"@daily", "@hourly", "@weekly", "@monthly", "@yearly", "30 2 * * *",
		"0 6 * * 1-5", "45 23 * * 0", "0 0 1,15 * *", "0 12 1 * 1", "*/20 * * * *", "0 0 29 2 *"}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	end := now.AddDate(3, 0, 0) // 2028 has a February 29
	for _, s := range schedules {
		for _, lz := range zones {
			loc := zone(t, lz)
			tt, err := timetable.New(s, loc)
			if err != nil {
				t.Fatal(err)
			}
			for _, hz := range zones {
				host := zone(t, hz)
				entries := HostEntries(s, loc, host, now)
				var scheds []cron.Schedule
				for _, e := range entries {
					sc, err := cron.ParseStandard(e.CronFields())
					if err != nil {
						t.Fatalf("%s %s for %s: entry %q: %v", s, lz, hz, e.CronFields(), err)
					}
					scheds = append(scheds, sc)
				}
				n := 0
				for tick := tt.Next(now); !tick.IsZero() && tick.Before(end); tick = tt.Next(tick) {
					n++
					h := tick.In(host)
					// robfig evaluates in the location of the time it is given.
					fires := false
					for _, sc := range scheds {
						fires = fires || sc.Next(h.Add(-time.Second)).Equal(h)
					}
					if !fires {
						t.Fatalf("%s in %s, daemon in %s: entries %s do not fire at the tick %s (%s in %s)",
							s, lz, hz, fields(entries), tick.In(loc).Format(time.RFC3339), h.Format("Mon 2006-01-02 15:04"), hz)
					}
				}
				if n == 0 {
					t.Fatalf("%s in %s: no tick in three years", s, lz)
				}
				if len(entries) == 1 && entries[0] == everyMinute && s != "* * * * *" {
					t.Errorf("%s in %s, daemon in %s: fell back to every minute", s, lz, hz)
				}
			}
		}
	}
}

func fields(es []HostEntry) string {
	var out []string
	for _, e := range es {
		out = append(out, fmt.Sprintf("%q", e.CronFields()))
	}
	return strings.Join(out, ", ")
}

// The OnCalendar form of an entry: systemd's syntax, and two settings
// where cron reads day of month or day of week.
func TestHostEntryOnCalendar(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		schedule, loc string
		want          []string
	}{
		{"0 6 * * 1-5", "Europe/Rome", []string{"Mon..Fri *-*-* 04,05:00:00 UTC"}},
		{"0 0 1 * *", "UTC", []string{"*-*-01 00:00:00 UTC"}},
		{"0 12 1 * 1", "UTC", []string{"*-*-01 12:00:00 UTC", "Mon *-*-* 12:00:00 UTC"}},
		{"*/20 * * 3 *", "UTC", []string{"*-03-* *:00,20,40:00 UTC"}},
	} {
		var got []string
		for _, e := range HostEntries(c.schedule, zone(t, c.loc), time.UTC, now) {
			got = append(got, e.OnCalendar("UTC")...)
		}
		if strings.Join(got, " | ") != strings.Join(c.want, " | ") {
			t.Errorf("%s in %s: %q, want %q", c.schedule, c.loc, got, c.want)
		}
	}
}
