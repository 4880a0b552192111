package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"
)

// A pipeline's name.

// LatestTasks reads the task instances of the pipeline's latest run: the
// run is one seek on the unique index (pipeline, logical_unix).
func (s *sqlStore) LatestTasks(ctx context.Context, pipeline string) ([]string, error) {
	rows, err := s.rq().query(ctx, `
		SELECT task FROM task_instances
		WHERE run_id = (SELECT id FROM runs WHERE pipeline = $1 ORDER BY logical_unix DESC LIMIT 1)
		ORDER BY task`+s.d.collate, pipeline)
	out, err := scanAll(rows, err, func(rows *sql.Rows) (string, error) {
		var t string
		return t, rows.Scan(&t)
	})
	if err != nil {
		return nil, fmt.Errorf("store: latest tasks of %s: %w", pipeline, err)
	}
	return out, nil
}

// RenamePipeline moves a pipeline's history to a new name in one write
// transaction: the guards first (each a count on an index), then one
// statement per table. Task instances, attempts and outbox rows belong to
// their run by id, so they follow it; only their log paths are rewritten.
func (s *sqlStore) RenamePipeline(ctx context.Context, p RenamePipelineParams) (RenameResult, error) {
	switch {
	case p.From == "" || p.To == "":
		return RenameResult{}, errors.New("store: rename pipeline: empty name")
	case p.From == p.To:
		return RenameResult{}, fmt.Errorf("store: rename pipeline %s to itself", p.From)
	case strings.Contains(p.To, ","):
		// The consumer lists of backfills are comma-separated.
		return RenameResult{}, fmt.Errorf("store: rename pipeline %s: %q has a comma", p.From, p.To)
	case (p.LogsFrom == "") != (p.LogsTo == ""):
		return RenameResult{}, fmt.Errorf("store: rename pipeline %s: log paths from %q to %q", p.From, p.LogsFrom, p.LogsTo)
	}
	var res RenameResult
	err := s.write(ctx, func(c conn) error {
		res = RenameResult{}
		fail := func(err error) error { return fmt.Errorf("store: rename pipeline %s to %s: %w", p.From, p.To, err) }
		if err := renameGuards(ctx, c, p, &res); err != nil {
			return fail(err)
		}
		if err := renameBackfills(ctx, c, p, &res); err != nil {
			return fail(err)
		}
		ofFrom := " run_id IN (SELECT id FROM runs WHERE pipeline = $1)"
		if p.LogsFrom != "" {
			// substr and || count characters in both databases.
			chars := utf8.RuneCountInString(p.LogsFrom)
			set := "SET log_path = CAST($2 AS TEXT) || substr(log_path, $3) WHERE substr(log_path, 1, $4) = CAST($5 AS TEXT) AND"
			for _, q := range []string{
				"UPDATE task_instances " + set + ofFrom,
				"UPDATE attempts " + set + " task_instance_id IN (SELECT id FROM task_instances WHERE" + ofFrom + ")",
			} {
				n, err := affected(c.exec(ctx, q, p.From, p.LogsTo, chars+1, chars, p.LogsFrom))
				if err != nil {
					return fail(fmt.Errorf("log paths: %w", err))
				}
				res.LogPaths += n
			}
		}
		if _, err := c.exec(ctx, "DELETE FROM pipelines WHERE name = $2 AND EXISTS (SELECT 1 FROM pipelines WHERE name = $1)", p.From, p.To); err != nil {
			return fail(err)
		}
		if _, err := c.exec(ctx, "UPDATE pipelines SET name = $2 WHERE name = $1", p.From, p.To); err != nil {
			return fail(err)
		}
		var err error
		if res.Runs, err = affected(c.exec(ctx, "UPDATE runs SET pipeline = $2 WHERE pipeline = $1", p.From, p.To)); err != nil {
			return fail(err)
		}
		if _, err := c.exec(ctx, "DELETE FROM watermarks WHERE pipeline = $2 AND EXISTS (SELECT 1 FROM watermarks WHERE pipeline = $1)", p.From, p.To); err != nil {
			return fail(err)
		}
		moved, err := affected(c.exec(ctx, "UPDATE watermarks SET pipeline = $2 WHERE pipeline = $1", p.From, p.To))
		if err != nil {
			return fail(err)
		}
		res.Watermark = moved > 0
		// A measurement recorded under the new name for the same task and
		// date is the later one: it stays, and the old one goes.
		if res.Probes, err = affected(c.exec(ctx, `
			UPDATE probe_results SET pipeline = $2 WHERE pipeline = $1 AND NOT EXISTS (
				SELECT 1 FROM probe_results q
				WHERE q.pipeline = $2 AND q.task = probe_results.task AND q.logical_unix = probe_results.logical_unix)`,
			p.From, p.To)); err != nil {
			return fail(err)
		}
		if _, err := c.exec(ctx, "DELETE FROM probe_results WHERE pipeline = $1", p.From); err != nil {
			return fail(err)
		}
		// Notifications keep their key and payload (the event as it
		// happened); the deadline checks go on from the later of the two
		// names' instants, so that no deadline is looked for twice.
		if res.Notifications, err = affected(c.exec(ctx, "UPDATE notifications SET pipeline = $2 WHERE pipeline = $1", p.From, p.To)); err != nil {
			return fail(err)
		}
		if _, err := c.exec(ctx, `
			INSERT INTO deadline_checks (pipeline, checked_until)
			SELECT $2, checked_until FROM deadline_checks WHERE pipeline = $1
			ON CONFLICT (pipeline) DO UPDATE SET checked_until = excluded.checked_until
			WHERE deadline_checks.checked_until < excluded.checked_until`, p.From, p.To); err != nil {
			return fail(err)
		}
		if _, err := c.exec(ctx, "DELETE FROM deadline_checks WHERE pipeline = $1", p.From); err != nil {
			return fail(err)
		}
		if err := bumpEpoch(ctx, c); err != nil {
			return fail(err)
		}
		return nil
	})
	if err != nil {
		return RenameResult{}, err
	}
	return res, nil
}

