package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// pgArgs builds a PostgreSQL argument list: add returns the placeholder of
// the value it appends.
type pgArgs []any

func (a *pgArgs) add(v any) string {
	*a = append(*a, v)
	return "$" + strconv.Itoa(len(*a))
}

// MaterializeRuns inserts the runs that do not exist yet in one statement
// (arrays unnested; ON CONFLICT DO NOTHING leaves a run that exists for the
// pipeline and logical date untouched, whatever its kind) whose RETURNING
// gives exactly the runs this call created, then their task instances in a
// second statement, task by task in input order as SQLite numbers them. A
// non-zero Through moves the pipeline's catchup_through forward in the same
// transaction, even when no run is new.
func (s *pgStore) MaterializeRuns(ctx context.Context, p MaterializeRunsParams) (int, error) {
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
	n := len(p.Runs)
	dates, unix, ds, ivStart, ivEnd := make([]string, n), make([]int64, n), make([]string, n), make([]string, n), make([]string, n)
	for i, r := range p.Runs {
		dates[i], unix[i], ds[i] = formatDate(r.LogicalDate), nanos(r.LogicalDate), r.DS
		ivStart[i], ivEnd[i] = formatDate(r.DataIntervalStart), formatDate(r.DataIntervalEnd)
	}
	taskNames, taskPools := make([]string, len(p.Tasks)), make([]string, len(p.Tasks))
	for i, t := range p.Tasks {
		taskNames[i], taskPools[i] = t.Name, t.Pool
	}
	var created []int64
	err := s.write(ctx, func(tx *sql.Tx) error {
		created = created[:0]
		if err := pgCatchupThrough(ctx, tx, p); err != nil {
			return err
		}
		if len(p.Runs) == 0 {
			return nil
		}
		now := nullNanos(p.Now)
		rows, err := tx.QueryContext(ctx, `
			INSERT INTO runs (pipeline, kind, backfill_id, created_at, logical_date, logical_unix, ds,
			                  data_interval_start, data_interval_end)
			SELECT $1, $2, $3, $4, d.logical_date, d.logical_unix, d.ds, d.iv_start, d.iv_end
			FROM unnest($5::text[], $6::bigint[], $7::text[], $8::text[], $9::text[]) WITH ORDINALITY
			     AS d (logical_date, logical_unix, ds, iv_start, iv_end, ord)
			ORDER BY d.ord
			ON CONFLICT (pipeline, logical_unix) DO NOTHING
			RETURNING id`,
			p.Pipeline, string(p.Kind), p.BackfillID, now, dates, unix, ds, ivStart, ivEnd)
		if err != nil {
			return fmt.Errorf("store: materialize runs %s from %s: %w", p.Pipeline, dates[0], err)
		}
		defer rows.Close()
		for rows.Next() {
			var id int64
			if err := rows.Scan(&id); err != nil {
				return fmt.Errorf("store: materialize runs %s: %w", p.Pipeline, err)
			}
			created = append(created, id)
		}
		if err := rows.Err(); err != nil {
			return fmt.Errorf("store: materialize runs %s: %w", p.Pipeline, err)
		}
		if len(created) == 0 || len(p.Tasks) == 0 {
			return nil
		}
		if _, err := tx.ExecContext(ctx, `
			INSERT INTO task_instances (run_id, task, state, pool, updated_at)
			SELECT r.id, t.task, 'scheduled', t.pool, $4
			FROM unnest($1::text[], $2::text[]) WITH ORDINALITY AS t (task, pool, ord)
			CROSS JOIN unnest($3::bigint[]) WITH ORDINALITY AS r (id, ord)
			ORDER BY t.ord, r.ord
			ON CONFLICT (run_id, task) DO NOTHING`,
			taskNames, taskPools, created, now); err != nil {
			return fmt.Errorf("store: materialize tasks of %s: %w", p.Pipeline, err)
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	return len(created), nil
}

// pgCatchupThrough moves the pipeline's catchup_through to
// max(catchup_through, p.Through) when p.Through is set; ErrNotFound for an
// unknown pipeline.
func pgCatchupThrough(ctx context.Context, tx *sql.Tx, p MaterializeRunsParams) error {
	if p.Through.IsZero() {
		return nil
	}
	var one int
	err := tx.QueryRowContext(ctx, `
		UPDATE pipelines SET catchup_through = GREATEST(catchup_through, $1)
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

// pgRunFilter is the WHERE clause of ListRuns on the runs table aliased r.
func pgRunFilter(p ListRunsParams, args *pgArgs) string {
	var conds []string
	if len(p.Pipelines) > 0 {
		conds = append(conds, "r.pipeline = ANY("+args.add(p.Pipelines)+"::text[])")
	}
	if len(p.States) > 0 {
		states := make([]string, len(p.States))
		for i, st := range p.States {
			states[i] = string(st)
		}
		conds = append(conds, "r.state = ANY("+args.add(states)+"::text[])")
	}
	if !p.From.IsZero() {
		conds = append(conds, "r.logical_unix >= "+args.add(nanos(p.From)))
	}
	if !p.To.IsZero() {
		conds = append(conds, "r.logical_unix <= "+args.add(nanos(p.To)))
	}
	if len(conds) == 0 {
		return ""
	}
	return " WHERE " + strings.Join(conds, " AND ")
}

// ListRuns reads runs, and optionally their task instances and attempts, from
// one snapshot: three queries with the same filter, stitched by id. Names
// sort bytewise (COLLATE "C"), as in SQLite, whatever the database's collation.
func (s *pgStore) ListRuns(ctx context.Context, p ListRunsParams) ([]Run, error) {
	var args pgArgs
	where := pgRunFilter(p, &args)
	var runs []Run
	err := s.read(ctx, func(tx *sql.Tx) error {
		runs = nil
		rows, err := tx.QueryContext(ctx, "SELECT "+runColumns+" FROM runs r"+where+
			` ORDER BY r.pipeline COLLATE "C", r.logical_unix`, args...)
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
		rows.Close()
		if !p.WithTasks && !p.WithAttempts || len(runs) == 0 {
			return nil
		}
		if err := pgFillTasks(ctx, tx, runs, where, args); err != nil {
			return err
		}
		if p.WithAttempts {
			return pgFillAttempts(ctx, tx, runs, where, args)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return runs, nil
}

func pgFillTasks(ctx context.Context, tx *sql.Tx, runs []Run, where string, args []any) error {
	byID := make(map[int64]int, len(runs))
	for i := range runs {
		byID[runs[i].ID] = i
		runs[i].Tasks = []TaskInstance{}
	}
	rows, err := tx.QueryContext(ctx, "SELECT "+taskColumns+
		` FROM task_instances ti JOIN runs r ON r.id = ti.run_id`+where+` ORDER BY ti.run_id, ti.task COLLATE "C"`, args...)
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

func pgFillAttempts(ctx context.Context, tx *sql.Tx, runs []Run, where string, args []any) error {
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
func (s *pgStore) AdmitRun(ctx context.Context, p AdmitRunParams) error {
	return s.write(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx,
			"UPDATE runs SET state = 'running', started_at = $1, ended_at = NULL WHERE id = $2 AND state = 'queued'",
			nullNanos(p.Now), p.RunID)
		if err != nil {
			return fmt.Errorf("store: admit run %d: %w", p.RunID, err)
		}
		return pgGuarded(ctx, tx, res, "runs", p.RunID, "admit run")
	})
}

// pgOpenTaskStates are the task states that keep a run from finishing.
const pgOpenTaskStates = "'scheduled', 'queued', 'running', 'up_for_retry'"

// pgLockRunTasks reads the run's task instances FOR SHARE: until this
// transaction ends, nobody changes them, and a change in flight is waited
// for (READ COMMITTED: the statements after this one see it).
func pgLockRunTasks(ctx context.Context, tx *sql.Tx, runID int64) error {
	if _, err := tx.ExecContext(ctx, "SELECT 1 FROM task_instances WHERE run_id = $1 FOR SHARE", runID); err != nil {
		return fmt.Errorf("lock task instances of run %d: %w", runID, err)
	}
	return nil
}

// pgFinishRunSQL finishes run $3 as $1 at $2, in one guarded statement: the
// run is queued or running, none of its task instances can still run, and
// for success every one succeeded or was skipped.
const pgFinishRunSQL = `
	UPDATE runs r SET state = $1, ended_at = $2
	WHERE r.id = $3 AND r.state IN ('queued', 'running')
	  AND NOT EXISTS (SELECT 1 FROM task_instances ti WHERE ti.run_id = r.id
	                  AND ti.state IN (` + pgOpenTaskStates + `))
	  AND ($1 <> 'success' OR NOT EXISTS (SELECT 1 FROM task_instances ti WHERE ti.run_id = r.id
	                                      AND ti.state NOT IN ('success', 'skipped')))`

// FinishRun moves a run queued|running -> success|failed when its task
// instances say so (pgFinishRunSQL, after locking them); ErrConflict
// otherwise.
func (s *pgStore) FinishRun(ctx context.Context, p FinishRunParams) error {
	if p.State != RunSuccess && p.State != RunFailed {
		return fmt.Errorf("store: finish run %d: state %q is not success or failed", p.RunID, p.State)
	}
	return s.write(ctx, func(tx *sql.Tx) error {
		if err := pgLockRunTasks(ctx, tx, p.RunID); err != nil {
			return fmt.Errorf("store: finish run %d: %w", p.RunID, err)
		}
		res, err := tx.ExecContext(ctx, pgFinishRunSQL, string(p.State), nullNanos(p.Now), p.RunID)
		if err != nil {
			return fmt.Errorf("store: finish run %d: %w", p.RunID, err)
		}
		return pgGuarded(ctx, tx, res, "runs", p.RunID, "finish run")
	})
}
