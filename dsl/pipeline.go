package dsl

import (
	"fmt"
	"math"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/robfig/cron/v3"
)

// Pipeline defaults, as Airflow's.
const (
	DefaultMaxActiveRuns  = 16
	DefaultMaxActiveTasks = 16
)

var pipelineSchema = &hcl.BodySchema{
	Attributes: []hcl.AttributeSchema{
		{Name: "schedule"},
		{Name: "timezone"},
		{Name: "start_date"},
		{Name: "end_date"},
		{Name: "catchup"},
		{Name: "reprocess_lookback"},
		{Name: "max_active_runs"},
		{Name: "max_active_tasks"},
		{Name: "default_pool"},
		{Name: "description"},
		{Name: "tags"},
		{Name: "params"},
		{Name: "for_each"},
		{Name: "consumes"},
		{Name: "notify"},
		{Name: "deadline"},
	},
	Blocks: []hcl.BlockHeaderSchema{
		{Type: "task", LabelNames: []string{"name"}},
		{Type: "skew"},
		{Type: "requires", LabelNames: []string{"name"}},
		{Type: "output", LabelNames: []string{"name"}},
		{Type: "backfill"},
	},
}

// envName matches the names that can follow REWIND_PARAM_ in an environment variable.
var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// cronParser accepts 5-field cron expressions and the presets (@daily, ...).
var cronParser = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// checkSchedule validates a schedule; start is the first instant it must
// fire at or after (zero: not checked).
func checkSchedule(s string, start time.Time) string {
	t := strings.TrimSpace(s)
	switch {
	case t == "":
		return "The schedule must not be empty: use a 5-field cron expression or a preset (@hourly, @daily, @weekly, @monthly, @yearly)."
	case strings.HasPrefix(t, "@every"):
		return "@every is not supported: schedules follow the calendar. Use a cron expression such as \"*/15 * * * *\"."
	case strings.HasPrefix(t, "TZ=") || strings.HasPrefix(t, "CRON_TZ="):
		return "Set the pipeline's timezone attribute instead of a TZ= prefix in the schedule."
	}
	sched, err := cronParser.Parse(t)
	if err != nil {
		return "The schedule " + quote(s) + " is not a valid cron expression: " + err.Error() + ". Use 5 fields (minute hour day-of-month month day-of-week) or a preset (@hourly, @daily, @weekly, @monthly, @yearly)."
	}
	if !start.IsZero() && sched.Next(start.Add(-time.Second)).IsZero() {
		return "The schedule " + quote(s) + " never fires."
	}
	return ""
}

// warnEndDay warns when a date-only end_date, which means midnight of that
// day (Airflow's meaning, kept), leaves out the day's later ticks: an
// hourly pipeline ending on a date keeps only its 00:00 run. It shows the
// timestamp that includes them.
func (l *loader) warnEndDay(attr *hcl.Attribute, p *Pipeline, day string) {
	sched, err := cronParser.Parse(p.Schedule)
	if err != nil {
		return
	}
	mid := p.EndDate
	next := time.Date(mid.Year(), mid.Month(), mid.Day()+1, 0, 0, 0, 0, p.Timezone)
	var ticks []time.Time
	for t := sched.Next(mid); !t.IsZero() && t.Before(next); t = sched.Next(t) {
		ticks = append(ticks, t.In(p.Timezone))
	}
	if len(ticks) == 0 {
		return
	}
	last := ticks[len(ticks)-1]
	which := ticks[0].Format("15:04")
	if len(ticks) > 1 {
		which = fmt.Sprintf("%d ticks, %s to %s", len(ticks), ticks[0].Format("15:04"), last.Format("15:04"))
	}
	l.warnf(attr.Expr.Range(), "end_date leaves out ticks of its day",
		"end_date = %q means %s, midnight in %s, and no run has a logical date after end_date: the ticks of %s after midnight (%s) get no run. To include the whole day, write end_date = %q (its last tick).",
		day, mid.Format(time.RFC3339), p.Timezone, day, which, last.Format(time.RFC3339))
	l.diags[len(l.diags)-1].Extra = ValidateOnly{}
}

// ValidateOnly marks (as hcl.Diagnostic.Extra) a warning about a choice
// that may be deliberate: `rewind validate` shows it, the commands that
// load the workspace to work on it do not repeat it on every run.
type ValidateOnly struct{}

// IsValidateOnly reports whether d is a ValidateOnly warning.
func IsValidateOnly(d *hcl.Diagnostic) bool {
	_, ok := d.Extra.(ValidateOnly)
	return ok && d.Severity == hcl.DiagWarning
}

func quote(s string) string { return `"` + strings.ReplaceAll(s, `"`, `\"`) + `"` }

