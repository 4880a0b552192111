package store

import (
	"context"
	"database/sql"
	"fmt"
	"sort"
	"strings"
)

// EnqueueTasks moves each listed task instance scheduled -> queued, or
// up_for_retry -> queued once its next_try_at has come, guarded, all in one
// transaction (the dialect's enqueue); it returns how many moved. An id
// listed twice is routed by its first item, as if the items were applied in
// order.
func (s *sqlStore) EnqueueTasks(ctx context.Context, p EnqueueTasksParams) (int, error) {
	if len(p.Items) == 0 {
		return 0, nil
	}
	moved := 0
	// Its guards refuse by moving nothing: no savepoint inside InTx.
	err := s.writeSet(ctx, func(c conn) error {
		var err error
		moved, err = s.d.steps.enqueue(ctx, c, p)
		return err
	})
	if err != nil {
		return 0, err
	}
	return moved, nil
}

// claimKey: the claim order of queued task instances is their run's kind
// (scheduled and manual runs first, then backfill runs), the run's logical
// date, the task's priority, its id. A task instance carries a copy of the
// first two (task_instances.claim_backfill and claim_unix), so that the
// partial indexes task_instances_claim and task_instances_claim_newest (of
// queued task instances, by pool) give a claim its candidates in that
// order and it reads only those it may take. The copy is written with the
// task instance, and again for every task instance of a run, whatever its
// state, in the transaction that changes the run's kind (ReprocessRuns,
// ClearTasks taking runs back from a backfill); a run's logical date never
// changes. Whether a candidate may be claimed, and as what, is read from
// the run itself: a wrong copy could only misorder.

// claimCandidate is a queued task instance ClaimReady may take, with its
// sort key and its pool's free slots and free backfill slots.
type claimCandidate struct {
	id           int64
	pool         string
	backfill     bool
	logicalUnix  int64
	priority     int
	free         int // the pool's free slots (at most the claim's limit)
	freeBackfill int
}

// poolRoom is what one pool can still take in a ClaimReady: free slots (at
// most the call's limit) and free backfill slots.
type poolRoom struct {
	pool         string
	free         int
	freeBackfill int
}

