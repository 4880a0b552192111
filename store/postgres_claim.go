package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"sort"
	"strings"
)

// EnqueueTasks moves each listed task instance scheduled -> queued, or
// up_for_retry -> queued once its next_try_at has come, in one guarded
// UPDATE over the unnested items; it returns how many moved. An id listed
// twice is routed by its first item, as if the items were applied in order.
func (s *pgStore) EnqueueTasks(ctx context.Context, p EnqueueTasksParams) (int, error) {
	if len(p.Items) == 0 {
		return 0, nil
	}
	var (
		ids                   []int64
		pools, reasons, paths []string
		prios                 []int64
		seen                  = make(map[int64]bool, len(p.Items))
	)
	for _, it := range p.Items {
		if seen[it.TaskInstanceID] {
			continue
		}
		seen[it.TaskInstanceID] = true
		ids = append(ids, it.TaskInstanceID)
		pools, reasons, paths = append(pools, it.Pool), append(reasons, it.Reason), append(paths, it.LogPath)
		prios = append(prios, int64(it.Priority))
	}
	moved := 0
	err := s.write(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `
			UPDATE task_instances ti
			SET state = 'queued', pool = CASE WHEN i.pool = '' THEN ti.pool ELSE i.pool END,
			    reason = i.reason, priority = i.priority, log_path = i.log_path, next_try_at = NULL, updated_at = $1
			FROM unnest($2::bigint[], $3::text[], $4::text[], $5::text[], $6::bigint[]) AS i (id, pool, reason, log_path, priority)
			WHERE ti.id = i.id
			  AND (ti.state = 'scheduled'
			       OR (ti.state = 'up_for_retry' AND (ti.next_try_at IS NULL OR ti.next_try_at <= $1)))`,
			nanos(p.Now), ids, pools, reasons, paths, prios)
		if err != nil {
			return fmt.Errorf("store: enqueue tasks: %w", err)
		}
		n, err := res.RowsAffected()
		if err != nil {
			return fmt.Errorf("store: enqueue tasks: %w", err)
		}
		moved = int(n)
		return nil
	})
	if err != nil {
		return 0, err
	}
	return moved, nil
}

// pgPoolLockKey is the advisory lock key of a pool.
func pgPoolLockKey(pool string) int32 {
	h := fnv.New32a()
	_, _ = h.Write([]byte(pgPoolLockBase + pool))
	return int32(h.Sum32())
}

// pgLockPools takes the advisory transaction locks of the pools, in key
// order (so that two claimers with overlapping pools cannot deadlock, even
// when two names share a key).
func pgLockPools(ctx context.Context, tx *sql.Tx, pools []PoolCapacity) error {
	keys := make([]int32, 0, len(pools))
	for _, pc := range pools {
		keys = append(keys, pgPoolLockKey(pc.Name))
	}
	slices.Sort(keys)
	keys = slices.Compact(keys)
	for _, k := range keys {
		if _, err := tx.ExecContext(ctx, "SELECT pg_advisory_xact_lock($1, $2)", pgLockSpace, k); err != nil {
			return fmt.Errorf("lock pools: %w", err)
		}
	}
	return nil
}

