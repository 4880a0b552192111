package backfill

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/rewind-dev/rewind/lake"
	"github.com/rewind-dev/rewind/scheduler"
	"github.com/rewind-dev/rewind/skew"
	"github.com/rewind-dev/rewind/store"
)

func (a *applier) report(ctx context.Context) error { return a.writeReport(ctx, false) }

// writeReport writes the backfill's report to .rewind/backfills/ID.md and
// sends it to every notify block that gets backfill reports. With
// validationFailed, the backfill failed at its validation: the report says
// so, why (a.res.Corrections), and the two ways on; the notify blocks get
// state failed.
func (a *applier) writeReport(ctx context.Context, validationFailed bool) error {
	headline := ""
	switch {
	case validationFailed && a.failedRuns != "":
		headline = "**FAILED**: dates of the window failed; main is untouched (see below for which and the two ways on)."
	case validationFailed:
		headline = "**Validation FAILED**: main is untouched (see below for why and the two ways on)."
	}
	text, err := backfillReport(ctx, a.o.Store, a.b, a.plan, headline)
	if err != nil {
		return err
	}
	switch {
	case validationFailed && a.failedRuns != "":
		text += a.failedRuns
	case validationFailed:
		text += validationFailedSection(a.b.ID, a.res.Corrections)
	}
	if len(a.def.Outputs) > 0 {
		cs := a.res.Corrections
		if cs == nil && !validationFailed && len(a.selected()) > 0 { // resumed after validation: the tag holds the old main
			if cs, err = Corrections(ctx, a.lakes, a.def, TagName(a.b.ID), "main", a.selected()); errors.Is(err, lake.ErrNoSuchRef) {
				cs = nil // main had nothing to tag: no correction to show
			} else if err != nil {
				return err
			}
		}
		text += "\n## Corrections of the outputs\n\n" + correctionsTable(cs)
	}
	// The report is stored and sent: never a sensitive value in it.
	text = a.o.Workspace.Redact(text)
	path := filepath.Join(a.o.Home, "backfills", a.b.ID+".md")
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		return err
	}
	a.res.ReportPath = path
	// The report tells what the data is; its delivery does not change
	// it: a notify block that fails is recorded (and retried by apply
	// --resume), the backfill's state stays.
	a.res.Undelivered = nil
	if err := notifyAll(ctx, a.o.Workspace, a.b, validationFailed || a.runsFailed(ctx), path, text); err != nil {
		a.res.Undelivered = a.o.Workspace.RedactError(err)
		a.o.Log.Warn("backfill report not delivered", "backfill", a.b.ID, "error", a.res.Undelivered)
	}
	return nil
}

// validationFailedSection says why a backfill's validation failed, each
// date of each output over its rules, and the two ways on.
func validationFailedSection(id string, cs []Correction) string {
	var sb strings.Builder
	over := violations(cs)
	fmt.Fprintf(&sb, "\n## Validation FAILED\n\n%d changes over their rules: main is untouched, the branch %s is kept.\n\n",
		len(over), scheduler.BranchName(id))
	for _, v := range over {
		fmt.Fprintf(&sb, "- %s\n", v)
	}
	fmt.Fprintf(&sb, "\nTwo ways on:\n\n")
	fmt.Fprintf(&sb, "- `rewind backfill apply --resume %s --force` cuts over anyway: main gets the branch's version of every date of the window\n", id)
	fmt.Fprintf(&sb, "- `rewind backfill cancel %s` gives the backfill up: main keeps its version\n", id)
	return sb.String()
}

// runsFailedSection says that dates of a backfill failed (err lists them),
// and the two ways on.
func runsFailedSection(id string, err error) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "\n## FAILED: dates of the window failed\n\n%v\n\nTwo ways on:\n\n", err)
	fmt.Fprintf(&sb, "- `rewind backfill apply --resume %s` runs the failed dates again (after a fix), then validates and cuts over\n", id)
	fmt.Fprintf(&sb, "- `rewind backfill cancel %s` gives the backfill up: main keeps its version\n", id)
	return sb.String()
}

// BackfillReport is the Markdown summary of a backfill: window, dates,
// attempts, failures, durations, pools, downstream.
func BackfillReport(ctx context.Context, st store.Store, b store.Backfill, plan Plan) (string, error) {
	return backfillReport(ctx, st, b, plan, "")
}

