package backfill

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/rewind-dev/rewind/dsl"
	"github.com/rewind-dev/rewind/lake"
	"github.com/rewind-dev/rewind/lease"
	"github.com/rewind-dev/rewind/scheduler"
	"github.com/rewind-dev/rewind/store"
)

// RollbackOptions configure `rewind backfill rollback`.
type RollbackOptions struct {
	Store     store.Store
	Workspace *dsl.Workspace
	ID        string
	Home      string
	Now       time.Time // the clock of the consumers' rebuild (zero: the wall clock)
	Grace     time.Duration
	Log       *slog.Logger
	// EnsureAgent is scheduler.Options.EnsureAgent for the rebuild.
	EnsureAgent func() error
	// Holder overrides the identity of this process as the owner.
	Holder *lease.Holder
	// OnStart is told once, when the rollback holds the backfill and its
	// checks passed: from then on it changes the outputs and the state.
	OnStart func()
}

// RollbackResult is what a rollback did.
type RollbackResult struct {
	Dates   int      // the window's dates restored on main
	Rebuilt []string // the consumers cleared and run again for the window
}

// Cutover says what main of the outputs of backfill id's pipeline holds of
// it: held, main of some output holds its cutover (its pre_backfill_ tag
// exists and main has no rollback of it since); rolledBack, main of some
// output holds its rollback.
func Cutover(ctx context.Context, lakes *scheduler.Lakes, def *dsl.Pipeline, id string) (held, rolledBack bool, err error) {
	for _, o := range def.Outputs {
		lk, err := lakes.Get(ctx, o.Catalog)
		if err != nil {
			return false, false, err
		}
		refs, err := lk.Refs(ctx, o.Table)
		if errors.Is(err, lake.ErrNoSuchTable) {
			continue
		}
		if err != nil {
			return false, false, err
		}
		back, err := lk.Holds(ctx, o.Table, lake.MainBranch, "rollback:"+id)
		if err != nil {
			return false, false, err
		}
		_, tagged := refs[TagName(id)]
		held = held || tagged && !back
		rolledBack = rolledBack || back
	}
	return held, rolledBack, nil
}

// RollbackBackfill restores, on main of each output of a backfill's
// pipeline, the partitions of the dates it ran (its plan's dates that are
// not skipped) as they were before its cutover (from the pre_backfill_<ID>
// tag); the other partitions stay: those outside the window, the nightly
// runs committed since the cutover, and the dates its plan skipped (held by
// another backfill, which may have cut them over since).
//
// Whether it can is decided by what main holds (Cutover), whatever the
// backfill's state: a backfill that failed or was stopped after its
// cutover is rolled back like one that succeeded. Like apply, it holds
// the backfill's owner lease, pauses the consumers first, and rebuilds
// them for the window once main is restored; each step is recorded, so a
// rollback that died is finished by running it again. The backfill then
// shows rolled_back.
func RollbackBackfill(ctx context.Context, o RollbackOptions) (*RollbackResult, error) {
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.Home == "" {
		o.Home = ".rewind"
	}
	b, err := o.Store.GetBackfill(ctx, o.ID)
	if err != nil {
		return nil, err
	}
	def := o.Workspace.Pipeline(b.Pipeline)
	if def == nil {
		return nil, fmt.Errorf("backfill %s: pipeline %s is not in the workspace", o.ID, b.Pipeline)
	}
	if len(def.Outputs) == 0 {
		return nil, fmt.Errorf("%w: pipeline %s has no outputs: nothing to roll back", ErrBackfillState, b.Pipeline)
	}
	ctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	own, err := own(ctx, o.Store, b.ID, holderOf(o.Holder), func(err error) { stop(err) })
	if err != nil {
		return nil, err
	}
	defer own.release()
	if b, err = o.Store.GetBackfill(ctx, o.ID); err != nil {
		return nil, err
	}
	var plan Plan
	if err := json.Unmarshal([]byte(b.Plan), &plan); err != nil {
		return nil, fmt.Errorf("backfill %s: its plan: %w", o.ID, err)
	}
	a := &applier{o: ApplyOptions{Store: o.Store, Workspace: o.Workspace, Home: o.Home, Now: o.Now, Grace: o.Grace, Log: o.Log, EnsureAgent: o.EnsureAgent},
		st: own.st, b: b, plan: plan, def: def, res: &BackfillResult{ID: b.ID}, lakes: scheduler.NewLakes(o.Workspace)}
	defer a.lakes.Close()
	dates := a.selected()
	res := &RollbackResult{Dates: len(dates)}
	if !b.RolledBack {
		held, back, err := Cutover(ctx, a.lakes, def, b.ID)
		if err != nil {
			return nil, err
		}
		// back without the flag: a rollback that died after its commits.
		if !held && !back {
			return nil, fmt.Errorf("%w: backfill %s is %s at %s and main holds no cutover of it: nothing to roll back", ErrBackfillState, b.ID, b.State, b.Phase)
		}
		if b.State == store.BackfillRunning && !PastCutover(b.Phase) {
			return nil, fmt.Errorf("%w: backfill %s is running at %s: its cutover is not done", ErrBackfillState, b.ID, b.Phase)
		}
		// The consumers built from the version rolled back are frozen
		// until they are rebuilt from the restored one.
		a.plan.Downstream = slices.DeleteFunc(slices.Clone(plan.Downstream), func(c string) bool { return o.Workspace.Pipeline(c) == nil })
		if o.OnStart != nil {
			o.OnStart()
		}
		if err := a.pause(ctx); err != nil {
			return nil, err
		}
		for _, out := range def.Outputs {
			lk, err := a.lakes.Get(ctx, out.Catalog)
			if err != nil {
				return nil, err
			}
			refs, err := lk.Refs(ctx, out.Table)
			if errors.Is(err, lake.ErrNoSuchTable) {
				continue
			}
			if err != nil {
				return nil, err
			}
			if _, tagged := refs[TagName(b.ID)]; !tagged {
				continue // this output was never cut over
			}
			window, err := WindowValues(out, dates)
			if err != nil {
				return nil, err
			}
			if _, err := lk.ReplaceWindow(context.WithoutCancel(ctx), out.Table, lake.MainBranch, TagName(b.ID), window, "",
				"rollback:"+b.ID, map[string]string{"rewind.backfill": b.ID, "rewind.kind": "rollback"}); err != nil {
				return nil, fmt.Errorf("rollback of %s: %w", out.Table, err)
			}
		}
		// A running backfill (whose apply died after the cutover) ends
		// with its rollback: nothing of it is left to resume.
		state := b.State
		if state == store.BackfillRunning {
			state = store.BackfillFailed
		}
		detail := fmt.Sprintf("rolled back: the %d dates of the window are on main as at %s; later dates kept", len(dates), TagName(b.ID))
		yes := true
		if err := a.update(ctx, store.UpdateBackfillParams{State: state, Phase: PhaseRebuild, Detail: &detail, RolledBack: &yes}); err != nil {
			return nil, err
		}
	} else if a.b.Phase == PhaseDone {
		return nil, fmt.Errorf("%w: backfill %s was rolled back: main holds no cutover of it", ErrBackfillState, b.ID)
	} else if o.OnStart != nil {
		o.OnStart()
	}
	if err := a.rebuild(ctx); err != nil {
		return nil, err
	}
	res.Rebuilt = a.plan.Rebuilt
	return res, a.update(context.WithoutCancel(ctx), store.UpdateBackfillParams{Phase: PhaseDone})
}
