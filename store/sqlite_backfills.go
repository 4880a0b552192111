package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
)

// SetWatermark sets (or, for a zero date, removes) a pipeline's watermark
// and bumps the epoch, in one transaction: an operator's command.
func (s *sqliteStore) SetWatermark(ctx context.Context, p SetWatermarkParams) error {
	return s.write(ctx, func(tx *sql.Tx) error {
		if p.LogicalDate.IsZero() {
			if _, err := tx.ExecContext(ctx, "DELETE FROM watermarks WHERE pipeline = ?", p.Pipeline); err != nil {
				return fmt.Errorf("store: reset watermark %s: %w", p.Pipeline, err)
			}
		} else if _, err := tx.ExecContext(ctx, `
			INSERT INTO watermarks (pipeline, logical_date, logical_unix, updated_at) VALUES (?, ?, ?, ?)
			ON CONFLICT (pipeline) DO UPDATE SET logical_date = excluded.logical_date,
				logical_unix = excluded.logical_unix, updated_at = excluded.updated_at`,
			p.Pipeline, formatDate(p.LogicalDate), nanos(p.LogicalDate), nullNanos(p.Now)); err != nil {
			return fmt.Errorf("store: set watermark %s: %w", p.Pipeline, err)
		}
		if err := bumpEpoch(ctx, tx); err != nil {
			return fmt.Errorf("store: set watermark %s: %w", p.Pipeline, err)
		}
		return nil
	})
}

// CreateBackfill inserts a backfill row; its id is unique (ErrConflict).
func (s *sqliteStore) CreateBackfill(ctx context.Context, b Backfill) error {
	switch b.Reprocess {
	case "none", "failed", "completed":
	default:
		return fmt.Errorf("store: backfill %s: reprocess %q is not none, failed or completed", b.ID, b.Reprocess)
	}
	if b.State == "" {
		b.State = BackfillRunning
	}
	return s.write(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `
			INSERT INTO backfills (id, pipeline, from_date, to_date, reprocess, reverse, max_active_runs,
			                       state, phase, detail, paused, plan, created_at, updated_at)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT (id) DO NOTHING`,
			b.ID, b.Pipeline, formatDate(b.From), formatDate(b.To), b.Reprocess, b.Reverse, b.MaxActiveRuns,
			string(b.State), b.Phase, b.Detail, strings.Join(b.Paused, ","), b.Plan, nullNanos(b.CreatedAt), nullNanos(b.CreatedAt))
		if err != nil {
			return fmt.Errorf("store: create backfill %s: %w", b.ID, err)
		}
		if n, err := res.RowsAffected(); err != nil {
			return fmt.Errorf("store: create backfill %s: %w", b.ID, err)
		} else if n == 0 {
			return fmt.Errorf("store: backfill %s exists: %w", b.ID, ErrConflict)
		}
		return nil
	})
}

const backfillColumns = `id, pipeline, from_date, to_date, reprocess, reverse, max_active_runs, state, phase,
	detail, paused, plan, created_at, updated_at, on_hold, rolled_back`

func scanBackfill(row interface{ Scan(...any) error }) (Backfill, error) {
	var (
		b                Backfill
		from, to, paused string
		state            string
		created, updated sql.NullInt64
	)
	if err := row.Scan(&b.ID, &b.Pipeline, &from, &to, &b.Reprocess, &b.Reverse, &b.MaxActiveRuns, &state,
		&b.Phase, &b.Detail, &paused, &b.Plan, &created, &updated, &b.OnHold, &b.RolledBack); err != nil {
		return Backfill{}, err
	}
	var err error
	if b.From, err = parseDate(from); err != nil {
		return Backfill{}, err
	}
	if b.To, err = parseDate(to); err != nil {
		return Backfill{}, err
	}
	b.State = BackfillState(state)
	if paused != "" {
		b.Paused = strings.Split(paused, ",")
	}
	b.CreatedAt, b.UpdatedAt = fromNanos(created), fromNanos(updated)
	return b, nil
}

