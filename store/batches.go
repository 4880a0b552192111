package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
)

// SetBatches gives a backfill's runs their batches, in one transaction: see
// SetBatchesParams.
func (s *sqlStore) SetBatches(ctx context.Context, p SetBatchesParams) error {
	if p.Pipeline == "" || p.BackfillID == "" {
		return errors.New("store: set batches: empty pipeline or backfill")
	}
	for _, b := range p.Batches {
		if !b.End.After(b.Start) {
			return fmt.Errorf("store: set batches %s: batch from %s ends at %s", p.Pipeline, formatDate(b.Start), formatDate(b.End))
		}
	}
	return s.write(ctx, func(c conn) error {
		for _, b := range p.Batches {
			var id int64
			err := c.row(ctx, `
				UPDATE runs SET data_interval_end = $1, batch_of = 0
				WHERE pipeline = $2 AND logical_unix = $3 AND backfill_id = $4
				RETURNING id`, formatDate(b.End), p.Pipeline, nanos(b.Start), p.BackfillID).Scan(&id)
			if errors.Is(err, sql.ErrNoRows) {
				continue // not the backfill's run (another's, in flight): its dates run on their own
			}
			if err != nil {
				return fmt.Errorf("store: set batches %s: %w", p.Pipeline, err)
			}
			// What it covered before (a plan's earlier batches) is its own
			// again, then what it covers now.
			if _, err := c.exec(ctx, "UPDATE runs SET batch_of = 0 WHERE batch_of = $1", id); err != nil {
				return fmt.Errorf("store: set batches %s: %w", p.Pipeline, err)
			}
			if len(b.Covered) == 0 {
				continue
			}
			dates := make([]int64, len(b.Covered))
			for i, t := range b.Covered {
				dates[i] = nanos(t)
			}
			var a args
			q := `UPDATE runs SET batch_of = ` + a.add(id) + ` WHERE pipeline = ` + a.add(p.Pipeline) +
				` AND backfill_id = ` + a.add(p.BackfillID) + ` AND state = 'queued' AND ` + c.d.in(&a, "logical_unix", dates)
			if _, err := c.exec(ctx, q, a...); err != nil {
				return fmt.Errorf("store: set batches %s: %w", p.Pipeline, err)
			}
		}
		return bumpEpoch(ctx, c)
	})
}

// finishCovered ends the runs that the run leader covers as it ended
// (state, at now), in the transaction that ended it: each covered task
// instance takes the state of the leader's instance of its task (skipped
// when the leader has none).
func finishCovered(ctx context.Context, c conn, leader int64, state RunState, now any) error {
	if _, err := c.exec(ctx, finishCoveredTasksSQL, leader, now); err != nil {
		return fmt.Errorf("covered runs of run %d: %w", leader, err)
	}
	if _, err := c.exec(ctx, finishCoveredRunsSQL, leader, string(state), now); err != nil {
		return fmt.Errorf("covered runs of run %d: %w", leader, err)
	}
	return nil
}

// The covered runs are found through the partial index runs_batch_of,
// which a query may use only when its WHERE implies the index's
// "batch_of <> 0" (a leader's id never is 0): "batch_of = $1" alone, with
// $1 unknown when the statement is prepared, scans every run of the state,
// in every FinishRun.
const (
	finishCoveredTasksSQL = `
		UPDATE task_instances SET updated_at = $2, next_try_at = NULL,
			state = COALESCE((SELECT l.state FROM task_instances l WHERE l.run_id = $1 AND l.task = task_instances.task), 'skipped')
		WHERE run_id IN (SELECT id FROM runs WHERE batch_of = $1 AND batch_of <> 0 AND state IN ('queued', 'running'))`
	finishCoveredRunsSQL = `
		UPDATE runs SET state = $2, ended_at = $3,
			started_at = (SELECT l.started_at FROM runs l WHERE l.id = $1)
		WHERE batch_of = $1 AND batch_of <> 0 AND state IN ('queued', 'running')`
)

// requeueCovered puts the finished runs covered by an unfinished leader of
// the pipeline back to queued (their task instances scheduled): a cleared
// leader runs again, and its runs end with it again.
func requeueCovered(ctx context.Context, c conn, pipeline string, now any) error {
	const leaders = `SELECT l.id FROM runs l WHERE l.pipeline = $1 AND l.state IN ('queued', 'running')`
	if _, err := c.exec(ctx, `
		UPDATE task_instances SET state = 'scheduled', failures = 0, next_try_at = NULL, updated_at = $2
		WHERE run_id IN (SELECT id FROM runs WHERE pipeline = $1 AND batch_of <> 0
		                 AND state IN ('success', 'failed') AND batch_of IN (`+leaders+`))`, pipeline, now); err != nil {
		return fmt.Errorf("runs covered by a cleared run: %w", err)
	}
	if _, err := c.exec(ctx, `
		UPDATE runs SET state = 'queued', started_at = NULL, ended_at = NULL
		WHERE pipeline = $1 AND batch_of <> 0 AND state IN ('success', 'failed') AND batch_of IN (`+leaders+`)`, pipeline); err != nil {
		return fmt.Errorf("runs covered by a cleared run: %w", err)
	}
	return nil
}
