package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"
)

// sqliteSteps are the SQLite dialect's own steps. Its write transaction
// holds the whole database from BEGIN IMMEDIATE, so a step may read, decide
// and write row by row without anyone coming in between; prepared
// statements keep the row-by-row parts cheap.
type sqliteSteps struct{}

// materializeBatch is the number of runs per multi-row INSERT (5 values each
// plus 4 shared by all rows, well under SQLite's limit on bound parameters).
const materializeBatch = 256

// createRuns inserts the runs with prepared multi-row INSERTs of
// materializeBatch runs, then their task instances set-wise, one statement
// per task, for exactly the runs this call created: the transaction holds
// the write lock from its first statement, so those are the runs whose id
// is above the largest id at its start.
func (sqliteSteps) createRuns(ctx context.Context, c conn, p MaterializeRunsParams) (int, error) {
	var before int64
	if err := c.row(ctx, "SELECT COALESCE(MAX(id), 0) FROM runs").Scan(&before); err != nil {
		return 0, fmt.Errorf("store: materialize runs %s: %w", p.Pipeline, err)
	}
	now := nullNanos(p.Now)
	stmts := map[int]*sql.Stmt{}
	defer func() {
		for _, st := range stmts {
			_ = st.Close()
		}
	}()
	created := 0
	a := make([]any, 0, 4+5*materializeBatch)
	for lo := 0; lo < len(p.Runs); lo += materializeBatch {
		batch := p.Runs[lo:min(lo+materializeBatch, len(p.Runs))]
		st, ok := stmts[len(batch)]
		if !ok {
			var err error
			if st, err = c.prepare(ctx, insertRunsSQL(len(batch))); err != nil {
				return 0, fmt.Errorf("store: materialize runs %s: %w", p.Pipeline, err)
			}
			stmts[len(batch)] = st
		}
		a = append(a[:0], p.Pipeline, string(p.Kind), p.BackfillID, now)
		for _, r := range batch {
			a = append(a, formatDate(r.LogicalDate), nanos(r.LogicalDate), r.DS,
				formatDate(r.DataIntervalStart), formatDate(r.DataIntervalEnd))
		}
		n, err := affected(st.ExecContext(ctx, a...))
		if err != nil {
			return 0, fmt.Errorf("store: materialize runs %s from %s: %w", p.Pipeline, formatDate(batch[0].LogicalDate), err)
		}
		created += n
	}
	if created == 0 || len(p.Tasks) == 0 {
		return created, nil
	}
	insTask, err := c.prepare(ctx, `
		INSERT INTO task_instances (run_id, task, state, pool, updated_at, claim_backfill, claim_unix)
		SELECT id, $1, 'scheduled', $2, $3, CASE WHEN kind = 'backfill' THEN 1 ELSE 0 END, logical_unix FROM runs WHERE id > $4
		ON CONFLICT (run_id, task) DO NOTHING`)
	if err != nil {
		return 0, fmt.Errorf("store: materialize runs %s: %w", p.Pipeline, err)
	}
	defer insTask.Close()
	for _, t := range p.Tasks {
		if _, err := insTask.ExecContext(ctx, t.Name, t.Pool, now, before); err != nil {
			return 0, fmt.Errorf("store: materialize task %s.%s: %w", p.Pipeline, t.Name, err)
		}
	}
	return created, nil
}

// insertRunsSQL is the INSERT of n runs. Parameters ?1 to ?4 (pipeline,
// kind, backfill id, created at) are shared by every row; each row then has
// five of its own.
func insertRunsSQL(n int) string {
	var b strings.Builder
	b.WriteString(`INSERT INTO runs (pipeline, kind, backfill_id, created_at, logical_date, logical_unix, ds,
		data_interval_start, data_interval_end) VALUES `)
	for i := 0; i < n; i++ {
		if i > 0 {
			b.WriteString(", ")
		}
		k := 5 + 5*i
		fmt.Fprintf(&b, "(?1, ?2, ?3, ?4, ?%d, ?%d, ?%d, ?%d, ?%d)", k, k+1, k+2, k+3, k+4)
	}
	b.WriteString(" ON CONFLICT (pipeline, logical_unix) DO NOTHING")
	return b.String()
}

