package dsl

import (
	"fmt"
	"regexp"
	"strconv"

	"github.com/hashicorp/hcl/v2"
)

// BatchUnit is the calendar unit of a backfill batch.
type BatchUnit string

// Batch units.
const (
	BatchHours  BatchUnit = "h"
	BatchDays   BatchUnit = "d"
	BatchWeeks  BatchUnit = "w"
	BatchMonths BatchUnit = "mo"
)

// Batch is how many consecutive intervals one backfill run covers: the
// intervals of N hours, days, weeks or months (`--batch 1d`, or the
// pipeline's `backfill { batch = "1d" }`). Zero N: no batches.
type Batch struct {
	N    int
	Unit BatchUnit
}

func (b Batch) String() string {
	if b.N == 0 {
		return ""
	}
	return strconv.Itoa(b.N) + string(b.Unit)
}

var batchRE = regexp.MustCompile(`^([0-9]+)(h|d|w|mo)$`)

// ParseBatch reads a batch such as "6h", "1d", "1w" or "1mo".
func ParseBatch(s string) (Batch, error) {
	m := batchRE.FindStringSubmatch(s)
	if m == nil {
		return Batch{}, fmt.Errorf("batch %q: want a count and a unit, h (hours), d (days), w (weeks) or mo (months), such as 1d or 1mo", s)
	}
	n, err := strconv.Atoi(m[1])
	if err != nil || n < 1 || n > 100000 {
		return Batch{}, fmt.Errorf("batch %q: the count is from 1 to 100000", s)
	}
	return Batch{N: n, Unit: BatchUnit(m[2])}, nil
}

var backfillSchema = &hcl.BodySchema{Attributes: []hcl.AttributeSchema{{Name: "batch"}}}

// decodeBackfill reads a pipeline's backfill block: the defaults of its
// backfills.
func (l *loader) decodeBackfill(b *hcl.Block, p *Pipeline, ctx *hcl.EvalContext, sc scope) {
	content, diags := b.Body.Content(backfillSchema)
	l.diags = append(l.diags, diags...)
	attr := content.Attributes["batch"]
	if attr == nil {
		return
	}
	s, ok := l.stringAttr(attr, ctx, sc, false)
	if !ok {
		return
	}
	batch, err := ParseBatch(s)
	if err != nil {
		l.errorf(attr.Expr.Range(), "Invalid batch", "The %s. One backfill run then covers the intervals of that span.", err)
		return
	}
	p.BackfillBatch = batch
}
