// Package web owns `rewind ui`: an HTTP view of a workspace's state and
// the operator's actions on it. It renders the pages (pipelines, the grid
// of a pipeline's runs and tasks a page at a time, a run's Gantt chart of attempts, a
// backfill's phases, progress, plan, validation and report, a backfill
// form with its plan, and on every page a banner when no scheduler leads)
// with html/template from assets embedded in the
// binary, serves the JSON behind every page (the same documents as
// `rewind runs --json`, `rewind dates --recorded --json`, `rewind backfill
// status --json` and `rewind audit --json`, built by this package for the
// CLI and the view alike), the tail of an attempt's log by attempt id, the
// state's Prometheus metrics at /metrics (package metrics reads and names
// them), and the safety rules: loopback by default, a bearer token for
// any other address (/metrics included), sensitive values redacted,
// strict response headers.
//
// Reads go through Options.State, a Reader with no write method. Writes
// (actions.go) go through Options.Write and only through the package
// functions the CLI calls: package ops (clear, mark, retry now, pause)
// and package backfill (plan, apply, pause, unpause, cancel, resume,
// rollback); the view has no write logic of its own. Applies, resumes and
// rollbacks run in this process, one at a time, holding the backfill's
// owner lease as the CLI does (jobs.go), and so start the backfill's
// attempts. Every write is guarded: it needs the token even on loopback
// (a view without one refuses every write with 403), a same-origin
// request (Origin, else Referer) and, for a signed-in browser, the CSRF
// token of its session (an HMAC of the session's nonce); a bearer
// client's Authorization header is its proof. Every write is recorded in
// the state's audit trail (package ops) with who (the sign-in's label,
// or "token"), from where, what and how it ended.
//
// Reads start no process: probe values are those runs recorded in the
// state, a catalog is opened only where its file exists, and every window
// a request names is bounded (MaxDates, MaxNowAhead, MaxGridRuns).
package web
