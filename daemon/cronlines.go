package daemon

import (
	"sort"
	"strings"
	"time"

	"github.com/rewind-dev/rewind/dsl"
	"github.com/rewind-dev/rewind/timetable"
)

// CronLine is one crontab entry: the pipelines that share a schedule and a timezone.
type CronLine struct {
	Schedule  string // 5-field cron, presets spelled out
	Timezone  string
	Pipelines []string
}

var presets = map[string]string{
	"@yearly": "0 0 1 1 *", "@annually": "0 0 1 1 *", "@monthly": "0 0 1 * *",
	"@weekly": "0 0 * * 0", "@daily": "0 0 * * *", "@midnight": "0 0 * * *", "@hourly": "0 * * * *",
}

// CronLines groups a workspace's pipelines by schedule and timezone, so that
// one crontab line per group calls `rewind run` when their intervals end.
func CronLines(ws *dsl.Workspace) []CronLine {
	lines, _ := cronLines(ws, time.Time{})
	return lines
}

// CronLinesAt is CronLines without the pipelines that have ended at now
// (their end_date has passed: no interval is left to become due), which it
// returns by name.
func CronLinesAt(ws *dsl.Workspace, now time.Time) ([]CronLine, []string) {
	return cronLines(ws, now)
}

func cronLines(ws *dsl.Workspace, now time.Time) ([]CronLine, []string) {
	byKey := map[[2]string]*CronLine{}
	var out []*CronLine
	var ended []string
	for _, p := range ws.Pipelines {
		if !now.IsZero() && !p.EndDate.IsZero() {
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
		k := [2]string{s, p.Timezone.String()}
		l := byKey[k]
		if l == nil {
			l = &CronLine{Schedule: s, Timezone: k[1]}
			byKey[k] = l
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
		res[i] = *l
	}
	return res, ended
}
