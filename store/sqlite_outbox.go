package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
)

// runCommittableSQL is the guard of RequestCommit on the runs table aliased
// r: the run is queued or running and every task instance of it succeeded
// or was skipped (finishRunSQL's guard for success).
const runCommittableSQL = `r.state IN ('queued', 'running')
	AND NOT EXISTS (SELECT 1 FROM task_instances ti WHERE ti.run_id = r.id
	                AND ti.state NOT IN ('success', 'skipped'))`

const outboxColumns = "o.id, o.run_id, r.pipeline, r.logical_date, o.created_at"

func scanOutbox(row interface{ Scan(...any) error }) (OutboxItem, error) {
	var (
		it      OutboxItem
		logical string
		created sql.NullInt64
	)
	if err := row.Scan(&it.ID, &it.RunID, &it.Pipeline, &logical, &created); err != nil {
		return OutboxItem{}, err
	}
	var err error
	if it.LogicalDate, err = parseDate(logical); err != nil {
		return OutboxItem{}, err
	}
	it.CreatedAt = fromNanos(created)
	return it, nil
}

// RequestCommit inserts the run's outbox row with one guarded INSERT ...
// SELECT (ON CONFLICT on the unique run_id keeps an existing row), then
// reads the row back under the same guard, in one transaction.
func (s *sqliteStore) RequestCommit(ctx context.Context, p RequestCommitParams) (OutboxItem, error) {
	var it OutboxItem
	err := s.write(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `
			INSERT INTO outbox (run_id, created_at)
			SELECT r.id, ? FROM runs r WHERE r.id = ? AND `+runCommittableSQL+`
			ON CONFLICT (run_id) DO NOTHING`,
			nullNanos(p.Now), p.RunID); err != nil {
			return fmt.Errorf("store: request commit of run %d: %w", p.RunID, err)
		}
		var err error
		it, err = scanOutbox(tx.QueryRowContext(ctx, "SELECT "+outboxColumns+`
			FROM outbox o JOIN runs r ON r.id = o.run_id
			WHERE o.run_id = ? AND `+runCommittableSQL, p.RunID))
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("store: request commit of run %d: %w", p.RunID, missingOr(ctx, tx, "runs", p.RunID))
		}
		if err != nil {
			return fmt.Errorf("store: request commit of run %d: %w", p.RunID, err)
		}
		return nil
	})
	if err != nil {
		return OutboxItem{}, err
	}
	return it, nil
}

// ListOutbox lists outbox rows, oldest first.
func (s *sqliteStore) ListOutbox(ctx context.Context, pipelines []string) ([]OutboxItem, error) {
	q := "SELECT " + outboxColumns + " FROM outbox o JOIN runs r ON r.id = o.run_id"
	var args []any
	if len(pipelines) > 0 {
		q += " WHERE r.pipeline IN (" + placeholders(len(pipelines)) + ")"
		for _, name := range pipelines {
			args = append(args, name)
		}
	}
	rows, err := s.rq().QueryContext(ctx, q+" ORDER BY o.created_at, o.id", args...)
	if err != nil {
		return nil, fmt.Errorf("store: list outbox: %w", err)
	}
	defer rows.Close()
	var out []OutboxItem
	for rows.Next() {
		it, err := scanOutbox(rows)
		if err != nil {
			return nil, fmt.Errorf("store: list outbox: %w", err)
		}
		out = append(out, it)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: list outbox: %w", err)
	}
	return out, nil
}

// CompleteCommit deletes the outbox row (DELETE ... RETURNING) and finishes
// its run with finishRunSQL, in one transaction. When the guard refuses, the
// deletion is still committed and ErrConflict returned: the commit's outcome
// no longer decides the run, whose task instances were cleared meanwhile.
func (s *sqliteStore) CompleteCommit(ctx context.Context, p CompleteCommitParams) error {
	if p.State != RunSuccess && p.State != RunFailed {
		return fmt.Errorf("store: complete commit %d: state %q is not success or failed", p.OutboxID, p.State)
	}
	var runID int64
	finished := false
	err := s.write(ctx, func(tx *sql.Tx) error {
		err := tx.QueryRowContext(ctx, "DELETE FROM outbox WHERE id = ? RETURNING run_id", p.OutboxID).Scan(&runID)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("store: complete commit %d: %w", p.OutboxID, ErrNotFound)
		}
		if err != nil {
			return fmt.Errorf("store: complete commit %d: %w", p.OutboxID, err)
		}
		res, err := tx.ExecContext(ctx, finishRunSQL, string(p.State), nullNanos(p.Now), runID)
		if err != nil {
			return fmt.Errorf("store: complete commit %d: finish run %d: %w", p.OutboxID, runID, err)
		}
		n, err := res.RowsAffected()
		if err != nil {
			return fmt.Errorf("store: complete commit %d: finish run %d: %w", p.OutboxID, runID, err)
		}
		finished = n > 0
		return nil
	})
	if err != nil {
		return err
	}
	if !finished {
		return fmt.Errorf("store: complete commit %d: run %d can no longer finish %s: %w", p.OutboxID, runID, p.State, ErrConflict)
	}
	return nil
}
