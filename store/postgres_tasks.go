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
// guarded UPDATE ... RETURNING (a second claimer waits for the first one's
// row lock, re-checks the guard on the committed row and finds it taken) and
// inserts the attempt row in the same transaction. A non-empty Pool also
// becomes the task instance's pool; an empty one keeps it.
func (s *pgStore) ClaimTask(ctx context.Context, p ClaimTaskParams) (Attempt, error) {
	var a Attempt
	err := s.write(ctx, func(tx *sql.Tx) error {
		var try int
		var pool string
		err := tx.QueryRowContext(ctx, `
			UPDATE task_instances
			SET state = 'running', try_number = try_number + 1, next_try_at = NULL,
			    pool = CASE WHEN $1 = '' THEN pool ELSE $1 END, updated_at = $2
			WHERE id = $3 AND state IN ('scheduled', 'up_for_retry')
			RETURNING try_number, pool`,
			p.Pool, nullNanos(p.Now), p.TaskInstanceID).Scan(&try, &pool)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("store: claim task instance %d: %w", p.TaskInstanceID,
				pgMissingOr(ctx, tx, "task_instances", p.TaskInstanceID))
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
		if err := pgInsertAttempts(ctx, tx, []*Attempt{&a}, p.Now); err != nil {
			return fmt.Errorf("store: claim task instance %d: %w", p.TaskInstanceID, err)
		}
		return nil
	})
	if err != nil {
		return Attempt{}, err
	}
	return a, nil
}

// pgNonce returns 32 hex characters from crypto/rand.
func pgNonce() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read does not fail (it crashes the program instead)
	return hex.EncodeToString(b[:])
}

// pgInsertAttempts inserts the running attempts of claims in one statement:
// each carries its task instance, try, pool, host, owner, reason and log
// template, and gets its id, nonce, state, start time and log path ({try}
// replaced). An attempt that exists already for its try is ErrConflict.
func pgInsertAttempts(ctx context.Context, tx *sql.Tx, as []*Attempt, now time.Time) error {
	if len(as) == 0 {
		return nil
	}
	n := len(as)
	var (
		tis, tries          = make([]int64, n), make([]int64, n)
		pools, hosts, paths = make([]string, n), make([]string, n), make([]string, n)
		reasons, owners     = make([]string, n), make([]string, n)
		nonces              = make([]string, n)
	)
	byTI := make(map[int64]*Attempt, n)
	for i, a := range as {
		a.State = AttemptRunning
		a.StartedAt = stamp(now)
		a.Nonce = pgNonce()
		a.LogPath = strings.ReplaceAll(a.LogPath, "{try}", strconv.Itoa(a.TryNumber))
		tis[i], tries[i] = a.TaskInstanceID, int64(a.TryNumber)
		pools[i], hosts[i], paths[i] = a.Pool, a.Host, a.LogPath
		reasons[i], owners[i], nonces[i] = a.Reason, a.Owner, a.Nonce
		byTI[a.TaskInstanceID] = a
	}
	rows, err := tx.QueryContext(ctx, `
		INSERT INTO attempts (task_instance_id, try_number, pool, state, host, pid, pid_start,
		                      started_at, log_path, reason, owner, nonce)
		SELECT ti, try, pool, 'running', host, 0, 0, $1, log_path, reason, owner, nonce
		FROM unnest($2::bigint[], $3::bigint[], $4::text[], $5::text[], $6::text[], $7::text[], $8::text[], $9::text[])
		     WITH ORDINALITY AS x (ti, try, pool, host, log_path, reason, owner, nonce, ord)
		ORDER BY ord
		ON CONFLICT (task_instance_id, try_number) DO NOTHING
		RETURNING id, task_instance_id`,
		nullNanos(now), tis, tries, pools, hosts, paths, reasons, owners, nonces)
	if err != nil {
		return fmt.Errorf("insert attempt: %w", err)
	}
	defer rows.Close()
	got := 0
	for rows.Next() {
		var id, ti int64
		if err := rows.Scan(&id, &ti); err != nil {
			return fmt.Errorf("insert attempt: %w", err)
		}
		if a := byTI[ti]; a != nil {
			a.ID = id
			got++
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("insert attempt: %w", err)
	}
	if got < n {
		for _, a := range as {
			if a.ID == 0 {
				return fmt.Errorf("attempt %d exists: %w", a.TryNumber, ErrConflict)
			}
		}
	}
	return nil
}

// StartAttempt records the attempt's process in one guarded statement: the
// attempt is running without a pid yet and its task instance is running on
// the attempt's try. The task instance's state does not change.
func (s *pgStore) StartAttempt(ctx context.Context, p StartAttemptParams) error {
	return s.write(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `
			UPDATE attempts a SET pid = $1, pid_start = $2, job_id = $5, started_at = $3
			WHERE a.id = $4 AND a.state = 'running' AND a.pid = 0 AND a.job_id = ''
			  AND EXISTS (SELECT 1 FROM task_instances ti
			              WHERE ti.id = a.task_instance_id AND ti.state = 'running'
			                AND ti.try_number = a.try_number)`,
			p.PID, int64(p.PIDStart), nullNanos(p.Now), p.AttemptID, p.JobID)
		if err != nil {
			return fmt.Errorf("store: start attempt %d: %w", p.AttemptID, err)
		}
		return pgGuarded(ctx, tx, res, "attempts", p.AttemptID, "start attempt")
	})
}

