package store

import (
	"context"
	"errors"
	"fmt"
)

// The batch forms of the scheduler's per-item transitions (AdmitRuns,
// FinishRuns, StartAttempts, FinishAttempts): one write transaction, in
// which the dialect applies every item (PostgreSQL: a few set-wise
// statements over unnested arrays; SQLite: the same guarded statements item
// by item) and reports which items its guards took. An item the guards
// refused gets the error its single operation returns, ErrConflict or
// ErrNotFound (read after the statements, for those only); nothing of it
// was written. An item whose id comes again later in the list is
// ErrConflict, as a second single call would be. The single operations are
// the batch of one. Since a refusal writes nothing, a batch inside InTx
// needs no savepoint of its own (writeSet): a database error in it fails
// the whole transaction instead.

// one is what the single operation of a batch returns for its one item.
func one(errs []error, err error) error {
	if err != nil {
		return err
	}
	return errs[0]
}

// refused fills the errors of the items the statements did not take (ok
// false): ErrConflict for a repeated id, else ErrNotFound or ErrConflict as
// the row says.
func refused(ctx context.Context, c conn, table, op string, ids []int64, ok []bool) ([]error, error) {
	errs := make([]error, len(ids))
	seen := make(map[int64]bool, len(ids))
	for i, id := range ids {
		first := !seen[id]
		seen[id] = true
		switch {
		case ok[i] && first:
			continue
		case !first:
			errs[i] = fmt.Errorf("store: %s %d: listed twice: %w", op, id, ErrConflict)
		default:
			err := missingOr(ctx, c, table, id)
			if !errors.Is(err, ErrConflict) && !errors.Is(err, ErrNotFound) {
				return nil, fmt.Errorf("store: %s %d: %w", op, id, err)
			}
			errs[i] = fmt.Errorf("store: %s %d: %w", op, id, err)
		}
	}
	return errs, nil
}

// firsts marks, for each item, whether its id is the first of its kind in
// the list (the dialects apply only those).
func firsts(ids []int64) []bool {
	out := make([]bool, len(ids))
	seen := make(map[int64]bool, len(ids))
	for i, id := range ids {
		out[i] = !seen[id]
		seen[id] = true
	}
	return out
}

// applyBatch runs a batch form in one write transaction: apply applies the
// items whose id is the first of its kind and reports which its guards took;
// the others get refused's errors. what names the batch in a database
// error, op an item in its own error, table the items' table.
func (s *sqlStore) applyBatch(ctx context.Context, what, table, op string, ids []int64, apply func(c conn, first []bool) ([]bool, error)) ([]error, error) {
	var errs []error
	err := s.writeSet(ctx, func(c conn) error {
		ok, err := apply(c, firsts(ids))
		if err != nil {
			return fmt.Errorf("store: %s: %w", what, err)
		}
		errs, err = refused(ctx, c, table, op, ids, ok)
		return err
	})
	return errs, err
}

// AdmitRuns admits many runs at once (see AdmitRun).
func (s *sqlStore) AdmitRuns(ctx context.Context, ps []AdmitRunParams) ([]error, error) {
	if len(ps) == 0 {
		return nil, nil
	}
	ids := make([]int64, len(ps))
	for i, p := range ps {
		ids[i] = p.RunID
	}
	return s.applyBatch(ctx, "admit runs", "runs", "admit run", ids, func(c conn, apply []bool) ([]bool, error) {
		return s.d.steps.admitRuns(ctx, c, ps, apply)
	})
}

// AdmitRun moves a run queued -> running.
func (s *sqlStore) AdmitRun(ctx context.Context, p AdmitRunParams) error {
	return one(s.AdmitRuns(ctx, []AdmitRunParams{p}))
}

// FinishRuns finishes many runs at once (see FinishRun).
func (s *sqlStore) FinishRuns(ctx context.Context, ps []FinishRunParams) ([]error, error) {
	if len(ps) == 0 {
		return nil, nil
	}
	ids := make([]int64, len(ps))
	for i, p := range ps {
		if p.State != RunSuccess && p.State != RunFailed {
			return nil, fmt.Errorf("store: finish run %d: state %q is not success or failed", p.RunID, p.State)
		}
		ids[i] = p.RunID
	}
	return s.applyBatch(ctx, "finish runs", "runs", "finish run", ids, func(c conn, apply []bool) ([]bool, error) {
		return s.d.steps.finishRuns(ctx, c, ps, apply)
	})
}

// FinishRun moves a run queued|running -> success|failed when its task
// instances say so (finishRunSQL, after locking them); ErrConflict
// otherwise.
func (s *sqlStore) FinishRun(ctx context.Context, p FinishRunParams) error {
	return one(s.FinishRuns(ctx, []FinishRunParams{p}))
}

// StartAttempts records the processes of many attempts at once (see
// StartAttempt).
func (s *sqlStore) StartAttempts(ctx context.Context, ps []StartAttemptParams) ([]error, error) {
	if len(ps) == 0 {
		return nil, nil
	}
	ids := make([]int64, len(ps))
	for i, p := range ps {
		ids[i] = p.AttemptID
	}
	return s.applyBatch(ctx, "start attempts", "attempts", "start attempt", ids, func(c conn, apply []bool) ([]bool, error) {
		return s.d.steps.startAttempts(ctx, c, ps, apply)
	})
}

// StartAttempt records the attempt's process in one guarded statement: the
// attempt is running without a pid yet and its task instance is running on
// the attempt's try. The task instance's state does not change.
func (s *sqlStore) StartAttempt(ctx context.Context, p StartAttemptParams) error {
	return one(s.StartAttempts(ctx, []StartAttemptParams{p}))
}

// FinishAttempts records the outcomes of many attempts at once (see
// FinishAttempt).
func (s *sqlStore) FinishAttempts(ctx context.Context, ps []FinishAttemptParams) ([]error, error) {
	if len(ps) == 0 {
		return nil, nil
	}
	ids := make([]int64, len(ps))
	for i, p := range ps {
		switch p.State {
		case AttemptSuccess, AttemptFailed, AttemptOOM, AttemptSkipped, AttemptInterrupted, AttemptLost:
		default:
			return nil, fmt.Errorf("store: finish attempt %d: %q is not an outcome", p.AttemptID, p.State)
		}
		switch p.TaskState {
		case TaskQueued, TaskRunning:
			return nil, fmt.Errorf("store: finish attempt %d: task state %q is not after an attempt", p.AttemptID, p.TaskState)
		}
		if !validTaskState(p.TaskState) {
			return nil, fmt.Errorf("store: finish attempt %d: unknown task state %q", p.AttemptID, p.TaskState)
		}
		ids[i] = p.AttemptID
	}
	return s.applyBatch(ctx, "finish attempts", "attempts", "finish attempt", ids, func(c conn, apply []bool) ([]bool, error) {
		return s.d.steps.finishAttempts(ctx, c, ps, apply)
	})
}

// FinishAttempt records an attempt's outcome (guarded: only a running attempt
// gets one, else ErrConflict) and moves its task instance to p.TaskState if
// the task instance is still running on this attempt's try. The outcome of a
// process is recorded even when the task instance was moved on meanwhile (by
// SetTaskStates): it is a fact about the process, and leaving the attempt
// running would make it look alive forever.
func (s *sqlStore) FinishAttempt(ctx context.Context, p FinishAttemptParams) error {
	return one(s.FinishAttempts(ctx, []FinishAttemptParams{p}))
}
