package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
)

func pgBool(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// Pipelines.

// UpsertPipeline records a pipeline and the hash of its definition.
// UpdatedAt moves only when the hash changes (or the pause flag does); a
// changed hash also resets catchup_through.
func (s *pgStore) UpsertPipeline(ctx context.Context, p UpsertPipelineParams) (Pipeline, error) {
	if p.Name == "" {
		return Pipeline{}, errors.New("store: upsert pipeline: empty name")
	}
	var pl Pipeline
	err := s.write(ctx, func(tx *sql.Tx) error {
		var err error
		pl, err = scanPipeline(tx.QueryRowContext(ctx, `
			INSERT INTO pipelines AS pl (name, hash, paused, updated_at) VALUES ($1, $2, 0, $3)
			ON CONFLICT (name) DO UPDATE SET
				hash            = excluded.hash,
				updated_at      = CASE WHEN pl.hash = excluded.hash THEN pl.updated_at ELSE excluded.updated_at END,
				catchup_through = CASE WHEN pl.hash = excluded.hash THEN pl.catchup_through END
			RETURNING `+pipelineColumns,
			p.Name, p.Hash, nullNanos(p.Now)))
		if err != nil {
			return fmt.Errorf("store: upsert pipeline %s: %w", p.Name, err)
		}
		return nil
	})
	if err != nil {
		return Pipeline{}, err
	}
	return pl, nil
}

// SetPaused sets a pipeline's pause flag.
func (s *pgStore) SetPaused(ctx context.Context, p SetPausedParams) error {
	return s.write(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx,
			"UPDATE pipelines SET paused = $1, updated_at = $2 WHERE name = $3",
			pgBool(p.Paused), nullNanos(p.Now), p.Name)
		if err != nil {
			return fmt.Errorf("store: set paused %s: %w", p.Name, err)
		}
		if n, err := res.RowsAffected(); err != nil {
			return fmt.Errorf("store: set paused %s: %w", p.Name, err)
		} else if n == 0 {
			return fmt.Errorf("store: set paused: pipeline %s: %w", p.Name, ErrNotFound)
		}
		return pgBumpEpoch(ctx, tx)
	})
}

// GetPipeline returns one pipeline, or ErrNotFound.
func (s *pgStore) GetPipeline(ctx context.Context, name string) (Pipeline, error) {
	pl, err := scanPipeline(s.rq().QueryRowContext(ctx,
		"SELECT "+pipelineColumns+" FROM pipelines WHERE name = $1", name))
	if errors.Is(err, sql.ErrNoRows) {
		return Pipeline{}, fmt.Errorf("store: pipeline %s: %w", name, ErrNotFound)
	}
	if err != nil {
		return Pipeline{}, fmt.Errorf("store: get pipeline %s: %w", name, err)
	}
	return pl, nil
}

// ListPipelines returns every pipeline, ordered by name (bytewise).
func (s *pgStore) ListPipelines(ctx context.Context) ([]Pipeline, error) {
	rows, err := s.rq().QueryContext(ctx, "SELECT "+pipelineColumns+` FROM pipelines ORDER BY name COLLATE "C"`)
	if err != nil {
		return nil, fmt.Errorf("store: list pipelines: %w", err)
	}
	defer rows.Close()
	var out []Pipeline
	for rows.Next() {
		pl, err := scanPipeline(rows)
		if err != nil {
			return nil, fmt.Errorf("store: list pipelines: %w", err)
		}
		out = append(out, pl)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: list pipelines: %w", err)
	}
	return out, nil
}

// Watermarks.