// FinishAttempt records an attempt's outcome (guarded: only a running attempt
// gets one, else ErrConflict) and moves its task instance to p.TaskState if
// the task instance is still running on this attempt's try. The outcome of
// a process is recorded even when the task instance was moved on meanwhile.
func (s *pgStore) FinishAttempt(ctx context.Context, p FinishAttemptParams) error {
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
			UPDATE attempts SET state = $1, ended_at = $2, exit_code = $3, signal = $4, peak_rss = $5
			WHERE id = $6 AND state = 'running'
			RETURNING task_instance_id, try_number`,
			string(p.State), now, exit, p.Signal, p.PeakRSS, p.AttemptID).Scan(&taskID, &try)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("store: finish attempt %d: %w", p.AttemptID, pgMissingOr(ctx, tx, "attempts", p.AttemptID))
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
			SET state = $1, failures = failures + $2, next_try_at = $3, updated_at = $4
			WHERE id = $5 AND state = 'running' AND try_number = $6`,
			string(p.TaskState), failed, nullNanos(p.NextTryAt), now, taskID, try); err != nil {
			return fmt.Errorf("store: finish attempt %d: task instance %d: %w", p.AttemptID, taskID, err)
		}
		return nil
	})
}

// SetTaskStates moves the listed task instances that are in one of p.From to
// p.To, in one statement, and returns how many moved.
func (s *pgStore) SetTaskStates(ctx context.Context, p SetTaskStatesParams) (int, error) {
	if !validTaskState(p.To) {
		return 0, fmt.Errorf("store: set task states: unknown state %q", p.To)
	}
	if len(p.IDs) == 0 || len(p.From) == 0 {
		return 0, nil
	}
	from := make([]string, len(p.From))
	for i, st := range p.From {
		from[i] = string(st)
	}
	moved := 0
	err := s.write(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx,
			"UPDATE task_instances SET state = $1, updated_at = $2 WHERE id = ANY($3::bigint[]) AND state = ANY($4::text[])",
			string(p.To), nullNanos(p.Now), p.IDs, from)
		if err != nil {
			return fmt.Errorf("store: set task states: %w", err)
		}
		n, err := res.RowsAffected()
		if err != nil {
			return fmt.Errorf("store: set task states: %w", err)
		}
		moved = int(n)
		return nil
	})
	if err != nil {
		return 0, err
	}
	return moved, nil
}