func fileDir(r hcl.Range) string {
	dir := filepath.Dir(r.Filename)
	if abs, err := filepath.Abs(dir); err == nil {
		return abs
	}
	return dir
}

func (l *loader) decodePipelines(blocks []*hcl.Block) {
	byName := map[string]*Pipeline{}
	labels := map[string]bool{} // label -> the block sets for_each
	var decls []*pipelineDecl
	for _, b := range blocks {
		label := b.Labels[0]
		if !l.checkName("pipeline", label, b) {
			continue
		}
		content, diags := b.Body.Content(pipelineSchema)
		l.diags = append(l.diags, diags...)
		forEach := content.Attributes["for_each"]
		if _, dup := labels[label]; !dup {
			labels[label] = forEach != nil
		}
		var refs []depRef
		if attr := content.Attributes["consumes"]; attr != nil {
			refs = l.decodeConsumes(attr)
		}
		for _, inst := range l.expand(label, forEach, l.ctx, scope{}) {
			if prev := byName[inst.name]; prev != nil {
				l.errorf(b.DefRange, "Duplicate pipeline", "A pipeline named %q was already declared at %s. Pipeline names must be unique.", inst.name, prev.DeclRange)
				continue
			}
			p := l.decodePipeline(b, content, inst, forEach != nil)
			byName[p.Name] = p
			l.ws.Pipelines = append(l.ws.Pipelines, p)
			decls = append(decls, &pipelineDecl{p: p, multi: forEach != nil, refs: refs, ranges: map[string]hcl.Range{}})
		}
	}
	sort.Slice(l.ws.Pipelines, func(i, j int) bool { return l.ws.Pipelines[i].Name < l.ws.Pipelines[j].Name })
	sort.Slice(decls, func(i, j int) bool { return decls[i].p.Name < decls[j].p.Name })
	l.resolveConsumes(decls, labels)
	for _, p := range l.ws.Pipelines {
		p.Hash = l.hashPipeline(p)
	}
}