// ClaimReady claims queued task instances in one write transaction. The
// dialect first serializes claimers of the same pools (SQLite: the writer
// holds the whole database from BEGIN IMMEDIATE; PostgreSQL: the advisory
// lock of every pool, after which statements at READ COMMITTED see every
// claim committed before), so the capacity read next (running attempts per
// pool, and of backfill runs) cannot change before it commits, in this
// process or another. For each pool with room it reads at most min(free
// slots, Limit) queued candidates in claim order, of which at most the free
// backfill slots of backfill runs: all that pool can take. The pools'
// candidates are then merged in the same order and the first Limit claimed
// with a guarded UPDATE (queued -> running) and their attempt rows.
func (s *sqlStore) ClaimReady(ctx context.Context, p ClaimReadyParams) ([]ClaimedAttempt, error) {
	if p.Limit <= 0 || len(p.Pools) == 0 {
		return nil, nil
	}
	seen := map[string]bool{}
	for _, pc := range p.Pools {
		if seen[pc.Name] {
			return nil, fmt.Errorf("store: claim ready: pool %q listed twice", pc.Name)
		}
		seen[pc.Name] = true
	}
	if pc, ok := s.b.(pipelinedClaimer); ok {
		ctx, _, cancel := s.bound(ctx)
		defer cancel()
		if out, done, err := pc.claimPipelined(ctx, s.d, p); done {
			return out, err
		}
	}
	var out []ClaimedAttempt
	// It claims what it finds and no more: no savepoint inside InTx.
	err := s.writeSet(ctx, func(c conn) error {
		var err error
		out, err = s.d.steps.claim(ctx, c, p)
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// pickCandidates is ClaimReady's choice among the pools' candidates (each
// pool's in claim order): per pool, the backfill ones (last in its order)
// beyond its free backfill slots are dropped, and the rest beyond its free
// slots; the rest are merged in claim order (claimBefore) and the first
// p.Limit kept.
func pickCandidates(p ClaimReadyParams, cands []claimCandidate) []claimCandidate {
	// Each pool's candidates in claim order, whatever order its query
	// returned them in, so that the caps keep the first ones.
	sort.SliceStable(cands, func(i, j int) bool {
		if cands[i].pool != cands[j].pool {
			return cands[i].pool < cands[j].pool
		}
		return claimBefore(cands[i], cands[j], p.ReverseBackfill)
	})
	taken, takenBackfill := map[string]int{}, map[string]int{}
	kept := cands[:0]
	for _, cd := range cands {
		if cd.backfill {
			if takenBackfill[cd.pool] >= cd.freeBackfill {
				continue
			}
			takenBackfill[cd.pool]++
		}
		if taken[cd.pool] >= cd.free {
			continue
		}
		taken[cd.pool]++
		kept = append(kept, cd)
	}
	sort.SliceStable(kept, func(i, j int) bool { return claimBefore(kept[i], kept[j], p.ReverseBackfill) })
	return kept[:min(len(kept), p.Limit)]
}

// claimBefore is ClaimReady's order: scheduled and manual runs before
// backfill runs, then the logical date (backfill runs newest first when
// reverse), then priority, then id.
func claimBefore(a, b claimCandidate, reverse bool) bool {
	if a.backfill != b.backfill {
		return !a.backfill
	}
	if a.logicalUnix != b.logicalUnix {
		if a.backfill && reverse {
			return a.logicalUnix > b.logicalUnix
		}
		return a.logicalUnix < b.logicalUnix
	}
	if a.priority != b.priority {
		return a.priority < b.priority
	}
	return a.id < b.id
}

// claimCandidatesSQL is the query of one pool's candidates in claim order,
// on the pool named by the SQL expression pool: its queued task instances
// of scheduled and manual runs, at most free (an SQL expression), then, for
// a claim of a backfill's runs, those of the backfill's runs, at most
// freeBackfill. Each is read in order from an index of queued task
// instances by their claim key (see claimKey), so the query reads about as
// many task instances as it returns; what may be taken, and bf, come from
// the run. Columns: id, bf (1 for a backfill run), logical_unix, priority.
func claimCandidatesSQL(d *dialect, a *args, p ClaimReadyParams, pool, free, freeBackfill string) string {
	may := "r.kind <> 'backfill'"
	if p.BackfillID != "" {
		may = "(r.kind <> 'backfill' OR r.backfill_id = " + a.add(p.BackfillID) + ")"
	}
	branch := func(key, desc, limit string) string {
		conds := []string{"ti.state = 'queued'", "ti.pool = " + pool, "ti.claim_backfill = " + key, may}
		if len(p.Pipelines) > 0 {
			conds = append(conds, d.in(a, "r.pipeline", p.Pipelines))
		}
		return `SELECT * FROM (
				SELECT ti.id, CASE WHEN r.kind = 'backfill' THEN 1 ELSE 0 END AS bf, r.logical_unix, ti.priority
				FROM task_instances ti
				JOIN runs r ON r.id = ti.run_id
				WHERE ` + strings.Join(conds, " AND ") + `
				ORDER BY ti.claim_unix` + desc + `, ti.priority, ti.id
				LIMIT ` + limit + `
			) AS q` + key
	}
	q := branch("0", "", free)
	if p.BackfillID != "" {
		desc := ""
		if p.ReverseBackfill {
			desc = " DESC"
		}
		q += "\n\t\t\tUNION ALL\n\t\t\t" + branch("1", desc, freeBackfill)
	}
	return q
}

// poolRooms reads what each pool of p can still take (runningByPool): the
// pools with a free slot, each with at most p.Limit.
func poolRooms(ctx context.Context, c conn, p ClaimReadyParams) ([]poolRoom, error) {
	running, backfillRunning, err := runningByPool(ctx, c, p.Pools)
	if err != nil {
		return nil, err
	}
	var rooms []poolRoom
	for _, pc := range p.Pools {
		free := min(pc.Slots-running[pc.Name], p.Limit)
		if free <= 0 {
			continue
		}
		rooms = append(rooms, poolRoom{pool: pc.Name, free: free, freeBackfill: pc.BackfillSlots - backfillRunning[pc.Name]})
	}
	return rooms, nil
}

// runningByPool counts the running attempts of the given pools, and those of
// backfill runs, from the attempts themselves.
func runningByPool(ctx context.Context, c conn, pools []PoolCapacity) (all, backfill map[string]int, err error) {
	names := make([]string, len(pools))
	for i, pc := range pools {
		names[i] = pc.Name
	}
	var a args
	rows, err := c.query(ctx, `
		SELECT a.pool, COUNT(*), SUM(CASE WHEN r.kind = 'backfill' THEN 1 ELSE 0 END)
		FROM attempts a
		JOIN task_instances ti ON ti.id = a.task_instance_id
		JOIN runs r ON r.id = ti.run_id
		WHERE a.state = 'running' AND `+c.d.in(&a, "a.pool", names)+`
		GROUP BY a.pool`, a...)
	type count struct {
		pool  string
		n, bf int
	}
	counts, err := scanAll(rows, err, func(rows *sql.Rows) (count, error) {
		var n count
		return n, rows.Scan(&n.pool, &n.n, &n.bf)
	})
	if err != nil {
		return nil, nil, fmt.Errorf("store: claim ready: running attempts: %w", err)
	}
	all, backfill = map[string]int{}, map[string]int{}
	for _, n := range counts {
		all[n.pool], backfill[n.pool] = n.n, n.bf
	}
	return all, backfill, nil
}

// Usage counts running attempts (by the attempt's pool) and queued task
// instances (by the task instance's pool) in one statement, read from one
// snapshot.
func (s *sqlStore) Usage(ctx context.Context) ([]UsageRow, error) {
	var out []UsageRow
	err := s.rq().pipeline(ctx, []pipeStmt{usageStmt(s.d, &out)})
	if err != nil {
		return nil, fmt.Errorf("store: usage: %w", err)
	}
	return out, nil
}

// usageStmt is Usage's statement, its rows appended to out.
func usageStmt(d *dialect, out *[]UsageRow) pipeStmt {
	col := d.collate
	return pipeStmt{query: `
		SELECT pool, pipeline, task, bf, SUM(running), SUM(queued)
		FROM (
			SELECT a.pool AS pool, r.pipeline AS pipeline, ti.task AS task,
			       CASE WHEN r.kind = 'backfill' THEN 1 ELSE 0 END AS bf, 1 AS running, 0 AS queued
			FROM attempts a
			JOIN task_instances ti ON ti.id = a.task_instance_id
			JOIN runs r ON r.id = ti.run_id
			WHERE a.state = 'running'
			UNION ALL
			SELECT ti.pool, r.pipeline, ti.task,
			       CASE WHEN r.kind = 'backfill' THEN 1 ELSE 0 END, 0, 1
			FROM task_instances ti
			JOIN runs r ON r.id = ti.run_id
			WHERE ti.state = 'queued'
		) AS u
		GROUP BY pool, pipeline, task, bf
		ORDER BY pool` + col + `, pipeline` + col + `, task` + col + `, bf`,
		scan: func(rows rowScanner) error {
			for rows.Next() {
				var u UsageRow
				var bf int
				if err := rows.Scan(&u.Pool, &u.Pipeline, &u.Task, &bf, &u.Running, &u.Queued); err != nil {
					return err
				}
				u.Backfill = bf == 1
				*out = append(*out, u)
			}
			return nil
		}}
}
