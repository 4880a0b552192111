package store

import (
	"context"
	"database/sql"
	"fmt"
	"time"
)

// Stats is the state counted, for the operators' metrics (package
// metrics): every count is aggregated in the database, grouped by names
// that the workspace bounds (pipelines, pools, states), never by a date,
// a run or an attempt, so that its size does not grow with the history.
type Stats struct {
	// Now is the state's clock (Store.Now) when the counts were read.
	Now time.Time
	// Runs counts runs by pipeline and state (ordered by those).
	Runs []RunCount
	// Attempts counts attempts by pool and state: those running, and
	// every outcome since the state began (ordered by pool and state).
	Attempts []AttemptCount
	// Queued counts task instances in state queued by their pool, with
	// when the oldest of them was queued (ordered by pool).
	Queued []QueuedCount
	// Backfills counts backfills by state (ordered by state).
	Backfills []BackfillCount
	// BackfillRuns counts the runs of the backfills in state running,
	// by the backfill's pipeline and the run's state (ordered by those).
	BackfillRuns []RunCount
	// Notifications counts the outbox of notifications.
	Notifications NotificationCounts
}

// NotificationCounts is the outbox of notifications counted: Pending (to
// deliver: its depth), of which Failing have failed at least one try;
// Delivered and GaveUp since the state began; the oldest pending one's
// creation.
type NotificationCounts struct {
	Pending, Failing, Delivered, GaveUp int
	OldestPending                       time.Time
}

// RunCount is how many runs of a pipeline are in a state.
type RunCount struct {
	Pipeline string
	State    RunState
	Count    int
}

// AttemptCount is how many attempts of a pool are in a state.
type AttemptCount struct {
	Pool  string
	State AttemptState
	Count int
}

// QueuedCount is how many task instances of a pool are queued (routed,
// waiting for a slot), and since when the oldest one waits: its last
// change, by the clock of the rewind that queued it.
type QueuedCount struct {
	Pool   string
	Count  int
	Oldest time.Time
}

// BackfillCount is how many backfills are in a state.
type BackfillCount struct {
	State BackfillState
	Count int
}

// Stats reads the counts of Stats from one snapshot. Each statement is
// one GROUP BY: runs through the (pipeline, state) index, queued task
// instances through the (state, pool) index, the runs of running
// backfills through their pipeline's; attempts are counted whole.
func (s *sqlStore) Stats(ctx context.Context) (Stats, error) {
	var st Stats
	col := s.d.collate
	err := s.read(ctx, func(c conn) error {
		now, err := c.clock(ctx)
		if err != nil {
			return err
		}
		st.Now = now
		rows, err := c.query(ctx, `
			SELECT pipeline, state, COUNT(*) FROM runs
			GROUP BY pipeline, state ORDER BY pipeline`+col+`, state`+col)
		if st.Runs, err = scanAll(rows, err, scanRunCount); err != nil {
			return fmt.Errorf("runs: %w", err)
		}
		rows, err = c.query(ctx, `
			SELECT pool, state, COUNT(*) FROM attempts
			GROUP BY pool, state ORDER BY pool`+col+`, state`+col)
		st.Attempts, err = scanAll(rows, err, func(rows *sql.Rows) (AttemptCount, error) {
			var a AttemptCount
			return a, rows.Scan(&a.Pool, &a.State, &a.Count)
		})
		if err != nil {
			return fmt.Errorf("attempts: %w", err)
		}
		rows, err = c.query(ctx, `
			SELECT pool, COUNT(*), MIN(updated_at) FROM task_instances
			WHERE state = 'queued'
			GROUP BY pool ORDER BY pool`+col)
		st.Queued, err = scanAll(rows, err, func(rows *sql.Rows) (QueuedCount, error) {
			var (
				q      QueuedCount
				oldest sql.NullInt64
			)
			err := rows.Scan(&q.Pool, &q.Count, &oldest)
			q.Oldest = fromNanos(oldest)
			return q, err
		})
		if err != nil {
			return fmt.Errorf("queued task instances: %w", err)
		}
		rows, err = c.query(ctx, `SELECT state, COUNT(*) FROM backfills GROUP BY state ORDER BY state`+col)
		st.Backfills, err = scanAll(rows, err, func(rows *sql.Rows) (BackfillCount, error) {
			var b BackfillCount
			return b, rows.Scan(&b.State, &b.Count)
		})
		if err != nil {
			return fmt.Errorf("backfills: %w", err)
		}
		rows, err = c.query(ctx, `
			SELECT b.pipeline, r.state, COUNT(*)
			FROM backfills b JOIN runs r ON r.pipeline = b.pipeline AND r.backfill_id = b.id
			WHERE b.state = 'running'
			GROUP BY b.pipeline, r.state ORDER BY b.pipeline`+col+`, r.state`+col)
		if st.BackfillRuns, err = scanAll(rows, err, scanRunCount); err != nil {
			return fmt.Errorf("runs of running backfills: %w", err)
		}
		var oldest sql.NullInt64
		n := &st.Notifications
		if err := c.row(ctx, `
			SELECT
				COALESCE(SUM(CASE WHEN delivered_at IS NULL AND gave_up_at IS NULL THEN 1 ELSE 0 END), 0),
				COALESCE(SUM(CASE WHEN delivered_at IS NULL AND gave_up_at IS NULL AND tries > 0 THEN 1 ELSE 0 END), 0),
				COALESCE(SUM(CASE WHEN delivered_at IS NOT NULL THEN 1 ELSE 0 END), 0),
				COALESCE(SUM(CASE WHEN gave_up_at IS NOT NULL THEN 1 ELSE 0 END), 0),
				MIN(CASE WHEN delivered_at IS NULL AND gave_up_at IS NULL THEN created_at END)
			FROM notifications`).Scan(&n.Pending, &n.Failing, &n.Delivered, &n.GaveUp, &oldest); err != nil {
			return fmt.Errorf("notifications: %w", err)
		}
		n.OldestPending = fromNanos(oldest)
		return nil
	})
	if err != nil {
		return Stats{}, fmt.Errorf("store: stats: %w", err)
	}
	return st, nil
}

func scanRunCount(rows *sql.Rows) (RunCount, error) {
	var r RunCount
	return r, rows.Scan(&r.Pipeline, &r.State, &r.Count)
}