// insertAttempts inserts the attempts one row at a time; one that exists
// already for its try is ErrConflict.
func (sqliteSteps) insertAttempts(ctx context.Context, c conn, as []*Attempt, now time.Time) error {
	for _, a := range as {
		newAttempt(a, now)
		err := c.row(ctx, `
			INSERT INTO attempts (task_instance_id, try_number, pool, state, host, pid, pid_start,
			                      started_at, log_path, reason, owner, nonce)
			VALUES ($1, $2, $3, 'running', $4, 0, 0, $5, $6, $7, $8, $9)
			ON CONFLICT (task_instance_id, try_number) DO NOTHING
			RETURNING id`,
			a.TaskInstanceID, a.TryNumber, a.Pool, a.Host, nullNanos(now), a.LogPath, a.Reason, a.Owner, a.Nonce).Scan(&a.ID)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("attempt %d exists: %w", a.TryNumber, ErrConflict)
		}
		if err != nil {
			return fmt.Errorf("insert attempt: %w", err)
		}
	}
	return nil
}

// enqueue runs one prepared guarded UPDATE per item, in order.
func (sqliteSteps) enqueue(ctx context.Context, c conn, p EnqueueTasksParams) (int, error) {
	st, err := c.prepare(ctx, `
		UPDATE task_instances
		SET state = 'queued', pool = CASE WHEN $1 = '' THEN pool ELSE $1 END,
		    reason = $2, priority = $3, log_path = $4, next_try_at = NULL, updated_at = $5
		WHERE id = $6 AND (state = 'scheduled'
		                   OR (state = 'up_for_retry' AND (next_try_at IS NULL OR next_try_at <= $5)))`)
	if err != nil {
		return 0, fmt.Errorf("store: enqueue tasks: %w", err)
	}
	defer st.Close()
	now := nanos(p.Now)
	moved := 0
	for _, it := range p.Items {
		n, err := affected(st.ExecContext(ctx, it.Pool, it.Reason, it.Priority, it.LogPath, now, it.TaskInstanceID))
		if err != nil {
			return 0, fmt.Errorf("store: enqueue task instance %d: %w", it.TaskInstanceID, err)
		}
		moved += n
	}
	return moved, nil
}

// claim reads the candidates (claimCandidates), picks among them in Go
// (pickCandidates) and claims them (claimQueued).
func (st sqliteSteps) claim(ctx context.Context, c conn, p ClaimReadyParams) ([]ClaimedAttempt, error) {
	cands, err := st.claimCandidates(ctx, c, p)
	if err != nil || len(cands) == 0 {
		return nil, err
	}
	cands = pickCandidates(p, cands)
	if len(cands) == 0 {
		return nil, nil
	}
	return st.claimQueued(ctx, c, p, cands)
}

// claimCandidates reads the pools' room (poolRooms), then each pool's
// candidates with its own query, in claim order, LIMIT its free slots.
func (sqliteSteps) claimCandidates(ctx context.Context, c conn, p ClaimReadyParams) ([]claimCandidate, error) {
	rooms, err := poolRooms(ctx, c, p)
	if err != nil {
		return nil, err
	}
	var out []claimCandidate
	for _, room := range rooms {
		a := args{room.pool}
		free := a.add(room.free)
		q := claimCandidatesSQL(c.d, &a, p, "$1", free, a.add(max(min(room.free, room.freeBackfill), 0)))
		rows, err := c.query(ctx, q, a...)
		got, err := scanAll(rows, err, func(rows *sql.Rows) (claimCandidate, error) {
			cd := claimCandidate{pool: room.pool, free: room.free, freeBackfill: room.freeBackfill}
			var bf int
			err := rows.Scan(&cd.id, &bf, &cd.logicalUnix, &cd.priority)
			cd.backfill = bf == 1
			return cd, err
		})
		if err != nil {
			return nil, fmt.Errorf("store: claim ready: pool %s: %w", room.pool, err)
		}
		out = append(out, got...)
	}
	return out, nil
}

