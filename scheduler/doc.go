// Package scheduler is the engine of one execution: it materializes the
// due runs of the selected pipelines (their intervals come from package
// timetable), decides the transitions of runs and task instances
// (dependencies, retries, depends_on_past, max_active_runs,
// max_active_tasks, pools and their rates), launches attempts through
// package executor in the pools that package skew chooses, records how
// they ended, recovers attempts left running by a rewind that stopped,
// and commits outputs through the store's outbox. It holds the state's
// execution lease throughout, so two rewinds never run the same attempt.
//
// It never parses HCL (package dsl hands it definitions), never plans or
// cuts over a backfill (package backfill drives it for that), and keeps
// every state change in package store, the one source of truth.
package scheduler
