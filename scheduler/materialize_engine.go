package scheduler

import (
	"context"
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
	err := e.batch(ctx, func() error {
		for _, def := range defs {
			sp, err := e.st.UpsertPipeline(ctx, store.UpsertPipelineParams{Name: def.Name, Hash: def.Hash, Now: time.Now()})
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
		n, err := Materialize(ctx, e.st, MaterializeParams{
			Pipeline: def, Catchup: def.Catchup || e.o.Catchup, Now: now, Cursor: cursors[def.Name],
		})
		e.summary.Created += n
		if err != nil {
			return err
		}
	}
	return nil
}

// refresh materializes the intervals that became due since the execution
// started, and queues their runs. With the cursor it reads and writes only
// what is new.
func (e *engine) refresh(ctx context.Context) error {
	now := e.o.Clock()
	created := 0
	for _, p := range e.cache.order {
		sp, err := e.st.GetPipeline(ctx, p.def.Name)
		if err != nil {
			return err
		}
		if p.paused = sp.Paused; p.paused {
			continue
		}
		n, err := Materialize(ctx, e.st, MaterializeParams{
			Pipeline: p.def, Catchup: p.def.Catchup || e.o.Catchup, Now: now, Cursor: sp.CatchupThrough,
		})
		if err != nil {
			return err
		}
		created += n
	}
	if created > 0 {
		e.summary.Created += created
		e.cache.stale = true
	}
	return nil
}