// claimQueued claims the candidates one by one: a guarded UPDATE ...
// RETURNING, the run's context, the attempt row.
func (sqliteSteps) claimQueued(ctx context.Context, c conn, p ClaimReadyParams, cands []claimCandidate) ([]ClaimedAttempt, error) {
	var out []ClaimedAttempt
	for _, cd := range cands {
		var (
			ca            ClaimedAttempt
			kind, logical string
		)
		ca.TaskInstanceID = cd.id
		err := c.row(ctx, `
			UPDATE task_instances SET state = 'running', try_number = try_number + 1, updated_at = $1
			WHERE id = $2 AND state = 'queued'
			RETURNING try_number, pool, reason, log_path, task, run_id`,
			nullNanos(p.Now), cd.id).Scan(&ca.TryNumber, &ca.Pool, &ca.Reason, &ca.LogPath, &ca.Task, &ca.RunID)
		if errors.Is(err, sql.ErrNoRows) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("store: claim task instance %d: %w", cd.id, err)
		}
		if err := c.row(ctx, "SELECT pipeline, kind, logical_date FROM runs WHERE id = $1", ca.RunID).
			Scan(&ca.Pipeline, &kind, &logical); err != nil {
			return nil, fmt.Errorf("store: claim task instance %d: run %d: %w", cd.id, ca.RunID, err)
		}
		ca.Kind = RunKind(kind)
		if ca.LogicalDate, err = parseDate(logical); err != nil {
			return nil, err
		}
		ca.Host, ca.Owner = p.Host, p.Owner
		if err := (sqliteSteps{}).insertAttempts(ctx, c, []*Attempt{&ca.Attempt}, p.Now); err != nil {
			return nil, fmt.Errorf("store: claim task instance %d: %w", cd.id, err)
		}
		out = append(out, ca)
	}
	return out, nil
}

// clearTasks puts the runs back to queued first (found through the task
// instances that cond selects, before they change), then the task
// instances back to scheduled.
func (sqliteSteps) clearTasks(ctx context.Context, c conn, cond func(*args) string, _ []string, now any) (int, error) {
	var a args
	if _, err := c.exec(ctx, `
		UPDATE runs SET state = 'queued', started_at = NULL, ended_at = NULL
		WHERE state IN ('success', 'failed') AND id IN (
			SELECT ti.run_id FROM task_instances ti JOIN runs r ON r.id = ti.run_id WHERE `+cond(&a)+`)`,
		a...); err != nil {
		return 0, fmt.Errorf("runs: %w", err)
	}
	a = nil
	return affected(c.exec(ctx, `
		UPDATE task_instances SET state = 'scheduled', failures = 0, next_try_at = NULL, updated_at = `+a.add(now)+`
		WHERE id IN (SELECT ti.id FROM task_instances ti JOIN runs r ON r.id = ti.run_id WHERE `+cond(&a)+`)`, a...))
}

// admitRuns runs AdmitRun's guarded UPDATE for each item it applies.
func (sqliteSteps) admitRuns(ctx context.Context, c conn, ps []AdmitRunParams, apply []bool) ([]bool, error) {
	ok := make([]bool, len(ps))
	for i, p := range ps {
		if !apply[i] {
			continue
		}
		n, err := affected(c.exec(ctx,
			"UPDATE runs SET state = 'running', started_at = $1, ended_at = NULL WHERE id = $2 AND state = 'queued'",
			nullNanos(p.Now), p.RunID))
		if err != nil {
			return nil, fmt.Errorf("run %d: %w", p.RunID, err)
		}
		ok[i] = n > 0
	}
	return ok, nil
}