// AdvanceWatermark recomputes the watermark as the latest logical date L such
// that every run of the pipeline at or before L succeeded (see the SQLite
// backend: the same index seeks on runs (pipeline, state, logical_unix)).
func (s *pgStore) AdvanceWatermark(ctx context.Context, p AdvanceWatermarkParams) (Watermark, error) {
	var wm Watermark
	err := s.write(ctx, func(tx *sql.Tx) error {
		var date sql.NullString
		var unix sql.NullInt64
		err := tx.QueryRowContext(ctx, `
			WITH first_open (u) AS (
				SELECT MIN(u) FROM (
					SELECT MIN(logical_unix) AS u FROM runs WHERE pipeline = $1 AND state = 'queued'
					UNION ALL
					SELECT MIN(logical_unix) FROM runs WHERE pipeline = $1 AND state = 'running'
					UNION ALL
					SELECT MIN(logical_unix) FROM runs WHERE pipeline = $1 AND state = 'failed'
				) AS o
			), last_done (u) AS (
				SELECT MAX(logical_unix) FROM runs, first_open
				WHERE pipeline = $1 AND state = 'success'
				  AND (first_open.u IS NULL OR logical_unix < first_open.u)
			)
			SELECT runs.logical_date, runs.logical_unix
			FROM last_done LEFT JOIN runs ON runs.pipeline = $1 AND runs.logical_unix = last_done.u`,
			p.Pipeline).Scan(&date, &unix)
		if err != nil {
			return fmt.Errorf("store: advance watermark %s: %w", p.Pipeline, err)
		}
		if !date.Valid {
			if _, err := tx.ExecContext(ctx, "DELETE FROM watermarks WHERE pipeline = $1", p.Pipeline); err != nil {
				return fmt.Errorf("store: advance watermark %s: %w", p.Pipeline, err)
			}
			return fmt.Errorf("store: watermark %s: no leading successful run: %w", p.Pipeline, ErrNotFound)
		}
		ld, err := parseDate(date.String)
		if err != nil {
			return err
		}
		var updated sql.NullInt64
		if err := tx.QueryRowContext(ctx, `
			INSERT INTO watermarks AS w (pipeline, logical_date, logical_unix, updated_at) VALUES ($1, $2, $3, $4)
			ON CONFLICT (pipeline) DO UPDATE SET
				logical_date = excluded.logical_date,
				logical_unix = excluded.logical_unix,
				updated_at   = CASE WHEN w.logical_unix = excluded.logical_unix
				                    THEN w.updated_at ELSE excluded.updated_at END
			RETURNING updated_at`,
			p.Pipeline, date.String, unix.Int64, nullNanos(p.Now)).Scan(&updated); err != nil {
			return fmt.Errorf("store: advance watermark %s: %w", p.Pipeline, err)
		}
		wm = Watermark{Pipeline: p.Pipeline, LogicalDate: ld, UpdatedAt: fromNanos(updated)}
		return nil
	})
	if err != nil {
		return Watermark{}, err
	}
	return wm, nil
}

// GetWatermark returns the stored watermark, or ErrNotFound.
func (s *pgStore) GetWatermark(ctx context.Context, pipeline string) (Watermark, error) {
	var (
		date    string
		updated sql.NullInt64
	)
	err := s.rq().QueryRowContext(ctx,
		"SELECT logical_date, updated_at FROM watermarks WHERE pipeline = $1", pipeline).Scan(&date, &updated)
	if errors.Is(err, sql.ErrNoRows) {
		return Watermark{}, fmt.Errorf("store: watermark %s: %w", pipeline, ErrNotFound)
	}
	if err != nil {
		return Watermark{}, fmt.Errorf("store: get watermark %s: %w", pipeline, err)
	}
	ld, err := parseDate(date)
	if err != nil {
		return Watermark{}, err
	}
	return Watermark{Pipeline: pipeline, LogicalDate: ld, UpdatedAt: fromNanos(updated)}, nil
}

