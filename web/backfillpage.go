package web

import (
	"context"
	"fmt"
	"html"
	"html/template"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/rewind-dev/rewind/backfill"
	"github.com/rewind-dev/rewind/dsl"
	"github.com/rewind-dev/rewind/store"
)

// ProgressBarJSON is where the dates of one pipeline of a backfill stand:
// Targeted dates, of which Succeeded, Failed, InProgress (queued or
// running), Pending (no run yet), Skipped (the plan left them: already
// succeeded, in flight, held) and Elsewhere (taken back by a run of its
// own); Percent is each of those as a share of Targeted, in percent with
// one decimal.
type ProgressBarJSON struct {
	Pipeline string `json:"pipeline"`
	// Role is "backfill" for the backfill's pipeline, "downstream" for a
	// consumer it rebuilt (its runs of the window).
	Role       string             `json:"role"`
	Targeted   int                `json:"targeted"`
	Succeeded  int                `json:"succeeded"`
	Failed     int                `json:"failed"`
	InProgress int                `json:"in_progress"`
	Pending    int                `json:"pending"`
	Skipped    int                `json:"skipped"`
	Elsewhere  int                `json:"elsewhere"`
	Percent    map[string]float64 `json:"percent"`
}

// OutsideJSON is a range of days of a backfill's window on which the
// pipeline's schedule has no interval: before its start_date, after its
// end_date, not due when the backfill was planned, or days its cron skips.
type OutsideJSON struct {
	From   string `json:"from"`
	To     string `json:"to"`
	Days   int    `json:"days"`
	Reason string `json:"reason"`
}

// BehindJSON says that a running backfill's work waits in a pool behind
// scheduled and manual work, which goes first: Queued task instances of
// the backfill wait there while Scheduled ones of other runs run or wait;
// Reserved slots of the pool are never given to a backfill.
type BehindJSON struct {
	Pool      string `json:"pool"`
	Queued    int    `json:"queued"`
	Running   int    `json:"running"`
	Scheduled int    `json:"scheduled"`
	Slots     int    `json:"slots"`
	Reserved  int    `json:"reserved"`
}

// skipWhy says why the plan skipped date d, from its state when planned
// and its run now.
func skipWhy(d backfill.PlanDate, b store.Backfill, byTime map[int64]store.Run) string {
	var r store.Run
	ok := false
	if at, err := time.Parse(time.RFC3339, d.LogicalDate); err == nil {
		r, ok = byTime[at.Unix()]
	}
	extra := ""
	if d.Result == "branch" || strings.Contains(d.Reason, "backfill") {
		// Why the plan said more: a success only on a branch, a run held
		// by a backfill that no longer runs.
		extra = ": " + d.Reason
	}
	switch d.State {
	case string(store.RunSuccess):
		return "already succeeded (reprocess " + b.Reprocess + ")" + extra
	case string(store.RunFailed):
		return "already failed, and reprocess " + b.Reprocess + " leaves failed dates" + extra
	case string(store.RunQueued), string(store.RunRunning):
		if ok && r.BackfillID != "" && r.BackfillID != b.ID {
			return "held by backfill " + r.BackfillID + extra
		}
		if extra != "" {
			return "in flight" + extra
		}
		return "in flight: its run was " + d.State + " when planned"
	}
	return "skipped by the plan" + extra
}

// runWhy says why a date the backfill selected did not run as its own
// (the date's row, as it stands).
func runWhy(row BackfillDateRowJSON, b store.Backfill, byTime map[int64]store.Run) string {
	switch row.State {
	case "elsewhere":
		if at, err := time.Parse(time.RFC3339, row.LogicalDate); err == nil {
			if r, ok := byTime[at.Unix()]; ok {
				if r.BackfillID != "" {
					return "taken by backfill " + r.BackfillID
				}
				return "taken back by a " + string(r.Kind) + " run"
			}
		}
		return "taken back by another run"
	case "none":
		if b.State != store.BackfillRunning {
			return "not run: the backfill stopped at its " + b.Phase + " phase (" + backfill.ShownState(b) + ")"
		}
		return "not run yet"
	}
	if row.Batch != "" && row.Batch != row.LogicalDate {
		return "covered by the batch run of " + row.Batch
	}
	return ""
}

