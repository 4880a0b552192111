package store

import "time"

// RunID is a run's id as tasks see it (run.id, REWIND_RUN_ID), as Airflow
// names runs: "<kind>__<logical date>".
func RunID(kind RunKind, logical time.Time) string {
	return string(kind) + "__" + logical.Format(time.RFC3339)
}
