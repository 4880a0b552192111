package store

import (
	"context"
	"database/sql"
	"fmt"
	"time"
)

// selectTasks is the condition on task_instances ti JOIN runs r that picks
// a pipeline's task instances in a window of logical dates (zero bounds are
// open), of the given tasks (none: every task).
func (s *sqlStore) selectTasks(a *args, pipeline string, from, to time.Time, tasks []string) string {
	c := "r.pipeline = " + a.add(pipeline)
	if !from.IsZero() {
		c += " AND r.logical_unix >= " + a.add(nanos(from))
	}
	if !to.IsZero() {
		c += " AND r.logical_unix <= " + a.add(nanos(to))
	}
	if len(tasks) > 0 {
		c += " AND " + s.d.in(a, "ti.task", tasks)
	}
	return c
}

// MarkTasks marks task instances success or failed and lets their runs
// follow, in one transaction: see MarkTasksParams.
func (s *sqlStore) MarkTasks(ctx context.Context, p MarkTasksParams) (MarkResult, error) {
	if p.State != TaskSuccess && p.State != TaskFailed {
		return MarkResult{}, fmt.Errorf("store: mark tasks %s: state %q is not success or failed", p.Pipeline, p.State)
	}
	var res MarkResult
	err := s.write(ctx, func(c conn) error {
		res = MarkResult{}
		var a args
		var running int
		if err := c.row(ctx, `SELECT COUNT(*) FROM task_instances ti JOIN runs r ON r.id = ti.run_id
			WHERE ti.state = 'running' AND `+s.selectTasks(&a, p.Pipeline, p.From, p.To, p.Tasks), a...).Scan(&running); err != nil {
			return fmt.Errorf("store: mark tasks %s: %w", p.Pipeline, err)
		}
		if running > 0 {
			return fmt.Errorf("store: mark tasks %s: %d selected task instances are running: %w", p.Pipeline, running, ErrConflict)
		}
		// The instances that change, and so the runs that may.
		a = nil
		sel := `SELECT ti.id, ti.run_id FROM task_instances ti JOIN runs r ON r.id = ti.run_id
			WHERE ti.state NOT IN ('running', ` + a.add(string(p.State)) + `) AND ` + s.selectTasks(&a, p.Pipeline, p.From, p.To, p.Tasks)
		rows, err := c.query(ctx, sel, a...)
		pairs, err := scanAll(rows, err, func(rows *sql.Rows) ([2]int64, error) {
			var v [2]int64
			return v, rows.Scan(&v[0], &v[1])
		})
		if err != nil {
			return fmt.Errorf("store: mark tasks %s: %w", p.Pipeline, err)
		}
		if len(pairs) == 0 {
			return nil
		}
		var ids, runIDs []int64
		seen := map[int64]bool{}
		for _, v := range pairs {
			ids = append(ids, v[0])
			if !seen[v[1]] {
				seen[v[1]] = true
				runIDs = append(runIDs, v[1])
			}
		}
		now := nullNanos(p.Now)
		for start := 0; start < len(ids); start += s.d.chunk {
			chunk := ids[start:min(start+s.d.chunk, len(ids))]
			a = nil
			n, err := affected(c.exec(ctx, "UPDATE task_instances SET state = "+a.add(string(p.State))+", next_try_at = NULL, updated_at = "+a.add(now)+
				" WHERE state <> 'running' AND "+s.d.in(&a, "id", chunk), a...))
			if err != nil {
				return fmt.Errorf("store: mark tasks %s: %w", p.Pipeline, err)
			}
			res.Tasks += n
		}
		for start := 0; start < len(runIDs); start += s.d.chunk {
			chunk := runIDs[start:min(start+s.d.chunk, len(runIDs))]
			// A covered run marked without its leader is its own again.
			a = nil
			in := s.d.in(&a, "id", chunk)
			if _, err := c.exec(ctx, "UPDATE runs SET batch_of = 0 WHERE batch_of <> 0 AND "+in+" AND NOT "+s.d.in(&a, "batch_of", chunk), a...); err != nil {
				return fmt.Errorf("store: mark tasks %s: batches: %w", p.Pipeline, err)
			}
		}
		for _, id := range runIDs {
			moved, err := followTasks(ctx, c, id, p.Outputs, now)
			if err != nil {
				return fmt.Errorf("store: mark tasks %s: %w", p.Pipeline, err)
			}
			if moved {
				res.Runs++
			}
		}
		if err := requeueCovered(ctx, c, p.Pipeline, now); err != nil {
			return fmt.Errorf("store: mark tasks %s: %w", p.Pipeline, err)
		}
		return bumpEpoch(ctx, c)
	})
	if err != nil {
		return MarkResult{}, err
	}
	return res, nil
}

