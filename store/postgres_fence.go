package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
)

// pgFence is the lease a Fenced store's writes are conditional on.
type pgFence struct {
	lease, holder string
	generation    int64
}

// Fenced returns a view of the store whose every write transaction first
// checks, inside that transaction, that the lease is held by holder at
// generation. The check reads the lease row FOR SHARE: a takeover (an
// UPDATE of that row by AcquireLease) waits until the fenced transaction
// has ended, so none can come between the check and the commit. The view
// shares the store's connections (and the enclosing transaction when made
// from InTx's Store).
func (s *pgStore) Fenced(lease, holder string, generation int64) Store {
	f := *s
	f.fence = &pgFence{lease: lease, holder: holder, generation: generation}
	return &f
}

// check returns ErrFenced unless f is nil or its lease is held as it says.
func (f *pgFence) check(ctx context.Context, tx *sql.Tx) error {
	if f == nil {
		return nil
	}
	var one int
	err := tx.QueryRowContext(ctx,
		"SELECT 1 FROM leases WHERE name = $1 AND holder = $2 AND generation = $3 FOR SHARE",
		f.lease, f.holder, f.generation).Scan(&one)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return fmt.Errorf("store: lease %s generation %d of %s: %w", f.lease, f.generation, f.holder, ErrFenced)
	case err != nil:
		return fmt.Errorf("store: check lease %s: %w", f.lease, err)
	}
	return nil
}

// pgBumpEpoch moves the epoch on by one, in the caller's transaction: what
// every operator command does with its change.
func pgBumpEpoch(ctx context.Context, tx *sql.Tx) error {
	if _, err := tx.ExecContext(ctx, `
		INSERT INTO epoch AS e (id, n) VALUES (1, 1)
		ON CONFLICT (id) DO UPDATE SET n = e.n + 1`); err != nil {
		return fmt.Errorf("bump epoch: %w", err)
	}
	return nil
}

// Epoch reads the epoch: one primary-key read.
func (s *pgStore) Epoch(ctx context.Context) (int64, error) {
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
func (s *pgStore) Heartbeat(ctx context.Context, p HeartbeatParams) error {
	if p.ID == "" {
		return errors.New("store: heartbeat: empty owner id")
	}
	return s.write(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `
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
func (s *pgStore) GetOwner(ctx context.Context, id string) (Owner, error) {
	var (
		o           Owner
		pidStart    int64
		beat, until sql.NullInt64
	)
	err := s.rq().QueryRowContext(ctx,
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
// guarded statement; with running attempts it is ErrConflict, and without
// the row nil.
func (s *pgStore) RemoveOwner(ctx context.Context, id string) error {
	return s.write(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `
			DELETE FROM owners WHERE id = $1
			AND NOT EXISTS (SELECT 1 FROM attempts WHERE state = 'running' AND owner = $1)`, id)
		if err != nil {
			return fmt.Errorf("store: remove owner %s: %w", id, err)
		}
		if n, err := res.RowsAffected(); err != nil {
			return fmt.Errorf("store: remove owner %s: %w", id, err)
		} else if n > 0 {
			return nil
		}
		var one int
		err = tx.QueryRowContext(ctx, "SELECT 1 FROM owners WHERE id = $1", id).Scan(&one)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			return nil
		case err != nil:
			return fmt.Errorf("store: remove owner %s: %w", id, err)
		}
		return fmt.Errorf("store: remove owner %s: it owns running attempts: %w", id, ErrConflict)
	})
}
