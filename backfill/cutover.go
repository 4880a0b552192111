package backfill

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/rewind-dev/rewind/lake"
	"github.com/rewind-dev/rewind/scheduler"
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
	over := violations(cs)
	if len(over) > 0 && !a.o.Force {
		return fmt.Errorf("%w: %d changes over their rules; main is untouched, branch %s kept (apply --resume %s --force cuts over anyway; rewind backfill cancel %s gives it up):\n  %s",
			ErrValidation, len(over), scheduler.BranchName(a.b.ID), a.b.ID, a.b.ID, strings.Join(over, "\n  "))
	}
	return nil
}

// violations names each date of each output over its validate rules.
func violations(cs []Correction) []string {
	var over []string
	for _, c := range cs {
		for _, r := range c.FailedRules {
			over = append(over, fmt.Sprintf("%s %s: rule %s is false", c.Output, c.DS, r))
		}
		if c.Limit > 0 && c.OldRows > 0 && c.Change > c.Limit {
			over = append(over, fmt.Sprintf("%s %s %s: %.2f -> %.2f (%.2f%% > %.2f%%)", c.Output, c.DS, c.Column, c.Old, c.New, 100*c.Change, 100*c.Limit))
		}
	}
	return over
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
	// Every output is cut over, or none: a cancel is refused from this
	// phase on, and an interrupt waits for the last output's commit (a
	// kill leaves the rest to apply --resume, which finds the commits
	// done and makes the others).
	ctx = context.WithoutCancel(ctx)
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
