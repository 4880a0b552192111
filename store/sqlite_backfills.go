package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
)

func (s *sqliteStore) SetWatermark(ctx context.Context, p SetWatermarkParams) error {
	if p.LogicalDate.IsZero() {
		_, err := s.wq().ExecContext(ctx, "DELETE FROM watermarks WHERE pipeline = ?", p.Pipeline)
		if err != nil {
			return fmt.Errorf("store: reset watermark %s: %w", p.Pipeline, err)
		}
		return nil
	}
	_, err := s.wq().ExecContext(ctx, `
		INSERT INTO watermarks (pipeline, logical_date, logical_unix, updated_at) VALUES (?, ?, ?, ?)
		ON CONFLICT (pipeline) DO UPDATE SET logical_date = excluded.logical_date,
			logical_unix = excluded.logical_unix, updated_at = excluded.updated_at`,
		p.Pipeline, formatDate(p.LogicalDate), nanos(p.LogicalDate), nullNanos(p.Now))
	if err != nil {
		return fmt.Errorf("store: set watermark %s: %w", p.Pipeline, err)
	}
	return nil
}

func (s *sqliteStore) CreateBackfill(ctx context.Context, b Backfill) error {
	switch b.Reprocess {
	case "none", "failed", "completed":
	default:
		return fmt.Errorf("store: backfill %s: reprocess %q is not none, failed or completed", b.ID, b.Reprocess)
	}
	if b.State == "" {
		b.State = BackfillRunning
	}
	_, err := s.wq().ExecContext(ctx, `
		INSERT INTO backfills (id, pipeline, from_date, to_date, reprocess, reverse, max_active_runs,
		                       state, phase, detail, paused, plan, created_at, updated_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		b.ID, b.Pipeline, formatDate(b.From), formatDate(b.To), b.Reprocess, b.Reverse, b.MaxActiveRuns,
		string(b.State), b.Phase, b.Detail, strings.Join(b.Paused, ","), b.Plan, nullNanos(b.CreatedAt), nullNanos(b.CreatedAt))
	if isConstraint(err) {
		return fmt.Errorf("store: backfill %s exists: %w", b.ID, ErrConflict)
	}
	if err != nil {
		return fmt.Errorf("store: create backfill %s: %w", b.ID, err)
	}
	return nil
}

const backfillColumns = `id, pipeline, from_date, to_date, reprocess, reverse, max_active_runs, state, phase,
	detail, paused, plan, created_at, updated_at`

func scanBackfill(row interface{ Scan(...any) error }) (Backfill, error) {
	var (
		b                Backfill
		from, to, paused string
		state            string
		created, updated sql.NullInt64
	)
	if err := row.Scan(&b.ID, &b.Pipeline, &from, &to, &b.Reprocess, &b.Reverse, &b.MaxActiveRuns, &state,
		&b.Phase, &b.Detail, &paused, &b.Plan, &created, &updated); err != nil {
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
	res, err := s.wq().ExecContext(ctx, "UPDATE backfills SET "+strings.Join(sets, ", ")+" WHERE id = ?", append(args, p.ID)...)
	if err != nil {
		return fmt.Errorf("store: update backfill %s: %w", p.ID, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("store: backfill %s: %w", p.ID, ErrNotFound)
	}
	return nil
}

func (s *sqliteStore) ReprocessRuns(ctx context.Context, p ReprocessRunsParams) (int, error) {
	if len(p.States) == 0 {
		return 0, nil
	}
	n := 0
	err := s.write(ctx, func(tx *sql.Tx) error {
		states := make([]any, len(p.States))
		for i, st := range p.States {
			states[i] = string(st)
		}
		args := append([]any{p.BackfillID, p.Pipeline, nanos(p.From), nanos(p.To)}, states...)
		res, err := tx.ExecContext(ctx, `
			UPDATE runs SET kind = 'backfill', backfill_id = ?, state = 'queued', started_at = NULL, ended_at = NULL
			WHERE pipeline = ? AND logical_unix BETWEEN ? AND ? AND state IN (`+placeholders(len(states))+`)`, args...)
		if err != nil {
			return fmt.Errorf("store: reprocess runs of %s: %w", p.Pipeline, err)
		}
		c, _ := res.RowsAffected()
		n = int(c)
		if _, err := tx.ExecContext(ctx, `
			UPDATE task_instances SET state = 'scheduled', failures = 0, next_try_at = NULL, updated_at = ?
			WHERE state NOT IN ('queued', 'running') AND run_id IN (
				SELECT id FROM runs WHERE pipeline = ? AND backfill_id = ? AND state = 'queued'
				AND logical_unix BETWEEN ? AND ?)`,
			nullNanos(p.Now), p.Pipeline, p.BackfillID, nanos(p.From), nanos(p.To)); err != nil {
			return fmt.Errorf("store: reprocess task instances of %s: %w", p.Pipeline, err)
		}
		return nil
	})
	return n, err
}