// backfillReport is BackfillReport; with a headline, of a backfill that
// failed before its cutover (main untouched, its consumers not rebuilt),
// saying so first.
func backfillReport(ctx context.Context, st store.Store, b store.Backfill, plan Plan, headline string) (string, error) {
	validationFailed := headline != ""
	runs, err := st.ListRuns(ctx, store.ListRunsParams{Pipelines: []string{b.Pipeline}, From: b.From, To: b.To, WithTasks: true, WithAttempts: true})
	if err != nil {
		return "", err
	}
	// A run is named as the plan names its date (Plan.DateName).
	names := map[int64]string{}
	for _, d := range plan.Dates {
		if at, err := time.Parse(time.RFC3339, d.LogicalDate); err == nil {
			names[at.Unix()] = plan.DateName(d)
		}
	}
	name := func(r store.Run) string {
		if n, ok := names[r.LogicalDate.Unix()]; ok {
			return n
		}
		return r.DS
	}
	var (
		ok, failed, attempts int
		failedDates          []string
		durations            []time.Duration
		pools                = map[string]int{}
		first, last          time.Time
	)
	for _, r := range runs {
		if r.BackfillID != b.ID {
			continue
		}
		switch r.State {
		case store.RunSuccess:
			ok++
		case store.RunFailed:
			failed++
			failedDates = append(failedDates, name(r))
		}
		if !r.StartedAt.IsZero() && !r.EndedAt.IsZero() {
			durations = append(durations, r.EndedAt.Sub(r.StartedAt))
			if first.IsZero() || r.StartedAt.Before(first) {
				first = r.StartedAt
			}
			if r.EndedAt.After(last) {
				last = r.EndedAt
			}
		}
		for _, ti := range r.Tasks {
			for _, at := range ti.Attempts {
				if at.StartedAt.Before(b.CreatedAt) {
					continue // an attempt of the run before the backfill took it over
				}
				attempts++
				pools[at.Pool]++
			}
		}
	}
	from, to := plan.Window()
	var sb strings.Builder
	fmt.Fprintf(&sb, "# Backfill %s\n\n", b.ID)
	if headline != "" {
		fmt.Fprintf(&sb, "%s\n\n", headline)
	}
	fmt.Fprintf(&sb, "- pipeline: %s\n- window: %s .. %s (reprocess %s%s)\n", b.Pipeline, from, to, plan.Reprocess, map[bool]string{true: ", newest first", false: ""}[plan.Reverse])
	fmt.Fprintf(&sb, "- dates: %d planned, %d succeeded, %d failed\n", plan.Selected, ok, failed)
	fmt.Fprintf(&sb, "- attempts: %d\n", attempts)
	if len(durations) > 0 {
		fmt.Fprintf(&sb, "- wall clock: %s; median run %s; %d waves of up to %d runs\n", last.Sub(first).Round(time.Second), skew.MedianDuration(durations).Round(time.Millisecond), plan.Waves, plan.MaxActiveRuns)
	}
	poolNames := make([]string, 0, len(pools))
	for p := range pools {
		poolNames = append(poolNames, p)
	}
	sort.Strings(poolNames)
	for _, p := range poolNames {
		fmt.Fprintf(&sb, "- pool %s: %d attempts\n", p, pools[p])
	}
	if len(plan.Watermarks) > 0 {
		sb.WriteString("\n## Watermarks reset\n\n")
		for _, w := range plan.Watermarks {
			fmt.Fprintf(&sb, "- %s: %s -> %s\n", w.Pipeline, w.Current, orNone(w.ResetTo))
		}
	}
	if len(plan.Downstream) > 0 {
		if validationFailed {
			fmt.Fprintf(&sb, "\n## Downstream\n\nPaused during the backfill (those it paused are unpaused again), not rebuilt: main is untouched: %s\n", strings.Join(plan.Downstream, ", "))
		} else {
			fmt.Fprintf(&sb, "\n## Downstream\n\nPaused during the backfill, then rebuilt for the window: %s\n", strings.Join(plan.Downstream, ", "))
		}
	}
	if failed > 0 {
		fmt.Fprintf(&sb, "\n## Failed dates\n\n%s\n", strings.Join(failedDates, ", "))
	}
	return sb.String(), nil
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}