// RunningAttempts lists the attempts in state running with their pipeline,
// run and task, ordered by attempt id.
func (s *pgStore) RunningAttempts(ctx context.Context) ([]RunningAttempt, error) {
	rows, err := s.rq().QueryContext(ctx, "SELECT "+attemptColumns+`, r.pipeline, r.id, ti.task,
		       o.expires_at, r.kind, r.logical_date
		FROM attempts a
		JOIN task_instances ti ON ti.id = a.task_instance_id
		JOIN runs r ON r.id = ti.run_id
		LEFT JOIN owners o ON o.id = a.owner
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
		var err error
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
// latest try). A day with several runs resolves to its latest run.
func (s *pgStore) FindAttempt(ctx context.Context, p FindAttemptParams) (Attempt, error) {
	args := pgArgs{p.Pipeline, p.DS, p.Task}
	q := "SELECT " + attemptColumns + `
		FROM attempts a
		JOIN task_instances ti ON ti.id = a.task_instance_id
		JOIN runs r ON r.id = ti.run_id
		WHERE r.pipeline = $1 AND r.ds = $2 AND ti.task = $3`
	if p.TryNumber > 0 {
		q += " AND a.try_number = " + args.add(p.TryNumber)
	}
	q += " ORDER BY r.logical_unix DESC, a.try_number DESC LIMIT 1"
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
// retry budget (queued ones too: no process has them; running ones never)
// and their finished runs back to queued, and bumps the epoch, in one
// transaction. The task instances are
// updated first (their row locks make a concurrent FinishRun of the run wait,
// or wait for it), then the runs they belong to.
func (s *pgStore) ClearTasks(ctx context.Context, p ClearTasksParams) (int, error) {
	states := []string{"queued", "success", "failed", "up_for_retry", "upstream_failed", "skipped"}
	if p.OnlyFailed {
		states = []string{"failed", "upstream_failed"}
	}
	args := pgArgs{nullNanos(p.Now), p.Pipeline, states}
	cond := "r.pipeline = $2 AND ti.state = ANY($3::text[])"
	win := ""
	if !p.From.IsZero() {
		ph := args.add(nanos(p.From))
		cond += " AND r.logical_unix >= " + ph
		win += " AND logical_unix >= " + ph
	}
	if !p.To.IsZero() {
		ph := args.add(nanos(p.To))
		cond += " AND r.logical_unix <= " + ph
		win += " AND logical_unix <= " + ph
	}
	if p.Task != "" {
		cond += " AND ti.task = " + args.add(p.Task)
	}
	if p.SparingBackfills {
		cond += " AND NOT (r.kind = 'backfill' AND r.backfill_id IN (SELECT id FROM backfills WHERE state = 'running'))"
	}
	// As in SQLite: the runs of backfills that no longer run, without a
	// live attempt, go back to their pipeline.
	detach := `pipeline = $2` + win + ` AND kind = 'backfill' AND backfill_id <> ''
		AND backfill_id NOT IN (SELECT id FROM backfills WHERE state = 'running')
		AND NOT EXISTS (SELECT 1 FROM task_instances ti WHERE ti.run_id = runs.id AND ti.state = 'running')
		AND (state IN ('queued', 'running') OR id IN (
			SELECT ti.run_id FROM task_instances ti JOIN runs r ON r.id = ti.run_id WHERE ` + cond + `))`
	cleared := 0
	err := s.write(ctx, func(tx *sql.Tx) error {
		cleared = 0
		var waiting int
		if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM task_instances WHERE state = 'scheduled'
			AND run_id IN (SELECT id FROM runs WHERE `+detach+`) AND $1::bigint IS NOT DISTINCT FROM $1`, args...).Scan(&waiting); err != nil {
			return fmt.Errorf("store: clear tasks %s: %w", p.Pipeline, err)
		}
		rows, err := tx.QueryContext(ctx, `
			UPDATE task_instances SET state = 'scheduled', failures = 0, next_try_at = NULL, updated_at = $1
			WHERE id IN (SELECT ti.id FROM task_instances ti JOIN runs r ON r.id = ti.run_id WHERE `+cond+`)
			  AND state = ANY($3::text[])
			RETURNING run_id`, args...)
		if err != nil {
			return fmt.Errorf("store: clear tasks %s: %w", p.Pipeline, err)
		}
		seen := map[int64]bool{}
		var runIDs []int64
		for rows.Next() {
			var id int64
			if err := rows.Scan(&id); err != nil {
				rows.Close()
				return fmt.Errorf("store: clear tasks %s: %w", p.Pipeline, err)
			}
			cleared++
			if !seen[id] {
				seen[id] = true
				runIDs = append(runIDs, id)
			}
		}
		if err := rows.Err(); err != nil {
			return fmt.Errorf("store: clear tasks %s: %w", p.Pipeline, err)
		}
		rows.Close()
		if len(runIDs) > 0 {
			if _, err := tx.ExecContext(ctx, `
				UPDATE runs SET state = 'queued', started_at = NULL, ended_at = NULL
				WHERE state IN ('success', 'failed') AND id = ANY($1::bigint[])`, runIDs); err != nil {
				return fmt.Errorf("store: clear tasks %s: runs: %w", p.Pipeline, err)
			}
		}
		if _, err := tx.ExecContext(ctx, `
			UPDATE task_instances SET state = 'scheduled', updated_at = $1 WHERE state = 'queued'
			AND run_id IN (SELECT id FROM runs WHERE `+detach+`)`, args...); err != nil {
			return fmt.Errorf("store: clear tasks %s: runs of backfills: %w", p.Pipeline, err)
		}
		if _, err := tx.ExecContext(ctx, `
			UPDATE runs SET kind = 'scheduled', backfill_id = '', state = 'queued'
			WHERE state IN ('queued', 'running') AND `+detach+` AND $1::bigint IS NOT DISTINCT FROM $1`, args...); err != nil {
			return fmt.Errorf("store: clear tasks %s: runs of backfills: %w", p.Pipeline, err)
		}
		if _, err := tx.ExecContext(ctx, `
			UPDATE runs SET kind = 'scheduled', backfill_id = '' WHERE `+detach+` AND $1::bigint IS NOT DISTINCT FROM $1`, args...); err != nil {
			return fmt.Errorf("store: clear tasks %s: runs of backfills: %w", p.Pipeline, err)
		}
		cleared += waiting
		if err := pgBumpEpoch(ctx, tx); err != nil {
			return fmt.Errorf("store: clear tasks %s: %w", p.Pipeline, err)
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	return cleared, nil
}

// TaskDurations returns, per task, how long its latest successful attempts
// ran, newest first.
func (s *pgStore) TaskDurations(ctx context.Context, p TaskDurationsParams) (map[string][]time.Duration, error) {
	if p.Limit <= 0 {
		p.Limit = 1000
	}
	out := map[string][]time.Duration{}
	rows, err := s.rq().QueryContext(ctx, `
		SELECT task, d FROM (
			SELECT ti.task AS task, a.ended_at - a.started_at AS d,
			       ROW_NUMBER() OVER (PARTITION BY ti.task ORDER BY a.ended_at DESC) AS n
			FROM (SELECT id FROM runs WHERE pipeline = $1 ORDER BY logical_unix DESC LIMIT $3) AS r
			JOIN task_instances ti ON ti.run_id = r.id
			JOIN attempts a ON a.task_instance_id = ti.id
			WHERE a.state = 'success' AND a.ended_at IS NOT NULL
		) AS x WHERE n <= $2 ORDER BY task COLLATE "C", n`, p.Pipeline, p.Limit, TaskDurationsRuns(p.Limit))
	if err != nil {
		return nil, fmt.Errorf("store: task durations of %s: %w", p.Pipeline, err)
	}
	defer rows.Close()
	for rows.Next() {
		var task string
		var d int64
		if err := rows.Scan(&task, &d); err != nil {
			return nil, fmt.Errorf("store: task durations of %s: %w", p.Pipeline, err)
		}
		out[task] = append(out[task], time.Duration(d))
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: task durations of %s: %w", p.Pipeline, err)
	}
	return out, nil
}