// finishRuns runs finishRunSQL for each item it applies, and ends the runs
// covered by those it finished.
func (sqliteSteps) finishRuns(ctx context.Context, c conn, ps []FinishRunParams, apply []bool) ([]bool, error) {
	ok := make([]bool, len(ps))
	leaders := map[int64]bool{}
	if len(ps) > 1 {
		for i, p := range ps {
			leaders[p.RunID] = apply[i]
		}
	}
	for i, p := range ps {
		if !apply[i] {
			continue
		}
		if len(leaders) > 0 {
			// A run covered by a leader of this batch is the leader's to
			// end, whatever the order of the two (as on PostgreSQL).
			var of int64
			if err := c.row(ctx, `SELECT batch_of FROM runs WHERE id = $1`, p.RunID).Scan(&of); err != nil && !errors.Is(err, sql.ErrNoRows) {
				return nil, fmt.Errorf("run %d: %w", p.RunID, err)
			}
			if of != 0 && leaders[of] {
				continue
			}
		}
		n, err := affected(c.exec(ctx, finishRunSQL, string(p.State), nullNanos(p.Now), p.RunID))
		if err != nil {
			return nil, fmt.Errorf("run %d: %w", p.RunID, err)
		}
		if n == 0 {
			continue
		}
		if err := finishCovered(ctx, c, p.RunID, p.State, nullNanos(p.Now)); err != nil {
			return nil, fmt.Errorf("run %d: %w", p.RunID, err)
		}
		ok[i] = true
	}
	return ok, nil
}

// startAttempts runs StartAttempt's guarded UPDATE for each item it applies.
func (sqliteSteps) startAttempts(ctx context.Context, c conn, ps []StartAttemptParams, apply []bool) ([]bool, error) {
	ok := make([]bool, len(ps))
	for i, p := range ps {
		if !apply[i] {
			continue
		}
		n, err := affected(c.exec(ctx, `
			UPDATE attempts SET pid = $1, pid_start = $2, job_id = $3, started_at = $4
			WHERE id = $5 AND state = 'running' AND pid = 0 AND job_id = ''
			  AND EXISTS (SELECT 1 FROM task_instances ti
			              WHERE ti.id = attempts.task_instance_id AND ti.state = 'running'
			                AND ti.try_number = attempts.try_number)`,
			p.PID, int64(p.PIDStart), p.JobID, nullNanos(p.Now), p.AttemptID))
		if err != nil {
			return nil, fmt.Errorf("attempt %d: %w", p.AttemptID, err)
		}
		ok[i] = n > 0
	}
	return ok, nil
}

// finishAttempts records each applied item's outcome (guarded on the
// attempt running), then moves its task instance if it still runs on the
// attempt's try.
func (sqliteSteps) finishAttempts(ctx context.Context, c conn, ps []FinishAttemptParams, apply []bool) ([]bool, error) {
	ok := make([]bool, len(ps))
	for i, p := range ps {
		if !apply[i] {
			continue
		}
		now := nullNanos(p.Now)
		var exit any
		if p.ExitCode != nil {
			exit = int64(*p.ExitCode)
		}
		var taskID int64
		var try int
		err := c.row(ctx, `
			UPDATE attempts SET state = $1, ended_at = $2, exit_code = $3, signal = $4, peak_rss = $5
			WHERE id = $6 AND state = 'running'
			RETURNING task_instance_id, try_number`,
			string(p.State), now, exit, p.Signal, p.PeakRSS, p.AttemptID).Scan(&taskID, &try)
		if errors.Is(err, sql.ErrNoRows) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("attempt %d: %w", p.AttemptID, err)
		}
		if _, err := c.exec(ctx, `
			UPDATE task_instances
			SET state = $1, failures = failures + $2, next_try_at = $3, updated_at = $4
			WHERE id = $5 AND state = 'running' AND try_number = $6`,
			string(p.TaskState), boolInt(p.CountFailure), nullNanos(p.NextTryAt), now, taskID, try); err != nil {
			return nil, fmt.Errorf("attempt %d: task instance %d: %w", p.AttemptID, taskID, err)
		}
		ok[i] = true
	}
	return ok, nil
}