// backfillProgress adds the progress bars, the days outside the schedule
// and the pools where the backfill waits to out.
func (s *Server) backfillProgress(ctx context.Context, out *BackfillJSON, b store.Backfill) error {
	out.Bars, out.Outside, out.Behind = []ProgressBarJSON{}, []OutsideJSON{}, []BehindJSON{}
	bar := ProgressBarJSON{Pipeline: b.Pipeline, Role: "backfill"}
	for _, d := range out.Dates {
		bar.Targeted++
		switch d.State {
		case "skip":
			bar.Skipped++
		case string(store.RunSuccess):
			bar.Succeeded++
		case string(store.RunFailed):
			bar.Failed++
		case string(store.RunQueued), string(store.RunRunning):
			bar.InProgress++
		case "elsewhere":
			bar.Elsewhere++
		default:
			bar.Pending++
		}
	}
	out.Bars = append(out.Bars, bar.percent())
	if out.Plan != nil {
		for _, c := range out.Plan.Rebuilt {
			runs, err := s.o.State.ListRuns(ctx, store.ListRunsParams{Pipelines: []string{c}, From: b.From, To: b.To})
			if err != nil {
				return err
			}
			cb := ProgressBarJSON{Pipeline: c, Role: "downstream"}
			for _, r := range runs {
				cb.Targeted++
				switch r.State {
				case store.RunSuccess:
					cb.Succeeded++
				case store.RunFailed:
					cb.Failed++
				default:
					cb.InProgress++
				}
			}
			out.Bars = append(out.Bars, cb.percent())
		}
		out.Outside = outsideDays(out.Plan, s.o.Workspace.Pipeline(b.Pipeline), b.CreatedAt)
	}
	if b.State == store.BackfillRunning && bar.InProgress+bar.Pending > 0 {
		usage, err := s.o.State.Usage(ctx)
		if err != nil {
			return err
		}
		out.Behind = behind(usage, b.Pipeline, s.o.Workspace)
	}
	return nil
}

func (p ProgressBarJSON) percent() ProgressBarJSON {
	p.Percent = map[string]float64{}
	for k, n := range map[string]int{"succeeded": p.Succeeded, "failed": p.Failed, "in_progress": p.InProgress, "pending": p.Pending,
		"skipped": p.Skipped, "elsewhere": p.Elsewhere} {
		if p.Targeted > 0 {
			p.Percent[k] = math.Round(1000*float64(n)/float64(p.Targeted)) / 10
		} else {
			p.Percent[k] = 0
		}
	}
	return p
}

// behind are the pools where the backfill's task instances are queued
// while scheduled or manual ones run or wait there.
func behind(usage []store.UsageRow, pipeline string, ws *dsl.Workspace) []BehindJSON {
	by := map[string]*BehindJSON{}
	var pools []string
	get := func(pool string) *BehindJSON {
		if by[pool] == nil {
			by[pool] = &BehindJSON{Pool: pool, Slots: dsl.DefaultPoolSlots}
			if pl := ws.Pools[pool]; pl != nil {
				by[pool].Slots, by[pool].Reserved = pl.Slots, pl.ReservedForScheduled
			}
			pools = append(pools, pool)
		}
		return by[pool]
	}
	for _, u := range usage {
		w := get(u.Pool)
		switch {
		case u.Backfill && u.Pipeline == pipeline:
			w.Queued += u.Queued
			w.Running += u.Running
		case !u.Backfill:
			w.Scheduled += u.Running + u.Queued
		}
	}
	out := []BehindJSON{}
	for _, p := range pools {
		if w := by[p]; w.Queued > 0 && (w.Scheduled > 0 || w.Reserved > 0 && w.Running >= w.Slots-w.Reserved) {
			out = append(out, *w)
		}
	}
	return out
}

