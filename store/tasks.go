package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"time"
)

// ClaimTask moves a task instance scheduled|up_for_retry -> running with one
// guarded UPDATE ... RETURNING (so that of any number of claimers, in this
// process or another, exactly one wins: in PostgreSQL a second claimer
// waits for the first one's row lock, re-checks the guard on the committed
// row and finds it taken) and inserts the attempt row in the same
// transaction. A non-empty Pool also becomes the task instance's pool (a
// retry escalated to a larger pool); an empty one keeps it.
func (s *sqlStore) ClaimTask(ctx context.Context, p ClaimTaskParams) (Attempt, error) {
	var a Attempt
	err := s.write(ctx, func(c conn) error {
		var try int
		var pool string
		err := c.row(ctx, `
			UPDATE task_instances
			SET state = 'running', try_number = try_number + 1, next_try_at = NULL,
			    pool = CASE WHEN $1 = '' THEN pool ELSE $1 END, updated_at = $2
			WHERE id = $3 AND state IN ('scheduled', 'up_for_retry')
			RETURNING try_number, pool`,
			p.Pool, nullNanos(p.Now), p.TaskInstanceID).Scan(&try, &pool)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("store: claim task instance %d: %w", p.TaskInstanceID,
				missingOr(ctx, c, "task_instances", p.TaskInstanceID))
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
		if err := s.d.steps.insertAttempts(ctx, c, []*Attempt{&a}, p.Now); err != nil {
			return fmt.Errorf("store: claim task instance %d: %w", p.TaskInstanceID, err)
		}
		return nil
	})
	if err != nil {
		return Attempt{}, err
	}
	return a, nil
}

