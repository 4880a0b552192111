-- rewind state, version 6: notifications and deadlines.
--
-- A notification is written in the same transaction as the transition that
-- causes it (a run that failed, a deadline that passed) and delivered later
-- by whichever rewind runs next: one row per event, notify block and
-- channel (command, webhook: each delivered and retried on its own), its
-- idem_key unique, so that an event is queued once whatever retries or
-- takeovers happen. A deliverer claims a row until claimed_until (the
-- state's clock), sends it, and records delivered_at, or an error and when
-- to try again (next_at), or gave_up_at.
--
-- deadline_checks holds, per pipeline with a deadline, the instant up to
-- which missed deadlines have been looked for: the next look starts there,
-- so that a deadline that passed while no rewind ran is found once.
CREATE TABLE notifications (
    id            {{id}},
    idem_key      TEXT    NOT NULL UNIQUE,
    event         TEXT    NOT NULL,
    notify        TEXT    NOT NULL,
    channel       TEXT    NOT NULL,
    pipeline      TEXT    NOT NULL DEFAULT '',
    payload       TEXT    NOT NULL,
    created_at    {{int}} NOT NULL,
    tries         {{int}} NOT NULL DEFAULT 0,
    next_at       {{int}} NOT NULL,
    claimed_by    TEXT    NOT NULL DEFAULT '',
    claimed_until {{int}} NOT NULL DEFAULT 0,
    delivered_at  {{int}},
    gave_up_at    {{int}},
    last_error    TEXT    NOT NULL DEFAULT ''
) {{strict}};
CREATE INDEX notifications_due ON notifications (next_at, id);

CREATE TABLE deadline_checks (
    pipeline      TEXT    PRIMARY KEY,
    checked_until {{int}} NOT NULL
) {{strict}};
