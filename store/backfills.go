package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
)

// Backfills.

// CreateBackfill inserts a backfill row; its id is unique (ErrConflict).
func (s *sqlStore) CreateBackfill(ctx context.Context, b Backfill) error {
	switch b.Reprocess {
	case "none", "failed", "completed":
	default:
		return fmt.Errorf("store: backfill %s: reprocess %q is not none, failed or completed", b.ID, b.Reprocess)
	}
	if b.State == "" {
		b.State = BackfillRunning
	}
	return s.write(ctx, func(c conn) error {
		n, err := affected(c.exec(ctx, `
			INSERT INTO backfills (id, pipeline, from_date, to_date, reprocess, reverse, max_active_runs,
			                       state, phase, detail, paused, plan, created_at, updated_at)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)
			ON CONFLICT (id) DO NOTHING`,
			b.ID, b.Pipeline, formatDate(b.From), formatDate(b.To), b.Reprocess, boolInt(b.Reverse), b.MaxActiveRuns,
			string(b.State), b.Phase, b.Detail, strings.Join(b.Paused, ","), b.Plan, nullNanos(b.CreatedAt), nullNanos(b.CreatedAt)))
		if err != nil {
			return fmt.Errorf("store: create backfill %s: %w", b.ID, err)
		}
		if n == 0 {
			return fmt.Errorf("store: backfill %s exists: %w", b.ID, ErrConflict)
		}
		return nil
	})
}

const backfillColumns = `id, pipeline, from_date, to_date, reprocess, reverse, max_active_runs, state, phase,
	detail, paused, plan, created_at, updated_at, on_hold, rolled_back`

func scanBackfill(row interface{ Scan(...any) error }) (Backfill, error) {
	var (
		b                Backfill
		from, to, paused string
		state            string
		created, updated sql.NullInt64
	)
	if err := row.Scan(&b.ID, &b.Pipeline, &from, &to, &b.Reprocess, &b.Reverse, &b.MaxActiveRuns, &state,
		&b.Phase, &b.Detail, &paused, &b.Plan, &created, &updated, &b.OnHold, &b.RolledBack); err != nil {
		return Backfill{}, err
	}
	var err error
	if b.From, err = parseDate(from); err != nil {
		return Backfill{}, err
	}
	if b.To, err = parseDate(to); err != nil {
		return Backfill{}, err
	}
	b.State = BackfillState(state)
	if paused != "" {
		b.Paused = strings.Split(paused, ",")
	}
	b.CreatedAt, b.UpdatedAt = fromNanos(created), fromNanos(updated)
	return b, nil
}

