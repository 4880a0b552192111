// Package store owns rewind's state: pipelines, runs, task instances,
// attempts, watermarks and the scheduler lease. Store is the interface the
// scheduler and the CLI use; Open picks the backend from a DSN (SQLite is the
// embedded default). Every backend passes the conformance suite in
// store/storetest.
package store

import (
	"context"
	"errors"
	"time"
)

// ErrNotFound is returned when a named row does not exist.
var ErrNotFound = errors.New("not found")

// ErrConflict is returned when a guarded transition finds the row in another state.
var ErrConflict = errors.New("state conflict")

// RunKind says why a run exists.
type RunKind string

// Run kinds (contract: REWIND_RUN_KIND).
const (
	KindScheduled RunKind = "scheduled" // materialized by `rewind run` / the scheduler from the timetable
	KindBackfill  RunKind = "backfill"  // created by `rewind backfill apply`
	KindManual    RunKind = "manual"    // triggered by hand
)

// RunState is derived from the run's task instances by the scheduler.
type RunState string

// Run states (contract: `runs --json`).
const (
	// RunQueued: materialized, not admitted yet (max_active_runs). Set by
	// MaterializeRuns and by ClearTasks.
	RunQueued RunState = "queued"
	// RunRunning: admitted by the scheduler (AdmitRun); counts against max_active_runs.
	RunRunning RunState = "running"
	// RunSuccess: every task instance is success or skipped. Set by FinishRun.
	RunSuccess RunState = "success"
	// RunFailed: some task failed or is upstream_failed and nothing can run. Set by FinishRun.
	RunFailed RunState = "failed"
)

// TaskState is the state of one task instance.
type TaskState string

// Task instance states (contract: `runs --json`).
const (
	// TaskScheduled: created with its run, or cleared; waits for its upstreams and a slot.
	TaskScheduled TaskState = "scheduled"
	// TaskQueued: claimed by the scheduler (ClaimTask), an attempt row exists, the process is being started.
	TaskQueued TaskState = "queued"
	// TaskRunning: the attempt's process is running (StartAttempt).
	TaskRunning TaskState = "running"
	// TaskSuccess: the last attempt exited 0 (FinishAttempt).
	TaskSuccess TaskState = "success"
	// TaskFailed: the last attempt failed and no retry is left (FinishAttempt).
	TaskFailed TaskState = "failed"
	// TaskUpForRetry: the last attempt failed, a retry is left; eligible again at NextTryAt.
	TaskUpForRetry TaskState = "up_for_retry"
	// TaskUpstreamFailed: an upstream task failed (SetTaskStates by the scheduler).
	TaskUpstreamFailed TaskState = "upstream_failed"
	// TaskSkipped: the attempt exited 99 (Airflow's skip exit code), or an upstream was skipped.
	TaskSkipped TaskState = "skipped"
)

// Terminal reports whether no further attempt will happen without a clear.
func (s TaskState) Terminal() bool {
	switch s {
	case TaskSuccess, TaskFailed, TaskUpstreamFailed, TaskSkipped:
		return true
	}
	return false
}

// AttemptState is the outcome of one try.
type AttemptState string

// Attempt states.
const (
	AttemptRunning     AttemptState = "running"     // process started, no outcome recorded yet
	AttemptSuccess     AttemptState = "success"     // exited 0
	AttemptFailed      AttemptState = "failed"      // non-zero exit, signal or timeout
	AttemptOOM         AttemptState = "oom"         // killed for memory: over its pool's limit, exit 137 or SIGKILL
	AttemptSkipped     AttemptState = "skipped"     // exited 99
	AttemptInterrupted AttemptState = "interrupted" // stopped by Ctrl-C/SIGTERM of rewind; does not use a retry
	AttemptLost        AttemptState = "lost"        // its scheduler died and no outcome was found; does not use a retry
)

// Pipeline is a pipeline as the state knows it.
type Pipeline struct {
	Name      string
	Hash      string // hash of the HCL definition last seen
	Paused    bool
	UpdatedAt time.Time
}

// Run is one run of a pipeline for one logical date.
type Run struct {
	ID                int64
	Pipeline          string
	LogicalDate       time.Time // unique with Pipeline; carries the pipeline's offset
	DS                string    // YYYY-MM-DD in the pipeline's timezone
	DataIntervalStart time.Time
	DataIntervalEnd   time.Time
	Kind              RunKind
	State             RunState
	BackfillID        string // "" unless Kind is backfill
	CreatedAt         time.Time
	StartedAt         time.Time // zero until admitted
	EndedAt           time.Time // zero until success/failed
	Tasks             []TaskInstance
}

