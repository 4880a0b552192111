// Package web owns `rewind ui`: a read-only HTTP view of a workspace's
// state. It renders the pages (pipelines, the grid of a pipeline's runs
// and tasks a page at a time, a run's Gantt chart of attempts, a
// backfill's phases, progress, plan, validation and report, and on every
// page a banner when no scheduler leads) with html/template from assets
// embedded in the binary, serves the JSON behind every page (the same
// documents as `rewind runs --json`, `rewind dates --recorded --json` and `rewind
// backfill status --json`, built by this package for the CLI and the view
// alike), the tail of an attempt's log by attempt id, the state's
// Prometheus metrics at /metrics (package metrics reads and names them),
// and the safety rules: loopback by default, a bearer token for any
// other address (/metrics included: a scraper sends it as a bearer
// token), reads only, sensitive values redacted, strict response headers.
//
// The view only reads: the Reader it is given has no write method, and
// a catalog is opened only where its file exists. It starts no process:
// probe values are those runs recorded in the state, and every window a
// request names is bounded (MaxDates, MaxNowAhead, MaxGridRuns).
package web
