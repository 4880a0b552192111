package store

import (
	"context"
	"database/sql"
	"fmt"
	"hash/fnv"
	"slices"
	"strconv"
	"strings"
	"time"
)

// pgSteps are the PostgreSQL dialect's own steps: set-wise statements over
// unnested arrays, one round trip each, because several writers run at
// once and each statement is guarded on the rows it locks.
type pgSteps struct{}

// createRuns inserts the runs in one statement (arrays unnested) whose
// RETURNING gives exactly the runs this call created, then their task
// instances in a second statement, task by task in input order as SQLite
// numbers them.
func (pgSteps) createRuns(ctx context.Context, c conn, p MaterializeRunsParams) (int, error) {
	n := len(p.Runs)
	dates, unix, ds, ivStart, ivEnd := make([]string, n), make([]int64, n), make([]string, n), make([]string, n), make([]string, n)
	for i, r := range p.Runs {
		dates[i], unix[i], ds[i] = formatDate(r.LogicalDate), nanos(r.LogicalDate), r.DS
		ivStart[i], ivEnd[i] = formatDate(r.DataIntervalStart), formatDate(r.DataIntervalEnd)
	}
	now := nullNanos(p.Now)
	rows, err := c.query(ctx, `
		INSERT INTO runs (pipeline, kind, backfill_id, created_at, logical_date, logical_unix, ds,
		                  data_interval_start, data_interval_end)
		SELECT $1, $2, $3, $4, d.logical_date, d.logical_unix, d.ds, d.iv_start, d.iv_end
		FROM unnest($5::text[], $6::bigint[], $7::text[], $8::text[], $9::text[]) WITH ORDINALITY
		     AS d (logical_date, logical_unix, ds, iv_start, iv_end, ord)
		ORDER BY d.ord
		ON CONFLICT (pipeline, logical_unix) DO NOTHING
		RETURNING id`,
		p.Pipeline, string(p.Kind), p.BackfillID, now, dates, unix, ds, ivStart, ivEnd)
	created, err := scanAll(rows, err, func(rows *sql.Rows) (int64, error) {
		var id int64
		return id, rows.Scan(&id)
	})
	if err != nil {
		return 0, fmt.Errorf("store: materialize runs %s from %s: %w", p.Pipeline, dates[0], err)
	}
	if len(created) == 0 || len(p.Tasks) == 0 {
		return len(created), nil
	}
	taskNames, taskPools := make([]string, len(p.Tasks)), make([]string, len(p.Tasks))
	for i, t := range p.Tasks {
		taskNames[i], taskPools[i] = t.Name, t.Pool
	}
	if _, err := c.exec(ctx, `
		INSERT INTO task_instances (run_id, task, state, pool, updated_at, claim_backfill, claim_unix)
		SELECT r.id, t.task, 'scheduled', t.pool, $4, CASE WHEN runs.kind = 'backfill' THEN 1 ELSE 0 END, runs.logical_unix
		FROM unnest($1::text[], $2::text[]) WITH ORDINALITY AS t (task, pool, ord)
		CROSS JOIN unnest($3::bigint[]) WITH ORDINALITY AS r (id, ord)
		JOIN runs ON runs.id = r.id
		ORDER BY t.ord, r.ord
		ON CONFLICT (run_id, task) DO NOTHING`,
		taskNames, taskPools, created, now); err != nil {
		return 0, fmt.Errorf("store: materialize tasks of %s: %w", p.Pipeline, err)
	}
	return len(created), nil
}

