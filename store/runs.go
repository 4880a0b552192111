package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// MaterializeRuns inserts the runs that do not exist yet, in one transaction
// (the dialect's createRuns: ON CONFLICT DO NOTHING leaves a run that exists
// for the pipeline and logical date untouched, whatever its kind), and one
// scheduled task instance per task for exactly the runs it created. A
// non-zero Through moves the pipeline's catchup_through forward in the same
// transaction, even when no run is new.
func (s *sqlStore) MaterializeRuns(ctx context.Context, p MaterializeRunsParams) (int, error) {
	if p.Pipeline == "" {
		return 0, errors.New("store: materialize runs: empty pipeline")
	}
	if !validKind(p.Kind) {
		return 0, fmt.Errorf("store: materialize runs %s: unknown run kind %q", p.Pipeline, p.Kind)
	}
	for _, r := range p.Runs {
		if r.LogicalDate.IsZero() {
			return 0, fmt.Errorf("store: materialize runs %s: run %q without a logical date", p.Pipeline, r.DS)
		}
	}
	if len(p.Runs) == 0 && p.Through.IsZero() {
		return 0, nil
	}
	created := 0
	err := s.write(ctx, func(c conn) error {
		created = 0
		if err := catchupThrough(ctx, c, p); err != nil {
			return err
		}
		if len(p.Runs) == 0 {
			return nil
		}
		var err error
		created, err = s.d.steps.createRuns(ctx, c, p)
		return err
	})
	if err != nil {
		return 0, err
	}
	return created, nil
}

// catchupThrough moves the pipeline's catchup_through to
// max(catchup_through, p.Through) when p.Through is set; ErrNotFound for an
// unknown pipeline.
func catchupThrough(ctx context.Context, c conn, p MaterializeRunsParams) error {
	if p.Through.IsZero() {
		return nil
	}
	var one int
	err := c.row(ctx, `
		UPDATE pipelines SET catchup_through = CASE WHEN catchup_through IS NULL OR catchup_through < $1
		                                            THEN $1 ELSE catchup_through END
		WHERE name = $2
		RETURNING 1`, nanos(p.Through), p.Pipeline).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("store: materialize runs: pipeline %s: %w", p.Pipeline, ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("store: materialize runs %s: catchup: %w", p.Pipeline, err)
	}
	return nil
}

// runFilter is the WHERE clause of ListRuns on the runs table aliased r.
func (d *dialect) runFilter(p ListRunsParams, a *args) string {
	var conds []string
	if len(p.Pipelines) > 0 {
		conds = append(conds, d.in(a, "r.pipeline", p.Pipelines))
	}
	if len(p.States) > 0 {
		states := make([]string, len(p.States))
		for i, st := range p.States {
			states[i] = string(st)
		}
		conds = append(conds, d.in(a, "r.state", states))
	}
	if !p.From.IsZero() {
		conds = append(conds, "r.logical_unix >= "+a.add(nanos(p.From)))
	}
	if !p.To.IsZero() {
		conds = append(conds, "r.logical_unix <= "+a.add(nanos(p.To)))
	}
	if len(p.IDs) > 0 {
		conds = append(conds, d.in(a, "r.id", p.IDs))
	}
	if len(conds) == 0 {
		return ""
	}
	return " WHERE " + strings.Join(conds, " AND ")
}

// runOrder is ListRuns' ORDER BY: names bytewise, whatever the database's
// collation. With a state filter the sort keys are written as expressions
// where the dialect has a hint for that (SQLite), so that the planner picks
// an index for the filter (pipeline and state, or state) and sorts the few
// matching runs, rather than walking every run of the pipeline in date
// order to find them.
func (d *dialect) runOrder(p ListRunsParams) string {
	hint := ""
	if len(p.States) > 0 {
		hint = d.hint
	}
	if p.Limit > 0 {
		// A page: walked through the (pipeline, logical date) index from
		// the end it starts at; one pipeline sorts by date alone, so that
		// no collation stands between the index and the order.
		dir := ""
		if p.Last {
			dir = " DESC"
		}
		order := " ORDER BY "
		if len(p.Pipelines) != 1 {
			order += hint + "r.pipeline" + d.collate + dir + ", "
		}
		return order + hint + "r.logical_unix" + dir + " LIMIT " + strconv.Itoa(p.Limit)
	}
	return " ORDER BY " + hint + "r.pipeline" + d.collate + ", " + hint + "r.logical_unix"
}

const runColumns = `r.id, r.pipeline, r.logical_date, r.ds, r.data_interval_start, r.data_interval_end,
	r.kind, r.state, r.backfill_id, r.created_at, r.started_at, r.ended_at, r.batch_of,
	CASE WHEN r.batch_of = 0 THEN '' ELSE (SELECT l.logical_date FROM runs l WHERE l.id = r.batch_of) END`