// GetBackfill returns one backfill, or ErrNotFound.
func (s *sqliteStore) GetBackfill(ctx context.Context, id string) (Backfill, error) {
	b, err := scanBackfill(s.rq().QueryRowContext(ctx, "SELECT "+backfillColumns+" FROM backfills WHERE id = ?", id))
	if errors.Is(err, sql.ErrNoRows) {
		return Backfill{}, fmt.Errorf("store: backfill %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return Backfill{}, fmt.Errorf("store: get backfill %s: %w", id, err)
	}
	return b, nil
}

// ListBackfills returns every backfill, newest first.
func (s *sqliteStore) ListBackfills(ctx context.Context) ([]Backfill, error) {
	rows, err := s.rq().QueryContext(ctx, "SELECT "+backfillColumns+" FROM backfills ORDER BY created_at DESC, id DESC")
	if err != nil {
		return nil, fmt.Errorf("store: list backfills: %w", err)
	}
	defer rows.Close()
	var out []Backfill
	for rows.Next() {
		b, err := scanBackfill(rows)
		if err != nil {
			return nil, fmt.Errorf("store: list backfills: %w", err)
		}
		out = append(out, b)
	}
	return out, rows.Err()
}

// UpdateBackfill changes the given fields of a backfill and bumps the epoch,
// in one transaction (ErrNotFound for an unknown backfill).
func (s *sqliteStore) UpdateBackfill(ctx context.Context, p UpdateBackfillParams) error {
	sets := []string{"updated_at = ?"}
	args := []any{nullNanos(p.Now)}
	if p.State != "" {
		sets, args = append(sets, "state = ?"), append(args, string(p.State))
	}
	if p.Phase != "" {
		sets, args = append(sets, "phase = ?"), append(args, p.Phase)
	}
	if p.Detail != nil {
		sets, args = append(sets, "detail = ?"), append(args, *p.Detail)
	}
	if p.Paused != nil {
		sets, args = append(sets, "paused = ?"), append(args, strings.Join(p.Paused, ","))
	}
	if p.Plan != nil {
		sets, args = append(sets, "plan = ?"), append(args, *p.Plan)
	}
	if p.OnHold != nil {
		sets, args = append(sets, "on_hold = ?"), append(args, *p.OnHold)
	}
	if p.RolledBack != nil {
		sets, args = append(sets, "rolled_back = ?"), append(args, *p.RolledBack)
	}
	return s.write(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, "UPDATE backfills SET "+strings.Join(sets, ", ")+" WHERE id = ?", append(args, p.ID)...)
		if err != nil {
			return fmt.Errorf("store: update backfill %s: %w", p.ID, err)
		}
		if n, err := res.RowsAffected(); err != nil {
			return fmt.Errorf("store: update backfill %s: %w", p.ID, err)
		} else if n == 0 {
			return fmt.Errorf("store: backfill %s: %w", p.ID, ErrNotFound)
		}
		if err := bumpEpoch(ctx, tx); err != nil {
			return fmt.Errorf("store: update backfill %s: %w", p.ID, err)
		}
		return nil
	})
}

// ReprocessRuns hands a window's runs in the given states to a backfill and
// resets their task instances that are not running (queued ones included:
// they have no process), bumping the epoch, in one transaction.
func (s *sqliteStore) ReprocessRuns(ctx context.Context, p ReprocessRunsParams) (int, error) {
	if len(p.States) == 0 {
		return 0, nil
	}
	n := 0
	err := s.write(ctx, func(tx *sql.Tx) error {
		// The runs taken: in the window and the states, not already the
		// backfill's own.
		where := `pipeline = ? AND logical_unix BETWEEN ? AND ? AND state IN (` + placeholders(len(p.States)) +
			`) AND (backfill_id IS NULL OR backfill_id <> ?)`
		args := []any{p.Pipeline, nanos(p.From), nanos(p.To)}
		for _, st := range p.States {
			args = append(args, string(st))
		}
		args = append(args, p.BackfillID)
		if len(p.Dates) > 0 {
			where += ` AND logical_unix IN (` + placeholders(len(p.Dates)) + `)`
			for _, d := range p.Dates {
				args = append(args, nanos(d))
			}
		}
		// Their task instances first, while the runs still match.
		tiArgs := append([]any{nullNanos(p.Now)}, args...)
		byName := ""
		if len(p.Tasks) > 0 {
			byName = ` AND task IN (` + placeholders(len(p.Tasks)) + `)`
			for _, name := range p.Tasks {
				tiArgs = append(tiArgs, name)
			}
		}
		if _, err := tx.ExecContext(ctx, `
			UPDATE task_instances SET state = 'scheduled', failures = 0, next_try_at = NULL, updated_at = ?
			WHERE state <> 'running' AND run_id IN (SELECT id FROM runs WHERE `+where+`)`+byName, tiArgs...); err != nil {
			return fmt.Errorf("store: reprocess task instances of %s: %w", p.Pipeline, err)
		}
		for _, t := range p.Add {
			if _, err := tx.ExecContext(ctx, `
				INSERT INTO task_instances (run_id, task, state, pool, updated_at)
				SELECT id, ?, 'scheduled', ?, ? FROM runs WHERE `+where+`
				ON CONFLICT (run_id, task) DO NOTHING`, append([]any{t.Name, t.Pool, nullNanos(p.Now)}, args...)...); err != nil {
				return fmt.Errorf("store: reprocess runs of %s: add task %s: %w", p.Pipeline, t.Name, err)
			}
		}
		res, err := tx.ExecContext(ctx, `
			UPDATE runs SET kind = 'backfill', backfill_id = ?, state = 'queued', started_at = NULL, ended_at = NULL
			WHERE `+where, append([]any{p.BackfillID}, args...)...)
		if err != nil {
			return fmt.Errorf("store: reprocess runs of %s: %w", p.Pipeline, err)
		}
		c, err := res.RowsAffected()
		if err != nil {
			return fmt.Errorf("store: reprocess runs of %s: %w", p.Pipeline, err)
		}
		n = int(c)
		if err := bumpEpoch(ctx, tx); err != nil {
			return fmt.Errorf("store: reprocess runs of %s: %w", p.Pipeline, err)
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	return n, nil
}
