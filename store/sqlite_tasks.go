package store

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// ClaimTask moves a task instance scheduled|up_for_retry -> running with one
// guarded UPDATE ... RETURNING (so that of any number of claimers, in this
// process or another, exactly one wins) and inserts the attempt row in the
// same transaction. A non-empty Pool also becomes the task instance's pool
// (a retry escalated to a larger pool); an empty one keeps it.
func (s *sqliteStore) ClaimTask(ctx context.Context, p ClaimTaskParams) (Attempt, error) {
	var a Attempt
	err := s.write(ctx, func(tx *sql.Tx) error {
		var try int
		var pool string
		err := tx.QueryRowContext(ctx, `
			UPDATE task_instances
			SET state = 'running', try_number = try_number + 1, next_try_at = NULL,
			    pool = CASE WHEN ?1 = '' THEN pool ELSE ?1 END, updated_at = ?2
			WHERE id = ?3 AND state IN ('scheduled', 'up_for_retry')
			RETURNING try_number, pool`,
			p.Pool, nullNanos(p.Now), p.TaskInstanceID).Scan(&try, &pool)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("store: claim task instance %d: %w", p.TaskInstanceID,
				missingOr(ctx, tx, "task_instances", p.TaskInstanceID))
		}
		if err != nil {
			return fmt.Errorf("store: claim task instance %d: %w", p.TaskInstanceID, err)
		}
		a = Attempt{
			TaskInstanceID: p.TaskInstanceID,
			TryNumber:      try,
			Pool:           pool,
			Host:           p.Host,
			Owner:          p.Owner,
			LogPath:        p.LogPath,
			Reason:         p.Reason,
		}
		if err := insertAttempt(ctx, tx, &a, p.Now); err != nil {
			return fmt.Errorf("store: claim task instance %d: %w", p.TaskInstanceID, err)
		}
		return nil
	})
	if err != nil {
		return Attempt{}, err
	}
	return a, nil
}

// newNonce returns 32 hex characters from crypto/rand.
func newNonce() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read does not fail (it crashes the program instead)
	return hex.EncodeToString(b[:])
}

// insertAttempt inserts the running attempt of a claim: a carries the task
// instance, try, pool, host, owner, reason and the log template; it gets its
// id, nonce, state, start time and log path ({try} replaced).
func insertAttempt(ctx context.Context, tx *sql.Tx, a *Attempt, now time.Time) error {
	a.State = AttemptRunning
	a.StartedAt = stamp(now)
	a.Nonce = newNonce()
	a.LogPath = strings.ReplaceAll(a.LogPath, "{try}", strconv.Itoa(a.TryNumber))
	err := tx.QueryRowContext(ctx, `
		INSERT INTO attempts (task_instance_id, try_number, pool, state, host, pid, pid_start,
		                      started_at, log_path, reason, owner, nonce)
		VALUES (?, ?, ?, 'running', ?, 0, 0, ?, ?, ?, ?, ?)
		ON CONFLICT (task_instance_id, try_number) DO NOTHING
		RETURNING id`,
		a.TaskInstanceID, a.TryNumber, a.Pool, a.Host, nullNanos(now), a.LogPath, a.Reason, a.Owner, a.Nonce).Scan(&a.ID)
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("attempt %d exists: %w", a.TryNumber, ErrConflict)
	}
	if err != nil {
		return fmt.Errorf("insert attempt: %w", err)
	}
	return nil
}

// StartAttempt records the attempt's process in one guarded statement: the
// attempt is running and its task instance is running on the attempt's
// try. The task instance's state does not change.
func (s *sqliteStore) StartAttempt(ctx context.Context, p StartAttemptParams) error {
	return s.write(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `
			UPDATE attempts SET pid = ?, pid_start = ?, job_id = ?, started_at = ?
			WHERE id = ? AND state = 'running' AND pid = 0 AND job_id = ''
			  AND EXISTS (SELECT 1 FROM task_instances ti
			              WHERE ti.id = attempts.task_instance_id AND ti.state = 'running'
			                AND ti.try_number = attempts.try_number)`,
			p.PID, int64(p.PIDStart), p.JobID, nullNanos(p.Now), p.AttemptID)
		if err != nil {
			return fmt.Errorf("store: start attempt %d: %w", p.AttemptID, err)
		}
		return guarded(ctx, tx, res, "attempts", p.AttemptID, "start attempt")
	})
}

