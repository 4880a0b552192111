// Package storetest is the conformance suite every store backend passes:
// each operation of store.Store, its guards, and claims raced by concurrent
// schedulers.
package storetest

import (
	"context"
	"testing"
	"time"
	_ "time/tzdata" // Europe/Rome on machines without a zoneinfo database

	"github.com/rewind-dev/rewind/store"
)

// now is the suite's fixed clock.
var now = time.Date(2026, 1, 15, 12, 0, 0, 0, time.UTC)

var ctx = context.Background()

// Run runs the conformance suite. open must return a new, empty store for
// each call; the suite closes it.
func Run(t *testing.T, open func(t *testing.T) store.Store) {
	fresh := func(t *testing.T) store.Store {
		t.Helper()
		st := open(t)
		t.Cleanup(func() {
			if err := st.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
		})
		return st
	}
	tests := []struct {
		name string
		fn   func(t *testing.T, st store.Store)
	}{
		{"Pipelines", testPipelines},
		{"PausedFlag", testPaused},
		{"MaterializeIdempotent", testMaterializeIdempotent},
		{"MaterializeLeavesOtherKindAlone", testMaterializeOtherKind},
		{"MaterializeTasksOnlyForNewRuns", testMaterializeTasksOnlyForNewRuns},
		{"MaterializeRejectsBadInput", testMaterializeRejects},
		{"ListRunsOrderAndFilters", testListRunsOrderAndFilters},
		{"ListRunsWithTasksAndAttempts", testWithTasksAndAttempts},
		{"OffsetsPreserved", testOffsetsPreserved},
		{"RunAdmitAndFinish", testRunAdmitFinish},
		{"HappyPath", testHappyPath},
		{"BatchForms", testBatchForms},
		{"ClaimConflict", testClaimConflict},
		{"UniqueAttemptPerTry", testUniqueAttemptPerTry},
		{"RetryPathCountsFailures", testRetryPath},
		{"InterruptedAndLostDoNotCount", testInterruptedLost},
		{"AttemptGuards", testAttemptGuards},
		{"SetTaskStatesGuard", testSetTaskStates},
		{"Batches", testBatches},
		{"BatchFailsAndClears", testBatchFailsAndClears},
		{"BatchLeaderAndCoveredInOneFinishRuns", testBatchLeaderAndCoveredFinished},
		{"ClearTasksOnlyFailed", testClearOnlyFailed},
		{"ClearTasksAll", testClearAll},
		{"ClearTasksTaskFilter", testClearTaskFilter},
		{"ClearTasksDateWindow", testClearWindow},
		{"ClearTasksOfSeveralTasks", testClearTasksList},
		{"MarkTasksRefusesRunning", testMarkRefusesRunning},
		{"MarkTasks", testMarkTasks},
		{"MarkTasksWithOutputs", testMarkWithOutputs},
		{"RetryNow", testRetryNow},
		{"Audit", testAudit},
		{"RunningAttempts", testRunningAttempts},
		{"FindAttempt", testFindAttempt},
		{"WatermarkWithGap", testWatermarkGap},
		{"WatermarkNotFound", testWatermarkNotFound},
		{"WatermarkAfterClear", testWatermarkAfterClear},
		{"WatermarkBesideOtherPipelines", testWatermarkBesideOtherPipelines},
		{"Leases", testLeases},
		{"LeasesOnTheStateClock", testLeasesOnStateClock},
		{"LeaseStaleTakeover", testLeaseStale},
		{"InTxCommitsTogether", testInTxCommit},
		{"TaskDurations", testTaskDurations},
		{"Backfills", testBackfills},
		{"BackfillTransitionsGuarded", testBackfillGuard},
		{"ReprocessRuns", testReprocessRuns},
		{"SetWatermark", testSetWatermark},
		{"Probes", testProbes},
		{"Notifications", testNotifications},
		{"DeadlineChecks", testDeadlineChecks},
		{"RenamePipeline", testRenamePipeline},
		{"RenamePipelineRefused", testRenameRefused},
		{"LatestTasks", testLatestTasks},
		{"InTxRollsBack", testInTxRollback},
		{"ConcurrentClaims", func(t *testing.T, st store.Store) { ClaimRace(t, []store.Store{st}, 8) }},
		{"CatchupThrough", testCatchupThrough},
		{"EnqueueTasks", testEnqueueTasks},
		{"ClaimReadyOrderAndFields", testClaimReadyOrder},
		{"ClaimReadyCapacity", testClaimReadyCapacity},
		{"ClaimReadyFilters", testClaimReadyFilters},
		{"ClaimReadyRollsBackWithItsBatch", testClaimReadyRollback},
		{"UsageEmpty", testUsageEmpty},
		{"AttemptOnlyOnItsTry", testAttemptOnlyOnItsTry},
		{"SlurmJobID", testSlurmJobID},
		{"FinishRunGuard", testFinishRunGuard},
		{"ClearTasksClearsQueued", testClearQueued},
		{"ReprocessRunsResetsQueued", testReprocessQueued},
		{"ReprocessRunsLeavesItsOwn", testReprocessOwn},
		{"ClearHandsBackRunsOfStoppedBackfills", testClearDetaches},
		{"ReprocessRunsOfSomeTasks", testReprocessTasks},
		{"Owners", testOwners},
		{"RecoveryOfALostOwner", testRecoveryOfLostOwner},
		{"LeaseGeneration", testLeaseGeneration},
		{"FencedWrites", testFenced},
		{"FencedInsideInTx", testFencedInTx},
		{"Epoch", testEpoch},
		{"Outbox", testOutbox},
		{"CompleteCommitOfAClearedRun", testCompleteCommitCleared},
		{"TaskDurationsOnlyThePipeline", testTaskDurationsOtherPipeline},
		{"TaskDurationsLatestRuns", testTaskDurationsLatestRuns},
		{"Stats", testStats},
		{"LeaseTimes", testLeaseTimes},
		{"ConcurrentClaimReady", func(t *testing.T, st store.Store) { ClaimReadyRace(t, []store.Store{st}, 4) }},
		{"ConcurrentFencedWriters", func(t *testing.T, st store.Store) { FenceRace(t, st, st) }},
		{"ConcurrentCommits", func(t *testing.T, st store.Store) { CommitRace(t, []store.Store{st}, 4) }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, fresh(t)) })
	}
}

// Helpers.

// Pipelines.

// Materialization.

// Runs.

// Task instances and attempts.

// Watermarks.

// Leases.

// The store as the one source of truth: routing, claiming by capacity,
// owners, fencing, the epoch and the outbox.