// TaskInstance is one task of one run.
type TaskInstance struct {
	ID        int64
	RunID     int64
	Task      string
	State     TaskState
	Pool      string
	TryNumber int // number of the latest attempt; 0 before the first
	// Failures counts failed attempts since creation or the last clear: the
	// retry budget. Lost and interrupted attempts do not count.
	Failures  int
	NextTryAt time.Time // when up_for_retry: not before this
	UpdatedAt time.Time
	Attempts  []Attempt
}

// Attempt is one try of a task instance: one process.
type Attempt struct {
	ID             int64
	TaskInstanceID int64
	TryNumber      int
	Pool           string
	State          AttemptState
	Host           string
	PID            int
	PIDStart       uint64 // process start time in clock ticks since boot (/proc/PID/stat field 22), to tell a reused pid
	StartedAt      time.Time
	EndedAt        time.Time // zero while running
	ExitCode       *int      // nil while running, or when killed by a signal
	Signal         string    // e.g. "killed", "terminated"; "" if none
	PeakRSS        int64     // bytes
	LogPath        string
	// Reason says why the attempt ran in its pool: "" for the task's own
	// pool, else the hot-date rule or the escalation that chose it.
	Reason string
}

// RunningAttempt is an attempt left in state running, with its context, for recovery.
type RunningAttempt struct {
	Attempt
	Pipeline string
	RunID    int64
	Task     string
}

// Watermark is the latest logical date up to which every run of a pipeline
// (from its first) has succeeded.
type Watermark struct {
	Pipeline    string
	LogicalDate time.Time
	UpdatedAt   time.Time
}

// Lease is the scheduler lease: one holder at a time executes attempts.
type Lease struct {
	Name      string
	Holder    string // "host:pid:pidstart"
	Host      string
	PID       int
	PIDStart  uint64
	ExpiresAt time.Time
}

// BackfillState is where a backfill stands.
type BackfillState string

// Backfill states.
const (
	BackfillRunning   BackfillState = "running"   // apply is at Phase (or died there: apply --resume continues)
	BackfillSuccess   BackfillState = "success"   // every phase done, every run succeeded
	BackfillFailed    BackfillState = "failed"    // a source check or a run failed
	BackfillCancelled BackfillState = "cancelled" // rewind backfill cancel
)

// Backfill is a window of a pipeline re-run as an executable plan.
type Backfill struct {
	ID            string
	Pipeline      string
	From, To      time.Time // logical dates, inclusive
	Reprocess     string    // none | failed | completed
	Reverse       bool
	MaxActiveRuns int
	State         BackfillState
	Phase         string   // the phase apply is in or finished last
	Detail        string   // what the last phase found (e.g. missing sources)
	Paused        []string // consumers this backfill paused
	Plan          string   // the plan, as JSON
	CreatedAt     time.Time
	UpdatedAt     time.Time
}

// Params of each operation.
type (
	UpsertPipelineParams struct {
		Name string
		Hash string
		Now  time.Time
	}
	SetPausedParams struct {
		Name   string
		Paused bool
		Now    time.Time
	}
	RunSpec struct {
		LogicalDate       time.Time
		DS                string
		DataIntervalStart time.Time
		DataIntervalEnd   time.Time
	}
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
		Now        time.Time
	}
	// ListRunsParams filters runs; zero fields do not filter. Runs come ordered
	// by pipeline, then logical date.
	ListRunsParams struct {
		Pipelines    []string
		States       []RunState
		From, To     time.Time // inclusive bounds on the logical date
		WithTasks    bool      // fill Run.Tasks (ordered by task name)
		WithAttempts bool      // also fill TaskInstance.Attempts (by try number)
	}
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
	RenewLeaseParams struct {
		Name   string
		Holder string
		TTL    time.Duration
		Now    time.Time
	}
	ReleaseLeaseParams struct {
		Name   string
		Holder string
	}
	// AdmitRunParams moves a run queued -> running.
	AdmitRunParams struct {
		RunID int64
		Now   time.Time
	}
	// FinishRunParams moves a run running (or queued) -> success | failed.
	FinishRunParams struct {
		RunID int64
		State RunState
		Now   time.Time
	}
	// ClaimTaskParams moves a task instance scheduled|up_for_retry -> queued,
	// increments its try number and inserts the attempt row (state running,
	// no pid yet). Fails with ErrConflict if the task is in another state.
	ClaimTaskParams struct {
		TaskInstanceID int64
		Pool           string
		Host           string
		LogPath        string // may contain "{try}", replaced by the new try number
		Reason         string // why Pool: see Attempt.Reason
		Now            time.Time
	}
	// StartAttemptParams records the process: task queued -> running.
	StartAttemptParams struct {
		AttemptID int64
		PID       int
		PIDStart  uint64
		Now       time.Time
	}
	// FinishAttemptParams records an outcome and moves the task instance
	// queued|running -> TaskState (success, failed, up_for_retry, skipped, or
	// scheduled for interrupted/lost attempts). CountFailure adds one to the
	// task's Failures.
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
	// instances. Task: only that task ("" = all). Running and queued task
	// instances are never cleared.
	ClearTasksParams struct {
		Pipeline   string
		From, To   time.Time
		OnlyFailed bool
		Task       string
		Now        time.Time
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
	TaskDurationsParams struct {
		Pipeline string
		Limit    int
	}
	// UpdateBackfillParams changes a backfill; empty fields are kept.
	UpdateBackfillParams struct {
		ID     string
		State  BackfillState
		Phase  string
		Detail *string
		Paused []string // nil keeps
		Now    time.Time
	}
	// ReprocessRunsParams hands the existing runs of a pipeline with logical
	// dates in [From, To] and a state in States to a backfill: kind backfill,
	// the backfill's id, state queued, and every task instance that is not
	// running back to scheduled with a fresh retry budget.
	ReprocessRunsParams struct {
		Pipeline   string
		BackfillID string
		From, To   time.Time
		States     []RunState
		Now        time.Time
	}
	// SetWatermarkParams sets a pipeline's watermark; a zero LogicalDate
	// removes it.
	SetWatermarkParams struct {
		Pipeline    string
		LogicalDate time.Time
		Now         time.Time
	}
	AdvanceWatermarkParams struct {
		Pipeline string
		Now      time.Time
	}
)