// outsideDays are the days from the plan's start to its end without an
// interval of the plan, in ranges of one reason.
func outsideDays(plan *backfill.Plan, def *dsl.Pipeline, planned time.Time) []OutsideJSON {
	out := []OutsideJSON{}
	if def == nil {
		return out
	}
	start, err1 := time.ParseInLocation(time.DateOnly, plan.Start, def.Timezone)
	end, err2 := time.ParseInLocation(time.DateOnly, plan.End, def.Timezone)
	if err1 != nil || err2 != nil || end.Sub(start) > 20*366*24*time.Hour {
		return out
	}
	have := map[string]bool{}
	for _, d := range plan.Dates {
		have[d.DS] = true
	}
	for day := start; !day.After(end); day = day.AddDate(0, 0, 1) {
		ds := day.Format(time.DateOnly)
		if have[ds] {
			continue
		}
		reason := "no interval of the schedule (" + def.Schedule + ") on this day"
		switch {
		case !def.StartDate.IsZero() && day.AddDate(0, 0, 1).Before(def.StartDate.Add(time.Second)):
			reason = "before start_date " + def.StartDate.Format(time.DateOnly)
		case !def.EndDate.IsZero() && day.After(def.EndDate):
			reason = "after end_date " + def.EndDate.Format(time.DateOnly)
		case !planned.IsZero() && !day.AddDate(0, 0, 1).Before(planned):
			reason = "not due when the backfill was planned"
		}
		if n := len(out); n > 0 && out[n-1].Reason == reason && out[n-1].To == day.AddDate(0, 0, -1).Format(time.DateOnly) {
			out[n-1].To = ds
			out[n-1].Days++
			continue
		}
		out = append(out, OutsideJSON{From: ds, To: ds, Days: 1, Reason: reason})
	}
	return out
}

// BackfillView is what the backfill page renders: the backfill, its
// dates as a heatmap, and what failed of its validation.
type BackfillView struct {
	*BackfillJSON
	Heatmap template.HTML
	// SubDaily: the plan names its dates by their logical date-time.
	SubDaily bool
	// Failures are the validation's dates over their rules, as sentences.
	Failures []string
}

func newBackfillView(b *BackfillJSON, def *dsl.Pipeline) BackfillView {
	v := BackfillView{BackfillJSON: b}
	if b.Plan != nil {
		v.SubDaily = b.Plan.SubDaily()
	}
	loc := time.UTC
	if def != nil {
		loc = def.Timezone
	}
	v.Heatmap = heatmap(b.Dates, b.Outside, v.SubDaily, loc)
	if val := b.Validation; val != nil {
		for _, r := range val.Rows {
			if !r.Violates {
				continue
			}
			if r.Column != "" && r.Limit > 0 && r.OldRows > 0 && (r.Change == nil || *r.Change > r.Limit) {
				change := "new data"
				if r.Change != nil {
					change = fmt.Sprintf("%.2f%%", 100**r.Change)
				}
				v.Failures = append(v.Failures, fmt.Sprintf("%s %s: %s changed by %s (%.2f → %.2f), over max_change %.2f%%",
					r.Output, r.DS, r.Column, change, r.Old, r.New, 100*r.Limit))
			}
			for _, rule := range r.FailedRules {
				v.Failures = append(v.Failures, fmt.Sprintf("%s %s: rule %s is false", r.Output, r.DS, rule))
			}
		}
	}
	return v
}

// The heatmap of a backfill's dates: a daily plan as weeks (columns) of
// days (rows, Monday first), a sub-daily one as days (columns) of times
// of day (rows); one square per date, coloured by its state, its title
// what it is and why. Days of the window outside the schedule are drawn
// hollow. SVG: its sizes are attributes, not styles (the pages' policy
// forbids inline styles).
const (
	hmCell = 11.0
	hmGap  = 2.0
	hmLeft = 36.0
	hmTop  = 16.0
)