// followTasks moves run id to the state its task instances say, under
// finishRunSQL's guard: failed or success once none can run (success
// only when every one succeeded or was skipped, and never with outputs,
// which the engine commits: such a run goes back to queued), and ends
// the runs it covers as it ended. It reports whether the run moved.
func followTasks(ctx context.Context, c conn, id int64, outputs bool, now any) (bool, error) {
	if err := lockRunTasks(ctx, c, id); err != nil {
		return false, err
	}
	var state string
	var pending, failed int
	err := c.row(ctx, `SELECT r.state,
		(SELECT COUNT(*) FROM task_instances ti WHERE ti.run_id = r.id AND ti.state IN ('scheduled', 'queued', 'running', 'up_for_retry')),
		(SELECT COUNT(*) FROM task_instances ti WHERE ti.run_id = r.id AND ti.state NOT IN ('success', 'skipped'))
		FROM runs r WHERE r.id = $1`, id).Scan(&state, &pending, &failed)
	if err != nil {
		return false, fmt.Errorf("run %d: %w", id, err)
	}
	target := RunFailed
	switch {
	case pending > 0:
		return false, nil // the engine finishes it
	case failed == 0 && outputs:
		target = RunQueued
	case failed == 0:
		target = RunSuccess
	}
	if RunState(state) == target {
		return false, nil
	}
	if target == RunQueued {
		_, err := c.exec(ctx, "UPDATE runs SET state = 'queued', started_at = NULL, ended_at = NULL WHERE id = $1 AND state IN ('success', 'failed')", id)
		return err == nil, err
	}
	// A finished run is reopened, then finished as its tasks say by the
	// statement FinishRun runs; the runs it covers follow it.
	for _, q := range []string{
		"UPDATE runs SET state = 'queued' WHERE id = $1 AND state IN ('success', 'failed')",
		"UPDATE runs SET state = 'queued' WHERE batch_of = $1 AND state IN ('success', 'failed')",
	} {
		if _, err := c.exec(ctx, q, id); err != nil {
			return false, fmt.Errorf("run %d: %w", id, err)
		}
	}
	n, err := affected(c.exec(ctx, finishRunSQL, string(target), now, id))
	if err != nil || n == 0 {
		return false, err
	}
	return true, finishCovered(ctx, c, id, target, now)
}

// RetryNow makes the selected up_for_retry task instances eligible now.
func (s *sqlStore) RetryNow(ctx context.Context, p RetryNowParams) (int, error) {
	n := 0
	err := s.write(ctx, func(c conn) error {
		var a args
		now := nullNanos(p.Now)
		q := "UPDATE task_instances SET next_try_at = " + a.add(now) + ", updated_at = " + a.add(now) +
			" WHERE state = 'up_for_retry' AND id IN (SELECT ti.id FROM task_instances ti JOIN runs r ON r.id = ti.run_id WHERE " +
			s.selectTasks(&a, p.Pipeline, p.From, p.To, p.Tasks) + ")"
		var err error
		if n, err = affected(c.exec(ctx, q, a...)); err != nil {
			return fmt.Errorf("store: retry now %s: %w", p.Pipeline, err)
		}
		if n == 0 {
			return nil
		}
		return bumpEpoch(ctx, c)
	})
	return n, err
}

// RecordAudit adds an entry to the audit trail.
func (s *sqlStore) RecordAudit(ctx context.Context, e AuditEntry) error {
	if e.Args == "" {
		e.Args = "{}"
	}
	return s.write(ctx, func(c conn) error {
		if _, err := c.exec(ctx, `INSERT INTO audit (at, who, origin, action, target, pipeline, args, result)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`,
			nanos(e.At), e.Who, e.From, e.Action, e.Target, e.Pipeline, e.Args, e.Result); err != nil {
			return fmt.Errorf("store: record audit %s: %w", e.Action, err)
		}
		return nil
	})
}

// ListAudit reads the audit trail, newest first.
func (s *sqlStore) ListAudit(ctx context.Context, p ListAuditParams) ([]AuditEntry, error) {
	if p.Limit <= 0 {
		p.Limit = 1000
	}
	var a args
	q := "SELECT id, at, who, origin, action, target, pipeline, args, result FROM audit WHERE 1 = 1"
	if p.Pipeline != "" {
		q += " AND pipeline = " + a.add(p.Pipeline)
	}
	if p.Target != "" {
		q += " AND target = " + a.add(p.Target)
	}
	q += " ORDER BY id DESC LIMIT " + a.add(p.Limit)
	rows, err := s.rq().query(ctx, q, a...)
	out, err := scanAll(rows, err, func(rows *sql.Rows) (AuditEntry, error) {
		var e AuditEntry
		var at sql.NullInt64
		err := rows.Scan(&e.ID, &at, &e.Who, &e.From, &e.Action, &e.Target, &e.Pipeline, &e.Args, &e.Result)
		e.At = fromNanos(at)
		return e, err
	})
	if err != nil {
		return nil, fmt.Errorf("store: list audit: %w", err)
	}
	return out, nil
}