// SetTaskStates moves the listed task instances that are in one of p.From to
// p.To, in one transaction (ids in lists of at most the dialect's chunk),
// and returns how many moved.
func (s *sqlStore) SetTaskStates(ctx context.Context, p SetTaskStatesParams) (int, error) {
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
	err := s.write(ctx, func(c conn) error {
		moved = 0
		for start := 0; start < len(p.IDs); start += s.d.chunk {
			ids := p.IDs[start:min(start+s.d.chunk, len(p.IDs))]
			var a args
			q := "UPDATE task_instances SET state = " + a.add(string(p.To)) + ", updated_at = " + a.add(nullNanos(p.Now)) +
				" WHERE " + s.d.in(&a, "id", ids) + " AND " + s.d.in(&a, "state", from)
			n, err := affected(c.exec(ctx, q, a...))
			if err != nil {
				return fmt.Errorf("store: set task states: %w", err)
			}
			moved += n
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
func (s *sqlStore) RunningAttempts(ctx context.Context) ([]RunningAttempt, error) {
	rows, err := s.rq().query(ctx, runningAttemptsSQL)
	out, err := scanAll(rows, err, func(rows *sql.Rows) (RunningAttempt, error) {
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
			return RunningAttempt{}, err
		}
		finishAttemptScan(&ra.Attempt, state, pidStart, started, ended, exit)
		ra.OwnerExpiresAt, ra.Kind = fromNanos(ownerExpires), RunKind(kind)
		var err error
		ra.LogicalDate, err = parseDate(logical)
		return ra, err
	})
	if err != nil {
		return nil, fmt.Errorf("store: running attempts: %w", err)
	}
	return out, nil
}

// FindAttempt finds the attempt of a pipeline's task on a day (try 0: the
// latest try). A day with several runs (hourly schedules) resolves to its
// latest run.
func (s *sqlStore) FindAttempt(ctx context.Context, p FindAttemptParams) (Attempt, error) {
	a := args{p.Pipeline, p.DS, p.Task}
	q := "SELECT " + attemptColumns + `
		FROM attempts a
		JOIN task_instances ti ON ti.id = a.task_instance_id
		JOIN runs r ON r.id = ti.run_id
		WHERE r.pipeline = $1 AND r.ds = $2 AND ti.task = $3`
	if p.TryNumber > 0 {
		q += " AND a.try_number = " + a.add(p.TryNumber)
	}
	// With SQLite's hint (+r.logical_unix): find the day's runs through
	// runs (pipeline, ds).
	q += " ORDER BY " + s.d.hint + "r.logical_unix DESC, a.try_number DESC LIMIT 1"
	at, err := scanAttempt(s.rq().row(ctx, q, a...))
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
	return at, nil
}

// ClearTasks puts the matching task instances back to scheduled with a fresh
// retry budget (their try numbers keep counting, so attempts stay unique) and
// puts their finished runs back to queued (the dialect's clearTasks), and
// bumps the epoch, in one transaction. A run that is still running stays
// running: it is admitted already and the scheduler picks the cleared tasks
// up. Queued task instances are cleared too (no process has them); running
// or already scheduled ones are left alone. A run of a backfill that no
// longer runs is handed back to its pipeline (kind scheduled, no backfill):
// cleared, it commits to main, and one left queued is not held for good.
func (s *sqlStore) ClearTasks(ctx context.Context, p ClearTasksParams) (int, error) {
	states := []string{"queued", "success", "failed", "up_for_retry", "upstream_failed", "skipped"}
	if p.OnlyFailed {
		states = []string{"failed", "upstream_failed"}
	}
	// window is the condition on the logical dates of runs aliased as given.
	window := func(a *args, col string) string {
		w := ""
		if !p.From.IsZero() {
			w += " AND " + col + " >= " + a.add(nanos(p.From))
		}
		if !p.To.IsZero() {
			w += " AND " + col + " <= " + a.add(nanos(p.To))
		}
		return w
	}
	// cond selects the task instances cleared, on task_instances ti JOIN runs r.
	cond := func(a *args) string {
		c := "r.pipeline = " + a.add(p.Pipeline) + " AND " + s.d.in(a, "ti.state", states) + window(a, "r.logical_unix")
		if tasks := p.taskList(); len(tasks) > 0 {
			c += " AND " + s.d.in(a, "ti.task", tasks)
		}
		if p.SparingBackfills {
			c += " AND NOT (r.kind = 'backfill' AND r.backfill_id IN (SELECT id FROM backfills WHERE state = 'running'))"
		}
		return c
	}
	// detach selects the runs of backfills that no longer run (failed,
	// cancelled, done): they become the pipeline's own, so that `rewind run`
	// executes them and they commit to main. That way out works for every
	// such run without a live attempt, queued ones included (their waiting
	// task instances count as cleared).
	detach := func(a *args) string {
		return "pipeline = " + a.add(p.Pipeline) + window(a, "logical_unix") + ` AND kind = 'backfill' AND backfill_id <> ''
		AND backfill_id NOT IN (SELECT id FROM backfills WHERE state = 'running')
		AND NOT EXISTS (SELECT 1 FROM task_instances ti WHERE ti.run_id = runs.id AND ti.state = 'running')
		AND (state IN ('queued', 'running') OR id IN (
			SELECT ti.run_id FROM task_instances ti JOIN runs r ON r.id = ti.run_id WHERE ` + cond(a) + `))`
	}
	cleared := 0
	err := s.write(ctx, func(c conn) error {
		now := nullNanos(p.Now)
		var waiting int
		var a args
		if err := c.row(ctx, `SELECT COUNT(*) FROM task_instances WHERE state = 'scheduled'
			AND run_id IN (SELECT id FROM runs WHERE `+detach(&a)+`)`, a...).Scan(&waiting); err != nil {
			return fmt.Errorf("store: clear tasks %s: %w", p.Pipeline, err)
		}
		// A run covered by a batch that is cleared without its leader is
		// its own again: it runs alone, for its own interval.
		a = nil
		sel := `SELECT ti.run_id FROM task_instances ti JOIN runs r ON r.id = ti.run_id WHERE ` + cond(&a)
		if _, err := c.exec(ctx, `UPDATE runs SET batch_of = 0 WHERE batch_of <> 0 AND id IN (`+sel+`) AND batch_of NOT IN (`+sel+`)`, a...); err != nil {
			return fmt.Errorf("store: clear tasks %s: batches: %w", p.Pipeline, err)
		}
		var err error
		if cleared, err = s.d.steps.clearTasks(ctx, c, cond, states, now); err != nil {
			return fmt.Errorf("store: clear tasks %s: %w", p.Pipeline, err)
		}
		a = nil
		if _, err := c.exec(ctx, `
			UPDATE task_instances SET state = 'scheduled', updated_at = `+a.add(now)+` WHERE state = 'queued'
			AND run_id IN (SELECT id FROM runs WHERE `+detach(&a)+`)`, a...); err != nil {
			return fmt.Errorf("store: clear tasks %s: runs of backfills: %w", p.Pipeline, err)
		}
		// The claim key of their task instances follows their kind (see
		// claimKey).
		a = nil
		if _, err := c.exec(ctx, `
			UPDATE task_instances SET claim_backfill = 0
			WHERE claim_backfill <> 0 AND run_id IN (SELECT id FROM runs WHERE `+detach(&a)+`)`, a...); err != nil {
			return fmt.Errorf("store: clear tasks %s: runs of backfills: claim keys: %w", p.Pipeline, err)
		}
		a = nil
		if _, err := c.exec(ctx, `
			UPDATE runs SET kind = 'scheduled', backfill_id = '', state = 'queued'
			WHERE state IN ('queued', 'running') AND `+detach(&a), a...); err != nil {
			return fmt.Errorf("store: clear tasks %s: runs of backfills: %w", p.Pipeline, err)
		}
		a = nil
		if _, err := c.exec(ctx, `
			UPDATE runs SET kind = 'scheduled', backfill_id = '' WHERE `+detach(&a), a...); err != nil {
			return fmt.Errorf("store: clear tasks %s: runs of backfills: %w", p.Pipeline, err)
		}
		cleared += waiting
		if err := requeueCovered(ctx, c, p.Pipeline, now); err != nil {
			return fmt.Errorf("store: clear tasks %s: %w", p.Pipeline, err)
		}
		if err := bumpEpoch(ctx, c); err != nil {
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
// the pipeline's history. $1 is the pipeline, $2 the number of runs, $3 the
// limit per task.
func taskDurationsSQL(d *dialect) string {
	return `
	SELECT task, d FROM (
		SELECT ti.task AS task, a.ended_at - a.started_at AS d,
		       ROW_NUMBER() OVER (PARTITION BY ti.task ORDER BY a.ended_at DESC, a.id DESC) AS n
		FROM (SELECT id FROM runs WHERE pipeline = $1 ORDER BY logical_unix DESC LIMIT $2) AS latest
		JOIN task_instances ti ON ti.run_id = latest.id
		JOIN attempts a ON a.task_instance_id = ti.id
		WHERE a.state = 'success' AND a.ended_at IS NOT NULL
	) AS durations WHERE n <= $3 ORDER BY task` + d.collate + `, n`
}

// TaskDurationsRuns is how many of a pipeline's latest runs TaskDurations
// looks at for a limit of limit durations per task: twice as many, so that
// failed runs and retries leave enough successes.
func TaskDurationsRuns(limit int) int {
	if limit <= 0 {
		limit = 1000
	}
	return 2 * limit
}

// TaskDurations returns, per task, how long its latest successful attempts
// ran, newest first.
func (s *sqlStore) TaskDurations(ctx context.Context, p TaskDurationsParams) (map[string][]time.Duration, error) {
	if p.Limit <= 0 {
		p.Limit = 1000
	}
	rows, err := s.rq().query(ctx, taskDurationsSQL(s.d), p.Pipeline, TaskDurationsRuns(p.Limit), p.Limit)
	type duration struct {
		task string
		d    int64
	}
	ds, err := scanAll(rows, err, func(rows *sql.Rows) (duration, error) {
		var d duration
		return d, rows.Scan(&d.task, &d.d)
	})
	if err != nil {
		return nil, fmt.Errorf("store: task durations of %s: %w", p.Pipeline, err)
	}
	out := map[string][]time.Duration{}
	for _, d := range ds {
		out[d.task] = append(out[d.task], time.Duration(d.d))
	}
	return out, nil
}