// SetWatermark sets (or, for a zero date, removes) a pipeline's watermark.
func (s *pgStore) SetWatermark(ctx context.Context, p SetWatermarkParams) error {
	return s.write(ctx, func(tx *sql.Tx) error {
		if p.LogicalDate.IsZero() {
			if _, err := tx.ExecContext(ctx, "DELETE FROM watermarks WHERE pipeline = $1", p.Pipeline); err != nil {
				return fmt.Errorf("store: reset watermark %s: %w", p.Pipeline, err)
			}
			return pgBumpEpoch(ctx, tx)
		}
		if _, err := tx.ExecContext(ctx, `
			INSERT INTO watermarks (pipeline, logical_date, logical_unix, updated_at) VALUES ($1, $2, $3, $4)
			ON CONFLICT (pipeline) DO UPDATE SET logical_date = excluded.logical_date,
				logical_unix = excluded.logical_unix, updated_at = excluded.updated_at`,
			p.Pipeline, formatDate(p.LogicalDate), nanos(p.LogicalDate), nullNanos(p.Now)); err != nil {
			return fmt.Errorf("store: set watermark %s: %w", p.Pipeline, err)
		}
		return pgBumpEpoch(ctx, tx)
	})
}

// Leases.

// AcquireLease takes the lease in one statement: the insert succeeds when no
// lease row exists (generation 1), and the conflict update applies only when
// the current lease has expired (or was released), is the caller's own, or
// belongs to p.Stale; it moves the generation on when the holder changes. ON
// CONFLICT DO UPDATE locks the row and checks that on its latest version
// (and waits for fenced writers of the old holder, who lock it FOR SHARE).
// The row is then read back in the same transaction.
func (s *pgStore) AcquireLease(ctx context.Context, p AcquireLeaseParams) (Lease, bool, error) {
	if p.Name == "" || p.Holder == "" {
		return Lease{}, false, errors.New("store: acquire lease: name and holder are required")
	}
	var l Lease
	err := s.write(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `
			INSERT INTO leases AS l (name, holder, host, pid, pid_start, expires_at, generation)
			VALUES ($1, $2, $3, $4, $5, $6, 1)
			ON CONFLICT (name) DO UPDATE SET
				holder     = excluded.holder,
				host       = excluded.host,
				pid        = excluded.pid,
				pid_start  = excluded.pid_start,
				expires_at = excluded.expires_at,
				generation = CASE WHEN l.holder = excluded.holder THEN l.generation ELSE l.generation + 1 END
			WHERE l.expires_at <= $7
			   OR l.holder = excluded.holder
			   OR ($8 <> '' AND l.holder = $8)`,
			p.Name, p.Holder, p.Host, p.PID, int64(p.PIDStart), nanos(p.Now.Add(p.TTL)), nanos(p.Now), p.Stale); err != nil {
			return fmt.Errorf("store: acquire lease %s: %w", p.Name, err)
		}
		s.leaseMoved()
		var err error
		l, err = pgGetLease(ctx, tx, p.Name)
		return err
	})
	if err != nil {
		return Lease{}, false, err
	}
	return l, l.Holder == p.Holder, nil
}

// GetLease reads the lease name.
func (s *pgStore) GetLease(ctx context.Context, name string) (Lease, error) {
	var l Lease
	err := s.read(ctx, func(tx *sql.Tx) error {
		var err error
		l, err = pgGetLease(ctx, tx, name)
		return err
	})
	return l, err
}

func pgGetLease(ctx context.Context, tx *sql.Tx, name string) (Lease, error) {
	var (
		l        Lease
		pidStart int64
		expires  sql.NullInt64
	)
	err := tx.QueryRowContext(ctx,
		"SELECT name, holder, host, pid, pid_start, expires_at, generation FROM leases WHERE name = $1", name).
		Scan(&l.Name, &l.Holder, &l.Host, &l.PID, &pidStart, &expires, &l.Generation)
	if errors.Is(err, sql.ErrNoRows) {
		return Lease{}, fmt.Errorf("store: lease %s: %w", name, ErrNotFound)
	}
	if err != nil {
		return Lease{}, fmt.Errorf("store: lease %s: %w", name, err)
	}
	l.PIDStart = uint64(pidStart)
	l.ExpiresAt = fromNanos(expires)
	return l, nil
}