// Store is rewind's state. Implementations are safe for concurrent use by one
// process and for use by several processes on the same state.
type Store interface {
	Close() error

	// InTx runs fn with a Store whose operations all happen in one
	// transaction, committed when fn returns nil, rolled back otherwise. An
	// operation that fails inside it leaves no partial effect, and the
	// others stand. The scheduler batches a pass's writes this way. Close
	// must not be called on the inner Store; InTx inside InTx joins the
	// outer transaction.
	InTx(ctx context.Context, fn func(Store) error) error

	UpsertPipeline(ctx context.Context, p UpsertPipelineParams) (Pipeline, error)
	SetPaused(ctx context.Context, p SetPausedParams) error // ErrNotFound for an unknown pipeline
	GetPipeline(ctx context.Context, name string) (Pipeline, error)
	ListPipelines(ctx context.Context) ([]Pipeline, error)

	// MaterializeRuns returns how many runs it created.
	MaterializeRuns(ctx context.Context, p MaterializeRunsParams) (int, error)
	ListRuns(ctx context.Context, p ListRunsParams) ([]Run, error)
	AdmitRun(ctx context.Context, p AdmitRunParams) error
	FinishRun(ctx context.Context, p FinishRunParams) error

	ClaimTask(ctx context.Context, p ClaimTaskParams) (Attempt, error)
	StartAttempt(ctx context.Context, p StartAttemptParams) error
	FinishAttempt(ctx context.Context, p FinishAttemptParams) error
	SetTaskStates(ctx context.Context, p SetTaskStatesParams) (int, error)
	// RunningAttempts lists attempts in state running (for crash recovery).
	RunningAttempts(ctx context.Context) ([]RunningAttempt, error)
	FindAttempt(ctx context.Context, p FindAttemptParams) (Attempt, error)
	ClearTasks(ctx context.Context, p ClearTasksParams) (int, error)
	// TaskDurations returns, per task, how long its latest successful
	// attempts ran (newest first): the history that finds slow dates.
	TaskDurations(ctx context.Context, p TaskDurationsParams) (map[string][]time.Duration, error)

	// AdvanceWatermark recomputes the pipeline's watermark from its runs and returns it.
	AdvanceWatermark(ctx context.Context, p AdvanceWatermarkParams) (Watermark, error)
	GetWatermark(ctx context.Context, pipeline string) (Watermark, error) // ErrNotFound when none
	SetWatermark(ctx context.Context, p SetWatermarkParams) error

	// CreateBackfill records a new backfill (ErrConflict if its id exists).
	CreateBackfill(ctx context.Context, b Backfill) error
	GetBackfill(ctx context.Context, id string) (Backfill, error) // ErrNotFound
	ListBackfills(ctx context.Context) ([]Backfill, error)        // newest first
	UpdateBackfill(ctx context.Context, p UpdateBackfillParams) error
	// ReprocessRuns returns how many runs it handed to the backfill.
	ReprocessRuns(ctx context.Context, p ReprocessRunsParams) (int, error)

	// AcquireLease takes the lease if it is free, expired, already held by
	// Holder, or held by p.Stale. It returns the current lease and whether the
	// caller holds it.
	AcquireLease(ctx context.Context, p AcquireLeaseParams) (Lease, bool, error)
	RenewLease(ctx context.Context, p RenewLeaseParams) error // ErrConflict when lost
	ReleaseLease(ctx context.Context, p ReleaseLeaseParams) error
}