func scanRun(rows interface{ Scan(...any) error }) (Run, error) {
	var (
		r                          Run
		logical, ivStart, ivEnd    string
		kind, state, batchStart    string
		created, started, finished sql.NullInt64
	)
	if err := rows.Scan(&r.ID, &r.Pipeline, &logical, &r.DS, &ivStart, &ivEnd,
		&kind, &state, &r.BackfillID, &created, &started, &finished, &r.BatchOf, &batchStart); err != nil {
		return Run{}, err
	}
	var err error
	if batchStart != "" {
		if r.BatchStart, err = parseDate(batchStart); err != nil {
			return Run{}, err
		}
	}
	if r.LogicalDate, err = parseDate(logical); err != nil {
		return Run{}, err
	}
	if r.DataIntervalStart, err = parseDate(ivStart); err != nil {
		return Run{}, err
	}
	if r.DataIntervalEnd, err = parseDate(ivEnd); err != nil {
		return Run{}, err
	}
	r.Kind, r.State = RunKind(kind), RunState(state)
	r.CreatedAt, r.StartedAt, r.EndedAt = fromNanos(created), fromNanos(started), fromNanos(finished)
	return r, nil
}

const taskColumns = `ti.id, ti.run_id, ti.task, ti.state, ti.pool, ti.try_number, ti.failures, ti.next_try_at, ti.updated_at,
	ti.reason, ti.priority, ti.log_path`

func scanTask(row interface{ Scan(...any) error }) (TaskInstance, error) {
	var (
		t             TaskInstance
		state         string
		next, updated sql.NullInt64
	)
	if err := row.Scan(&t.ID, &t.RunID, &t.Task, &state, &t.Pool, &t.TryNumber, &t.Failures, &next, &updated,
		&t.Reason, &t.Priority, &t.LogPath); err != nil {
		return TaskInstance{}, err
	}
	t.State = TaskState(state)
	t.NextTryAt, t.UpdatedAt = fromNanos(next), fromNanos(updated)
	return t, nil
}

const attemptColumns = `a.id, a.task_instance_id, a.try_number, a.pool, a.state, a.host, a.pid, a.pid_start,
	a.started_at, a.ended_at, a.exit_code, a.signal, a.peak_rss, a.log_path, a.reason, a.owner, a.nonce, a.job_id`

func attemptDest(a *Attempt, state *string, pidStart *int64, started, ended, exit *sql.NullInt64) []any {
	return []any{&a.ID, &a.TaskInstanceID, &a.TryNumber, &a.Pool, state, &a.Host, &a.PID, pidStart,
		started, ended, exit, &a.Signal, &a.PeakRSS, &a.LogPath, &a.Reason, &a.Owner, &a.Nonce, &a.JobID}
}

func finishAttemptScan(a *Attempt, state string, pidStart int64, started, ended, exit sql.NullInt64) {
	a.State = AttemptState(state)
	a.PIDStart = uint64(pidStart)
	a.StartedAt, a.EndedAt = fromNanos(started), fromNanos(ended)
	if exit.Valid {
		code := int(exit.Int64)
		a.ExitCode = &code
	}
}

func scanAttempt(row interface{ Scan(...any) error }) (Attempt, error) {
	var (
		a                    Attempt
		state                string
		pidStart             int64
		started, ended, exit sql.NullInt64
	)
	if err := row.Scan(attemptDest(&a, &state, &pidStart, &started, &ended, &exit)...); err != nil {
		return Attempt{}, err
	}
	finishAttemptScan(&a, state, pidStart, started, ended, exit)
	return a, nil
}

// ListRuns reads runs, and optionally their task instances and attempts, from
// one snapshot: three queries with the same filter, stitched by id. Requested
// lists are empty rather than nil when there is nothing in them, so that
// `runs --json` prints [] for a run without attempts.
func (s *sqlStore) ListRuns(ctx context.Context, p ListRunsParams) ([]Run, error) {
	var a args
	where := s.d.runFilter(p, &a)
	var runs []Run
	err := s.read(ctx, func(c conn) error {
		var err error
		rows, err := c.query(ctx, "SELECT "+runColumns+" FROM runs r"+where+s.d.runOrder(p), a...)
		if runs, err = scanAll(rows, err, func(rows *sql.Rows) (Run, error) { return scanRun(rows) }); err != nil {
			return fmt.Errorf("store: list runs: %w", err)
		}
		if p.Limit > 0 && p.Last {
			slices.Reverse(runs)
		}
		if !p.WithTasks && !p.WithAttempts || len(runs) == 0 {
			return nil
		}
		if p.Limit > 0 {
			// The tasks and attempts of the page's runs only: the filter
			// narrowed to the dates they span (fill* keep those of the
			// runs listed).
			narrow := p
			narrow.From, narrow.To = runs[0].LogicalDate, runs[0].LogicalDate
			for _, r := range runs {
				if r.LogicalDate.Before(narrow.From) {
					narrow.From = r.LogicalDate
				}
				if r.LogicalDate.After(narrow.To) {
					narrow.To = r.LogicalDate
				}
			}
			var na args
			w := s.d.runFilter(narrow, &na)
			return fill(ctx, c, runs, p.WithAttempts, w, na)
		}
		return fill(ctx, c, runs, p.WithAttempts, where, a)
	})
	if err != nil {
		return nil, err
	}
	return runs, nil
}

