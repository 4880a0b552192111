package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sort"
	"strings"
)

// EnqueueTasks moves each listed task instance scheduled -> queued, or
// up_for_retry -> queued once its next_try_at has come, with one guarded
// UPDATE per item, all in one transaction; it returns how many moved.
func (s *sqliteStore) EnqueueTasks(ctx context.Context, p EnqueueTasksParams) (int, error) {
	if len(p.Items) == 0 {
		return 0, nil
	}
	moved := 0
	err := s.write(ctx, func(tx *sql.Tx) error {
		st, err := tx.PrepareContext(ctx, `
			UPDATE task_instances
			SET state = 'queued', pool = CASE WHEN ?1 = '' THEN pool ELSE ?1 END,
			    reason = ?2, priority = ?3, log_path = ?4, next_try_at = NULL, updated_at = ?5
			WHERE id = ?6 AND (state = 'scheduled'
			                   OR (state = 'up_for_retry' AND (next_try_at IS NULL OR next_try_at <= ?5)))`)
		if err != nil {
			return fmt.Errorf("store: enqueue tasks: %w", err)
		}
		defer st.Close()
		now := nanos(p.Now)
		for _, it := range p.Items {
			res, err := st.ExecContext(ctx, it.Pool, it.Reason, it.Priority, it.LogPath, now, it.TaskInstanceID)
			if err != nil {
				return fmt.Errorf("store: enqueue task instance %d: %w", it.TaskInstanceID, err)
			}
			n, err := res.RowsAffected()
			if err != nil {
				return fmt.Errorf("store: enqueue task instance %d: %w", it.TaskInstanceID, err)
			}
			moved += int(n)
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	return moved, nil
}

// claimCandidate is a queued task instance ClaimReady may take, with its
// sort key.
type claimCandidate struct {
	id          int64
	pool        string
	backfill    bool
	logicalUnix int64
	priority    int
}

// ClaimReady claims queued task instances in one write transaction. SQLite
// has one writer at a time and the transaction holds the write lock from
// BEGIN IMMEDIATE, so the capacity it reads (running attempts per pool, and
// of backfill runs) cannot change before it commits, in this process or
// another. For each pool with room it reads at most min(free slots, Limit)
// queued candidates in claim order, which is all that pool can take; the
// pools' candidates are then merged in the same order and the first Limit
// are claimed, each with a guarded UPDATE ... RETURNING and its attempt row.
func (s *sqliteStore) ClaimReady(ctx context.Context, p ClaimReadyParams) ([]ClaimedAttempt, error) {
	if p.Limit <= 0 || len(p.Pools) == 0 {
		return nil, nil
	}
	seen := map[string]bool{}
	for _, pc := range p.Pools {
		if seen[pc.Name] {
			return nil, fmt.Errorf("store: claim ready: pool %q listed twice", pc.Name)
		}
		seen[pc.Name] = true
	}
	var out []ClaimedAttempt
	err := s.write(ctx, func(tx *sql.Tx) error {
		out = nil
		running, backfillRunning, err := runningByPool(ctx, tx, p.Pools)
		if err != nil {
			return err
		}
		var cands []claimCandidate
		for _, pc := range p.Pools {
			free := min(pc.Slots-running[pc.Name], p.Limit)
			if free <= 0 {
				continue
			}
			freeBackfill := pc.BackfillSlots - backfillRunning[pc.Name]
			got, err := claimCandidates(ctx, tx, p, pc.Name, free, freeBackfill)
			if err != nil {
				return err
			}
			cands = append(cands, got...)
		}
		sort.SliceStable(cands, func(i, j int) bool { return claimBefore(cands[i], cands[j], p.ReverseBackfill) })
		if len(cands) > p.Limit {
			cands = cands[:p.Limit]
		}
		for _, c := range cands {
			ca, ok, err := claimQueued(ctx, tx, p, c.id)
			if err != nil {
				return err
			}
			if ok {
				out = append(out, ca)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// claimBefore is ClaimReady's order: scheduled and manual runs before
// backfill runs, then the logical date (backfill runs newest first when
// reverse), then priority, then id.
func claimBefore(a, b claimCandidate, reverse bool) bool {
	if a.backfill != b.backfill {
		return !a.backfill
	}
	if a.logicalUnix != b.logicalUnix {
		if a.backfill && reverse {
			return a.logicalUnix > b.logicalUnix
		}
		return a.logicalUnix < b.logicalUnix
	}
	if a.priority != b.priority {
		return a.priority < b.priority
	}
	return a.id < b.id
}

// runningByPool counts the running attempts of the given pools, and those of
// backfill runs, from the attempts themselves.
func runningByPool(ctx context.Context, tx *sql.Tx, pools []PoolCapacity) (all, backfill map[string]int, err error) {
	args := make([]any, len(pools))
	for i, pc := range pools {
		args[i] = pc.Name
	}
	rows, err := tx.QueryContext(ctx, `
		SELECT a.pool, COUNT(*), SUM(CASE WHEN r.kind = 'backfill' THEN 1 ELSE 0 END)
		FROM attempts a
		JOIN task_instances ti ON ti.id = a.task_instance_id
		JOIN runs r ON r.id = ti.run_id
		WHERE a.state = 'running' AND a.pool IN (`+placeholders(len(args))+`)
		GROUP BY a.pool`, args...)
	if err != nil {
		return nil, nil, fmt.Errorf("store: claim ready: running attempts: %w", err)
	}
	defer rows.Close()
	all, backfill = map[string]int{}, map[string]int{}
	for rows.Next() {
		var pool string
		var n, bf int
		if err := rows.Scan(&pool, &n, &bf); err != nil {
			return nil, nil, fmt.Errorf("store: claim ready: running attempts: %w", err)
		}
		all[pool], backfill[pool] = n, bf
	}
	if err := rows.Err(); err != nil {
		return nil, nil, fmt.Errorf("store: claim ready: running attempts: %w", err)
	}
	return all, backfill, nil
}

// claimCandidates reads, in claim order, the queued task instances of one
// pool that it can take: at most free, of which at most freeBackfill of
// backfill runs (which come last in the order, so reading stops there).
func claimCandidates(ctx context.Context, tx *sql.Tx, p ClaimReadyParams, pool string, free, freeBackfill int) ([]claimCandidate, error) {
	conds := []string{"ti.state = 'queued'", "ti.pool = ?"}
	args := []any{pool}
	if len(p.Pipelines) > 0 {
		conds = append(conds, "r.pipeline IN ("+placeholders(len(p.Pipelines))+")")
		for _, name := range p.Pipelines {
			args = append(args, name)
		}
	}
	if p.BackfillID == "" || freeBackfill <= 0 {
		conds = append(conds, "r.kind <> 'backfill'")
	} else {
		conds = append(conds, "(r.kind <> 'backfill' OR r.backfill_id = ?)")
		args = append(args, p.BackfillID)
	}
	order := "bf, r.logical_unix, ti.priority, ti.id"
	if p.ReverseBackfill {
		order = "bf, CASE WHEN r.kind = 'backfill' THEN r.logical_unix END DESC, r.logical_unix, ti.priority, ti.id"
	}
	args = append(args, free)
	rows, err := tx.QueryContext(ctx, `
		SELECT ti.id, CASE WHEN r.kind = 'backfill' THEN 1 ELSE 0 END AS bf, r.logical_unix, ti.priority
		FROM task_instances ti
		JOIN runs r ON r.id = ti.run_id
		WHERE `+strings.Join(conds, " AND ")+`
		ORDER BY `+order+`
		LIMIT ?`, args...)
	if err != nil {
		return nil, fmt.Errorf("store: claim ready: pool %s: %w", pool, err)
	}
	defer rows.Close()
	var out []claimCandidate
	backfills := 0
	for rows.Next() {
		c := claimCandidate{pool: pool}
		var bf int
		if err := rows.Scan(&c.id, &bf, &c.logicalUnix, &c.priority); err != nil {
			return nil, fmt.Errorf("store: claim ready: pool %s: %w", pool, err)
		}
		c.backfill = bf == 1
		if c.backfill {
			if backfills >= freeBackfill {
				break
			}
			backfills++
		}
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: claim ready: pool %s: %w", pool, err)
	}
	return out, nil
}

// claimQueued moves one task instance queued -> running (guarded) and
// inserts its attempt; ok is false when it was no longer queued.
func claimQueued(ctx context.Context, tx *sql.Tx, p ClaimReadyParams, id int64) (ClaimedAttempt, bool, error) {
	var (
		ca               ClaimedAttempt
		kind, logical    string
		pool, reason, lp string
		try              int
	)
	err := tx.QueryRowContext(ctx, `
		UPDATE task_instances SET state = 'running', try_number = try_number + 1, updated_at = ?
		WHERE id = ? AND state = 'queued'
		RETURNING try_number, pool, reason, log_path, task, run_id`,
		nullNanos(p.Now), id).Scan(&try, &pool, &reason, &lp, &ca.Task, &ca.RunID)
	if errors.Is(err, sql.ErrNoRows) {
		return ClaimedAttempt{}, false, nil
	}
	if err != nil {
		return ClaimedAttempt{}, false, fmt.Errorf("store: claim task instance %d: %w", id, err)
	}
	if err := tx.QueryRowContext(ctx, "SELECT pipeline, kind, logical_date FROM runs WHERE id = ?", ca.RunID).
		Scan(&ca.Pipeline, &kind, &logical); err != nil {
		return ClaimedAttempt{}, false, fmt.Errorf("store: claim task instance %d: run %d: %w", id, ca.RunID, err)
	}
	ca.Kind = RunKind(kind)
	if ca.LogicalDate, err = parseDate(logical); err != nil {
		return ClaimedAttempt{}, false, err
	}
	ca.Attempt = Attempt{
		TaskInstanceID: id,
		TryNumber:      try,
		Pool:           pool,
		Host:           p.Host,
		Owner:          p.Owner,
		LogPath:        lp,
		Reason:         reason,
	}
	if err := insertAttempt(ctx, tx, &ca.Attempt, p.Now); err != nil {
		return ClaimedAttempt{}, false, fmt.Errorf("store: claim task instance %d: %w", id, err)
	}
	return ca, true, nil
}

// Usage counts running attempts (by the attempt's pool) and queued task
// instances (by the task instance's pool) in one statement, read from one
// snapshot.
func (s *sqliteStore) Usage(ctx context.Context) ([]UsageRow, error) {
	rows, err := s.rq().QueryContext(ctx, `
		SELECT pool, pipeline, task, bf, SUM(running), SUM(queued)
		FROM (
			SELECT a.pool AS pool, r.pipeline AS pipeline, ti.task AS task,
			       CASE WHEN r.kind = 'backfill' THEN 1 ELSE 0 END AS bf, 1 AS running, 0 AS queued
			FROM attempts a
			JOIN task_instances ti ON ti.id = a.task_instance_id
			JOIN runs r ON r.id = ti.run_id
			WHERE a.state = 'running'
			UNION ALL
			SELECT ti.pool, r.pipeline, ti.task,
			       CASE WHEN r.kind = 'backfill' THEN 1 ELSE 0 END, 0, 1
			FROM task_instances ti
			JOIN runs r ON r.id = ti.run_id
			WHERE ti.state = 'queued'
		) u
		GROUP BY pool, pipeline, task, bf
		ORDER BY pool, pipeline, task, bf`)
	if err != nil {
		return nil, fmt.Errorf("store: usage: %w", err)
	}
	defer rows.Close()
	var out []UsageRow
	for rows.Next() {
		var u UsageRow
		var bf int
		if err := rows.Scan(&u.Pool, &u.Pipeline, &u.Task, &bf, &u.Running, &u.Queued); err != nil {
			return nil, fmt.Errorf("store: usage: %w", err)
		}
		u.Backfill = bf == 1
		out = append(out, u)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: usage: %w", err)
	}
	return out, nil
}
