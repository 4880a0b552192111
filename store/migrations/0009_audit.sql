-- rewind state, version 9: the audit trail of operator commands.
--
-- One row per command that an operator gave through `rewind ui` or the
-- CLI (clear, mark, retry, pause, the backfill commands): who gave it (a
-- sign-in's label, "token" for a bearer client, "cli"), from where (the
-- remote address, or user@host), when, what (action, target, its
-- arguments as a JSON object) and how it ended ("ok" or the error).
-- Rows are only ever added. "from" is a keyword: the column is origin.
CREATE TABLE audit (
    id       {{id}},
    at       {{int}} NOT NULL,
    who      TEXT    NOT NULL,
    origin   TEXT    NOT NULL,
    action   TEXT    NOT NULL,
    target   TEXT    NOT NULL,
    pipeline TEXT    NOT NULL DEFAULT '',
    args     TEXT    NOT NULL DEFAULT '{}',
    result   TEXT    NOT NULL
) {{strict}};
CREATE INDEX audit_pipeline ON audit (pipeline, id);
CREATE INDEX audit_target ON audit (target, id);
