-- rewind state, version 5: the measurements of skew probes.
--
-- A run that routes its dates with a skew block's probe (rewind run, the
-- scheduler, backfill apply) records what each date's probe printed, the
-- median of the date's reference dates, or why the probe failed, with the
-- pool the date was routed to and when it was measured, so that the web
-- view shows them without running a probe itself. task is '' for a
-- pipeline's skew block, else the name of the task whose own block it is.
-- One row per (pipeline, task, logical date): the latest measurement.
-- Written for every backend (the double-brace tokens of store/migrate.go).
CREATE TABLE probe_results (
    pipeline     TEXT    NOT NULL,
    task         TEXT    NOT NULL DEFAULT '',
    logical_date TEXT    NOT NULL,
    logical_unix {{int}} NOT NULL,
    value        {{real}} NOT NULL DEFAULT 0,
    median       {{real}} NOT NULL DEFAULT 0,
    error        TEXT    NOT NULL DEFAULT '',
    pool         TEXT    NOT NULL DEFAULT '',
    reason       TEXT    NOT NULL DEFAULT '',
    measured_at  {{int}} NOT NULL,
    PRIMARY KEY (pipeline, task, logical_unix)
) {{strict}};