// insertAttempts inserts the attempts in one statement; one that exists
// already for its try is ErrConflict.
func (pgSteps) insertAttempts(ctx context.Context, c conn, as []*Attempt, now time.Time) error {
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
		newAttempt(a, now)
		tis[i], tries[i] = a.TaskInstanceID, int64(a.TryNumber)
		pools[i], hosts[i], paths[i] = a.Pool, a.Host, a.LogPath
		reasons[i], owners[i], nonces[i] = a.Reason, a.Owner, a.Nonce
		byTI[a.TaskInstanceID] = a
	}
	rows, err := c.query(ctx, `
		INSERT INTO attempts (task_instance_id, try_number, pool, state, host, pid, pid_start,
		                      started_at, log_path, reason, owner, nonce)
		SELECT ti, try, pool, 'running', host, 0, 0, $1, log_path, reason, owner, nonce
		FROM unnest($2::bigint[], $3::bigint[], $4::text[], $5::text[], $6::text[], $7::text[], $8::text[], $9::text[])
		     WITH ORDINALITY AS x (ti, try, pool, host, log_path, reason, owner, nonce, ord)
		ORDER BY ord
		ON CONFLICT (task_instance_id, try_number) DO NOTHING
		RETURNING id, task_instance_id`,
		nullNanos(now), tis, tries, pools, hosts, paths, reasons, owners, nonces)
	ids, err := scanAll(rows, err, func(rows *sql.Rows) ([2]int64, error) {
		var id [2]int64
		return id, rows.Scan(&id[0], &id[1])
	})
	if err != nil {
		return fmt.Errorf("insert attempt: %w", err)
	}
	for _, id := range ids {
		if a := byTI[id[1]]; a != nil {
			a.ID = id[0]
		}
	}
	for _, a := range as {
		if a.ID == 0 {
			return fmt.Errorf("attempt %d exists: %w", a.TryNumber, ErrConflict)
		}
	}
	return nil
}

// enqueue runs one guarded UPDATE over the unnested items; an id listed
// twice is routed by its first item.
func (pgSteps) enqueue(ctx context.Context, c conn, p EnqueueTasksParams) (int, error) {
	var (
		ids                   []int64
		pools, reasons, paths []string
		prios                 []int64
		seen                  = make(map[int64]bool, len(p.Items))
	)
	for _, it := range p.Items {
		if seen[it.TaskInstanceID] {
			continue
		}
		seen[it.TaskInstanceID] = true
		ids = append(ids, it.TaskInstanceID)
		pools, reasons, paths = append(pools, it.Pool), append(reasons, it.Reason), append(paths, it.LogPath)
		prios = append(prios, int64(it.Priority))
	}
	n, err := affected(c.exec(ctx, `
		UPDATE task_instances ti
		SET state = 'queued', pool = CASE WHEN i.pool = '' THEN ti.pool ELSE i.pool END,
		    reason = i.reason, priority = i.priority, log_path = i.log_path, next_try_at = NULL, updated_at = $1
		FROM unnest($2::bigint[], $3::text[], $4::text[], $5::text[], $6::bigint[]) AS i (id, pool, reason, log_path, priority)
		WHERE ti.id = i.id
		  AND (ti.state = 'scheduled'
		       OR (ti.state = 'up_for_retry' AND (ti.next_try_at IS NULL OR ti.next_try_at <= $1)))`,
		nanos(p.Now), ids, pools, reasons, paths, prios))
	if err != nil {
		return 0, fmt.Errorf("store: enqueue tasks: %w", err)
	}
	return n, nil
}

// pgPoolLockKey is the advisory lock key of a pool.
func pgPoolLockKey(pool string) int32 {
	h := fnv.New32a()
	_, _ = h.Write([]byte(pgPoolLockBase + pool))
	return int32(h.Sum32())
}

// pgPoolLockKeys are the advisory lock keys of the pools, in key order (so
// that two claimers with overlapping pools cannot deadlock, even when two
// names share a key). A claimer of another pool set runs alongside; one of
// the same pools waits.
func pgPoolLockKeys(pools []PoolCapacity) []int32 {
	keys := make([]int32, 0, len(pools))
	for _, pc := range pools {
		keys = append(keys, pgPoolLockKey(pc.Name))
	}
	slices.Sort(keys)
	return slices.Compact(keys)
}

