package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
)

// fence is the lease a Fenced store's writes are conditional on.
type fence struct {
	lease, holder string
	generation    int64
}

// Fenced returns a view of the store whose every write transaction first
// checks, inside that transaction, that the lease is held by holder at
// generation. In SQLite the check runs under the write lock that the
// transaction holds from BEGIN IMMEDIATE, so no takeover can come between
// the check and the write. The view shares the store's connections (and
// the enclosing transaction when made from InTx's Store).
func (s *sqliteStore) Fenced(lease, holder string, generation int64) Store {
	f := *s
	f.fence = &fence{lease: lease, holder: holder, generation: generation}
	return &f
}

// checkFence returns ErrFenced unless the store is unfenced or its lease is
// held as the fence says.
func (s *sqliteStore) checkFence(ctx context.Context, tx *sql.Tx) error {
	if s.fence == nil {
		return nil
	}
	f := s.fence
	var one int
	err := tx.QueryRowContext(ctx,
		"SELECT 1 FROM leases WHERE name = ? AND holder = ? AND generation = ?",
		f.lease, f.holder, f.generation).Scan(&one)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return fmt.Errorf("store: lease %s generation %d of %s: %w", f.lease, f.generation, f.holder, ErrFenced)
	case err != nil:
		return fmt.Errorf("store: check lease %s: %w", f.lease, err)
	}
	return nil
}

// bumpEpoch moves the epoch on by one, in the caller's transaction: what
// every operator command does with its change.
func bumpEpoch(ctx context.Context, tx *sql.Tx) error {
	if _, err := tx.ExecContext(ctx, `
		INSERT INTO epoch (id, n) VALUES (1, 1)
		ON CONFLICT (id) DO UPDATE SET n = epoch.n + 1`); err != nil {
		return fmt.Errorf("bump epoch: %w", err)
	}
	return nil
}

// Epoch reads the epoch: one primary-key read.
func (s *sqliteStore) Epoch(ctx context.Context) (int64, error) {
	var n int64
	err := s.rq().QueryRowContext(ctx, "SELECT n FROM epoch WHERE id = 1").Scan(&n)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("store: epoch: %w", err)
	}
	return n, nil
}

// Owners.

// Heartbeat upserts the owner row of the calling process.
func (s *sqliteStore) Heartbeat(ctx context.Context, p HeartbeatParams) error {
	if p.ID == "" {
		return errors.New("store: heartbeat: empty owner id")
	}
	return s.write(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `
			INSERT INTO owners (id, host, pid, pid_start, heartbeat_at, expires_at) VALUES (?, ?, ?, ?, ?, ?)
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
func (s *sqliteStore) GetOwner(ctx context.Context, id string) (Owner, error) {
	var (
		o           Owner
		pidStart    int64
		beat, until sql.NullInt64
	)
	err := s.rq().QueryRowContext(ctx,
		"SELECT id, host, pid, pid_start, heartbeat_at, expires_at FROM owners WHERE id = ?", id).
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
// row is what tells recovery they are alive).
func (s *sqliteStore) RemoveOwner(ctx context.Context, id string) error {
	return s.write(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `
			DELETE FROM owners WHERE id = ?1
			AND NOT EXISTS (SELECT 1 FROM attempts WHERE state = 'running' AND owner = ?1)`, id)
		if err != nil {
			return fmt.Errorf("store: remove owner %s: %w", id, err)
		}
		if n, err := res.RowsAffected(); err != nil {
			return fmt.Errorf("store: remove owner %s: %w", id, err)
		} else if n > 0 {
			return nil
		}
		var one int
		err = tx.QueryRowContext(ctx, "SELECT 1 FROM owners WHERE id = ?", id).Scan(&one)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			return nil
		case err != nil:
			return fmt.Errorf("store: remove owner %s: %w", id, err)
		}
		return fmt.Errorf("store: remove owner %s: it owns running attempts: %w", id, ErrConflict)
	})
}
