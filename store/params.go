package store

import "time"

// Params of each operation.
type (
	// UpsertPipelineParams records a pipeline's definition hash (scheduler).
	UpsertPipelineParams struct {
		Name string
		Hash string
		Now  time.Time
	}
	// SetPausedParams pauses or unpauses a pipeline (operator).
	SetPausedParams struct {
		Name   string
		Paused bool
		Now    time.Time
	}
	// RunSpec is one run to materialize: an interval of the timetable.
	RunSpec struct {
		LogicalDate       time.Time
		DS                string
		DataIntervalStart time.Time
		DataIntervalEnd   time.Time
	}
	// TaskSpec is one task of the runs to materialize, with its own pool.
	TaskSpec struct {
		Name string
		Pool string
	}
	// MaterializeRunsParams creates the runs that do not exist yet (unique per
	// pipeline and logical date: existing ones are left untouched, whatever their
	// kind) and, for each new run, one scheduled task instance per task.
	MaterializeRunsParams struct {
		Pipeline   string
		Kind       RunKind
		BackfillID string
		Runs       []RunSpec
		Tasks      []TaskSpec
		// Through, when non-zero, moves the pipeline's CatchupThrough to
		// max(CatchupThrough, Through) in the same transaction (the caller
		// says every due interval up to it is in Runs or existed). The
		// pipeline must exist (ErrNotFound otherwise, and nothing is created).
		Through time.Time
		Now     time.Time
	}
	// InFlightParams names the pipelines whose running runs InFlight reads.
	InFlightParams struct {
		Pipelines []string
	}
	// ListRunsParams filters runs; zero fields do not filter. Runs come ordered
	// by pipeline, then logical date.
	ListRunsParams struct {
		Pipelines    []string
		States       []RunState
		From, To     time.Time // inclusive bounds on the logical date
		WithTasks    bool      // fill Run.Tasks (ordered by task name)
		WithAttempts bool      // also fill TaskInstance.Attempts (by try number)
		// Limit, when > 0, keeps at most Limit runs: the first ones of the
		// listing's order, or with Last the last ones (still listed in
		// that order). Tasks and attempts are read for those runs only,
		// so that a page of a long history costs what the page holds.
		Limit int
		Last  bool
		// IDs, when not empty, keeps the runs with those ids.
		IDs []int64
	}
	// CountRunsParams selects the runs CountRuns counts (every pipeline
	// when Pipelines is empty).
	CountRunsParams struct {
		Pipelines []string
	}
	// AcquireLeaseParams takes the lease for Holder (see Store.AcquireLease).
	AcquireLeaseParams struct {
		Name     string
		Holder   string
		Host     string
		PID      int
		PIDStart uint64
		TTL      time.Duration
		Now      time.Time
		// Takeover: also take the lease from Stale, the holder the caller has
		// proven dead (same host, process gone), before it expires.
		Stale string
	}
	// RenewLeaseParams extends Holder's lease to Now+TTL.
	RenewLeaseParams struct {
		Name   string
		Holder string
		TTL    time.Duration
		Now    time.Time
	}
	// ReleaseLeaseParams gives Holder's lease up.
	ReleaseLeaseParams struct {
		Name   string
		Holder string
	}
	// AdmitRunParams moves a run queued -> running.
	AdmitRunParams struct {
		RunID int64
		Now   time.Time
	}
	// FinishRunParams moves a run running (or queued) -> success | failed,
	// only when its task instances say so (see Store.FinishRun).
	FinishRunParams struct {
		RunID int64
		State RunState
		Now   time.Time
	}
	// ClaimTaskParams moves one task instance scheduled|up_for_retry ->
	// running, increments its try number and inserts the attempt row (state
	// running, owner, nonce, no pid yet). Fails with ErrConflict if the task
	// is in another state. The scheduler claims with EnqueueTasks and
	// ClaimReady; ClaimTask is the per-instance form (tests, tools).
	ClaimTaskParams struct {
		TaskInstanceID int64
		Pool           string
		Host           string
		Owner          string // see Attempt.Owner
		LogPath        string // may contain "{try}", replaced by the new try number
		Reason         string // why Pool: see Attempt.Reason
		Now            time.Time
	}
	// EnqueueTasksParams routes ready task instances (see Store.EnqueueTasks).
	EnqueueTasksParams struct {
		Items []EnqueueItem
		Now   time.Time
	}
	// EnqueueItem is one task instance to queue: its pool ("" keeps the task
	// instance's pool), the reason for that pool, its priority (lower is
	// claimed first) and its log template (may contain "{try}").
	EnqueueItem struct {
		TaskInstanceID int64
		Pool, Reason   string
		LogPath        string
		Priority       int
	}
	// ClaimReadyParams claim up to Limit queued task instances of the given
	// pools, in one transaction: each becomes running with try_number+1 and
	// gets an attempt row (state running, owner, host, nonce, pool, reason,
	// log path with {try} replaced, started_at = Now). Capacity is checked
	// in the same transaction from the attempts in state running (never
	// from counters): a pool never has more running attempts than Slots,
	// and attempts of backfill runs in it never more than BackfillSlots.
	// Order: runs of kind scheduled/manual before backfill, then logical
	// date (oldest first; newest first for backfill runs when
	// ReverseBackfill), then priority ascending, then id. Two claimers in
	// two processes never get the same task instance and never exceed a
	// pool. Any process holding work may claim (scheduler, backfill apply).
	ClaimReadyParams struct {
		Pools     []PoolCapacity
		Pipelines []string // only task instances of these pipelines; empty = all
		// BackfillID: "" claims no backfill runs' task instances; otherwise only
		// those of that backfill (besides scheduled/manual ones).
		BackfillID string
		// ReverseBackfill: backfill runs newest first.
		ReverseBackfill bool
		Owner, Host     string
		// Limit is the most attempts this call creates; 0 or less claims nothing.
		Limit int
		Now   time.Time
	}
	// HeartbeatParams records that owner ID is alive until Now+TTL.
	HeartbeatParams struct {
		ID, Host string
		PID      int
		PIDStart uint64
		TTL      time.Duration
		Now      time.Time
	}
	// RequestCommitParams asks for a run's output commit (see Store.RequestCommit).
	RequestCommitParams struct {
		RunID int64
		Now   time.Time
	}
	// CompleteCommitParams records a commit's outcome (see Store.CompleteCommit):
	// State is success, or failed when the commit failed.
	CompleteCommitParams struct {
		OutboxID int64
		State    RunState
		Now      time.Time
	}
	// StartAttemptParams records the attempt's process (pid and its start
	// time); the task instance stays running.
	StartAttemptParams struct {
		AttemptID int64
		PID       int
		PIDStart  uint64
		// JobID, for an attempt submitted to Slurm, is its job id (PID
		// and PIDStart are then 0).
		JobID string
		Now   time.Time
	}
	// FinishAttemptParams records an outcome and moves the task instance
	// running -> TaskState (success, failed, up_for_retry, skipped, or
	// scheduled for interrupted/lost attempts) if it is still on this
	// attempt's try. CountFailure adds one to the task's Failures.
	FinishAttemptParams struct {
		AttemptID    int64
		State        AttemptState
		ExitCode     *int
		Signal       string
		PeakRSS      int64
		TaskState    TaskState
		CountFailure bool
		NextTryAt    time.Time
		Now          time.Time
	}
	// SetTaskStatesParams moves the listed task instances to To, only those in
	// one of From (guarded); it returns how many moved.
	SetTaskStatesParams struct {
		IDs  []int64
		From []TaskState
		To   TaskState
		Now  time.Time
	}
	// ClearTasksParams puts task instances of a pipeline's runs with logical
	// dates in [From, To] back to scheduled (Failures reset to 0) and their runs
	// back to queued. OnlyFailed: only failed and upstream_failed task
	// instances. Task: only that task ("" = all), and with Tasks, those
	// too (a task and its downstream). Queued task instances are cleared
	// too (they have no process); running ones never are.
	ClearTasksParams struct {
		Pipeline   string
		From, To   time.Time
		OnlyFailed bool
		Task       string
		Tasks      []string
		// SparingBackfills leaves alone the runs of running backfills
		// (reprocess_lookback must not re-run what a backfill finished).
		SparingBackfills bool
		Now              time.Time
	}
	// FindAttemptParams finds one attempt; TryNumber 0 means the latest.
	FindAttemptParams struct {
		Pipeline  string
		DS        string
		Task      string
		TryNumber int
	}
	// TaskDurationsParams asks for the durations of the latest successful
	// attempts of each task of a pipeline, at most Limit per task.
	// TaskDurationsParams select the durations of a pipeline's latest
	// successful attempts: at most Limit per task (default 1000), newest
	// first, among the attempts of its latest TaskDurationsRuns(Limit) runs
	// by logical date, so that the cost does not grow with the history.
	TaskDurationsParams struct {
		Pipeline string
		Limit    int
	}
	// ClaimNotificationsParams claim due notifications for Owner, for For
	// on the state's clock; at most Limit (0: 100).
	ClaimNotificationsParams struct {
		Owner string
		For   time.Duration
		Limit int
		// Notify, when set, claims only that notify block's notifications
		// (each block's claims last as its timeout says).
		Notify string
		// Except claims only the notifications of blocks not in it (the
		// blocks the workspace no longer declares).
		Except []string
	}
	// FinishNotificationParams record what became of a claimed
	// notification: Delivered, GiveUp (with Error), or neither: tried again
	// RetryIn after the state's clock (with Error).
	FinishNotificationParams struct {
		ID        int64
		Owner     string
		Delivered bool
		GiveUp    bool
		Error     string
		RetryIn   time.Duration
	}
	// ListNotificationsParams select notifications: of one pipeline and
	// event when given, only undelivered ones not given up with Pending.
	ListNotificationsParams struct {
		Pipeline string
		Event    string
		Pending  bool
	}
	// ListProbesParams select recorded probe measurements: one pipeline,
	// one task ("" the pipeline's skew block), logical dates From..To
	// inclusive (zero: unbounded), at most Limit rows (0: all).
	ListProbesParams struct {
		Pipeline string
		Task     string
		From, To time.Time
		Limit    int
	}
	// UpdateBackfillParams changes a backfill; empty fields are kept.
	// FromState and FromPhase, when set, guard the change: it applies only
	// to a backfill in that state and phase (ErrConflict otherwise), so
	// that a transition never overwrites one made by another process
	// since the caller read the backfill.
	UpdateBackfillParams struct {
		ID        string
		FromState BackfillState
		FromPhase string
		State     BackfillState
		Phase     string
		Detail    *string
		Paused    []string // nil keeps
		// Plan, when not nil, replaces the recorded plan (JSON).
		Plan *string
		// OnHold and RolledBack, when not nil, set those flags.
		OnHold     *bool
		RolledBack *bool
		Now        time.Time
	}
	// SetBatchesParams gives a backfill's runs their batches (SetBatches):
	// for each batch, the run of the backfill at Start (the leader) gets
	// the data interval [Start, End) and covers no other run's batch;
	// the backfill's queued runs at Covered become covered by it (BatchOf:
	// never admitted, ended with the leader, as it ended, in the same
	// transaction). A batch without Covered is a run of one interval: End
	// is its own. A batch whose leader is not a run of the backfill is
	// left out: its runs stay their own. Bumps Epoch.
	SetBatchesParams struct {
		Pipeline   string
		BackfillID string
		Batches    []RunBatch
		Now        time.Time
	}
	// RunBatch is one batch of SetBatchesParams.
	RunBatch struct {
		Start, End time.Time
		Covered    []time.Time
	}
	// ReprocessRunsParams hands the existing runs of a pipeline with logical
	// dates in [From, To] and a state in States to a backfill: kind backfill,
	// the backfill's id, state queued, and every task instance that is not
	// running (queued ones included) back to scheduled with a fresh retry
	// budget. The backfill's own runs are never taken again: a resumed
	// backfill does not re-run what it finished. With Tasks, only the task
	// instances of those tasks go back to scheduled (a restatement of some
	// tasks: the others keep their outcome).
	ReprocessRunsParams struct {
		Pipeline   string
		BackfillID string
		From, To   time.Time
		// Dates, when set, takes only the runs of these logical dates of
		// the window (the dates a backfill's plan selected).
		Dates  []time.Time
		States []RunState
		Tasks  []string // nil: every task
		// Add are the pipeline's tasks: a run taken that has no task
		// instance of one of them (a task added to the pipeline since the
		// run was made) gets one, scheduled. That is how a new task reaches
		// the pipeline's history.
		Add []TaskSpec
		Now time.Time
	}
	// SetWatermarkParams sets a pipeline's watermark; a zero LogicalDate
	// removes it.
	SetWatermarkParams struct {
		Pipeline    string
		LogicalDate time.Time
		Now         time.Time
	}
	// AdvanceWatermarkParams recomputes a pipeline's watermark (scheduler).
	AdvanceWatermarkParams struct {
		Pipeline string
		Now      time.Time
	}
	// RenamePipelineParams move the history of pipeline From to the name
	// To (see Store.RenamePipeline).
	RenamePipelineParams struct {
		From, To string
		// LogsFrom and LogsTo rewrite the log paths recorded for From's
		// runs (their task instances' templates and their attempts'
		// paths): a path that begins with LogsFrom begins with LogsTo
		// instead. The caller moves the files; "" rewrites nothing.
		LogsFrom, LogsTo string
		// Plans are the backfills' plans as the caller rewrote them for
		// the new name (the store does not read plans): each replaces the
		// plan of its backfill only if that plan is still Old, otherwise
		// the rename is ErrConflict.
		Plans []PlanRewrite
		Now   time.Time
	}
	// PlanRewrite replaces the plan of backfill ID, Old, with New.
	PlanRewrite struct {
		ID       string
		Old, New string
	}
)

