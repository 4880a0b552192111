// Package metrics owns what rewind tells Prometheus: the metric names,
// their labels and help, the collector that reads the state at each
// scrape (State), the counters and histograms that `rewind scheduler`
// updates in its own process (Scheduler), and the registry and HTTP
// handler that serve them in the exposition format (Handler), on `rewind
// scheduler --metrics-listen ADDR` and at /metrics of `rewind ui`.
//
// Every name starts with rewind_, counters end in _total, times are in
// seconds. Label values are names that the workspace bounds (pipelines,
// pools, hosts of schedulers) or fixed words (states, outcomes, results):
// never a date, a run, an attempt or a backfill id, so that the number of
// series follows the workspace and not the history. What the state holds
// is counted in the database (store.Stats, GROUP BY), one snapshot per
// scrape, bounded by a deadline; a state that cannot be read is
// rewind_state_up 0, not a failed scrape.
//
// A gauge of the state is one entry of stateFamilies (state.go) over a
// count of store.Stats: a new count (say, the depth of an outbox or the
// notifications that failed) is a field there and an entry here.
//
// What metrics never does: it writes nothing to the state (it holds only
// its read methods), starts no process, and decides nothing about runs;
// it reports what others did.
package metrics