// RenewLease extends the lease if Holder still holds it (the generation
// stays).
func (s *pgStore) RenewLease(ctx context.Context, p RenewLeaseParams) error {
	if p.Holder == "" {
		return fmt.Errorf("store: renew lease %s: empty holder", p.Name)
	}
	return s.write(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx,
			"UPDATE leases SET expires_at = $1 WHERE name = $2 AND holder = $3",
			nanos(p.Now.Add(p.TTL)), p.Name, p.Holder)
		if err != nil {
			return fmt.Errorf("store: renew lease %s: %w", p.Name, err)
		}
		n, err := res.RowsAffected()
		if err != nil {
			return fmt.Errorf("store: renew lease %s: %w", p.Name, err)
		}
		if n == 0 {
			return fmt.Errorf("store: renew lease %s: not held by %s: %w", p.Name, p.Holder, ErrConflict)
		}
		return nil
	})
}

// ReleaseLease gives the lease up if Holder holds it; otherwise it does
// nothing. The row stays, without a holder and expired, so that the
// generation keeps growing with the next holder.
func (s *pgStore) ReleaseLease(ctx context.Context, p ReleaseLeaseParams) error {
	if p.Holder == "" {
		return nil
	}
	return s.write(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `
			UPDATE leases SET holder = '', host = '', pid = 0, pid_start = 0, expires_at = $1
			WHERE name = $2 AND holder = $3`, int64(math.MinInt64), p.Name, p.Holder); err != nil {
			return fmt.Errorf("store: release lease %s: %w", p.Name, err)
		}
		s.leaseMoved()
		return nil
	})
}

// Backfills.

