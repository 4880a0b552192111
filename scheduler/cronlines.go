package scheduler

import (
	"sort"
	"strings"

	"github.com/rewind-dev/rewind/dsl"
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
	byKey := map[[2]string]*CronLine{}
	var out []*CronLine
	for _, p := range ws.Pipelines {
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
	return res
}