// claim takes the pools' advisory transaction locks (pgPoolLockKeys), then
// is ClaimReady in one statement (a snapshot taken after the locks, so the
// running attempts it counts cannot change before the commit), all in one
// pipeline, so that the stretch every claimer of the pool waits for is one
// round trip and the commit:
//   - busy, room: the running attempts per pool and the room they leave;
//   - cand: per pool with room, its first queued task instances in claim
//     order (claimCandidatesSQL as a LATERAL query: index scans that stop
//     at its room);
//   - pick: pickCandidates in SQL: per pool, its backfill candidates beyond
//     its free backfill slots dropped and the rest beyond its free slots,
//     then the first Limit in claim order (claimBefore), numbered in that
//     order;
//   - u, ins: the guarded UPDATE queued -> running and the attempts'
//     INSERT, with the nonces made beforehand (the pick's number is the
//     index of its nonce), in the pick's order; an attempt that exists for
//     its try is a unique violation (ErrConflict) that undoes the claim.
func (pgSteps) claim(ctx context.Context, c conn, p ClaimReadyParams) ([]ClaimedAttempt, error) {
	var stmts []pipeStmt
	for _, k := range pgPoolLockKeys(p.Pools) {
		stmts = append(stmts, pipeStmt{query: "SELECT pg_advisory_xact_lock($1, $2)", args: []any{pgLockSpace, k}})
	}
	q, a := pgClaimQuery(c.d, p)
	var out []ClaimedAttempt
	stmts = append(stmts, pipeStmt{query: q, args: a, scan: func(rows rowScanner) error {
		for rows.Next() {
			ca, err := pgClaimed(p, rows.Scan)
			if err != nil {
				return err
			}
			out = append(out, ca)
		}
		return nil
	}})
	if err := c.pipeline(ctx, stmts); err != nil {
		return nil, fmt.Errorf("store: claim ready: %w", err)
	}
	return out, nil
}

// pgClaimQuery is claim's statement and its arguments.
func pgClaimQuery(d *dialect, p ClaimReadyParams) (string, args) {
	names, slots, backfillSlots := make([]string, len(p.Pools)), make([]int64, len(p.Pools)), make([]int64, len(p.Pools))
	for i, pc := range p.Pools {
		names[i], slots[i], backfillSlots[i] = pc.Name, int64(pc.Slots), int64(pc.BackfillSlots)
	}
	nonces := make([]string, p.Limit)
	for i := range nonces {
		nonces[i] = newNonce()
	}
	a := args{names, slots, backfillSlots, int64(p.Limit), nullNanos(p.Now), p.Host, p.Owner, nonces}
	cands := claimCandidatesSQL(d, &a, p, "pc.pool", "GREATEST(pc.free, 0)", "GREATEST(LEAST(pc.free, pc.free_backfill), 0)")
	order := "logical_unix, priority, id" // claimBefore, within bf
	if p.ReverseBackfill {
		order = "CASE WHEN bf = 1 THEN logical_unix END DESC, " + order
	}
	return `
		WITH busy AS (
			SELECT a.pool, COUNT(*) AS n, SUM(CASE WHEN r.kind = 'backfill' THEN 1 ELSE 0 END) AS bf
			FROM attempts a
			JOIN task_instances ti ON ti.id = a.task_instance_id
			JOIN runs r ON r.id = ti.run_id
			WHERE a.state = 'running' AND a.pool = ANY($1::text[])
			GROUP BY a.pool
		), room AS (
			SELECT x.pool, LEAST(x.slots - COALESCE(busy.n, 0), $4) AS free,
			       x.backfill_slots - COALESCE(busy.bf, 0) AS free_backfill
			FROM unnest($1::text[], $2::bigint[], $3::bigint[]) AS x (pool, slots, backfill_slots)
			LEFT JOIN busy ON busy.pool = x.pool
			WHERE x.slots - COALESCE(busy.n, 0) > 0
		), cand AS (
			SELECT c.id, pc.pool, c.bf, c.logical_unix, c.priority, pc.free, pc.free_backfill
			FROM room AS pc
			CROSS JOIN LATERAL (
			` + cands + `
			) AS c
		), pick AS (
			SELECT id, row_number() OVER (ORDER BY bf, ` + order + `) AS ord
			FROM (SELECT cand.*, row_number() OVER (PARTITION BY pool, bf ORDER BY ` + order + `) AS nth,
			             row_number() OVER (PARTITION BY pool ORDER BY bf, ` + order + `) AS pn
			      FROM cand) AS k
			WHERE (bf = 0 OR nth <= free_backfill) AND pn <= free
			ORDER BY bf, ` + order + `
			LIMIT $4
		), u AS (
			UPDATE task_instances ti SET state = 'running', try_number = ti.try_number + 1, updated_at = $5
			FROM runs r, pick
			WHERE ti.id = pick.id AND ti.state = 'queued' AND r.id = ti.run_id
			RETURNING ti.id, ti.try_number, ti.pool, ti.reason, ti.log_path, ti.task, ti.run_id,
			          r.pipeline, r.kind, r.logical_date, pick.ord
		), ins AS (
			INSERT INTO attempts (task_instance_id, try_number, pool, state, host, pid, pid_start,
			                      started_at, log_path, reason, owner, nonce)
			SELECT u.id, u.try_number, u.pool, 'running', $6, 0, 0, $5,
			       replace(u.log_path, '{try}', u.try_number::text), u.reason, $7, ($8::text[])[u.ord]
			FROM u
			ORDER BY u.ord
			RETURNING id, task_instance_id, nonce
		)
		SELECT u.id, u.try_number, u.pool, u.reason, u.log_path, u.task, u.run_id, u.pipeline, u.kind, u.logical_date,
		       ins.id, ins.nonce
		FROM u JOIN ins ON ins.task_instance_id = u.id
		ORDER BY u.ord`, a
}

