package backfill

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/rewind-dev/rewind/dsl"
	"github.com/rewind-dev/rewind/lake"
	"github.com/rewind-dev/rewind/scheduler"
	"github.com/rewind-dev/rewind/store"
)

// ErrValidation stops a backfill whose outputs changed more than their
// validate rules allow: main is left untouched, the branch kept.
var ErrValidation = errors.New("validation failed")

// validate compares each output's branch with main for every date of the
// backfill (write-audit-publish): main stays untouched until cutover.
func (a *applier) validate(ctx context.Context) error {
	if err := a.requireComplete(ctx, "validation"); errors.Is(err, errNothingSelected) {
		return nil // no date: nothing to compare or cut over
	} else if err != nil {
		return err
	}
	if len(a.def.Outputs) == 0 {
		return nil
	}
	cs, err := Corrections(ctx, a.lakes, a.def, "main", scheduler.BranchName(a.b.ID), a.selected())
	if err != nil {
		return err
	}
	a.res.Corrections = cs
	var over []string
	for _, c := range cs {
		for _, r := range c.FailedRules {
			over = append(over, fmt.Sprintf("%s %s: rule %s is false", c.Output, c.DS, r))
		}
		if c.Limit > 0 && c.OldRows > 0 && c.Change > c.Limit {
			over = append(over, fmt.Sprintf("%s %s %s: %.2f -> %.2f (%.2f%% > %.2f%%)", c.Output, c.DS, c.Column, c.Old, c.New, 100*c.Change, 100*c.Limit))
		}
	}
	if len(over) > 0 && !a.o.Force {
		return fmt.Errorf("%w: %d changes over their rules; main is untouched, branch %s kept (apply --resume %s --force cuts over anyway):\n  %s",
			ErrValidation, len(over), scheduler.BranchName(a.b.ID), a.b.ID, strings.Join(over, "\n  "))
	}
	return nil
}

// cutover makes the window's partitions of each output's main the
// backfill branch's, in one catalog commit per output that tags the old main
// pre_backfill_<ID>. It works on today's main: every other partition keeps
// what main gained meanwhile (the nightly runs). A cutover repeated after a
// crash finds its commit in main's history and does nothing.
func (a *applier) cutover(ctx context.Context) error {
	if err := a.requireComplete(ctx, "the cutover"); errors.Is(err, errNothingSelected) {
		return nil // no date: nothing to compare or cut over
	} else if err != nil {
		return err
	}
	dates := a.selected()
	for _, o := range a.def.Outputs {
		lk, err := a.lakes.Get(ctx, o.Catalog)
		if err != nil {
			return err
		}
		window, err := WindowValues(o, dates)
		if err != nil {
			return err
		}
		if _, err := lk.ReplaceWindow(ctx, o.Table, lake.MainBranch, scheduler.BranchName(a.b.ID), window, TagName(a.b.ID),
			"cutover:"+a.b.ID, map[string]string{"rewind.backfill": a.b.ID, "rewind.kind": "cutover"}); err != nil {
			return fmt.Errorf("cutover of %s: %w", o.Table, err)
		}
	}
	return nil
}

// RollbackBackfill restores, on main of each output of a backfill's
// pipeline, the partitions of the dates it ran (its plan's dates that are
// not skipped) as they were before its cutover (from the pre_backfill_<ID>
// tag); the other partitions stay: those outside the window, the nightly
// runs committed since the cutover, and the dates its plan skipped (held by
// another backfill, which may have cut them over since).
func RollbackBackfill(ctx context.Context, st store.Store, ws *dsl.Workspace, id string) error {
	b, err := st.GetBackfill(ctx, id)
	if err != nil {
		return err
	}
	def := ws.Pipeline(b.Pipeline)
	if def == nil {
		return fmt.Errorf("backfill %s: pipeline %s is not in the workspace", id, b.Pipeline)
	}
	if len(def.Outputs) == 0 {
		return fmt.Errorf("pipeline %s has no outputs: nothing to roll back", b.Pipeline)
	}
	var plan Plan
	if err := json.Unmarshal([]byte(b.Plan), &plan); err != nil {
		return fmt.Errorf("backfill %s: its plan: %w", id, err)
	}
	var dates []PlanDate
	for _, d := range plan.Dates {
		if d.Action != "skip" {
			dates = append(dates, d)
		}
	}
	if b.State != store.BackfillSuccess {
		return fmt.Errorf("%w: backfill %s is %s: it never cut over, main holds nothing of it to roll back", ErrBackfillState, id, b.State)
	}
	if len(dates) == 0 {
		return fmt.Errorf("%w: backfill %s ran no date: nothing to roll back", ErrBackfillState, id)
	}
	lakes := scheduler.NewLakes(ws)
	defer lakes.Close()
	for _, o := range def.Outputs {
		lk, err := lakes.Get(ctx, o.Catalog)
		if err != nil {
			return err
		}
		window, err := WindowValues(o, dates)
		if err != nil {
			return err
		}
		if _, err := lk.ReplaceWindow(ctx, o.Table, lake.MainBranch, TagName(id), window, "",
			"rollback:"+id, map[string]string{"rewind.backfill": id, "rewind.kind": "rollback"}); err != nil {
			return fmt.Errorf("rollback of %s: %w", o.Table, err)
		}
	}
	detail := fmt.Sprintf("rolled back: the %d dates of the window are on main as at %s; later dates kept", len(dates), TagName(id))
	yes := true
	return st.UpdateBackfill(ctx, store.UpdateBackfillParams{ID: id, Detail: &detail, RolledBack: &yes, Now: time.Now()})
}