// FinishAttempt records an attempt's outcome (guarded: only a running attempt
// gets one, else ErrConflict) and moves its task instance to p.TaskState if
// the task instance is still running on this attempt's try. The outcome of a
// process is recorded even when the task instance was moved on meanwhile (by
// SetTaskStates): it is a fact about the process, and leaving the attempt
// running would make it look alive forever.
func (s *sqliteStore) FinishAttempt(ctx context.Context, p FinishAttemptParams) error {
	switch p.State {
	case AttemptSuccess, AttemptFailed, AttemptOOM, AttemptSkipped, AttemptInterrupted, AttemptLost:
	default:
		return fmt.Errorf("store: finish attempt %d: %q is not an outcome", p.AttemptID, p.State)
	}
	switch p.TaskState {
	case TaskQueued, TaskRunning:
		return fmt.Errorf("store: finish attempt %d: task state %q is not after an attempt", p.AttemptID, p.TaskState)
	}
	if !validTaskState(p.TaskState) {
		return fmt.Errorf("store: finish attempt %d: unknown task state %q", p.AttemptID, p.TaskState)
	}
	return s.write(ctx, func(tx *sql.Tx) error {
		now := nullNanos(p.Now)
		var exit any
		if p.ExitCode != nil {
			exit = int64(*p.ExitCode)
		}
		var taskID int64
		var try int
		err := tx.QueryRowContext(ctx, `
			UPDATE attempts SET state = ?, ended_at = ?, exit_code = ?, signal = ?, peak_rss = ?
			WHERE id = ? AND state = 'running'
			RETURNING task_instance_id, try_number`,
			string(p.State), now, exit, p.Signal, p.PeakRSS, p.AttemptID).Scan(&taskID, &try)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("store: finish attempt %d: %w", p.AttemptID, missingOr(ctx, tx, "attempts", p.AttemptID))
		}
		if err != nil {
			return fmt.Errorf("store: finish attempt %d: %w", p.AttemptID, err)
		}
		failed := 0
		if p.CountFailure {
			failed = 1
		}
		if _, err := tx.ExecContext(ctx, `
			UPDATE task_instances
			SET state = ?, failures = failures + ?, next_try_at = ?, updated_at = ?
			WHERE id = ? AND state = 'running' AND try_number = ?`,
			string(p.TaskState), failed, nullNanos(p.NextTryAt), now, taskID, try); err != nil {
			return fmt.Errorf("store: finish attempt %d: task instance %d: %w", p.AttemptID, taskID, err)
		}
		return nil
	})
}

func validTaskState(st TaskState) bool {
	switch st {
	case TaskScheduled, TaskQueued, TaskRunning, TaskSuccess, TaskFailed,
		TaskUpForRetry, TaskUpstreamFailed, TaskSkipped:
		return true
	}
	return false
}

// idChunk bounds the number of ids bound in one statement.
const idChunk = 500