// pgClaimed scans one row of claim's statement.
func pgClaimed(p ClaimReadyParams, scan func(dest ...any) error) (ClaimedAttempt, error) {
	var (
		ca            ClaimedAttempt
		kind, logical string
	)
	if err := scan(&ca.TaskInstanceID, &ca.TryNumber, &ca.Pool, &ca.Reason, &ca.LogPath, &ca.Task, &ca.RunID,
		&ca.Pipeline, &kind, &logical, &ca.ID, &ca.Nonce); err != nil {
		return ca, err
	}
	ca.Kind = RunKind(kind)
	ca.Host, ca.Owner = p.Host, p.Owner
	ca.State, ca.StartedAt = AttemptRunning, stamp(p.Now)
	ca.LogPath = strings.ReplaceAll(ca.LogPath, "{try}", strconv.Itoa(ca.TryNumber))
	var err error
	ca.LogicalDate, err = parseDate(logical)
	return ca, err
}

// clearTasks updates the task instances first (their row locks make a
// concurrent FinishRun of the run wait, or wait for it; the guard on their
// state is checked again on each locked row), then the runs they belong to.
func (pgSteps) clearTasks(ctx context.Context, c conn, cond func(*args) string, states []string, now any) (int, error) {
	var a args
	q := `UPDATE task_instances SET state = 'scheduled', failures = 0, next_try_at = NULL, updated_at = ` + a.add(now) + `
		WHERE id IN (SELECT ti.id FROM task_instances ti JOIN runs r ON r.id = ti.run_id WHERE ` + cond(&a) + `)
		  AND ` + c.d.in(&a, "state", states) + `
		RETURNING run_id`
	rows, err := c.query(ctx, q, a...)
	runIDs, err := scanAll(rows, err, func(rows *sql.Rows) (int64, error) {
		var id int64
		return id, rows.Scan(&id)
	})
	if err != nil {
		return 0, err
	}
	cleared := len(runIDs)
	slices.Sort(runIDs)
	runIDs = slices.Compact(runIDs)
	if len(runIDs) > 0 {
		if _, err := c.exec(ctx, `
			UPDATE runs SET state = 'queued', started_at = NULL, ended_at = NULL
			WHERE state IN ('success', 'failed') AND id = ANY($1::bigint[])`, runIDs); err != nil {
			return 0, fmt.Errorf("runs: %w", err)
		}
	}
	return cleared, nil
}

// pgTaken maps the ids a set-wise statement returned back onto the items
// (whose applied ids are unique).
func pgTaken(rows *sql.Rows, err error, ids []int64, apply []bool) ([]bool, error) {
	got, err := scanAll(rows, err, func(rows *sql.Rows) (int64, error) {
		var id int64
		return id, rows.Scan(&id)
	})
	if err != nil {
		return nil, err
	}
	return pgTook(got, ids, apply), nil
}

// pgTook says, for each of ids, whether it was to be applied and is among
// got.
func pgTook(got, ids []int64, apply []bool) []bool {
	took := make(map[int64]bool, len(got))
	for _, id := range got {
		took[id] = true
	}
	ok := make([]bool, len(ids))
	for i, id := range ids {
		ok[i] = apply[i] && took[id]
	}
	return ok
}

