package web

import (
	"fmt"
	"github.com/rewind-dev/rewind/backfill"
	"html/template"
	"time"
)

func (s *Server) funcs() template.FuncMap {
	return template.FuncMap{
		"static": func(name string) string { return "/static/" + name + "?v=" + s.assetVersion },
		"bytes":  humanBytes,
		"short":  short,
		"f1":     func(f float64) string { return fmt.Sprintf("%.1f", f) },
		"add":    func(a, b float64) float64 { return a + b },
		"pct": func(p *float64) string {
			if p == nil {
				return "new"
			}
			return fmt.Sprintf("%.2f%%", 100**p)
		},
		"num":      func(f float64) string { return fmt.Sprintf("%.2f", f) },
		"when":     when,
		"initial":  initial,
		"runTitle": func(ds, state, kind string) string { return ds + ": " + state + " (" + kind + ")" },
		"gridBody": gridBody,
		"kindMark": kindMark,
		"runHead":  runHeadTitle,
		"durLevel": durLevel,
		"bar":      barHTML,
		"took":     phaseDuration,
		"runAt":    runAt,
		"barWidth": func(change *float64, limit float64) float64 {
			// bar of a change, on a scale where the larger of 2 x limit
			// and 100 % fills the width
			full := max(2*limit, 1.0)
			if change == nil {
				return 300
			}
			return min(*change/full, 1) * 300
		},
		"limitX": func(limit float64) float64 { return min(limit/max(2*limit, 1.0), 1) * 300 },
		"rowY":   func(i int) float64 { return float64(i)*18 + 4 },
		"chartH": func(n int) float64 { return float64(n)*18 + 8 },
		"orDash": orDash,
		"reprocessModes": func() []string {
			return []string{backfill.ReprocessNone, backfill.ReprocessFailed, backfill.ReprocessCompleted}
		},
		"ptr": func(f float64) *float64 { return &f },
	}
}

func orDash(s string) string {
	if s == "" {
		return "–"
	}
	return s
}

// humanBytes writes a size in binary units: 0 B, 812 KiB, 1.5 GiB.
func humanBytes(n int64) string {
	if n <= 0 {
		return "–"
	}
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

// when writes an RFC 3339 time of the JSON documents for the page.
func when(s string) string {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return s
	}
	return t.UTC().Format("2006-01-02 15:04:05Z")
}

// runAt names a run by its logical date (RFC 3339 with the pipeline's
// offset): its day, with its time of day when that is not midnight (a
// sub-daily pipeline's runs).
func runAt(logical string) string {
	t, err := time.Parse(time.RFC3339, logical)
	if err != nil {
		return logical
	}
	if t.Hour() == 0 && t.Minute() == 0 && t.Second() == 0 {
		return t.Format(time.DateOnly)
	}
	return t.Format("2006-01-02 15:04")
}