func (l *loader) decodePipeline(b *hcl.Block, content *hcl.BodyContent, inst instance, each bool) *Pipeline {
	p := &Pipeline{
		Name:           inst.name,
		Label:          b.Labels[0],
		Key:            inst.key,
		Timezone:       time.UTC,
		Catchup:        true,
		MaxActiveRuns:  DefaultMaxActiveRuns,
		MaxActiveTasks: DefaultMaxActiveTasks,
		Params:         map[string]string{},
		Dir:            fileDir(b.DefRange),
		DeclRange:      b.DefRange,
	}
	ctx := inst.ctx
	sc := scope{each: each}
	attrs := content.Attributes

	if attr := attrs["timezone"]; attr != nil {
		if s, ok := l.stringAttr(attr, ctx, sc, false); ok {
			loc, err := time.LoadLocation(s)
			switch {
			case s == "" || s == "Local":
				l.errorf(attr.Expr.Range(), "Unknown timezone", "timezone must name an IANA zone such as \"UTC\" or \"Europe/Rome\", not %q.", s)
			case err != nil:
				l.errorf(attr.Expr.Range(), "Unknown timezone", "%q is not an IANA timezone name (such as \"UTC\", \"Europe/Rome\" or \"America/New_York\").", s)
			default:
				p.Timezone = loc
			}
		}
	}

	if attr := attrs["start_date"]; attr == nil {
		l.errorf(b.DefRange, "Missing required argument", "The pipeline %q has no start_date: the first data interval starts at its first schedule tick at or after start_date.", p.Name)
	} else if s, ok := l.stringAttr(attr, ctx, sc, true); ok {
		if t, err := parseDate(s, p.Timezone); err != nil {
			l.errorf(attr.Expr.Range(), "Invalid start_date", "%s.", capitalize(err.Error()))
		} else {
			p.StartDate = t
		}
	}
	endDay := "" // end_date as a date without a time
	if attr := attrs["end_date"]; attr != nil {
		if s, ok := l.stringAttr(attr, ctx, sc, false); ok {
			if _, err := time.Parse(dateOnly, s); err == nil {
				endDay = s
			}
			t, err := parseDate(s, p.Timezone)
			switch {
			case err != nil:
				l.errorf(attr.Expr.Range(), "Invalid end_date", "%s.", capitalize(err.Error()))
			case !p.StartDate.IsZero() && t.Before(p.StartDate):
				l.errorf(attr.Expr.Range(), "end_date before start_date", "end_date (%s) is before start_date (%s).", t.Format(time.RFC3339), p.StartDate.Format(time.RFC3339))
			default:
				p.EndDate = t
			}
		}
	}

	if attr := attrs["schedule"]; attr == nil {
		l.errorf(b.DefRange, "Missing required argument", "The pipeline %q has no schedule: set a 5-field cron expression or a preset such as \"@daily\".", p.Name)
	} else if s, ok := l.stringAttr(attr, ctx, sc, true); ok {
		if msg := checkSchedule(s, p.StartDate); msg != "" {
			l.errorf(attr.Expr.Range(), "Invalid schedule", "%s", msg)
		} else {
			p.Schedule = strings.TrimSpace(s)
			if endDay != "" && !p.EndDate.IsZero() {
				l.warnEndDay(attrs["end_date"], p, endDay)
			}
		}
	}

	if v, ok := l.boolAttr(attrs["catchup"], ctx, sc); ok {
		p.Catchup = v
	}
	if attr := attrs["deadline"]; attr != nil {
		if d, ok := l.durationAttr(attr, ctx, sc); ok {
			if d <= 0 {
				l.errorf(attr.Expr.Range(), "Invalid deadline", "deadline must be more than 0 (e.g. \"6h\": a run not succeeded 6 hours after the end of its data interval raises deadline_missed); leave it out for no deadline.")
			} else {
				p.Deadline = d
			}
		}
	}
	if attr := attrs["notify"]; attr != nil {
		exprs, diags := hcl.ExprList(attr.Expr)
		if diags.HasErrors() {
			l.errorf(attr.Expr.Range(), "Invalid notify", "notify must be a list of references to notify blocks, like [notify.oncall].")
		} else {
			p.notifyRefs = l.decodeRefs(exprs, refSyntax{root: "notify", attr: "notify", holds: "notify blocks", example: "notify.oncall", keyed: "notify.oncall"})
		}
	}
	if attr := attrs["reprocess_lookback"]; attr != nil {
		if d, ok := l.durationAttr(attr, ctx, sc); ok {
			if d <= 0 {
				l.errorf(attr.Expr.Range(), "Invalid reprocess_lookback", "reprocess_lookback must be more than 0 (e.g. \"2d\"); leave it out to re-run nothing.")
			} else {
				p.ReprocessLookback = d
			}
		}
	}
	if n, ok := l.intAttr(attrs["max_active_runs"], ctx, sc, 1, math.MaxInt32, "at least 1"); ok {
		p.MaxActiveRuns = n
	}
	if n, ok := l.intAttr(attrs["max_active_tasks"], ctx, sc, 1, math.MaxInt32, "at least 1"); ok {
		p.MaxActiveTasks = n
	}
	if attr := attrs["default_pool"]; attr != nil {
		if s, ok := l.stringAttr(attr, ctx, sc, false); ok {
			if l.ws.Pools[s] == nil {
				l.errorf(attr.Expr.Range(), "Unknown pool", "No pool named %q is declared. %s", s, l.knownPools())
			} else {
				p.DefaultPool = s
			}
		}
	}
	if s, ok := l.stringAttr(attrs["description"], ctx, sc, false); ok {
		p.Description = s
	}
	if tags, _, ok := l.stringList(attrs["tags"], ctx, sc); ok {
		p.Tags = tags
	}
	if attr := attrs["params"]; attr != nil {
		if params, ok := l.stringMap(attr, ctx, sc); ok {
			for _, k := range sortedNames(params) {
				if !envName.MatchString(k) {
					l.errorf(attr.Expr.Range(), "Invalid params", "The param name %q cannot name the environment variable REWIND_PARAM_%s: use letters, digits and underscores, starting with a letter or underscore.", k, k)
					delete(params, k)
				}
			}
			p.Params = params
		}
	}

	var skewBlock, backfillBlock *hcl.Block
	var taskBlocks, requiresBlocks, outputBlocks []*hcl.Block
	for _, blk := range content.Blocks {
		switch blk.Type {
		case "skew":
			if skewBlock != nil {
				l.errorf(blk.DefRange, "Duplicate skew block", "The pipeline %q already has a skew block at %s; a pipeline has at most one.", p.Name, skewBlock.DefRange)
				continue
			}
			skewBlock = blk
		case "backfill":
			if backfillBlock != nil {
				l.errorf(blk.DefRange, "Duplicate backfill block", "The pipeline %q already has a backfill block at %s; a pipeline has at most one.", p.Name, backfillBlock.DefRange)
				continue
			}
			backfillBlock = blk
			l.decodeBackfill(blk, p, ctx, sc)
		case "task":
			taskBlocks = append(taskBlocks, blk)
		case "requires":
			requiresBlocks = append(requiresBlocks, blk)
		case "output":
			outputBlocks = append(outputBlocks, blk)
		}
	}
	if skewBlock != nil {
		p.Skew = l.decodeSkew(skewBlock, p, ctx, sc)
	}
	l.decodeTasks(p, b, taskBlocks, ctx, sc)
	l.decodeRequires(p, requiresBlocks, ctx, sc)
	l.decodeOutputs(p, outputBlocks, ctx, sc)
	return p
}