// scanIDs is a pipeline scan of one id column into *out.
func scanIDs(out *[]int64) func(rows rowScanner) error {
	return func(rows rowScanner) error {
		for rows.Next() {
			var id int64
			if err := rows.Scan(&id); err != nil {
				return err
			}
			*out = append(*out, id)
		}
		return nil
	}
}

// pgNullNanos is a time as a nullable bigint array element.
func pgNullNanos(t time.Time) *int64 {
	if t.IsZero() {
		return nil
	}
	n := nanos(t)
	return &n
}

// admitRuns admits the applied runs in one guarded UPDATE.
func (pgSteps) admitRuns(ctx context.Context, c conn, ps []AdmitRunParams, apply []bool) ([]bool, error) {
	var ids []int64
	var nows []*int64
	all := make([]int64, len(ps))
	for i, p := range ps {
		all[i] = p.RunID
		if apply[i] {
			ids, nows = append(ids, p.RunID), append(nows, pgNullNanos(p.Now))
		}
	}
	rows, err := c.query(ctx, `
		UPDATE runs SET state = 'running', started_at = x.now, ended_at = NULL
		FROM unnest($1::bigint[], $2::bigint[]) AS x (id, now)
		WHERE runs.id = x.id AND runs.state = 'queued'
		RETURNING runs.id`, ids, nows)
	return pgTaken(rows, err, all, apply)
}

// pgFinishRunsSQL finishes the runs $1 as $2 at $3 that finishRunSQL's
// guards allow, and ends the runs each one covers with it (finishCovered's
// two statements, for those runs); it returns the runs it finished.
const pgFinishRunsSQL = `
		WITH f AS (
			UPDATE runs SET state = x.state, ended_at = x.now
			FROM unnest($1::bigint[], $2::text[], $3::bigint[]) AS x (id, state, now)
			WHERE runs.id = x.id AND runs.state IN ('queued', 'running')
			  -- a run covered by a leader of this batch is the leader's to end
			  -- (as on SQLite, where the leader, taken first, leaves it finished)
			  AND (runs.batch_of = 0 OR runs.batch_of <> ALL($1::bigint[]))
			  AND NOT EXISTS (SELECT 1 FROM task_instances ti WHERE ti.run_id = runs.id
			                  AND ti.state IN ('scheduled', 'queued', 'running', 'up_for_retry'))
			  AND (x.state <> 'success' OR NOT EXISTS (SELECT 1 FROM task_instances ti WHERE ti.run_id = runs.id
			                                           AND ti.state NOT IN ('success', 'skipped')))
			RETURNING runs.id, runs.state, runs.ended_at, runs.started_at
		), cov AS (
			SELECT r.id, f.id AS leader, f.state, f.ended_at, f.started_at
			FROM runs r JOIN f ON r.batch_of = f.id
			WHERE r.batch_of <> 0 AND r.state IN ('queued', 'running') -- the partial index runs_batch_of
		), cov_tasks AS (
			UPDATE task_instances t SET updated_at = cov.ended_at, next_try_at = NULL,
				state = COALESCE((SELECT l.state FROM task_instances l WHERE l.run_id = cov.leader AND l.task = t.task), 'skipped')
			FROM cov WHERE t.run_id = cov.id
		), cov_runs AS (
			UPDATE runs SET state = cov.state, ended_at = cov.ended_at, started_at = cov.started_at
			FROM cov WHERE runs.id = cov.id AND runs.state IN ('queued', 'running')
		)
		SELECT id FROM f`

// finishRuns locks the applied runs' task instances FOR SHARE (in id
// order), then, in one statement (a new snapshot, after the lock), finishes
// those runs finishRunSQL's guards allow and ends the runs each one covers
// with it (see finishCovered).
func (pgSteps) finishRuns(ctx context.Context, c conn, ps []FinishRunParams, apply []bool) ([]bool, error) {
	var ids []int64
	var states []string
	var nows []*int64
	all := make([]int64, len(ps))
	for i, p := range ps {
		all[i] = p.RunID
		if apply[i] {
			ids, states, nows = append(ids, p.RunID), append(states, string(p.State)), append(nows, pgNullNanos(p.Now))
		}
	}
	var took []int64
	err := c.pipeline(ctx, []pipeStmt{
		{query: "SELECT 1 FROM task_instances WHERE run_id = ANY($1::bigint[]) ORDER BY id FOR SHARE", args: []any{ids}},
		{query: pgFinishRunsSQL, args: []any{ids, states, nows}, scan: scanIDs(&took)},
	})
	if err != nil {
		return nil, err
	}
	return pgTook(took, all, apply), nil
}