func heatmap(dates []BackfillDateRowJSON, outside []OutsideJSON, sub bool, loc *time.Location) template.HTML {
	type cell struct {
		day   time.Time
		slot  string
		row   BackfillDateRowJSON
		empty string // the reason of an outside day
	}
	var cells []cell
	for _, d := range dates {
		at, err := time.Parse(time.RFC3339, d.LogicalDate)
		if err != nil {
			continue
		}
		at = at.In(loc)
		day, _ := time.ParseInLocation(time.DateOnly, d.DS, loc)
		cells = append(cells, cell{day: day, slot: at.Format("15:04"), row: d})
	}
	for _, o := range outside {
		from, err1 := time.ParseInLocation(time.DateOnly, o.From, loc)
		to, err2 := time.ParseInLocation(time.DateOnly, o.To, loc)
		if err1 != nil || err2 != nil {
			continue
		}
		for day := from; !day.After(to); day = day.AddDate(0, 0, 1) {
			cells = append(cells, cell{day: day, empty: o.Reason})
		}
	}
	if len(cells) == 0 {
		return ""
	}
	first := cells[0].day
	for _, c := range cells {
		if c.day.Before(first) {
			first = c.day
		}
	}
	dayIndex := func(t time.Time) int {
		// Calendar days, whatever the length of a day (DST).
		y1, m1, d1 := first.Date()
		y2, m2, d2 := t.Date()
		return int(time.Date(y2, m2, d2, 12, 0, 0, 0, time.UTC).Sub(time.Date(y1, m1, d1, 12, 0, 0, 0, time.UTC)).Hours() / 24)
	}
	var slots []string
	if sub {
		for _, c := range cells {
			if c.empty == "" && !slices.Contains(slots, c.slot) {
				slots = append(slots, c.slot)
			}
		}
		slices.Sort(slots)
	}
	lead := (int(first.Weekday()) + 6) % 7 // Monday first
	pos := func(c cell) (col, row int) {
		i := dayIndex(c.day)
		if !sub {
			return (i + lead) / 7, (i + lead) % 7
		}
		if c.empty != "" {
			return i, -1 // the whole column
		}
		return i, slices.Index(slots, c.slot)
	}
	rows := 7
	if sub {
		rows = max(len(slots), 1)
	}
	cols := 0
	for _, c := range cells {
		col, _ := pos(c)
		cols = max(cols, col+1)
	}
	step := hmCell + hmGap
	width, height := hmLeft+max(float64(cols)*step, 60), hmTop+float64(rows)*step // room for a label over one column
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="heatmap" id="heatmap" width="%.0f" height="%.0f" viewBox="0 0 %.0f %.0f" role="img" aria-label="the state of each date">`, width, height, width, height)
	// Row labels.
	if !sub {
		for i, name := range []string{"Mon", "", "Wed", "", "Fri", "", "Sun"} {
			if name != "" {
				fmt.Fprintf(&b, `<text class="hmlabel" x="0" y="%.0f">%s</text>`, hmTop+float64(i)*step+9, name)
			}
		}
	} else {
		every := max(1, len(slots)/6)
		for i, sl := range slots {
			if i%every == 0 {
				fmt.Fprintf(&b, `<text class="hmlabel" x="0" y="%.0f">%s</text>`, hmTop+float64(i)*step+9, sl)
			}
		}
	}
	// Column labels: the month (a daily plan), the day (sub-daily) where
	// it changes.
	last, lastCol := "", -9
	for col := 0; col < cols; col++ {
		var day time.Time
		if sub {
			day = first.AddDate(0, 0, col)
		} else {
			day = first.AddDate(0, 0, col*7-lead)
			if col == 0 {
				day = first
			}
		}
		label := day.Format("Jan 2006")
		if sub && cols <= 62 {
			label = day.Format("01-02")
		}
		if label != last && col-lastCol >= 4 {
			fmt.Fprintf(&b, `<text class="hmlabel" x="%.0f" y="10">%s</text>`, hmLeft+float64(col)*step, html.EscapeString(label))
			last, lastCol = label, col
		}
	}
	for _, c := range cells {
		col, row := pos(c)
		x := hmLeft + float64(col)*step
		if c.empty != "" {
			y, h := hmTop+float64(row)*step, hmCell
			if row < 0 {
				y, h = hmTop, float64(rows)*step-hmGap
			}
			fmt.Fprintf(&b, `<rect class="hd outside" x="%.0f" y="%.0f" width="%.0f" height="%.0f" rx="2"><title>%s: %s</title></rect>`,
				x, y, hmCell, h, c.day.Format(time.DateOnly), html.EscapeString(c.empty))
			continue
		}
		d := c.row
		title := d.Name + ": " + d.State
		if d.State == "skip" {
			title = d.Name + ": skipped"
		}
		if d.Why != "" {
			title += " · " + d.Why
		}
		if d.Reason != "" && d.State != "skip" {
			title += " · pool " + d.Pool + " (" + d.Reason + ")"
		}
		fmt.Fprintf(&b, `<rect class="hd s-%s" data-logical="%s" data-ds="%s" x="%.0f" y="%.0f" width="%.0f" height="%.0f" rx="2"><title>%s</title></rect>`,
			html.EscapeString(d.State), html.EscapeString(d.LogicalDate), html.EscapeString(d.DS), x, hmTop+float64(row)*step, hmCell, hmCell, html.EscapeString(title))
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String())
}

// barSegments are the segments of a progress bar, in the order drawn.
var barSegments = []struct{ Key, Label, Class string }{
	{"succeeded", "succeeded", "s-success"}, {"failed", "failed", "s-failed"}, {"in_progress", "in progress", "s-running"},
	{"pending", "not run yet", "s-queued"}, {"skipped", "skipped", "s-skip"}, {"elsewhere", "taken back", "s-elsewhere"},
}

// barHTML draws a progress bar as SVG (its widths are attributes) with
// its legend: count and percentage of each segment.
func barHTML(p ProgressBarJSON) template.HTML {
	const w, h = 600.0, 16.0
	counts := map[string]int{"succeeded": p.Succeeded, "failed": p.Failed, "in_progress": p.InProgress, "pending": p.Pending,
		"skipped": p.Skipped, "elsewhere": p.Elsewhere}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="pbar" width="%.0f" height="%.0f" viewBox="0 0 %.0f %.0f" role="img" aria-label="progress of %s">`, w, h, w, h, html.EscapeString(p.Pipeline))
	fmt.Fprintf(&b, `<rect class="track" x="0" y="0" width="%.0f" height="%.0f" rx="3"></rect>`, w, h)
	x := 0.0
	for _, s := range barSegments {
		n := counts[s.Key]
		if n == 0 || p.Targeted == 0 {
			continue
		}
		sw := w * float64(n) / float64(p.Targeted)
		fmt.Fprintf(&b, `<rect class="seg %s" data-key="%s" x="%.2f" y="0" width="%.2f" height="%.0f"><title>%s: %d of %d (%s%%)</title></rect>`,
			s.Class, s.Key, x, sw, h, s.Label, n, p.Targeted, strconv.FormatFloat(p.Percent[s.Key], 'f', 1, 64))
		x += sw
	}
	b.WriteString(`</svg><span class="pcounts">`)
	fmt.Fprintf(&b, `<span class="targeted">%d targeted</span>`, p.Targeted)
	for _, s := range barSegments {
		n := counts[s.Key]
		if n == 0 && (s.Key == "elsewhere" || s.Key == "pending") {
			continue
		}
		fmt.Fprintf(&b, ` · <span class="pc" data-key="%s"><span class="swatch %s"></span>%d %s (%s%%)</span>`,
			s.Key, s.Class, n, s.Label, strconv.FormatFloat(p.Percent[s.Key], 'f', 1, 64))
	}
	b.WriteString(`</span>`)
	return template.HTML(b.String())
}

// phaseDuration is how long a phase took, from its RFC 3339 times ("" when
// it has not ended).
func phaseDuration(started, ended string) string {
	s, err1 := time.Parse(time.RFC3339, started)
	e, err2 := time.Parse(time.RFC3339, ended)
	if err1 != nil || err2 != nil || e.Before(s) {
		return ""
	}
	if e.Equal(s) {
		return "< 1s"
	}
	return short(e.Sub(s))
}