// SetTaskStates moves the listed task instances that are in one of p.From to
// p.To, in one transaction, and returns how many moved.
func (s *sqliteStore) SetTaskStates(ctx context.Context, p SetTaskStatesParams) (int, error) {
	if !validTaskState(p.To) {
		return 0, fmt.Errorf("store: set task states: unknown state %q", p.To)
	}
	if len(p.IDs) == 0 || len(p.From) == 0 {
		return 0, nil
	}
	from := make([]any, len(p.From))
	for i, st := range p.From {
		from[i] = string(st)
	}
	moved := 0
	err := s.write(ctx, func(tx *sql.Tx) error {
		for start := 0; start < len(p.IDs); start += idChunk {
			ids := p.IDs[start:min(start+idChunk, len(p.IDs))]
			args := make([]any, 0, 2+len(ids)+len(from))
			args = append(args, string(p.To), nullNanos(p.Now))
			for _, id := range ids {
				args = append(args, id)
			}
			args = append(args, from...)
			res, err := tx.ExecContext(ctx,
				"UPDATE task_instances SET state = ?, updated_at = ? WHERE id IN ("+placeholders(len(ids))+
					") AND state IN ("+placeholders(len(from))+")", args...)
			if err != nil {
				return fmt.Errorf("store: set task states: %w", err)
			}
			n, err := res.RowsAffected()
			if err != nil {
				return fmt.Errorf("store: set task states: %w", err)
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

// runningAttemptsSQL reads the running attempts through the partial index
// attempts_running (in id order), never the finished ones.
const runningAttemptsSQL = "SELECT " + attemptColumns + `, r.pipeline, r.id, ti.task,
	       o.expires_at, r.kind, r.logical_date
	FROM attempts a
	JOIN task_instances ti ON ti.id = a.task_instance_id
	JOIN runs r ON r.id = ti.run_id
	LEFT JOIN owners o ON o.id = a.owner
	WHERE a.state = 'running'
	ORDER BY a.id`

// RunningAttempts lists the attempts in state running with their pipeline,
// run, task, run kind and logical date, and their owner's heartbeat expiry,
// ordered by attempt id.
func (s *sqliteStore) RunningAttempts(ctx context.Context) ([]RunningAttempt, error) {
	rows, err := s.rq().QueryContext(ctx, runningAttemptsSQL)
	if err != nil {
		return nil, fmt.Errorf("store: running attempts: %w", err)
	}
	defer rows.Close()
	var out []RunningAttempt
	for rows.Next() {
		var (
			ra                   RunningAttempt
			state, kind, logical string
			pidStart             int64
			started, ended, exit sql.NullInt64
			ownerExpires         sql.NullInt64
		)
		dest := attemptDest(&ra.Attempt, &state, &pidStart, &started, &ended, &exit)
		dest = append(dest, &ra.Pipeline, &ra.RunID, &ra.Task, &ownerExpires, &kind, &logical)
		if err := rows.Scan(dest...); err != nil {
			return nil, fmt.Errorf("store: running attempts: %w", err)
		}
		finishAttemptScan(&ra.Attempt, state, pidStart, started, ended, exit)
		ra.OwnerExpiresAt, ra.Kind = fromNanos(ownerExpires), RunKind(kind)
		if ra.LogicalDate, err = parseDate(logical); err != nil {
			return nil, fmt.Errorf("store: running attempts: %w", err)
		}
		out = append(out, ra)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: running attempts: %w", err)
	}
	return out, nil
}

// FindAttempt finds the attempt of a pipeline's task on a day (try 0: the
// latest try). A day with several runs (hourly schedules) resolves to its
// latest run.
func (s *sqliteStore) FindAttempt(ctx context.Context, p FindAttemptParams) (Attempt, error) {
	q := "SELECT " + attemptColumns + `
		FROM attempts a
		JOIN task_instances ti ON ti.id = a.task_instance_id
		JOIN runs r ON r.id = ti.run_id
		WHERE r.pipeline = ? AND r.ds = ? AND ti.task = ?`
	args := []any{p.Pipeline, p.DS, p.Task}
	if p.TryNumber > 0 {
		q += " AND a.try_number = ?"
		args = append(args, p.TryNumber)
	}
	// +r.logical_unix: find the day's runs through runs (pipeline, ds).
	q += " ORDER BY +r.logical_unix DESC, a.try_number DESC LIMIT 1"
	a, err := scanAttempt(s.rq().QueryRowContext(ctx, q, args...))
	if errors.Is(err, sql.ErrNoRows) {
		what := "latest try"
		if p.TryNumber > 0 {
			what = "try " + strconv.Itoa(p.TryNumber)
		}
		return Attempt{}, fmt.Errorf("store: attempt %s %s %s (%s): %w", p.Pipeline, p.DS, p.Task, what, ErrNotFound)
	}
	if err != nil {
		return Attempt{}, fmt.Errorf("store: find attempt %s %s %s: %w", p.Pipeline, p.DS, p.Task, err)
	}
	return a, nil
}

// ClearTasks puts the matching task instances back to scheduled with a fresh
// retry budget (their try numbers keep counting, so attempts stay unique) and
// puts their finished runs back to queued, and bumps the epoch, in one
// transaction. A run that is still running stays running: it is admitted
// already and the scheduler picks the cleared tasks up. Queued task
// instances are cleared too (no process has them); running or already
// scheduled ones are left alone. A run of a backfill that no longer runs is
// handed back to its pipeline (kind scheduled, no backfill): cleared, it
// commits to main, and one left queued is not held for good.
func (s *sqliteStore) ClearTasks(ctx context.Context, p ClearTasksParams) (int, error) {
	states := []any{"queued", "success", "failed", "up_for_retry", "upstream_failed", "skipped"}
	if p.OnlyFailed {
		states = []any{"failed", "upstream_failed"}
	}
	cond := "r.pipeline = ? AND ti.state IN (" + placeholders(len(states)) + ")"
	args := append([]any{p.Pipeline}, states...)
	if !p.From.IsZero() {
		cond += " AND r.logical_unix >= ?"
		args = append(args, nanos(p.From))
	}
	if !p.To.IsZero() {
		cond += " AND r.logical_unix <= ?"
		args = append(args, nanos(p.To))
	}
	if p.Task != "" {
		cond += " AND ti.task = ?"
		args = append(args, p.Task)
	}
	if p.SparingBackfills {
		cond += " AND NOT (r.kind = 'backfill' AND r.backfill_id IN (SELECT id FROM backfills WHERE state = 'running'))"
	}
	// A run of a backfill that no longer runs (failed, cancelled, done)
	// becomes the pipeline's own: `rewind run` executes it and it commits
	// to main. That way out works for every such run without a live
	// attempt, queued ones included (their waiting task instances count as
	// cleared).
	detach := `pipeline = ?`
	detachArgs := []any{p.Pipeline}
	if !p.From.IsZero() {
		detach += " AND logical_unix >= ?"
		detachArgs = append(detachArgs, nanos(p.From))
	}
	if !p.To.IsZero() {
		detach += " AND logical_unix <= ?"
		detachArgs = append(detachArgs, nanos(p.To))
	}
	detach += ` AND kind = 'backfill' AND backfill_id <> ''
		AND backfill_id NOT IN (SELECT id FROM backfills WHERE state = 'running')
		AND NOT EXISTS (SELECT 1 FROM task_instances ti WHERE ti.run_id = runs.id AND ti.state = 'running')
		AND (state IN ('queued', 'running') OR id IN (
			SELECT ti.run_id FROM task_instances ti JOIN runs r ON r.id = ti.run_id WHERE ` + cond + `))`
	detachArgs = append(detachArgs, args...)
	cleared := 0
	err := s.write(ctx, func(tx *sql.Tx) error {
		now := nullNanos(p.Now)
		var waiting int
		if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM task_instances WHERE state = 'scheduled'
			AND run_id IN (SELECT id FROM runs WHERE `+detach+`)`, detachArgs...).Scan(&waiting); err != nil {
			return fmt.Errorf("store: clear tasks %s: %w", p.Pipeline, err)
		}
		if _, err := tx.ExecContext(ctx, `
			UPDATE runs SET state = 'queued', started_at = NULL, ended_at = NULL
			WHERE state IN ('success', 'failed') AND id IN (
				SELECT ti.run_id FROM task_instances ti JOIN runs r ON r.id = ti.run_id WHERE `+cond+`)`,
			args...); err != nil {
			return fmt.Errorf("store: clear tasks %s: runs: %w", p.Pipeline, err)
		}
		res, err := tx.ExecContext(ctx, `
			UPDATE task_instances SET state = 'scheduled', failures = 0, next_try_at = NULL, updated_at = ?
			WHERE id IN (SELECT ti.id FROM task_instances ti JOIN runs r ON r.id = ti.run_id WHERE `+cond+`)`,
			append([]any{now}, args...)...)
		if err != nil {
			return fmt.Errorf("store: clear tasks %s: %w", p.Pipeline, err)
		}
		n, err := res.RowsAffected()
		if err != nil {
			return fmt.Errorf("store: clear tasks %s: %w", p.Pipeline, err)
		}
		cleared = int(n)
		if _, err := tx.ExecContext(ctx, `
			UPDATE task_instances SET state = 'scheduled', updated_at = ? WHERE state = 'queued'
			AND run_id IN (SELECT id FROM runs WHERE `+detach+`)`, append([]any{now}, detachArgs...)...); err != nil {
			return fmt.Errorf("store: clear tasks %s: runs of backfills: %w", p.Pipeline, err)
		}
		if _, err := tx.ExecContext(ctx, `
			UPDATE runs SET kind = 'scheduled', backfill_id = '', state = 'queued'
			WHERE state IN ('queued', 'running') AND `+detach, detachArgs...); err != nil {
			return fmt.Errorf("store: clear tasks %s: runs of backfills: %w", p.Pipeline, err)
		}
		if _, err := tx.ExecContext(ctx, `
			UPDATE runs SET kind = 'scheduled', backfill_id = '' WHERE `+detach, detachArgs...); err != nil {
			return fmt.Errorf("store: clear tasks %s: runs of backfills: %w", p.Pipeline, err)
		}
		cleared += waiting
		if err := bumpEpoch(ctx, tx); err != nil {
			return fmt.Errorf("store: clear tasks %s: %w", p.Pipeline, err)
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	return cleared, nil
}

// taskDurationsSQL reads the successful attempts of the pipeline's latest
// runs (the pipeline, logical_unix key, newest first, at most
// TaskDurationsRuns(limit)), through their task instances (the run_id, task
// key) and attempts_task_state, which holds state and times: every step is
// a covering index search, and the cost is bounded by the limit, whatever
// the pipeline's history.
const taskDurationsSQL = `
	SELECT task, d FROM (
		SELECT ti.task AS task, a.ended_at - a.started_at AS d,
		       ROW_NUMBER() OVER (PARTITION BY ti.task ORDER BY a.ended_at DESC, a.id DESC) AS n
		FROM (SELECT id FROM runs WHERE pipeline = ? ORDER BY logical_unix DESC LIMIT ?) latest
		JOIN task_instances ti ON ti.run_id = latest.id
		JOIN attempts a ON a.task_instance_id = ti.id
		WHERE a.state = 'success' AND a.ended_at IS NOT NULL
	) durations WHERE n <= ? ORDER BY task, n`

func (s *sqliteStore) TaskDurations(ctx context.Context, p TaskDurationsParams) (map[string][]time.Duration, error) {
	if p.Limit <= 0 {
		p.Limit = 1000
	}
	out := map[string][]time.Duration{}
	err := s.read(ctx, func(tx *sql.Tx) error {
		rows, err := tx.QueryContext(ctx, taskDurationsSQL, p.Pipeline, TaskDurationsRuns(p.Limit), p.Limit)
		if err != nil {
			return fmt.Errorf("store: task durations of %s: %w", p.Pipeline, err)
		}
		defer rows.Close()
		for rows.Next() {
			var task string
			var d int64
			if err := rows.Scan(&task, &d); err != nil {
				return fmt.Errorf("store: task durations of %s: %w", p.Pipeline, err)
			}
			out[task] = append(out[task], time.Duration(d))
		}
		return rows.Err()
	})
	return out, err
}
