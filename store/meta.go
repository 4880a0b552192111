package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"time"
)

// Pipelines.

const pipelineColumns = "name, hash, paused, updated_at, catchup_through"

func scanPipeline(row interface{ Scan(...any) error }) (Pipeline, error) {
	var (
		p                Pipeline
		updated, through sql.NullInt64
	)
	if err := row.Scan(&p.Name, &p.Hash, &p.Paused, &updated, &through); err != nil {
		return Pipeline{}, err
	}
	p.UpdatedAt, p.CatchupThrough = fromNanos(updated), fromNanos(through)
	return p, nil
}

// UpsertPipeline records a pipeline and the hash of its definition.
// UpdatedAt moves only when the hash changes (or the pause flag does); a
// changed hash also resets catchup_through, since the timetable may have
// changed with it.
func (s *sqlStore) UpsertPipeline(ctx context.Context, p UpsertPipelineParams) (Pipeline, error) {
	if p.Name == "" {
		return Pipeline{}, errors.New("store: upsert pipeline: empty name")
	}
	var pl Pipeline
	err := s.write(ctx, func(c conn) error {
		var err error
		pl, err = scanPipeline(c.row(ctx, `
			INSERT INTO pipelines (name, hash, paused, updated_at) VALUES ($1, $2, 0, $3)
			ON CONFLICT (name) DO UPDATE SET
				hash            = excluded.hash,
				updated_at      = CASE WHEN pipelines.hash = excluded.hash THEN pipelines.updated_at ELSE excluded.updated_at END,
				catchup_through = CASE WHEN pipelines.hash = excluded.hash THEN pipelines.catchup_through END
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

// SetPaused sets a pipeline's pause flag and bumps the epoch, in one
// transaction.
func (s *sqlStore) SetPaused(ctx context.Context, p SetPausedParams) error {
	return s.write(ctx, func(c conn) error {
		n, err := affected(c.exec(ctx,
			"UPDATE pipelines SET paused = $1, updated_at = $2 WHERE name = $3",
			boolInt(p.Paused), nullNanos(p.Now), p.Name))
		if err != nil {
			return fmt.Errorf("store: set paused %s: %w", p.Name, err)
		}
		if n == 0 {
			return fmt.Errorf("store: set paused: pipeline %s: %w", p.Name, ErrNotFound)
		}
		if err := bumpEpoch(ctx, c); err != nil {
			return fmt.Errorf("store: set paused %s: %w", p.Name, err)
		}
		return nil
	})
}

// GetPipeline returns one pipeline, or ErrNotFound.
func (s *sqlStore) GetPipeline(ctx context.Context, name string) (Pipeline, error) {
	pl, err := scanPipeline(s.rq().row(ctx,
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
func (s *sqlStore) ListPipelines(ctx context.Context) ([]Pipeline, error) {
	c := s.rq()
	rows, err := c.query(ctx, "SELECT "+pipelineColumns+" FROM pipelines ORDER BY name"+s.d.collate)
	out, err := scanAll(rows, err, func(rows *sql.Rows) (Pipeline, error) { return scanPipeline(rows) })
	if err != nil {
		return nil, fmt.Errorf("store: list pipelines: %w", err)
	}
	return out, nil
}

// Watermarks.

// advanceWatermarkSQL finds the run just before the pipeline's earliest
// run that is not success (every run before that one succeeded): its
// logical date and time; no row when there is none.
//
// Its cost is a few index entries whatever the planner's statistics say
// (they can be stale by a whole catchup on PostgreSQL, where an equality
// form of the same query was planned as a loop over every success of the
// pipeline). Each step is a seek by a row value in the order of the one
// index that holds it, LIMIT 1: the first entry of runs_pipeline_state at
// or after (pipeline, state) for each state that is not success, then the
// entry of the unique index (pipeline, logical_unix) just before (pipeline,
// that time). No other index gives these orders, and without one the plan
// would sort the whole table; each seek may land on another pipeline's or
// state's entry, which the CASE and the outer WHERE turn into "none".
// The literals are int8 on PostgreSQL (-2^63 itself would be numeric).
const advanceWatermarkSQL = `
	SELECT logical_date, logical_unix FROM (
		SELECT pipeline, logical_date, logical_unix FROM runs
		WHERE (pipeline, logical_unix) < ($1, COALESCE((
			SELECT MIN(u) FROM (
				SELECT (SELECT CASE WHEN pipeline = $1 AND state = 'queued' THEN logical_unix END FROM runs
				        WHERE (pipeline, state, logical_unix) >= ($1, 'queued', -9223372036854775807)
				        ORDER BY pipeline, state, logical_unix LIMIT 1) AS u
				UNION ALL
				SELECT (SELECT CASE WHEN pipeline = $1 AND state = 'running' THEN logical_unix END FROM runs
				        WHERE (pipeline, state, logical_unix) >= ($1, 'running', -9223372036854775807)
				        ORDER BY pipeline, state, logical_unix LIMIT 1) AS u
				UNION ALL
				SELECT (SELECT CASE WHEN pipeline = $1 AND state = 'failed' THEN logical_unix END FROM runs
				        WHERE (pipeline, state, logical_unix) >= ($1, 'failed', -9223372036854775807)
				        ORDER BY pipeline, state, logical_unix LIMIT 1) AS u
			) AS o), 9223372036854775807))
		ORDER BY pipeline DESC, logical_unix DESC LIMIT 1
	) AS w
	WHERE pipeline = $1`

// AdvanceWatermark recomputes the watermark as the latest logical date L such
// that every run of the pipeline at or before L succeeded, in a few index
// seeks (advanceWatermarkSQL). The watermark follows the
// runs both ways: a cleared run moves it back; with no qualifying run the
// stored watermark is removed and ErrNotFound returned.
func (s *sqlStore) AdvanceWatermark(ctx context.Context, p AdvanceWatermarkParams) (Watermark, error) {
	var wm Watermark
	err := s.write(ctx, func(c conn) error {
		var date sql.NullString
		var unix sql.NullInt64
		err := c.row(ctx, advanceWatermarkSQL, p.Pipeline).Scan(&date, &unix)
		if errors.Is(err, sql.ErrNoRows) {
			err = nil // no leading successful run
		}
		if err != nil {
			return fmt.Errorf("store: advance watermark %s: %w", p.Pipeline, err)
		}
		if !date.Valid {
			if _, err := c.exec(ctx, "DELETE FROM watermarks WHERE pipeline = $1", p.Pipeline); err != nil {
				return fmt.Errorf("store: advance watermark %s: %w", p.Pipeline, err)
			}
			return fmt.Errorf("store: watermark %s: no leading successful run: %w", p.Pipeline, ErrNotFound)
		}
		ld, err := parseDate(date.String)
		if err != nil {
			return err
		}
		var updated sql.NullInt64
		if err := c.row(ctx, `
			INSERT INTO watermarks (pipeline, logical_date, logical_unix, updated_at) VALUES ($1, $2, $3, $4)
			ON CONFLICT (pipeline) DO UPDATE SET
				logical_date = excluded.logical_date,
				logical_unix = excluded.logical_unix,
				updated_at   = CASE WHEN watermarks.logical_unix = excluded.logical_unix
				                    THEN watermarks.updated_at ELSE excluded.updated_at END
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
func (s *sqlStore) GetWatermark(ctx context.Context, pipeline string) (Watermark, error) {
	var (
		date    string
		updated sql.NullInt64
	)
	err := s.rq().row(ctx,
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

// SetWatermark sets (or, for a zero date, removes) a pipeline's watermark
// and bumps the epoch, in one transaction: an operator's command.
func (s *sqlStore) SetWatermark(ctx context.Context, p SetWatermarkParams) error {
	return s.write(ctx, func(c conn) error {
		if p.LogicalDate.IsZero() {
			if _, err := c.exec(ctx, "DELETE FROM watermarks WHERE pipeline = $1", p.Pipeline); err != nil {
				return fmt.Errorf("store: reset watermark %s: %w", p.Pipeline, err)
			}
		} else if _, err := c.exec(ctx, `
			INSERT INTO watermarks (pipeline, logical_date, logical_unix, updated_at) VALUES ($1, $2, $3, $4)
			ON CONFLICT (pipeline) DO UPDATE SET logical_date = excluded.logical_date,
				logical_unix = excluded.logical_unix, updated_at = excluded.updated_at`,
			p.Pipeline, formatDate(p.LogicalDate), nanos(p.LogicalDate), nullNanos(p.Now)); err != nil {
			return fmt.Errorf("store: set watermark %s: %w", p.Pipeline, err)
		}
		if err := bumpEpoch(ctx, c); err != nil {
			return fmt.Errorf("store: set watermark %s: %w", p.Pipeline, err)
		}
		return nil
	})
}

// Leases.

// Now reads the state's clock: the database server's for PostgreSQL, this
// machine's for SQLite (a file of one machine).
func (s *sqlStore) Now(ctx context.Context) (time.Time, error) {
	return s.rq().clock(ctx)
}

// clock is the state's clock, read on c.
func (c conn) clock(ctx context.Context) (time.Time, error) {
	if c.d.clock == "" {
		return time.Now(), nil
	}
	var n int64
	if err := c.row(ctx, c.d.clock).Scan(&n); err != nil {
		return time.Time{}, fmt.Errorf("store: read the server's clock: %w", err)
	}
	return time.Unix(0, n), nil
}

// stateNow is now, or the state's clock when now is zero.
func (c conn) stateNow(ctx context.Context, now time.Time) (time.Time, error) {
	if !now.IsZero() {
		return now, nil
	}
	return c.clock(ctx)
}

// AcquireLease takes the lease in one statement: the insert succeeds when no
// lease row exists (generation 1), and the conflict update applies only when
// the current lease has expired (or was released), is the caller's own, or
// belongs to p.Stale; it moves the generation on when the holder changes.
// In PostgreSQL, ON CONFLICT DO UPDATE locks the row and checks that on its
// latest version (and waits for fenced writers of the old holder, who lock
// it FOR SHARE). The row is then read back in the same transaction.
func (s *sqlStore) AcquireLease(ctx context.Context, p AcquireLeaseParams) (Lease, bool, error) {
	if p.Name == "" || p.Holder == "" {
		return Lease{}, false, errors.New("store: acquire lease: name and holder are required")
	}
	var l Lease
	err := s.write(ctx, func(c conn) error {
		now, err := c.stateNow(ctx, p.Now)
		if err != nil {
			return err
		}
		p.Now = now
		if _, err := c.exec(ctx, `
			INSERT INTO leases (name, holder, host, pid, pid_start, expires_at, generation, acquired_at, renewed_at)
			VALUES ($1, $2, $3, $4, $5, $6, 1, $7, $7)
			ON CONFLICT (name) DO UPDATE SET
				holder      = excluded.holder,
				host        = excluded.host,
				pid         = excluded.pid,
				pid_start   = excluded.pid_start,
				expires_at  = excluded.expires_at,
				generation  = CASE WHEN leases.holder = excluded.holder
				                   THEN leases.generation ELSE leases.generation + 1 END,
				acquired_at = CASE WHEN leases.holder = excluded.holder
				                   THEN COALESCE(leases.acquired_at, excluded.acquired_at) ELSE excluded.acquired_at END,
				renewed_at  = excluded.renewed_at
			WHERE leases.expires_at <= $7
			   OR leases.holder = excluded.holder
			   OR ($8 <> '' AND leases.holder = $8)`,
			p.Name, p.Holder, p.Host, p.PID, int64(p.PIDStart), nanos(p.Now.Add(p.TTL)), nanos(p.Now), p.Stale); err != nil {
			return fmt.Errorf("store: acquire lease %s: %w", p.Name, err)
		}
		s.b.leaseMoved()
		l, err = getLease(ctx, c, p.Name)
		return err
	})
	if err != nil {
		return Lease{}, false, err
	}
	return l, l.Holder == p.Holder, nil
}

// GetLease reads the lease name.
func (s *sqlStore) GetLease(ctx context.Context, name string) (Lease, error) {
	var l Lease
	err := s.read(ctx, func(c conn) error {
		var err error
		l, err = getLease(ctx, c, name)
		return err
	})
	return l, err
}

func getLease(ctx context.Context, c conn, name string) (Lease, error) {
	var (
		l        Lease
		pidStart int64
		expires  sql.NullInt64
		acquired sql.NullInt64
		renewed  sql.NullInt64
	)
	err := c.row(ctx,
		"SELECT name, holder, host, pid, pid_start, expires_at, generation, acquired_at, renewed_at FROM leases WHERE name = $1", name).
		Scan(&l.Name, &l.Holder, &l.Host, &l.PID, &pidStart, &expires, &l.Generation, &acquired, &renewed)
	if errors.Is(err, sql.ErrNoRows) {
		return Lease{}, fmt.Errorf("store: lease %s: %w", name, ErrNotFound)
	}
	if err != nil {
		return Lease{}, fmt.Errorf("store: lease %s: %w", name, err)
	}
	l.PIDStart = uint64(pidStart)
	l.ExpiresAt = fromNanos(expires)
	l.AcquiredAt, l.RenewedAt = fromNanos(acquired), fromNanos(renewed)
	return l, nil
}

// RenewLease extends the lease if Holder still holds it (the generation
// stays).
func (s *sqlStore) RenewLease(ctx context.Context, p RenewLeaseParams) error {
	if p.Holder == "" {
		return fmt.Errorf("store: renew lease %s: empty holder", p.Name)
	}
	return s.write(ctx, func(c conn) error {
		now, err := c.stateNow(ctx, p.Now)
		if err != nil {
			return err
		}
		n, err := affected(c.exec(ctx,
			"UPDATE leases SET expires_at = $1, renewed_at = $4 WHERE name = $2 AND holder = $3",
			nanos(now.Add(p.TTL)), p.Name, p.Holder, nanos(now)))
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
func (s *sqlStore) ReleaseLease(ctx context.Context, p ReleaseLeaseParams) error {
	if p.Holder == "" {
		return nil
	}
	return s.write(ctx, func(c conn) error {
		if _, err := c.exec(ctx, `
			UPDATE leases SET holder = '', host = '', pid = 0, pid_start = 0, expires_at = $1,
				acquired_at = NULL, renewed_at = NULL
			WHERE name = $2 AND holder = $3`, int64(math.MinInt64), p.Name, p.Holder); err != nil {
			return fmt.Errorf("store: release lease %s: %w", p.Name, err)
		}
		s.b.leaseMoved()
		return nil
	})
}

// Epoch and owners.

// bumpEpoch moves the epoch on by one, in the caller's transaction: what
// every operator command does with its change.
func bumpEpoch(ctx context.Context, c conn) error {
	if _, err := c.exec(ctx, `
		INSERT INTO epoch (id, n) VALUES (1, 1)
		ON CONFLICT (id) DO UPDATE SET n = epoch.n + 1`); err != nil {
		return fmt.Errorf("bump epoch: %w", err)
	}
	return nil
}

// Epoch reads the epoch: one primary-key read.
func (s *sqlStore) Epoch(ctx context.Context) (int64, error) {
	var n int64
	err := s.rq().row(ctx, "SELECT n FROM epoch WHERE id = 1").Scan(&n)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("store: epoch: %w", err)
	}
	return n, nil
}

// Heartbeat upserts the owner row of the calling process.
func (s *sqlStore) Heartbeat(ctx context.Context, p HeartbeatParams) error {
	if p.ID == "" {
		return errors.New("store: heartbeat: empty owner id")
	}
	return s.write(ctx, func(c conn) error {
		now, err := c.stateNow(ctx, p.Now)
		if err != nil {
			return err
		}
		p.Now = now
		if _, err := c.exec(ctx, `
			INSERT INTO owners (id, host, pid, pid_start, heartbeat_at, expires_at) VALUES ($1, $2, $3, $4, $5, $6)
			ON CONFLICT (id) DO UPDATE SET
				host         = excluded.host,
				pid          = excluded.pid,
				pid_start    = excluded.pid_start,
				heartbeat_at = excluded.heartbeat_at,
				expires_at   = excluded.expires_at`,
			p.ID, p.Host, p.PID, int64(p.PIDStart), nanos(p.Now), nanos(p.Now.Add(p.TTL))); err != nil {
			return fmt.Errorf("store: heartbeat %s: %w", p.ID, err)
		}
		return nil
	})
}

// GetOwner returns one owner row, or ErrNotFound.
func (s *sqlStore) GetOwner(ctx context.Context, id string) (Owner, error) {
	var (
		o           Owner
		pidStart    int64
		beat, until sql.NullInt64
	)
	err := s.rq().row(ctx,
		"SELECT id, host, pid, pid_start, heartbeat_at, expires_at FROM owners WHERE id = $1", id).
		Scan(&o.ID, &o.Host, &o.PID, &pidStart, &beat, &until)
	if errors.Is(err, sql.ErrNoRows) {
		return Owner{}, fmt.Errorf("store: owner %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return Owner{}, fmt.Errorf("store: get owner %s: %w", id, err)
	}
	o.PIDStart = uint64(pidStart)
	o.HeartbeatAt, o.ExpiresAt = fromNanos(beat), fromNanos(until)
	return o, nil
}

// RemoveOwner deletes an owner row that owns no running attempt, in one
// guarded statement; with running attempts it is ErrConflict (their owner
// row is what tells recovery they are alive), and without the row nil.
func (s *sqlStore) RemoveOwner(ctx context.Context, id string) error {
	return s.write(ctx, func(c conn) error {
		n, err := affected(c.exec(ctx, `
			DELETE FROM owners WHERE id = $1
			AND NOT EXISTS (SELECT 1 FROM attempts WHERE state = 'running' AND owner = $1)`, id))
		if err != nil {
			return fmt.Errorf("store: remove owner %s: %w", id, err)
		}
		if n > 0 {
			return nil
		}
		var one int
		err = c.row(ctx, "SELECT 1 FROM owners WHERE id = $1", id).Scan(&one)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			return nil
		case err != nil:
			return fmt.Errorf("store: remove owner %s: %w", id, err)
		}
		return fmt.Errorf("store: remove owner %s: it owns running attempts: %w", id, ErrConflict)
	})
}