// GetBackfill returns one backfill, or ErrNotFound.
func (s *sqlStore) GetBackfill(ctx context.Context, id string) (Backfill, error) {
	b, err := scanBackfill(s.rq().row(ctx, "SELECT "+backfillColumns+" FROM backfills WHERE id = $1", id))
	if errors.Is(err, sql.ErrNoRows) {
		return Backfill{}, fmt.Errorf("store: backfill %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return Backfill{}, fmt.Errorf("store: get backfill %s: %w", id, err)
	}
	return b, nil
}

// ListBackfills returns every backfill, newest first.
func (s *sqlStore) ListBackfills(ctx context.Context) ([]Backfill, error) {
	rows, err := s.rq().query(ctx, "SELECT "+backfillColumns+
		" FROM backfills ORDER BY created_at DESC NULLS LAST, id"+s.d.collate+" DESC")
	out, err := scanAll(rows, err, func(rows *sql.Rows) (Backfill, error) { return scanBackfill(rows) })
	if err != nil {
		return nil, fmt.Errorf("store: list backfills: %w", err)
	}
	return out, nil
}

// UpdateBackfill changes the given fields of a backfill and bumps the epoch,
// in one transaction (ErrNotFound for an unknown backfill). A guard
// (FromState, FromPhase) is part of the UPDATE's WHERE: when it no longer
// holds, nothing changes and the error is ErrConflict.
func (s *sqlStore) UpdateBackfill(ctx context.Context, p UpdateBackfillParams) error {
	a := args{nullNanos(p.Now)}
	sets := []string{"updated_at = $1"}
	if p.State != "" {
		sets = append(sets, "state = "+a.add(string(p.State)))
	}
	if p.Phase != "" {
		sets = append(sets, "phase = "+a.add(p.Phase))
	}
	if p.Detail != nil {
		sets = append(sets, "detail = "+a.add(*p.Detail))
	}
	if p.Paused != nil {
		sets = append(sets, "paused = "+a.add(strings.Join(p.Paused, ",")))
	}
	if p.Plan != nil {
		sets = append(sets, "plan = "+a.add(*p.Plan))
	}
	if p.OnHold != nil {
		sets = append(sets, "on_hold = "+a.add(boolInt(*p.OnHold)))
	}
	if p.RolledBack != nil {
		sets = append(sets, "rolled_back = "+a.add(boolInt(*p.RolledBack)))
	}
	q := "UPDATE backfills SET " + strings.Join(sets, ", ") + " WHERE id = " + a.add(p.ID)
	if p.FromState != "" {
		q += " AND state = " + a.add(string(p.FromState))
	}
	if p.FromPhase != "" {
		q += " AND phase = " + a.add(p.FromPhase)
	}
	return s.write(ctx, func(c conn) error {
		n, err := affected(c.exec(ctx, q, a...))
		if err != nil {
			return fmt.Errorf("store: update backfill %s: %w", p.ID, err)
		}
		if n == 0 && (p.FromState != "" || p.FromPhase != "") {
			var state, phase string
			err := c.row(ctx, "SELECT state, phase FROM backfills WHERE id = $1", p.ID).Scan(&state, &phase)
			if errors.Is(err, sql.ErrNoRows) {
				return fmt.Errorf("store: backfill %s: %w", p.ID, ErrNotFound)
			}
			if err != nil {
				return fmt.Errorf("store: update backfill %s: %w", p.ID, err)
			}
			return fmt.Errorf("store: backfill %s is %s at %s, not %s at %s: %w", p.ID, state, phase,
				orAny(string(p.FromState)), orAny(p.FromPhase), ErrConflict)
		}
		if n == 0 {
			return fmt.Errorf("store: backfill %s: %w", p.ID, ErrNotFound)
		}
		if err := bumpEpoch(ctx, c); err != nil {
			return fmt.Errorf("store: update backfill %s: %w", p.ID, err)
		}
		return nil
	})
}

func orAny(s string) string {
	if s == "" {
		return "any"
	}
	return s
}

// ReprocessRuns hands a window's runs in the given states to a backfill and
// resets their task instances that are not running (queued ones included:
// they have no process), bumping the epoch, in one transaction.
func (s *sqlStore) ReprocessRuns(ctx context.Context, p ReprocessRunsParams) (int, error) {
	if len(p.States) == 0 {
		return 0, nil
	}
	states := make([]string, len(p.States))
	for i, st := range p.States {
		states[i] = string(st)
	}
	dates := make([]int64, len(p.Dates))
	for i, d := range p.Dates {
		dates[i] = nanos(d)
	}
	// taken is the condition on the runs taken: in the window, the dates
	// when given, and the states; not already the backfill's own.
	taken := func(a *args) string {
		w := "pipeline = " + a.add(p.Pipeline) +
			" AND logical_unix BETWEEN " + a.add(nanos(p.From)) + " AND " + a.add(nanos(p.To)) +
			" AND " + s.d.in(a, "state", states) +
			" AND (backfill_id IS NULL OR backfill_id <> " + a.add(p.BackfillID) + ")"
		if len(dates) > 0 {
			w += " AND " + s.d.in(a, "logical_unix", dates)
		}
		return w
	}
	n := 0
	err := s.write(ctx, func(c conn) error {
		now := nullNanos(p.Now)
		// Their task instances first, while the runs still match.
		var a args
		q := `UPDATE task_instances SET state = 'scheduled', failures = 0, next_try_at = NULL, updated_at = ` + a.add(now) +
			` WHERE state <> 'running'`
		if len(p.Tasks) > 0 {
			q += " AND " + s.d.in(&a, "task", p.Tasks)
		}
		q += ` AND run_id IN (SELECT id FROM runs WHERE ` + taken(&a) + `)`
		if _, err := c.exec(ctx, q, a...); err != nil {
			return fmt.Errorf("store: reprocess task instances of %s: %w", p.Pipeline, err)
		}
		for _, t := range p.Add {
			var a args
			q := `INSERT INTO task_instances (run_id, task, state, pool, updated_at, claim_backfill, claim_unix)
				SELECT id, ` + a.add(t.Name) + `, 'scheduled', ` + a.add(t.Pool) + `, ` + a.add(now) + `, 1, logical_unix
				FROM runs WHERE ` + taken(&a) + ` ON CONFLICT (run_id, task) DO NOTHING`
			if _, err := c.exec(ctx, q, a...); err != nil {
				return fmt.Errorf("store: reprocess runs of %s: add task %s: %w", p.Pipeline, t.Name, err)
			}
		}
		// The claim key of every task instance of the runs follows their
		// kind (see claimKey), queued ones included (with p.Tasks, the
		// other tasks' task instances keep their state).
		a = nil
		q = `UPDATE task_instances SET claim_backfill = 1 WHERE claim_backfill <> 1 AND run_id IN (SELECT id FROM runs WHERE ` + taken(&a) + `)`
		if _, err := c.exec(ctx, q, a...); err != nil {
			return fmt.Errorf("store: reprocess runs of %s: claim keys: %w", p.Pipeline, err)
		}
		a = nil
		q = `UPDATE runs SET kind = 'backfill', backfill_id = ` + a.add(p.BackfillID) +
			`, state = 'queued', started_at = NULL, ended_at = NULL WHERE ` + taken(&a)
		var err error
		if n, err = affected(c.exec(ctx, q, a...)); err != nil {
			return fmt.Errorf("store: reprocess runs of %s: %w", p.Pipeline, err)
		}
		if err := bumpEpoch(ctx, c); err != nil {
			return fmt.Errorf("store: reprocess runs of %s: %w", p.Pipeline, err)
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	return n, nil
}

// Outbox.

// runCommittableSQL is the guard of RequestCommit on the runs table aliased
// r: the run is queued or running and every task instance of it succeeded
// or was skipped (finishRunSQL's guard for success).
const runCommittableSQL = `r.state IN ('queued', 'running')
	AND NOT EXISTS (SELECT 1 FROM task_instances ti WHERE ti.run_id = r.id
	                AND ti.state NOT IN ('success', 'skipped'))`

const outboxColumns = "o.id, o.run_id, r.pipeline, r.logical_date, o.created_at"

func scanOutbox(row interface{ Scan(...any) error }) (OutboxItem, error) {
	var (
		it      OutboxItem
		logical string
		created sql.NullInt64
	)
	if err := row.Scan(&it.ID, &it.RunID, &it.Pipeline, &logical, &created); err != nil {
		return OutboxItem{}, err
	}
	var err error
	if it.LogicalDate, err = parseDate(logical); err != nil {
		return OutboxItem{}, err
	}
	it.CreatedAt = fromNanos(created)
	return it, nil
}

// RequestCommit inserts the run's outbox row with one guarded INSERT ...
// SELECT (ON CONFLICT on the unique run_id keeps an existing row), then
// reads the row back under the same guard, in one transaction. Where the
// dialect locks rows (PostgreSQL), the run's task instances and the run are
// read FOR SHARE first: a clear or a finish waits, or is waited for.
func (s *sqlStore) RequestCommit(ctx context.Context, p RequestCommitParams) (OutboxItem, error) {
	var it OutboxItem
	err := s.write(ctx, func(c conn) error {
		if err := lockRunTasks(ctx, c, p.RunID); err != nil {
			return fmt.Errorf("store: request commit of run %d: %w", p.RunID, err)
		}
		if s.d.lockRun != "" {
			if _, err := c.exec(ctx, s.d.lockRun, p.RunID); err != nil {
				return fmt.Errorf("store: request commit of run %d: lock run: %w", p.RunID, err)
			}
		}
		if _, err := c.exec(ctx, `
			INSERT INTO outbox (run_id, created_at)
			SELECT r.id, $1 FROM runs r WHERE r.id = $2 AND `+runCommittableSQL+`
			ON CONFLICT (run_id) DO NOTHING`,
			nullNanos(p.Now), p.RunID); err != nil {
			return fmt.Errorf("store: request commit of run %d: %w", p.RunID, err)
		}
		var err error
		it, err = scanOutbox(c.row(ctx, "SELECT "+outboxColumns+`
			FROM outbox o JOIN runs r ON r.id = o.run_id
			WHERE o.run_id = $1 AND `+runCommittableSQL, p.RunID))
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("store: request commit of run %d: %w", p.RunID, missingOr(ctx, c, "runs", p.RunID))
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

// ListOutbox lists outbox rows, oldest first (a row without a time first).
func (s *sqlStore) ListOutbox(ctx context.Context, pipelines []string) ([]OutboxItem, error) {
	q := "SELECT " + outboxColumns + " FROM outbox o JOIN runs r ON r.id = o.run_id"
	var a args
	if len(pipelines) > 0 {
		q += " WHERE " + s.d.in(&a, "r.pipeline", pipelines)
	}
	rows, err := s.rq().query(ctx, q+" ORDER BY o.created_at NULLS FIRST, o.id", a...)
	out, err := scanAll(rows, err, func(rows *sql.Rows) (OutboxItem, error) { return scanOutbox(rows) })
	if err != nil {
		return nil, fmt.Errorf("store: list outbox: %w", err)
	}
	return out, nil
}

// CompleteCommit deletes the outbox row (DELETE ... RETURNING) and finishes
// its run with finishRunSQL (after locking its task instances where the
// dialect locks rows), in one transaction. When the guard refuses, the
// deletion is still committed and ErrConflict returned: the commit's outcome
// no longer decides the run, whose task instances were cleared meanwhile.
func (s *sqlStore) CompleteCommit(ctx context.Context, p CompleteCommitParams) error {
	if p.State != RunSuccess && p.State != RunFailed {
		return fmt.Errorf("store: complete commit %d: state %q is not success or failed", p.OutboxID, p.State)
	}
	var runID int64
	finished := false
	err := s.write(ctx, func(c conn) error {
		err := c.row(ctx, "DELETE FROM outbox WHERE id = $1 RETURNING run_id", p.OutboxID).Scan(&runID)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("store: complete commit %d: %w", p.OutboxID, ErrNotFound)
		}
		if err != nil {
			return fmt.Errorf("store: complete commit %d: %w", p.OutboxID, err)
		}
		if err := lockRunTasks(ctx, c, runID); err != nil {
			return fmt.Errorf("store: complete commit %d: %w", p.OutboxID, err)
		}
		n, err := affected(c.exec(ctx, finishRunSQL, string(p.State), nullNanos(p.Now), runID))
		if err != nil {
			return fmt.Errorf("store: complete commit %d: finish run %d: %w", p.OutboxID, runID, err)
		}
		finished = n > 0
		if finished {
			if err := finishCovered(ctx, c, runID, p.State, nullNanos(p.Now)); err != nil {
				return fmt.Errorf("store: complete commit %d: %w", p.OutboxID, err)
			}
		}
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