// CreateBackfill records a new backfill (ErrConflict if its id exists).
func (s *pgStore) CreateBackfill(ctx context.Context, b Backfill) error {
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
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)
			ON CONFLICT (id) DO NOTHING`,
			b.ID, b.Pipeline, formatDate(b.From), formatDate(b.To), b.Reprocess, pgBool(b.Reverse), b.MaxActiveRuns,
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

// GetBackfill returns one backfill, or ErrNotFound.
func (s *pgStore) GetBackfill(ctx context.Context, id string) (Backfill, error) {
	b, err := scanBackfill(s.rq().QueryRowContext(ctx, "SELECT "+backfillColumns+" FROM backfills WHERE id = $1", id))
	if errors.Is(err, sql.ErrNoRows) {
		return Backfill{}, fmt.Errorf("store: backfill %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return Backfill{}, fmt.Errorf("store: get backfill %s: %w", id, err)
	}
	return b, nil
}

// ListBackfills returns every backfill, newest first.
func (s *pgStore) ListBackfills(ctx context.Context) ([]Backfill, error) {
	rows, err := s.rq().QueryContext(ctx, "SELECT "+backfillColumns+
		` FROM backfills ORDER BY created_at DESC NULLS LAST, id COLLATE "C" DESC`)
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
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: list backfills: %w", err)
	}
	return out, nil
}

// UpdateBackfill changes a backfill; empty fields are kept.
func (s *pgStore) UpdateBackfill(ctx context.Context, p UpdateBackfillParams) error {
	args := pgArgs{nullNanos(p.Now)}
	sets := []string{"updated_at = $1"}
	if p.State != "" {
		sets = append(sets, "state = "+args.add(string(p.State)))
	}
	if p.Phase != "" {
		sets = append(sets, "phase = "+args.add(p.Phase))
	}
	if p.Detail != nil {
		sets = append(sets, "detail = "+args.add(*p.Detail))
	}
	if p.Paused != nil {
		sets = append(sets, "paused = "+args.add(strings.Join(p.Paused, ",")))
	}
	if p.Plan != nil {
		sets = append(sets, "plan = "+args.add(*p.Plan))
	}
	if p.OnHold != nil {
		sets = append(sets, "on_hold = "+args.add(pgBool(*p.OnHold)))
	}
	if p.RolledBack != nil {
		sets = append(sets, "rolled_back = "+args.add(pgBool(*p.RolledBack)))
	}
	q := "UPDATE backfills SET " + strings.Join(sets, ", ") + " WHERE id = " + args.add(p.ID)
	return s.write(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, q, args...)
		if err != nil {
			return fmt.Errorf("store: update backfill %s: %w", p.ID, err)
		}
		n, err := res.RowsAffected()
		if err != nil {
			return fmt.Errorf("store: update backfill %s: %w", p.ID, err)
		}
		if n == 0 {
			return fmt.Errorf("store: backfill %s: %w", p.ID, ErrNotFound)
		}
		return pgBumpEpoch(ctx, tx)
	})
}

// ReprocessRuns hands the existing runs of a pipeline in a window and in one
// of the states to a backfill, and their task instances that are not
// running back to scheduled.
func (s *pgStore) ReprocessRuns(ctx context.Context, p ReprocessRunsParams) (int, error) {
	if len(p.States) == 0 {
		return 0, nil
	}
	states := make([]string, len(p.States))
	for i, st := range p.States {
		states[i] = string(st)
	}
	dates := make([]int64, len(p.Dates))
	for i, d := range p.Dates {
		dates[i] = nanos(d)
	}
	// taken is the condition on the runs taken (in the window, the dates
	// when given, and the states; not already the backfill's own), with
	// its placeholders numbered in args.
	taken := func(args *pgArgs) string {
		return `pipeline = ` + args.add(p.Pipeline) +
			` AND logical_unix BETWEEN ` + args.add(nanos(p.From)) + ` AND ` + args.add(nanos(p.To)) +
			` AND state = ANY(` + args.add(states) + `::text[])` +
			` AND (backfill_id IS NULL OR backfill_id <> ` + args.add(p.BackfillID) + `)` +
			` AND (cardinality(` + args.add(dates) + `::bigint[]) = 0 OR logical_unix = ANY($` + strconv.Itoa(len(*args)) + `::bigint[]))`
	}
	n := 0
	err := s.write(ctx, func(tx *sql.Tx) error {
		// Their task instances first, while the runs still match.
		var args pgArgs
		q := `UPDATE task_instances SET state = 'scheduled', failures = 0, next_try_at = NULL, updated_at = ` + args.add(nullNanos(p.Now)) +
			` WHERE state <> 'running'`
		if len(p.Tasks) > 0 {
			q += ` AND task = ANY(` + args.add(p.Tasks) + `::text[])`
		}
		q += ` AND run_id IN (SELECT id FROM runs WHERE ` + taken(&args) + `)`
		if _, err := tx.ExecContext(ctx, q, args...); err != nil {
			return fmt.Errorf("store: reprocess task instances of %s: %w", p.Pipeline, err)
		}
		for _, t := range p.Add {
			var args pgArgs
			q := `INSERT INTO task_instances (run_id, task, state, pool, updated_at)
				SELECT id, ` + args.add(t.Name) + `, 'scheduled', ` + args.add(t.Pool) + `, ` + args.add(nullNanos(p.Now)) +
				` FROM runs WHERE ` + taken(&args) + ` ON CONFLICT (run_id, task) DO NOTHING`
			if _, err := tx.ExecContext(ctx, q, args...); err != nil {
				return fmt.Errorf("store: reprocess runs of %s: add task %s: %w", p.Pipeline, t.Name, err)
			}
		}
		args = nil
		q = `UPDATE runs SET kind = 'backfill', backfill_id = ` + args.add(p.BackfillID) +
			`, state = 'queued', started_at = NULL, ended_at = NULL WHERE ` + taken(&args)
		res, err := tx.ExecContext(ctx, q, args...)
		if err != nil {
			return fmt.Errorf("store: reprocess runs of %s: %w", p.Pipeline, err)
		}
		c, err := res.RowsAffected()
		if err != nil {
			return fmt.Errorf("store: reprocess runs of %s: %w", p.Pipeline, err)
		}
		n = int(c)
		return pgBumpEpoch(ctx, tx)
	})
	return n, err
}