// renameGuards refuses a rename the state does not allow, and counts what
// moves with the runs.
func renameGuards(ctx context.Context, c conn, p RenamePipelineParams, res *RenameResult) error {
	var from, to int
	if err := c.row(ctx, "SELECT COUNT(*) FROM runs WHERE pipeline = $1", p.From).Scan(&from); err != nil {
		return err
	}
	if err := c.row(ctx, "SELECT COUNT(*) FROM runs WHERE pipeline = $1", p.To).Scan(&to); err != nil {
		return err
	}
	switch {
	case from == 0:
		return fmt.Errorf("%s has no run: %w", p.From, ErrNotFound)
	case to > 0:
		return fmt.Errorf("%s has runs already (%d): %w", p.To, to, ErrConflict)
	}
	var running int
	if err := c.row(ctx, `
		SELECT COUNT(*) FROM attempts a
		JOIN task_instances ti ON ti.id = a.task_instance_id
		JOIN runs r ON r.id = ti.run_id
		WHERE a.state = 'running' AND r.pipeline = $1`, p.From).Scan(&running); err != nil {
		return err
	}
	if running > 0 {
		return fmt.Errorf("%s has attempts running (%d): %w", p.From, running, ErrConflict)
	}
	if err := c.row(ctx, `
		SELECT COUNT(*), (SELECT COUNT(*) FROM attempts a JOIN task_instances ti ON ti.id = a.task_instance_id
		                  JOIN runs r ON r.id = ti.run_id WHERE r.pipeline = $1)
		FROM task_instances ti JOIN runs r ON r.id = ti.run_id WHERE r.pipeline = $1`, p.From).
		Scan(&res.TaskInstances, &res.Attempts); err != nil {
		return err
	}
	return nil
}

// renameBackfills moves the backfills of From to To, renames From in the
// consumer lists of every backfill that paused it, and replaces the plans
// the caller rewrote. A running backfill that involves either name is a
// conflict: its apply acts on those names as it goes.
func renameBackfills(ctx context.Context, c conn, p RenamePipelineParams, res *RenameResult) error {
	type row struct {
		id, pipeline, state, paused string
	}
	rows, err := c.query(ctx, "SELECT id, pipeline, state, paused FROM backfills")
	bfs, err := scanAll(rows, err, func(rows *sql.Rows) (row, error) {
		var r row
		return r, rows.Scan(&r.id, &r.pipeline, &r.state, &r.paused)
	})
	if err != nil {
		return fmt.Errorf("backfills: %w", err)
	}
	for _, b := range bfs {
		consumers := strings.Split(b.paused, ",")
		involved := b.pipeline == p.From || b.pipeline == p.To ||
			slices.Contains(consumers, p.From) || slices.Contains(consumers, p.To)
		if involved && b.state == string(BackfillRunning) {
			return fmt.Errorf("backfill %s is running (or stopped midway) on %s: %w", b.id, b.pipeline, ErrConflict)
		}
		if b.pipeline == p.From {
			res.Backfills++
		}
		if !slices.Contains(consumers, p.From) {
			continue
		}
		for i, name := range consumers {
			if name == p.From {
				consumers[i] = p.To
			}
		}
		n, err := affected(c.exec(ctx, "UPDATE backfills SET paused = $1 WHERE id = $2 AND paused = $3",
			strings.Join(consumers, ","), b.id, b.paused))
		if err != nil {
			return fmt.Errorf("backfill %s: %w", b.id, err)
		}
		if n == 0 {
			return fmt.Errorf("backfill %s changed meanwhile: %w", b.id, ErrConflict)
		}
		res.Consumers++
	}
	if _, err := c.exec(ctx, "UPDATE backfills SET pipeline = $2 WHERE pipeline = $1", p.From, p.To); err != nil {
		return fmt.Errorf("backfills: %w", err)
	}
	for _, pr := range p.Plans {
		n, err := affected(c.exec(ctx, "UPDATE backfills SET plan = $1 WHERE id = $2 AND plan = $3", pr.New, pr.ID, pr.Old))
		if err != nil {
			return fmt.Errorf("plan of backfill %s: %w", pr.ID, err)
		}
		if n == 0 {
			return fmt.Errorf("the plan of backfill %s changed meanwhile (or it is gone): %w", pr.ID, ErrConflict)
		}
		res.Plans++
	}
	return nil
}
