// Package scheduler turns pipeline definitions into stored runs and drives
// them to completion. It owns the timetable (cron schedule -> Airflow data
// intervals), run materialization, the run and task-instance state machine
// (dependencies, retries, depends_on_past, limits of runs, tasks and pool
// slots), crash recovery of attempts left running by a dead rewind, the
// scheduler lease that keeps two rewinds from running the same attempt, and
// watermarks. It launches attempts through package executor and keeps every
// state change in package store.
package scheduler