// ClaimReady claims queued task instances in one transaction. It first takes
// the advisory lock of every pool it claims in, then (in later statements,
// which at READ COMMITTED see every claim committed before the locks were
// granted) counts the running attempts of those pools and reads, per pool,
// at most min(free slots, Limit) queued candidates in claim order, of which
// at most the free backfill slots of backfill runs: all that pool can take.
// The candidates are merged in claim order, the first Limit claimed with one
// guarded UPDATE (queued -> running) and their attempts inserted. A claimer
// of another pool set runs alongside; one of the same pools waits.
func (s *pgStore) ClaimReady(ctx context.Context, p ClaimReadyParams) ([]ClaimedAttempt, error) {
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
		if err := pgLockPools(ctx, tx, p.Pools); err != nil {
			return fmt.Errorf("store: claim ready: %w", err)
		}
		running, backfillRunning, err := pgRunningByPool(ctx, tx, p.Pools)
		if err != nil {
			return err
		}
		var (
			names             []string
			frees, freeBackfs []int64
		)
		freeBackfill := map[string]int{}
		for _, pc := range p.Pools {
			free := min(pc.Slots-running[pc.Name], p.Limit)
			if free <= 0 {
				continue
			}
			fb := pc.BackfillSlots - backfillRunning[pc.Name]
			freeBackfill[pc.Name] = fb
			names, frees, freeBackfs = append(names, pc.Name), append(frees, int64(free)), append(freeBackfs, int64(fb))
		}
		if len(names) == 0 {
			return nil
		}
		cands, err := pgClaimCandidates(ctx, tx, p, names, frees, freeBackfs)
		if err != nil {
			return err
		}
		// Per pool, backfill candidates come last in the order: drop those
		// beyond the pool's free backfill slots.
		taken := map[string]int{}
		kept := cands[:0]
		for _, c := range cands {
			if c.backfill {
				if taken[c.pool] >= freeBackfill[c.pool] {
					continue
				}
				taken[c.pool]++
			}
			kept = append(kept, c)
		}
		cands = kept
		sort.SliceStable(cands, func(i, j int) bool { return claimBefore(cands[i], cands[j], p.ReverseBackfill) })
		if len(cands) > p.Limit {
			cands = cands[:p.Limit]
		}
		if len(cands) == 0 {
			return nil
		}
		out, err = pgClaimQueued(ctx, tx, p, cands)
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// pgRunningByPool counts the running attempts of the given pools, and those
// of backfill runs, from the attempts themselves.
func pgRunningByPool(ctx context.Context, tx *sql.Tx, pools []PoolCapacity) (all, backfill map[string]int, err error) {
	names := make([]string, len(pools))
	for i, pc := range pools {
		names[i] = pc.Name
	}
	rows, err := tx.QueryContext(ctx, `
		SELECT a.pool, COUNT(*), COUNT(*) FILTER (WHERE r.kind = 'backfill')
		FROM attempts a
		JOIN task_instances ti ON ti.id = a.task_instance_id
		JOIN runs r ON r.id = ti.run_id
		WHERE a.state = 'running' AND a.pool = ANY($1::text[])
		GROUP BY a.pool`, names)
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

// pgClaimCandidates reads, for each pool (names[i] with frees[i] free slots
// and freeBackfs[i] free backfill slots), its first frees[i] queued task
// instances in claim order: one LATERAL query for all pools.
func pgClaimCandidates(ctx context.Context, tx *sql.Tx, p ClaimReadyParams, names []string, frees, freeBackfs []int64) ([]claimCandidate, error) {
	args := pgArgs{names, frees, freeBackfs}
	conds := []string{"ti.state = 'queued'", "ti.pool = pc.pool"}
	if len(p.Pipelines) > 0 {
		conds = append(conds, "r.pipeline = ANY("+args.add(p.Pipelines)+"::text[])")
	}
	if p.BackfillID == "" {
		conds = append(conds, "r.kind <> 'backfill'")
	} else {
		conds = append(conds, "(r.kind <> 'backfill' OR (pc.free_backfill > 0 AND r.backfill_id = "+args.add(p.BackfillID)+"))")
	}
	order := "bf, r.logical_unix, ti.priority, ti.id"
	if p.ReverseBackfill {
		order = "bf, CASE WHEN r.kind = 'backfill' THEN r.logical_unix END DESC, r.logical_unix, ti.priority, ti.id"
	}
	rows, err := tx.QueryContext(ctx, `
		SELECT c.id, pc.pool, c.bf, c.logical_unix, c.priority
		FROM unnest($1::text[], $2::bigint[], $3::bigint[]) AS pc (pool, free, free_backfill)
		CROSS JOIN LATERAL (
			SELECT ti.id, r.kind = 'backfill' AS bf, r.logical_unix, ti.priority
			FROM task_instances ti
			JOIN runs r ON r.id = ti.run_id
			WHERE `+strings.Join(conds, " AND ")+`
			ORDER BY `+order+`
			LIMIT pc.free
		) AS c`, args...)
	if err != nil {
		return nil, fmt.Errorf("store: claim ready: candidates: %w", err)
	}
	defer rows.Close()
	var out []claimCandidate
	for rows.Next() {
		var c claimCandidate
		if err := rows.Scan(&c.id, &c.pool, &c.backfill, &c.logicalUnix, &c.priority); err != nil {
			return nil, fmt.Errorf("store: claim ready: candidates: %w", err)
		}
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: claim ready: candidates: %w", err)
	}
	return out, nil
}

// pgClaimQueued moves the candidates queued -> running in one guarded
// UPDATE (those no longer queued are skipped) and inserts their attempts;
// the claims come back in the candidates' order.
func pgClaimQueued(ctx context.Context, tx *sql.Tx, p ClaimReadyParams, cands []claimCandidate) ([]ClaimedAttempt, error) {
	ids := make([]int64, len(cands))
	for i, c := range cands {
		ids[i] = c.id
	}
	rows, err := tx.QueryContext(ctx, `
		UPDATE task_instances ti SET state = 'running', try_number = ti.try_number + 1, updated_at = $2
		FROM runs r
		WHERE ti.id = ANY($1::bigint[]) AND ti.state = 'queued' AND r.id = ti.run_id
		RETURNING ti.id, ti.try_number, ti.pool, ti.reason, ti.log_path, ti.task, ti.run_id,
		          r.pipeline, r.kind, r.logical_date`,
		ids, nullNanos(p.Now))
	if err != nil {
		return nil, fmt.Errorf("store: claim ready: %w", err)
	}
	defer rows.Close()
	byID := make(map[int64]*ClaimedAttempt, len(cands))
	for rows.Next() {
		var (
			ca            ClaimedAttempt
			kind, logical string
		)
		if err := rows.Scan(&ca.TaskInstanceID, &ca.TryNumber, &ca.Pool, &ca.Reason, &ca.LogPath, &ca.Task, &ca.RunID,
			&ca.Pipeline, &kind, &logical); err != nil {
			return nil, fmt.Errorf("store: claim ready: %w", err)
		}
		ca.Kind = RunKind(kind)
		if ca.LogicalDate, err = parseDate(logical); err != nil {
			return nil, err
		}
		ca.Host, ca.Owner = p.Host, p.Owner
		byID[ca.TaskInstanceID] = &ca
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: claim ready: %w", err)
	}
	rows.Close()
	out := make([]ClaimedAttempt, 0, len(byID))
	as := make([]*Attempt, 0, len(byID))
	for _, c := range cands {
		if ca := byID[c.id]; ca != nil {
			out = append(out, *ca)
		}
	}
	for i := range out {
		as = append(as, &out[i].Attempt)
	}
	if err := pgInsertAttempts(ctx, tx, as, p.Now); err != nil {
		return nil, fmt.Errorf("store: claim ready: %w", err)
	}
	return out, nil
}

// Usage counts running attempts (by the attempt's pool) and queued task
// instances (by the task instance's pool) in one statement.
func (s *pgStore) Usage(ctx context.Context) ([]UsageRow, error) {
	rows, err := s.rq().QueryContext(ctx, `
		SELECT pool, pipeline, task, bf, SUM(running), SUM(queued)
		FROM (
			SELECT a.pool AS pool, r.pipeline AS pipeline, ti.task AS task,
			       r.kind = 'backfill' AS bf, 1 AS running, 0 AS queued
			FROM attempts a
			JOIN task_instances ti ON ti.id = a.task_instance_id
			JOIN runs r ON r.id = ti.run_id
			WHERE a.state = 'running'
			UNION ALL
			SELECT ti.pool, r.pipeline, ti.task, r.kind = 'backfill', 0, 1
			FROM task_instances ti
			JOIN runs r ON r.id = ti.run_id
			WHERE ti.state = 'queued'
		) AS u
		GROUP BY pool, pipeline, task, bf
		ORDER BY pool COLLATE "C", pipeline COLLATE "C", task COLLATE "C", bf`)
	if err != nil {
		return nil, fmt.Errorf("store: usage: %w", err)
	}
	defer rows.Close()
	var out []UsageRow
	for rows.Next() {
		var u UsageRow
		if err := rows.Scan(&u.Pool, &u.Pipeline, &u.Task, &u.Backfill, &u.Running, &u.Queued); err != nil {
			return nil, fmt.Errorf("store: usage: %w", err)
		}
		out = append(out, u)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: usage: %w", err)
	}
	return out, nil
}

// Outbox.

// pgRunCommittableSQL is RequestCommit's guard on the runs table aliased r:
// queued or running, every task instance succeeded or was skipped.
const pgRunCommittableSQL = `r.state IN ('queued', 'running')
	AND NOT EXISTS (SELECT 1 FROM task_instances ti WHERE ti.run_id = r.id
	                AND ti.state NOT IN ('success', 'skipped'))`

// RequestCommit locks the run's task instances and the run (FOR SHARE: a
// clear or a finish waits, or is waited for), inserts the run's outbox row
// under the guard (ON CONFLICT on the unique run_id keeps an existing row)
// and reads it back under the same guard.
func (s *pgStore) RequestCommit(ctx context.Context, p RequestCommitParams) (OutboxItem, error) {
	var it OutboxItem
	err := s.write(ctx, func(tx *sql.Tx) error {
		if err := pgLockRunTasks(ctx, tx, p.RunID); err != nil {
			return fmt.Errorf("store: request commit of run %d: %w", p.RunID, err)
		}
		if _, err := tx.ExecContext(ctx, "SELECT 1 FROM runs WHERE id = $1 FOR SHARE", p.RunID); err != nil {
			return fmt.Errorf("store: request commit of run %d: lock run: %w", p.RunID, err)
		}
		if _, err := tx.ExecContext(ctx, `
			INSERT INTO outbox (run_id, created_at)
			SELECT r.id, $1 FROM runs r WHERE r.id = $2 AND `+pgRunCommittableSQL+`
			ON CONFLICT (run_id) DO NOTHING`,
			nullNanos(p.Now), p.RunID); err != nil {
			return fmt.Errorf("store: request commit of run %d: %w", p.RunID, err)
		}
		var err error
		it, err = scanOutbox(tx.QueryRowContext(ctx, "SELECT "+outboxColumns+`
			FROM outbox o JOIN runs r ON r.id = o.run_id
			WHERE o.run_id = $1 AND `+pgRunCommittableSQL, p.RunID))
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("store: request commit of run %d: %w", p.RunID, pgMissingOr(ctx, tx, "runs", p.RunID))
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
func (s *pgStore) ListOutbox(ctx context.Context, pipelines []string) ([]OutboxItem, error) {
	q := "SELECT " + outboxColumns + " FROM outbox o JOIN runs r ON r.id = o.run_id"
	var args []any
	if len(pipelines) > 0 {
		q += " WHERE r.pipeline = ANY($1::text[])"
		args = append(args, pipelines)
	}
	// NULLS FIRST: SQLite's order for a row without a time.
	rows, err := s.rq().QueryContext(ctx, q+" ORDER BY o.created_at NULLS FIRST, o.id", args...)
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
// its run with pgFinishRunSQL after locking its task instances, in one
// transaction. When the guard refuses, the deletion is still committed and
// ErrConflict returned.
func (s *pgStore) CompleteCommit(ctx context.Context, p CompleteCommitParams) error {
	if p.State != RunSuccess && p.State != RunFailed {
		return fmt.Errorf("store: complete commit %d: state %q is not success or failed", p.OutboxID, p.State)
	}
	var runID int64
	finished := false
	err := s.write(ctx, func(tx *sql.Tx) error {
		err := tx.QueryRowContext(ctx, "DELETE FROM outbox WHERE id = $1 RETURNING run_id", p.OutboxID).Scan(&runID)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("store: complete commit %d: %w", p.OutboxID, ErrNotFound)
		}
		if err != nil {
			return fmt.Errorf("store: complete commit %d: %w", p.OutboxID, err)
		}
		if err := pgLockRunTasks(ctx, tx, runID); err != nil {
			return fmt.Errorf("store: complete commit %d: %w", p.OutboxID, err)
		}
		res, err := tx.ExecContext(ctx, pgFinishRunSQL, string(p.State), nullNanos(p.Now), runID)
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
