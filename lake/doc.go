// Package lake owns rewind's versioned outputs on Apache Iceberg.
//
// A pipeline's output is an Iceberg table with an identity partition on one
// column: a date column (one partition per ds) or, for schedules that tick
// more than once a day, a timestamp column holding each run's data interval
// start (one partition per interval). The package writes a run's files as
// the replacement of its date's or its interval's partition in a single
// Iceberg commit (so running it again never duplicates its rows),
// writes backfills to a branch beside main, reads per-partition row counts and
// column sums so a backfill can be validated against main, cuts main over to
// the branch by replacing the window's partitions on today's main in one
// atomic catalog commit that also tags the old main, restores a window
// from such a tag, and expires the tags, branches and snapshots that
// are past their retention.
//
// The catalog is either a SQLite file with a local warehouse directory (the
// embedded default under .rewind/) or a REST catalog. Every change to a
// table's refs is a compare-and-swap on the catalog: the commit carries
// requirements on the refs it read, so a concurrent commit to main is
// detected and reported as ErrConcurrentCommit instead of being lost, and a
// process killed in the middle of a cutover leaves main either where it was
// or where it was going, never in between.
package lake
