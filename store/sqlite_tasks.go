package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// ClaimTask moves a task instance scheduled|up_for_retry -> queued with one
// guarded UPDATE ... RETURNING (so that of any number of claimers, in this
// process or another, exactly one wins) and inserts the attempt row in the
// same transaction. A non-empty Pool also becomes the task instance's pool
// (a retry escalated to a larger pool); an empty one keeps it.
func (s *sqliteStore) ClaimTask(ctx context.Context, p ClaimTaskParams) (Attempt, error) {
	var a Attempt
	err := s.write(ctx, func(tx *sql.Tx) error {
		now := nullNanos(p.Now)
		var try int
		var pool string
		err := tx.QueryRowContext(ctx, `
			UPDATE task_instances
			SET state = 'queued', try_number = try_number + 1, next_try_at = NULL,
			    pool = CASE WHEN ?1 = '' THEN pool ELSE ?1 END, updated_at = ?2
			WHERE id = ?3 AND state IN ('scheduled', 'up_for_retry')
			RETURNING try_number, pool`,
			p.Pool, now, p.TaskInstanceID).Scan(&try, &pool)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("store: claim task instance %d: %w", p.TaskInstanceID,
				missingOr(ctx, tx, "task_instances", p.TaskInstanceID))
		}
		if err != nil {
			return fmt.Errorf("store: claim task instance %d: %w", p.TaskInstanceID, err)
		}
		tryStr := strconv.Itoa(try)
		a = Attempt{
			StartedAt:      stamp(p.Now),
			TaskInstanceID: p.TaskInstanceID,
			TryNumber:      try,
			Pool:           pool,
			State:          AttemptRunning,
			Host:           p.Host,
			LogPath:        strings.ReplaceAll(p.LogPath, "{try}", tryStr),
			Reason:         p.Reason,
		}
		err = tx.QueryRowContext(ctx, `
			INSERT INTO attempts (task_instance_id, try_number, pool, state, host, pid, pid_start,
			                      started_at, log_path, reason)
			VALUES (?, ?, ?, 'running', ?, 0, 0, ?, ?, ?)
			RETURNING id`,
			a.TaskInstanceID, a.TryNumber, a.Pool, a.Host, now, a.LogPath, a.Reason).Scan(&a.ID)
		if isConstraint(err) {
			return fmt.Errorf("store: claim task instance %d: attempt %d exists: %w", p.TaskInstanceID, try, ErrConflict)
		}
		if err != nil {
			return fmt.Errorf("store: claim task instance %d: insert attempt: %w", p.TaskInstanceID, err)
		}
		return nil
	})
	if err != nil {
		return Attempt{}, err
	}
	return a, nil
}

// StartAttempt records the attempt's process and moves its task instance
// queued -> running; both are guarded (attempt running, task queued on the
// attempt's try).
func (s *sqliteStore) StartAttempt(ctx context.Context, p StartAttemptParams) error {
	return s.write(ctx, func(tx *sql.Tx) error {
		var taskID int64
		var try int
		err := tx.QueryRowContext(ctx, `
			UPDATE attempts SET pid = ?, pid_start = ?, started_at = ?
			WHERE id = ? AND state = 'running'
			RETURNING task_instance_id, try_number`,
			p.PID, int64(p.PIDStart), nullNanos(p.Now), p.AttemptID).Scan(&taskID, &try)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("store: start attempt %d: %w", p.AttemptID, missingOr(ctx, tx, "attempts", p.AttemptID))
		}
		if err != nil {
			return fmt.Errorf("store: start attempt %d: %w", p.AttemptID, err)
		}
		res, err := tx.ExecContext(ctx, `
			UPDATE task_instances SET state = 'running', updated_at = ?
			WHERE id = ? AND state = 'queued' AND try_number = ?`,
			nullNanos(p.Now), taskID, try)
		if err != nil {
			return fmt.Errorf("store: start attempt %d: %w", p.AttemptID, err)
		}
		if n, err := res.RowsAffected(); err != nil {
			return fmt.Errorf("store: start attempt %d: %w", p.AttemptID, err)
		} else if n == 0 {
			return fmt.Errorf("store: start attempt %d: task instance %d is not queued for try %d: %w",
				p.AttemptID, taskID, try, ErrConflict)
		}
		return nil
	})
}

// FinishAttempt records an attempt's outcome (guarded: only a running attempt
// gets one, else ErrConflict) and moves its task instance to p.TaskState if
// the task instance is still queued or running on this attempt's try. The
// outcome of a process is recorded even when the task instance was moved on
// meanwhile (by SetTaskStates): it is a fact about the process, and leaving
// the attempt running would make it look alive forever.
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
			WHERE id = ? AND state IN ('queued', 'running') AND try_number = ?`,
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

// RunningAttempts lists the attempts in state running with their pipeline,
// run and task, ordered by attempt id.
func (s *sqliteStore) RunningAttempts(ctx context.Context) ([]RunningAttempt, error) {
	rows, err := s.rq().QueryContext(ctx, "SELECT "+attemptColumns+`, r.pipeline, r.id, ti.task
		FROM attempts a
		JOIN task_instances ti ON ti.id = a.task_instance_id
		JOIN runs r ON r.id = ti.run_id
		WHERE a.state = 'running'
		ORDER BY a.id`)
	if err != nil {
		return nil, fmt.Errorf("store: running attempts: %w", err)
	}
	defer rows.Close()
	var out []RunningAttempt
	for rows.Next() {
		var (
			ra                   RunningAttempt
			state                string
			pidStart             int64
			started, ended, exit sql.NullInt64
		)
		dest := attemptDest(&ra.Attempt, &state, &pidStart, &started, &ended, &exit)
		dest = append(dest, &ra.Pipeline, &ra.RunID, &ra.Task)
		if err := rows.Scan(dest...); err != nil {
			return nil, fmt.Errorf("store: running attempts: %w", err)
		}
		finishAttemptScan(&ra.Attempt, state, pidStart, started, ended, exit)
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
// puts their finished runs back to queued. A run that is still running stays
// running: it is admitted already and the scheduler picks the cleared tasks up.
// Task instances that are queued, running or already scheduled are left alone.
func (s *sqliteStore) ClearTasks(ctx context.Context, p ClearTasksParams) (int, error) {
	states := []any{"success", "failed", "up_for_retry", "upstream_failed", "skipped"}
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
	cleared := 0
	err := s.write(ctx, func(tx *sql.Tx) error {
		now := nullNanos(p.Now)
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
		return nil
	})
	if err != nil {
		return 0, err
	}
	return cleared, nil
}

func (s *sqliteStore) TaskDurations(ctx context.Context, p TaskDurationsParams) (map[string][]time.Duration, error) {
	if p.Limit <= 0 {
		p.Limit = 1000
	}
	out := map[string][]time.Duration{}
	err := s.read(ctx, func(tx *sql.Tx) error {
		rows, err := tx.QueryContext(ctx, `
			SELECT task, d FROM (
				SELECT ti.task AS task, a.ended_at - a.started_at AS d,
				       ROW_NUMBER() OVER (PARTITION BY ti.task ORDER BY a.ended_at DESC) AS n
				FROM attempts a
				JOIN task_instances ti ON ti.id = a.task_instance_id
				JOIN runs r ON r.id = ti.run_id
				WHERE r.pipeline = ? AND a.state = 'success' AND a.ended_at IS NOT NULL
			) WHERE n <= ? ORDER BY task, n`, p.Pipeline, p.Limit)
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
