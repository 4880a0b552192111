-- rewind state, version 1.
--
-- Timestamps (created_at, updated_at, started_at, ended_at, next_try_at,
-- expires_at) are UTC unix nanoseconds; NULL means "not yet". Run dates
-- (logical_date, data_interval_start, data_interval_end) are RFC 3339 text
-- with the pipeline's offset, as the timetable produced them; logical_unix is
-- the same instant in unix nanoseconds, used for uniqueness, order and ranges.
--
-- Written once for every backend: the double-brace tokens (id, int, strict)
-- are rendered per backend by store/migrate.go.

CREATE TABLE pipelines (
    name       TEXT    PRIMARY KEY,
    hash       TEXT    NOT NULL DEFAULT '',
    paused     {{int}} NOT NULL DEFAULT 0 CHECK (paused IN (0, 1)),
    updated_at {{int}}
) {{strict}};

CREATE TABLE runs (
    id                  {{id}},
    pipeline            TEXT    NOT NULL,
    logical_date        TEXT    NOT NULL,
    logical_unix        {{int}} NOT NULL,
    ds                  TEXT    NOT NULL,
    data_interval_start TEXT    NOT NULL,
    data_interval_end   TEXT    NOT NULL,
    kind                TEXT    NOT NULL CHECK (kind IN ('scheduled', 'backfill', 'manual')),
    state               TEXT    NOT NULL DEFAULT 'queued'
                                CHECK (state IN ('queued', 'running', 'success', 'failed')),
    backfill_id         TEXT    NOT NULL DEFAULT '',
    created_at          {{int}},
    started_at          {{int}},
    ended_at            {{int}},
    UNIQUE (pipeline, logical_unix)
) {{strict}};

-- The scheduler's queries: a pipeline's runs in a state, oldest first (and the
-- watermark's min/max per state); every run in a state; a day's runs.
CREATE INDEX runs_pipeline_state ON runs (pipeline, state, logical_unix);
CREATE INDEX runs_state ON runs (state, logical_unix);
CREATE INDEX runs_pipeline_ds ON runs (pipeline, ds);

CREATE TABLE task_instances (
    id          {{id}},
    run_id      {{int}} NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    task        TEXT    NOT NULL,
    state       TEXT    NOT NULL DEFAULT 'scheduled'
                        CHECK (state IN ('scheduled', 'queued', 'running', 'success', 'failed',
                                         'up_for_retry', 'upstream_failed', 'skipped')),
    pool        TEXT    NOT NULL DEFAULT '',
    try_number  {{int}} NOT NULL DEFAULT 0 CHECK (try_number >= 0),
    failures    {{int}} NOT NULL DEFAULT 0 CHECK (failures >= 0),
    next_try_at {{int}},
    updated_at  {{int}},
    UNIQUE (run_id, task)
) {{strict}};

CREATE INDEX task_instances_state ON task_instances (state);

CREATE TABLE attempts (
    id               {{id}},
    task_instance_id {{int}} NOT NULL REFERENCES task_instances (id) ON DELETE CASCADE,
    try_number       {{int}} NOT NULL CHECK (try_number >= 1),
    pool             TEXT    NOT NULL DEFAULT '',
    state            TEXT    NOT NULL DEFAULT 'running'
                             CHECK (state IN ('running', 'success', 'failed', 'oom', 'skipped',
                                              'interrupted', 'lost')),
    host             TEXT    NOT NULL DEFAULT '',
    pid              {{int}} NOT NULL DEFAULT 0,
    pid_start        {{int}} NOT NULL DEFAULT 0,
    started_at       {{int}},
    ended_at         {{int}},
    exit_code        {{int}},
    signal           TEXT    NOT NULL DEFAULT '',
    peak_rss         {{int}} NOT NULL DEFAULT 0,
    log_path         TEXT    NOT NULL DEFAULT '',
    reason           TEXT    NOT NULL DEFAULT '',
    UNIQUE (task_instance_id, try_number)
) {{strict}};

CREATE INDEX attempts_state ON attempts (state);

CREATE TABLE watermarks (
    pipeline     TEXT    PRIMARY KEY,
    logical_date TEXT    NOT NULL,
    logical_unix {{int}} NOT NULL,
    updated_at   {{int}}
) {{strict}};

CREATE TABLE leases (
    name       TEXT    PRIMARY KEY,
    holder     TEXT    NOT NULL,
    host       TEXT    NOT NULL DEFAULT '',
    pid        {{int}} NOT NULL DEFAULT 0,
    pid_start  {{int}} NOT NULL DEFAULT 0,
    expires_at {{int}} NOT NULL
) {{strict}};

-- A backfill: a window of a pipeline re-run as a plan of phases. Its runs
-- carry its id (runs.backfill_id); phase says where apply is, so that it can
-- resume; paused lists the consumers it paused (and must unpause).
CREATE TABLE backfills (
    id              TEXT    PRIMARY KEY,
    pipeline        TEXT    NOT NULL,
    from_date       TEXT    NOT NULL,
    to_date         TEXT    NOT NULL,
    reprocess       TEXT    NOT NULL CHECK (reprocess IN ('none', 'failed', 'completed')),
    reverse         {{int}} NOT NULL DEFAULT 0,
    max_active_runs {{int}} NOT NULL DEFAULT 0,
    state           TEXT    NOT NULL DEFAULT 'running'
                            CHECK (state IN ('running', 'success', 'failed', 'cancelled')),
    phase           TEXT    NOT NULL DEFAULT '',
    detail          TEXT    NOT NULL DEFAULT '',
    paused          TEXT    NOT NULL DEFAULT '',
    plan            TEXT    NOT NULL DEFAULT '',
    created_at      {{int}},
    updated_at      {{int}}
) {{strict}};
