// Package scheduler is the engine of one execution: it materializes the
// due runs of the selected pipelines (their intervals come from package
// timetable), decides the transitions of runs and task instances
// (dependencies, retries, depends_on_past, max_active_runs,
// max_active_tasks, pools and their rates), launches attempts through
// package executor in the pools that package skew chooses, records how
// they ended, recovers attempts left running by a rewind that stopped,
// and commits outputs through the store's outbox. It holds the state's
// execution lease throughout, so two rewinds never run the same attempt.
// A pipeline that looks renamed in the files (renamed.go: no run, and the
// tasks of a pipeline the files no longer declare) is recorded paused the
// first time an execution sees it, rather than run the old name's history
// again; package rename carries that history over.
//
// It never parses HCL (package dsl hands it definitions), never plans or
// cuts over a backfill (package backfill drives it for that), and keeps
// every state change in package store, the one source of truth.
//
// A pass of the engine is one transaction of the fenced store, in four
// steps: readSnapshot reads what the pass decides on (pass.go), decide
// turns that snapshot into commands without touching anything (decide.go,
// decide_run.go: pure, table-tested in decide_test.go), apply carries the
// commands out with guarded statements in the same transaction, and settle
// updates the in-memory view (cache.go) from what apply wrote, only once
// the transaction committed. A transaction that rolls back leaves the view
// as it was, and the next pass reads again. The loop around passes is in
// loop.go, attempts and their recovery in attempts.go and recover.go, the
// commit outbox in commit.go, and what an execution reports in summary.go.
package scheduler
