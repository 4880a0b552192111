// Package backfill owns a backfill's whole life: the plan (which dates,
// which action, which pool and why, the estimate, the watermarks and the
// consumers it touches), and apply's phases in the seeds' order: pause the
// consumers, verify the sources, reset the watermarks, run the dates on a
// branch of the outputs, validate against main, cut over, rebuild the
// consumers, report; and pause, unpause, cancel and rollback. Each phase is
// recorded in the state so that a resumed apply continues where a dead one
// stopped.
//
// It runs the dates through the engine (package scheduler: scheduler.Run
// with a BackfillRun) and writes outputs through package lake; it never
// launches an attempt itself and never decides a task instance's
// transition. Its end-to-end tests run real executions and share the
// engine's test harness in scheduler/ (backfill_*_test.go there).
package backfill