// startAttempts records the applied attempts' processes in one guarded
// UPDATE.
func (pgSteps) startAttempts(ctx context.Context, c conn, ps []StartAttemptParams, apply []bool) ([]bool, error) {
	var ids, pids, starts []int64
	var jobs []string
	var nows []*int64
	all := make([]int64, len(ps))
	for i, p := range ps {
		all[i] = p.AttemptID
		if apply[i] {
			ids, pids, starts = append(ids, p.AttemptID), append(pids, int64(p.PID)), append(starts, int64(p.PIDStart))
			jobs, nows = append(jobs, p.JobID), append(nows, pgNullNanos(p.Now))
		}
	}
	rows, err := c.query(ctx, `
		UPDATE attempts SET pid = x.pid, pid_start = x.pid_start, job_id = x.job_id, started_at = x.now
		FROM unnest($1::bigint[], $2::bigint[], $3::bigint[], $4::text[], $5::bigint[]) AS x (id, pid, pid_start, job_id, now)
		WHERE attempts.id = x.id AND attempts.state = 'running' AND attempts.pid = 0 AND attempts.job_id = ''
		  AND EXISTS (SELECT 1 FROM task_instances ti
		              WHERE ti.id = attempts.task_instance_id AND ti.state = 'running'
		                AND ti.try_number = attempts.try_number)
		RETURNING attempts.id`, ids, pids, starts, jobs, nows)
	return pgTaken(rows, err, all, apply)
}

// finishAttempts records the applied attempts' outcomes (guarded on the
// attempt running) and moves each one's task instance if it still runs on
// the attempt's try, in one statement.
func (pgSteps) finishAttempts(ctx context.Context, c conn, ps []FinishAttemptParams, apply []bool) ([]bool, error) {
	var ids, rss, fails []int64
	var exits, nows, nexts []*int64
	var states, signals, tstates []string
	all := make([]int64, len(ps))
	for i, p := range ps {
		all[i] = p.AttemptID
		if !apply[i] {
			continue
		}
		var exit *int64
		if p.ExitCode != nil {
			e := int64(*p.ExitCode)
			exit = &e
		}
		ids, rss, fails = append(ids, p.AttemptID), append(rss, p.PeakRSS), append(fails, boolInt(p.CountFailure))
		exits, nows, nexts = append(exits, exit), append(nows, pgNullNanos(p.Now)), append(nexts, pgNullNanos(p.NextTryAt))
		states, signals, tstates = append(states, string(p.State)), append(signals, p.Signal), append(tstates, string(p.TaskState))
	}
	rows, err := c.query(ctx, `
		WITH a AS (
			UPDATE attempts SET state = x.state, ended_at = x.now, exit_code = x.exit_code, signal = x.signal, peak_rss = x.peak_rss
			FROM unnest($1::bigint[], $2::text[], $3::bigint[], $4::bigint[], $5::text[], $6::bigint[], $7::text[], $8::bigint[], $9::bigint[])
			     AS x (id, state, now, exit_code, signal, peak_rss, task_state, failure, next_try_at)
			WHERE attempts.id = x.id AND attempts.state = 'running'
			RETURNING attempts.id, attempts.task_instance_id, attempts.try_number, x.task_state, x.failure, x.next_try_at, x.now
		), t AS (
			UPDATE task_instances ti
			SET state = a.task_state, failures = ti.failures + a.failure, next_try_at = a.next_try_at, updated_at = a.now
			FROM a WHERE ti.id = a.task_instance_id AND ti.state = 'running' AND ti.try_number = a.try_number
		)
		SELECT id FROM a`, ids, states, nows, exits, signals, rss, tstates, fails, nexts)
	return pgTaken(rows, err, all, apply)
}
