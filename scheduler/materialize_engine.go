package scheduler

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/rewind-dev/rewind/dsl"
	"github.com/rewind-dev/rewind/store"
)

// materializeAll records the selected pipelines (one transaction) and gives
// their due intervals runs, from each pipeline's catchup cursor on.
func (e *engine) materializeAll(ctx context.Context, defs []*dsl.Pipeline) error {
	now := e.o.Now
	if now.IsZero() {
		now = e.o.Clock()
	}
	cursors := make(map[string]time.Time, len(defs))
	err := e.base.InTx(ctx, func(tx store.Store) error {
		for _, def := range defs {
			sp, err := tx.UpsertPipeline(ctx, store.UpsertPipelineParams{Name: def.Name, Hash: def.Hash, Now: time.Now()})
			if err != nil {
				return err
			}
			cursors[def.Name] = sp.CatchupThrough
			if sp.Paused {
				e.summary.Paused = append(e.summary.Paused, def.Name)
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	paused := map[string]bool{}
	for _, name := range e.summary.Paused {
		paused[name] = true
	}
	for _, def := range defs {
		if paused[def.Name] {
			continue
		}
		n, err := Materialize(ctx, e.base, MaterializeParams{
			Pipeline: def, Catchup: def.Catchup || e.o.Catchup, Now: now, Cursor: cursors[def.Name],
		})
		e.summary.Created += n
		if err != nil {
			return err
		}
		if err := e.noteSkipped(ctx, def, n, now); err != nil {
			return err
		}
	}
	return nil
}

// noteSkipped records in the summary the due intervals that catchup =
// false passed over in def, when the n runs just created for it include
// its latest due interval's (without catchup, that is the only one).
func (e *engine) noteSkipped(ctx context.Context, def *dsl.Pipeline, n int, now time.Time) error {
	if n == 0 || def.Catchup || e.o.Catchup {
		return nil
	}
	sk, ok, err := skippedBefore(ctx, e.base, def, now)
	if !ok || err != nil {
		return err
	}
	s := e.summary
	s.Skipped = append(s.Skipped, sk)
	slices.SortStableFunc(s.Skipped, func(a, b SkippedIntervals) int { return strings.Compare(a.Pipeline, b.Pipeline) })
	return nil
}

// refresh materializes the intervals that became due since the execution
// started; created says that the cache is to be read again for their runs.
// With the cursor it reads and writes only what is new.
func (e *engine) refresh(ctx context.Context) (created bool, err error) {
	now := e.o.Clock()
	n := 0
	for _, p := range e.cache.order {
		sp, err := e.base.GetPipeline(ctx, p.def.Name)
		if err != nil {
			return false, err
		}
		if p.paused = sp.Paused; p.paused {
			continue
		}
		made, err := Materialize(ctx, e.base, MaterializeParams{
			Pipeline: p.def, Catchup: p.def.Catchup || e.o.Catchup, Now: now, Cursor: sp.CatchupThrough,
		})
		if err != nil {
			return false, err
		}
		if err := e.noteSkipped(ctx, p.def, made, now); err != nil {
			return false, err
		}
		n += made
	}
	e.summary.Created += n
	return n > 0, nil
}