// RenameResult counts what RenamePipeline moved.
type RenameResult struct {
	Runs, TaskInstances, Attempts int
	// Probes are the probe results moved (a measurement already recorded
	// under the new name for the same task and date is kept instead).
	Probes int
	// Backfills are the backfills of the pipeline; Consumers those that
	// paused it as a consumer; Plans the plans rewritten.
	Backfills, Consumers, Plans int
	Watermark                   bool // a watermark moved
	LogPaths                    int  // log paths rewritten (task instances and attempts)
	// Notifications are the notifications of the pipeline (queued or
	// sent), now listed under the new name.
	Notifications int
}

// taskList is Task and Tasks together: the tasks a clear selects (none:
// every task).
func (p ClearTasksParams) taskList() []string {
	if p.Task == "" {
		return p.Tasks
	}
	return append([]string{p.Task}, p.Tasks...)
}

// Operator actions on task instances beside ClearTasks, and the audit
// trail of operator commands.
type (
	// MarkTasksParams mark the task instances of a pipeline's runs with
	// logical dates in [From, To] (Tasks: only those; none: every task)
	// State, success or failed, like Airflow's "mark success" and "mark
	// failed"; a bumped Epoch tells a running engine.
	//
	// Guarded: when a selected task instance is running, nothing changes
	// and MarkTasks returns ErrConflict (its attempt decides its state; a
	// running one is never overwritten). Queued, scheduled and
	// up_for_retry instances have no process and are marked.
	//
	// The run follows its task instances under FinishRun's guard, in the
	// same transaction: when none of them can run any more it is failed
	// if one failed (or is upstream_failed), else success; a run whose
	// task instances can still run is left to the engine. With Outputs
	// (the pipeline writes versioned outputs) a run whose every task
	// succeeded is not made success here, since only the engine commits
	// its outputs: a finished one goes back to queued and the engine
	// commits it. A run covered by a batch whose leader is not marked is
	// its own again (as ClearTasks does); a leader marked finished ends
	// its covered runs as it ended.
	MarkTasksParams struct {
		Pipeline string
		From, To time.Time
		Tasks    []string
		State    TaskState
		Outputs  bool
		Now      time.Time
	}
	// RetryNowParams make the up_for_retry task instances of a pipeline's
	// runs in [From, To] (Tasks: only those) eligible at once: their
	// next_try_at becomes Now, and Epoch is bumped so that a running engine
	// reads it. Other states are left alone.
	RetryNowParams struct {
		Pipeline string
		From, To time.Time
		Tasks    []string
		Now      time.Time
	}
	// ListAuditParams select audit entries, newest first: of a pipeline
	// ("" every one), of a target ("" every one), at most Limit (0: 1000).
	ListAuditParams struct {
		Pipeline string
		Target   string
		Limit    int
	}
)

// MarkResult counts what MarkTasks changed.
type MarkResult struct {
	Tasks int // task instances marked
	Runs  int // runs whose state changed with them
}

// AuditEntry is one operator command as the audit trail records it: who
// (a session's label, "token", "cli"), from where (a remote address, or
// user@host), when, what (the action, its target, its arguments as a JSON
// object) and its result ("ok", or the error).
type AuditEntry struct {
	ID       int64
	At       time.Time
	Who      string
	From     string
	Action   string
	Target   string
	Pipeline string // the pipeline the target belongs to ("" none)
	Args     string // JSON object
	Result   string
}