// CountRuns counts runs by pipeline and state, in one GROUP BY through the
// (pipeline, state) index.
func (s *sqlStore) CountRuns(ctx context.Context, p CountRunsParams) ([]RunCount, error) {
	var a args
	where := ""
	if len(p.Pipelines) > 0 {
		where = " WHERE " + s.d.in(&a, "r.pipeline", p.Pipelines)
	}
	col := s.d.collate
	rows, err := s.rq().query(ctx, "SELECT r.pipeline, r.state, COUNT(*) FROM runs r"+where+
		" GROUP BY r.pipeline, r.state ORDER BY r.pipeline"+col+", r.state"+col, a...)
	out, err := scanAll(rows, err, func(rows *sql.Rows) (RunCount, error) {
		var c RunCount
		var state string
		err := rows.Scan(&c.Pipeline, &state, &c.Count)
		c.State = RunState(state)
		return c, err
	})
	if err != nil {
		return nil, fmt.Errorf("store: count runs: %w", err)
	}
	return out, nil
}

// fill reads the tasks, and with attempts their attempts, of runs.
func fill(ctx context.Context, c conn, runs []Run, attempts bool, where string, a args) error {
	if err := fillTasks(ctx, c, runs, where, a); err != nil {
		return err
	}
	if attempts {
		return fillAttempts(ctx, c, runs, where, a)
	}
	return nil
}

func fillTasks(ctx context.Context, c conn, runs []Run, where string, a args) error {
	byID := make(map[int64]int, len(runs))
	for i := range runs {
		byID[runs[i].ID] = i
		runs[i].Tasks = []TaskInstance{}
	}
	rows, err := c.query(ctx, "SELECT "+taskColumns+
		" FROM task_instances ti JOIN runs r ON r.id = ti.run_id"+where+" ORDER BY ti.run_id, ti.task"+c.d.collate, a...)
	tasks, err := scanAll(rows, err, func(rows *sql.Rows) (TaskInstance, error) { return scanTask(rows) })
	if err != nil {
		return fmt.Errorf("store: list task instances: %w", err)
	}
	for _, t := range tasks {
		if i, ok := byID[t.RunID]; ok {
			runs[i].Tasks = append(runs[i].Tasks, t)
		}
	}
	return nil
}

func fillAttempts(ctx context.Context, c conn, runs []Run, where string, a args) error {
	byID := make(map[int64]*TaskInstance)
	for i := range runs {
		for j := range runs[i].Tasks {
			runs[i].Tasks[j].Attempts = []Attempt{}
			byID[runs[i].Tasks[j].ID] = &runs[i].Tasks[j]
		}
	}
	rows, err := c.query(ctx, "SELECT "+attemptColumns+
		" FROM attempts a JOIN task_instances ti ON ti.id = a.task_instance_id JOIN runs r ON r.id = ti.run_id"+
		where+" ORDER BY a.task_instance_id, a.try_number", a...)
	attempts, err := scanAll(rows, err, func(rows *sql.Rows) (Attempt, error) { return scanAttempt(rows) })
	if err != nil {
		return fmt.Errorf("store: list attempts: %w", err)
	}
	for _, at := range attempts {
		if t, ok := byID[at.TaskInstanceID]; ok {
			t.Attempts = append(t.Attempts, at)
		}
	}
	return nil
}

// finishRunSQL finishes run $3 as $1 at $2, in one guarded statement: the
// run is queued or running, none of its task instances can still run, and
// for success every one succeeded or was skipped.
const finishRunSQL = `
	UPDATE runs SET state = $1, ended_at = $2
	WHERE id = $3 AND state IN ('queued', 'running')
	  AND NOT EXISTS (SELECT 1 FROM task_instances ti WHERE ti.run_id = runs.id
	                  AND ti.state IN ('scheduled', 'queued', 'running', 'up_for_retry'))
	  AND ($1 <> 'success' OR NOT EXISTS (SELECT 1 FROM task_instances ti WHERE ti.run_id = runs.id
	                                      AND ti.state NOT IN ('success', 'skipped')))`

// lockRunTasks runs the dialect's lock of a run's task instances, where it
// has one (PostgreSQL: FOR SHARE, so that until this transaction ends
// nobody changes them, and a change in flight is waited for; SQLite's
// writer holds the whole database already).
func lockRunTasks(ctx context.Context, c conn, runID int64) error {
	if c.d.lockTasks == "" {
		return nil
	}
	if _, err := c.exec(ctx, c.d.lockTasks, runID); err != nil {
		return fmt.Errorf("lock task instances of run %d: %w", runID, err)
	}
	return nil
}
