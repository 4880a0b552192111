-- rewind state, version 2: the store is the one source of truth.
--
-- Written once for every backend: the double-brace tokens (id, int, strict)
-- are rendered per backend by store/migrate.go. Timestamps are UTC unix
-- nanoseconds, NULL meaning "not yet", as in version 1.

-- Every due interval with a logical date <= catchup_through has a run
-- (MaterializeRuns.Through); NULL: nothing known (new pipeline, or its
-- definition changed).
ALTER TABLE pipelines ADD COLUMN catchup_through {{int}};

-- What EnqueueTasks decided for a queued task instance: ClaimReady copies
-- reason and log_path into the attempt and orders by priority.
ALTER TABLE task_instances ADD COLUMN reason TEXT NOT NULL DEFAULT '';
ALTER TABLE task_instances ADD COLUMN priority {{int}} NOT NULL DEFAULT 0;
ALTER TABLE task_instances ADD COLUMN log_path TEXT NOT NULL DEFAULT '';

-- ClaimReady reads the queued task instances of a pool; Usage counts them.
DROP INDEX task_instances_state;
CREATE INDEX task_instances_state_pool ON task_instances (state, pool);

-- The process that claimed an attempt (owners.id) and the attempt's secret,
-- printed by the wrapper with the exit status.
ALTER TABLE attempts ADD COLUMN owner TEXT NOT NULL DEFAULT '';
ALTER TABLE attempts ADD COLUMN nonce TEXT NOT NULL DEFAULT '';

-- TaskDurations reads a pipeline's successful attempts through its runs and
-- task instances: this index answers the last step from the task instance,
-- without reading the attempt rows or any other pipeline's attempts. The
-- index on state alone goes: with it the planner would read every
-- successful attempt of the state instead. Running attempts (recovery, pool
-- capacity, owners) have their own partial index.
CREATE INDEX attempts_task_state ON attempts (task_instance_id, state, ended_at, started_at);
DROP INDEX attempts_state;
CREATE INDEX attempts_running ON attempts (id) WHERE state = 'running';

-- A lease's generation: 1 for its first holder, one more at every change of
-- holder. Fenced writes check it. A released lease keeps its row (holder '')
-- so that the next holder's generation is larger.
ALTER TABLE leases ADD COLUMN generation {{int}} NOT NULL DEFAULT 1;

-- The processes that claim attempts, as their heartbeats left them.
CREATE TABLE owners (
    id           TEXT    PRIMARY KEY,
    host         TEXT    NOT NULL DEFAULT '',
    pid          {{int}} NOT NULL DEFAULT 0,
    pid_start    {{int}} NOT NULL DEFAULT 0,
    heartbeat_at {{int}},
    expires_at   {{int}} NOT NULL
) {{strict}};

-- One counter that operator commands bump with their change.
CREATE TABLE epoch (
    id {{int}} PRIMARY KEY CHECK (id = 1),
    n  {{int}} NOT NULL CHECK (n >= 0)
) {{strict}};
INSERT INTO epoch (id, n) VALUES (1, 0);

-- Side effects that leave the transaction: a run's output commit, requested
-- when its task instances all succeeded, completed by CompleteCommit.
CREATE TABLE outbox (
    id         {{id}},
    run_id     {{int}} NOT NULL UNIQUE REFERENCES runs (id) ON DELETE CASCADE,
    created_at {{int}}
) {{strict}};
CREATE INDEX outbox_created ON outbox (created_at, id);
