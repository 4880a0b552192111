package dsl

import (
	"math/big"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/zclconf/go-cty/cty"
)

// DefaultHotFactor is the probe threshold when hot_factor is unset: a date
// is hot when its measured size is above 3 times the median of its
// reference dates.
const DefaultHotFactor = 3.0

// DefaultProbeWindow is probe_window when unset: a date's probe is compared
// with the median of the due dates within 14 days of it, before and after.
const DefaultProbeWindow = 14 * 24 * time.Hour

// DefaultHistoryMinDuration is history_min_duration when unset: a try
// shorter than a minute is never hot by history, however it compares with
// the task's median (32 ms against a median of 6 ms is noise, not skew).
const DefaultHistoryMinDuration = time.Minute

var skewSchema = &hcl.BodySchema{
	Attributes: []hcl.AttributeSchema{
		{Name: "hot_dates"},
		{Name: "hot_when"},
		{Name: "probe"},
		{Name: "hot_factor"},
		{Name: "probe_window"},
		{Name: "pool"},
		{Name: "history"},
		{Name: "history_min_duration"},
	},
}

func (l *loader) decodeSkew(b *hcl.Block, p *Pipeline, ctx *hcl.EvalContext, sc scope) *Skew {
	s := &Skew{
		HotFactor:          DefaultHotFactor,
		ProbeWindow:        DefaultProbeWindow,
		History:            true,
		HistoryMinDuration: DefaultHistoryMinDuration,
		DeclRange:          b.DefRange,
		ctx:                ctx,
		dir:                p.Dir,
		loc:                p.Timezone,
		pipeline:           p.Name,
		pass:               l.ws.Environment.Pass,
	}
	content, diags := b.Body.Content(skewSchema)
	l.diags = append(l.diags, diags...)
	attrs := content.Attributes
	runScope := sc
	runScope.run = true

	if attr := attrs["hot_dates"]; attr != nil {
		dates, ranges, ok := l.stringList(attr, ctx, sc)
		if ok {
			for i, d := range dates {
				if _, err := time.Parse(dateOnly, d); err != nil {
					l.errorf(ranges[i], "Invalid hot date", "%q is not a date: hot_dates holds logical dates as YYYY-MM-DD.", d)
					continue
				}
				s.HotDates = append(s.HotDates, d)
			}
		}
	}
	if attr := attrs["hot_when"]; attr != nil {
		v := l.eval(attr.Expr, ctx, runScope)
		if v.IsKnown() && v.IsNull() {
			l.errorf(attr.Expr.Range(), "Invalid hot_when", "hot_when must be a condition over run.*, not null.")
		} else if _, ok := l.convert(attr, v, cty.Bool, false); ok || !v.IsWhollyKnown() {
			s.hotWhen = attr.Expr
			s.HotWhenText = sourceText(l.ws.Files, attr.Expr.Range())
		}
	}
	if attr := attrs["probe"]; attr != nil {
		v := l.eval(attr.Expr, ctx, runScope)
		l.checkCommandType(attr, v)
		s.probe = attr.Expr
		s.ProbeText = sourceText(l.ws.Files, attr.Expr.Range())
	}
	if attr := attrs["hot_factor"]; attr != nil {
		if f, ok := l.numberAttr(attr, ctx, sc); ok {
			if f.Cmp(big.NewFloat(1)) <= 0 || f.IsInf() {
				l.errorf(attr.Expr.Range(), "Invalid hot_factor", "hot_factor must be a number greater than 1, not %s.", f.Text('g', -1))
			} else {
				s.HotFactor, _ = f.Float64()
			}
		}
	}
	if attr := attrs["probe_window"]; attr != nil {
		if d, ok := l.durationAttr(attr, ctx, sc); ok {
			if d <= 0 {
				l.errorf(attr.Expr.Range(), "Invalid probe_window", "probe_window must be more than 0 (e.g. \"14d\"): a date's probe is compared with the median of the dates within it.")
			} else {
				s.ProbeWindow = d
			}
		}
		if attrs["probe"] == nil {
			l.errorf(attr.Expr.Range(), "probe_window without probe", "probe_window sets the dates a probe's value is compared with; this skew block has no probe.")
		}
	}
	if v, ok := l.boolAttr(attrs["history"], ctx, sc); ok {
		s.History = v
	}
	if attr := attrs["history_min_duration"]; attr != nil {
		if d, ok := l.durationAttr(attr, ctx, sc); ok {
			s.HistoryMinDuration = d
		}
		if !s.History {
			l.errorf(attr.Expr.Range(), "history_min_duration without history", "history_min_duration is the shortest try the history detector counts; this skew block turns history off (history = false).")
		}
	}
	if attr := attrs["pool"]; attr == nil {
		l.errorf(b.DefRange, "Missing required argument", "The skew block has no pool: name the pool that hot dates run in.")
	} else if name, ok := l.stringAttr(attr, ctx, sc, true); ok {
		if l.ws.Pools[name] == nil {
			l.errorf(attr.Expr.Range(), "Unknown pool", "No pool named %q is declared. %s", name, l.knownPools())
		} else {
			s.Pool = name
		}
	}
	return s
}
