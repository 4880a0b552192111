-- rewind state, version 10: queued task instances in claim order.
--
-- A claim takes a pool's first queued task instances in claim order:
-- scheduled and manual runs before backfill runs, then the run's logical
-- date, the task's priority, its id. The first two live on the run, so a
-- claim read every queued task instance of the pool, joined each with its
-- run and sorted them: a claim cost as much as the backlog. A task
-- instance now carries a copy of both, written with it and again when its
-- run changes kind, and the partial indexes hand a claim its candidates in
-- order: it reads what it takes. The claim still reads the run to decide
-- what it may take; the copies only order.
ALTER TABLE task_instances ADD COLUMN claim_backfill {{int}} NOT NULL DEFAULT 0;
ALTER TABLE task_instances ADD COLUMN claim_unix {{int}} NOT NULL DEFAULT 0;
UPDATE task_instances
SET claim_backfill = (SELECT CASE WHEN r.kind = 'backfill' THEN 1 ELSE 0 END FROM runs r WHERE r.id = task_instances.run_id),
    claim_unix = (SELECT r.logical_unix FROM runs r WHERE r.id = task_instances.run_id);
CREATE INDEX task_instances_claim ON task_instances (pool, claim_backfill, claim_unix, priority, id)
    WHERE state = 'queued';
-- A backfill run newest date first (--reverse) reads its candidates here.
CREATE INDEX task_instances_claim_newest ON task_instances (pool, claim_unix DESC, priority, id)
    WHERE state = 'queued' AND claim_backfill = 1;
