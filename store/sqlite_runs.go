package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
)

func validKind(k RunKind) bool {
	switch k {
	case KindScheduled, KindBackfill, KindManual:
		return true
	}
	return false
}

// materializeBatch is the number of runs per multi-row INSERT (5 values each
// plus 4 shared by all rows, well under SQLite's limit on bound parameters).
const materializeBatch = 256

// MaterializeRuns inserts the runs that do not exist yet, in one transaction:
// prepared multi-row INSERTs of materializeBatch runs, where ON CONFLICT DO
// NOTHING leaves a run that already exists for the pipeline and logical date
// untouched, whatever its kind. Task instances are then inserted set-wise,
// one statement per task, for exactly the runs this call created: the
// transaction holds the write lock from its first statement, so those are
// the runs whose id is above the largest id at its start. A non-zero
// Through moves the pipeline's catchup_through forward in the same
// transaction, even when no run is new.
func (s *sqliteStore) MaterializeRuns(ctx context.Context, p MaterializeRunsParams) (int, error) {
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
	err := s.write(ctx, func(tx *sql.Tx) error {
		if !p.Through.IsZero() {
			through := nanos(p.Through)
			res, err := tx.ExecContext(ctx, `
				UPDATE pipelines SET catchup_through = ?1
				WHERE name = ?2 AND (catchup_through IS NULL OR catchup_through < ?1)`,
				through, p.Pipeline)
			if err != nil {
				return fmt.Errorf("store: materialize runs %s: catchup: %w", p.Pipeline, err)
			}
			if n, err := res.RowsAffected(); err != nil {
				return fmt.Errorf("store: materialize runs %s: catchup: %w", p.Pipeline, err)
			} else if n == 0 {
				var one int
				err := tx.QueryRowContext(ctx, "SELECT 1 FROM pipelines WHERE name = ?", p.Pipeline).Scan(&one)
				if errors.Is(err, sql.ErrNoRows) {
					return fmt.Errorf("store: materialize runs: pipeline %s: %w", p.Pipeline, ErrNotFound)
				}
				if err != nil {
					return fmt.Errorf("store: materialize runs %s: catchup: %w", p.Pipeline, err)
				}
			}
		}
		if len(p.Runs) == 0 {
			return nil
		}
		var before int64
		if err := tx.QueryRowContext(ctx, "SELECT COALESCE(MAX(id), 0) FROM runs").Scan(&before); err != nil {
			return fmt.Errorf("store: materialize runs %s: %w", p.Pipeline, err)
		}
		now := nullNanos(p.Now)
		kind := string(p.Kind)
		stmts := map[int]*sql.Stmt{}
		defer func() {
			for _, st := range stmts {
				_ = st.Close()
			}
		}()
		args := make([]any, 0, 4+5*materializeBatch)
		for lo := 0; lo < len(p.Runs); lo += materializeBatch {
			batch := p.Runs[lo:min(lo+materializeBatch, len(p.Runs))]
			st, ok := stmts[len(batch)]
			if !ok {
				var err error
				st, err = tx.PrepareContext(ctx, insertRunsSQL(len(batch)))
				if err != nil {
					return fmt.Errorf("store: materialize runs %s: %w", p.Pipeline, err)
				}
				stmts[len(batch)] = st
			}
			args = append(args[:0], p.Pipeline, kind, p.BackfillID, now)
			for _, r := range batch {
				args = append(args, formatDate(r.LogicalDate), nanos(r.LogicalDate), r.DS,
					formatDate(r.DataIntervalStart), formatDate(r.DataIntervalEnd))
			}
			res, err := st.ExecContext(ctx, args...)
			if err != nil {
				return fmt.Errorf("store: materialize runs %s from %s: %w", p.Pipeline, formatDate(batch[0].LogicalDate), err)
			}
			n, err := res.RowsAffected()
			if err != nil {
				return fmt.Errorf("store: materialize runs %s: %w", p.Pipeline, err)
			}
			created += int(n)
		}
		if created == 0 || len(p.Tasks) == 0 {
			return nil
		}
		insTask, err := tx.PrepareContext(ctx, `
			INSERT INTO task_instances (run_id, task, state, pool, updated_at)
			SELECT id, ?, 'scheduled', ?, ? FROM runs WHERE id > ?
			ON CONFLICT (run_id, task) DO NOTHING`)
		if err != nil {
			return fmt.Errorf("store: materialize runs %s: %w", p.Pipeline, err)
		}
		defer insTask.Close()
		for _, t := range p.Tasks {
			if _, err := insTask.ExecContext(ctx, t.Name, t.Pool, now, before); err != nil {
				return fmt.Errorf("store: materialize task %s.%s: %w", p.Pipeline, t.Name, err)
			}
		}
		return nil
	})
	if err != nil {
		return 0, err
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

// runFilter is the WHERE clause of ListRuns on the runs table aliased r.
func runFilter(p ListRunsParams) (string, []any) {
	var (
		conds []string
		args  []any
	)
	if len(p.Pipelines) > 0 {
		conds = append(conds, "r.pipeline IN ("+placeholders(len(p.Pipelines))+")")
		for _, name := range p.Pipelines {
			args = append(args, name)
		}
	}
	if len(p.States) > 0 {
		conds = append(conds, "r.state IN ("+placeholders(len(p.States))+")")
		for _, st := range p.States {
			args = append(args, string(st))
		}
	}
	if !p.From.IsZero() {
		conds = append(conds, "r.logical_unix >= ?")
		args = append(args, nanos(p.From))
	}
	if !p.To.IsZero() {
		conds = append(conds, "r.logical_unix <= ?")
		args = append(args, nanos(p.To))
	}
	if len(conds) == 0 {
		return "", nil
	}
	return " WHERE " + strings.Join(conds, " AND "), args
}

// runOrder is ListRuns' ORDER BY. With a state filter the sort keys are
// written as expressions, so that SQLite picks an index for the filter
// (pipeline and state, or state) and sorts the few matching runs, rather than
// walking every run of the pipeline in date order to find them.
func runOrder(p ListRunsParams) string {
	if len(p.States) > 0 {
		return " ORDER BY +r.pipeline, +r.logical_unix"
	}
	return " ORDER BY r.pipeline, r.logical_unix"
}

const runColumns = `r.id, r.pipeline, r.logical_date, r.ds, r.data_interval_start, r.data_interval_end,
	r.kind, r.state, r.backfill_id, r.created_at, r.started_at, r.ended_at`

func scanRun(rows *sql.Rows) (Run, error) {
	var (
		r                          Run
		logical, ivStart, ivEnd    string
		kind, state                string
		created, started, finished sql.NullInt64
	)
	if err := rows.Scan(&r.ID, &r.Pipeline, &logical, &r.DS, &ivStart, &ivEnd,
		&kind, &state, &r.BackfillID, &created, &started, &finished); err != nil {
		return Run{}, err
	}
	var err error
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
func (s *sqliteStore) ListRuns(ctx context.Context, p ListRunsParams) ([]Run, error) {
	where, args := runFilter(p)
	var runs []Run
	err := s.read(ctx, func(tx *sql.Tx) error {
		rows, err := tx.QueryContext(ctx, "SELECT "+runColumns+" FROM runs r"+where+runOrder(p), args...)
		if err != nil {
			return fmt.Errorf("store: list runs: %w", err)
		}
		defer rows.Close()
		for rows.Next() {
			r, err := scanRun(rows)
			if err != nil {
				return fmt.Errorf("store: list runs: %w", err)
			}
			runs = append(runs, r)
		}
		if err := rows.Err(); err != nil {
			return fmt.Errorf("store: list runs: %w", err)
		}
		if !p.WithTasks && !p.WithAttempts || len(runs) == 0 {
			return nil
		}
		if err := fillTasks(ctx, tx, runs, where, args); err != nil {
			return err
		}
		if p.WithAttempts {
			return fillAttempts(ctx, tx, runs, where, args)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return runs, nil
}

func fillTasks(ctx context.Context, tx *sql.Tx, runs []Run, where string, args []any) error {
	byID := make(map[int64]int, len(runs))
	for i := range runs {
		byID[runs[i].ID] = i
		runs[i].Tasks = []TaskInstance{}
	}
	rows, err := tx.QueryContext(ctx, "SELECT "+taskColumns+
		" FROM task_instances ti JOIN runs r ON r.id = ti.run_id"+where+" ORDER BY ti.run_id, ti.task", args...)
	if err != nil {
		return fmt.Errorf("store: list task instances: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		t, err := scanTask(rows)
		if err != nil {
			return fmt.Errorf("store: list task instances: %w", err)
		}
		if i, ok := byID[t.RunID]; ok {
			runs[i].Tasks = append(runs[i].Tasks, t)
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("store: list task instances: %w", err)
	}
	return nil
}

func fillAttempts(ctx context.Context, tx *sql.Tx, runs []Run, where string, args []any) error {
	byID := make(map[int64]*TaskInstance)
	for i := range runs {
		for j := range runs[i].Tasks {
			runs[i].Tasks[j].Attempts = []Attempt{}
			byID[runs[i].Tasks[j].ID] = &runs[i].Tasks[j]
		}
	}
	rows, err := tx.QueryContext(ctx, "SELECT "+attemptColumns+
		" FROM attempts a JOIN task_instances ti ON ti.id = a.task_instance_id JOIN runs r ON r.id = ti.run_id"+
		where+" ORDER BY a.task_instance_id, a.try_number", args...)
	if err != nil {
		return fmt.Errorf("store: list attempts: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		a, err := scanAttempt(rows)
		if err != nil {
			return fmt.Errorf("store: list attempts: %w", err)
		}
		if t, ok := byID[a.TaskInstanceID]; ok {
			t.Attempts = append(t.Attempts, a)
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("store: list attempts: %w", err)
	}
	return nil
}

// AdmitRun moves a run queued -> running.
func (s *sqliteStore) AdmitRun(ctx context.Context, p AdmitRunParams) error {
	return s.write(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx,
			"UPDATE runs SET state = 'running', started_at = ?, ended_at = NULL WHERE id = ? AND state = 'queued'",
			nullNanos(p.Now), p.RunID)
		if err != nil {
			return fmt.Errorf("store: admit run %d: %w", p.RunID, err)
		}
		return guarded(ctx, tx, res, "runs", p.RunID, "admit run")
	})
}

// finishRunSQL finishes run ?3 as ?1 at ?2, in one guarded statement: the
// run is queued or running, none of its task instances can still run, and
// for success every one succeeded or was skipped.
const finishRunSQL = `
	UPDATE runs SET state = ?1, ended_at = ?2
	WHERE id = ?3 AND state IN ('queued', 'running')
	  AND NOT EXISTS (SELECT 1 FROM task_instances ti WHERE ti.run_id = runs.id
	                  AND ti.state IN ('scheduled', 'queued', 'running', 'up_for_retry'))
	  AND (?1 <> 'success' OR NOT EXISTS (SELECT 1 FROM task_instances ti WHERE ti.run_id = runs.id
	                                      AND ti.state NOT IN ('success', 'skipped')))`

// FinishRun moves a run queued|running -> success|failed when its task
// instances say so (finishRunSQL); ErrConflict otherwise.
func (s *sqliteStore) FinishRun(ctx context.Context, p FinishRunParams) error {
	if p.State != RunSuccess && p.State != RunFailed {
		return fmt.Errorf("store: finish run %d: state %q is not success or failed", p.RunID, p.State)
	}
	return s.write(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, finishRunSQL, string(p.State), nullNanos(p.Now), p.RunID)
		if err != nil {
			return fmt.Errorf("store: finish run %d: %w", p.RunID, err)
		}
		return guarded(ctx, tx, res, "runs", p.RunID, "finish run")
	})
}

// guarded turns a guarded UPDATE that touched no row into ErrNotFound or ErrConflict.
func guarded(ctx context.Context, tx *sql.Tx, res sql.Result, table string, id int64, op string) error {
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("store: %s %d: %w", op, id, err)
	}
	if n > 0 {
		return nil
	}
	return fmt.Errorf("store: %s %d: %w", op, id, missingOr(ctx, tx, table, id))
}
