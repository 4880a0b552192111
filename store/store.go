// Package store owns rewind's state: pipelines, runs, task instances,
// attempts, owners, the outbox, watermarks, backfills, the scheduler
// lease and the audit trail of operator commands, and every transition of
// them as one guarded, atomic operation.
// Store is the interface the scheduler and the CLI use; Open picks the
// backend from a DSN (SQLite is the embedded default, PostgreSQL for
// several hosts). Every backend passes the conformance suite in
// store/storetest.
//
// The package never decides anything: it knows no scheduling (no
// timetable, no readiness, no retries, no pools' policy), starts no
// process and reads no configuration. Callers decide and pass their
// decisions in (with Now, so that tests fix the clock); the store applies
// them under guards that refuse what the state no longer allows
// (ErrConflict, ErrNotFound, ErrFenced).
//
// One implementation of Store serves both databases: each operation's Go
// (checks, transaction, guards, scanning, errors) is written once, in
// meta.go, runs.go, tasks.go, many.go (batch forms), operator.go, claim.go, backfills.go,
// probes.go, notifications.go and rename.go, over a backend (sqlite.go, postgres.go:
// the transactions, their locking and fencing) and a dialect (dialect.go:
// a table of what the two databases spell differently, and the few steps
// one of them does its own way, in sqlite_steps.go, postgres_steps.go and
// postgres_claim.go).
// The SQL is written once with numbered placeholders wherever the two
// accept the same text. A query table rather than generated code (sqlc,
// as river does): most statements are the same in both databases, both
// run on database/sql with the same scanning, and generating Go per
// dialect would bring back two copies. No file is over 600 lines.
package store

import (
	"context"
	"errors"
	"time"
)

// ErrNotFound is returned when a named row does not exist.
var ErrNotFound = errors.New("not found")

// ErrConflict is returned when a guarded transition finds the row in another
// state: the caller re-reads and decides again.
var ErrConflict = errors.New("state conflict")

// ErrFenced is returned by every write of a Store made by Fenced once the
// lease it names has changed holder (or generation): the write did nothing.
// The process that gets it has lost the lease and must stop writing.
var ErrFenced = errors.New("fenced: the lease belongs to another holder")

// ErrCorrupt is returned (wrapped) by Open when the file at the state path is
// not a rewind state: empty, not a SQLite database, or a SQLite database with
// tables but no schema_migrations. The file is left untouched.
var ErrCorrupt = errors.New("not a rewind state")

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
	// TaskScheduled: created with its run, or cleared; waits for its upstreams.
	TaskScheduled TaskState = "scheduled"
	// TaskQueued: decided ready and routed by the scheduler (EnqueueTasks):
	// pool, reason, priority and log template are set, and any claimer may
	// take it (ClaimReady). No attempt row exists for it yet, so ClearTasks
	// may put it back to scheduled.
	TaskQueued TaskState = "queued"
	// TaskRunning: claimed (ClaimReady, ClaimTask): an attempt row in state
	// running exists, with its owner and nonce; the process is being started
	// or runs (StartAttempt records its pid, the task stays running).
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
	// CatchupThrough: every due interval with a logical date <= it has a run.
	// Moved forward by MaterializeRuns (MaterializeRunsParams.Through), reset
	// to zero by UpsertPipeline when the hash changes; zero: nothing known.
	CatchupThrough time.Time
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
	BackfillID        string    // "" unless Kind is backfill
	BatchOf           int64     // the leader of the batch that covers this run (0: none; see SetBatches)
	BatchStart        time.Time // the leader's logical date (zero: none)
	CreatedAt         time.Time
	StartedAt         time.Time // zero until admitted
	EndedAt           time.Time // zero until success/failed
	Tasks             []TaskInstance
}

// Notification is one event queued for one notify block: a failed run, a
// missed deadline. Key is its idempotency key (unique in the state, sent
// with it); Payload is the JSON the notify block receives.
type Notification struct {
	ID          int64
	Key         string
	Event       string
	Notify      string // the notify block's name
	Channel     string // "command" or "webhook": each is delivered on its own
	Pipeline    string
	Payload     []byte
	CreatedAt   time.Time
	Tries       int // delivery tries so far
	NextAt      time.Time
	ClaimedBy   string
	DeliveredAt time.Time // zero until delivered
	GaveUpAt    time.Time // zero unless given up
	LastError   string
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
	// Reason, Priority and LogPath are the routing EnqueueTasks decided (the
	// pool's reason as Attempt.Reason; lower priority is claimed first; the
	// log template, which may contain "{try}"). ClaimReady copies them into
	// the attempt.
	Reason   string
	Priority int
	LogPath  string
	Attempts []Attempt
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
	// Owner is the id of the process that claimed the attempt (its owner
	// row: Heartbeat); "" for attempts claimed without one.
	Owner string
	// Nonce is a per-attempt random secret (32 hex characters from
	// crypto/rand), generated by the store at claim time. The wrapper prints
	// it with the exit status, so that a task's own output cannot forge a
	// status line.
	Nonce string
	// JobID is the Slurm job id of an attempt in a Slurm pool (its PID is
	// then 0), "ARRAYID_INDEX" for an element of a job array; "" if local.
	JobID string
}

// RunningAttempt is an attempt left in state running, with its context, for recovery.
type RunningAttempt struct {
	Attempt
	Pipeline string
	RunID    int64
	Task     string
	// OwnerExpiresAt is the heartbeat expiry of the attempt's owner, zero
	// when the owner row does not exist (never had one, or removed).
	OwnerExpiresAt time.Time
	Kind           RunKind
	LogicalDate    time.Time
}

// ClaimedAttempt is an attempt ClaimReady created, with its context.
type ClaimedAttempt struct {
	Attempt
	Pipeline    string
	RunID       int64
	Task        string
	Kind        RunKind
	LogicalDate time.Time
}

// PoolCapacity is what ClaimReady may fill of one pool: at most Slots
// running attempts in it, of which at most BackfillSlots of backfill runs
// (0: none). Both count every running attempt in the state, whoever claimed it.
type PoolCapacity struct {
	Name          string
	Slots         int
	BackfillSlots int
}

// UsageRow is what is in flight for one pool, pipeline, task and kind of
// run (backfill or not): attempts in state running (by the attempt's pool)
// and task instances in state queued (by the task instance's pool).
type UsageRow struct {
	Pool, Pipeline, Task string
	Backfill             bool
	Running, Queued      int
}

// Owner is a process that claims attempts, as its heartbeat left it.
type Owner struct {
	ID          string
	Host        string
	PID         int
	PIDStart    uint64
	HeartbeatAt time.Time
	ExpiresAt   time.Time
}

// OutboxItem is a side effect (an Iceberg commit) a run waits for: requested
// in the state's transaction (RequestCommit), done outside it, completed by
// CompleteCommit.
type OutboxItem struct {
	ID, RunID   int64
	Pipeline    string
	LogicalDate time.Time
	CreatedAt   time.Time
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
	// Generation is 1 for the first holder and grows by one every time the
	// holder changes (not when the same holder renews or re-acquires): a
	// holder's writes are fenced by it (Store.Fenced).
	Generation int64
	// AcquiredAt is when Holder took the lease (a re-acquisition by the
	// same holder keeps it), RenewedAt when it last took or renewed it,
	// both on the state's clock; zero when released, or when the lease was
	// taken by a rewind that did not record them.
	AcquiredAt, RenewedAt time.Time
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
	// OnHold: paused by `backfill pause`: it starts nothing new.
	OnHold bool
	// RolledBack: `backfill rollback` restored main's window from the tag.
	RolledBack bool
	CreatedAt  time.Time
	UpdatedAt  time.Time
}

// Store is rewind's state. Implementations are safe for concurrent use by one
// process and for use by several processes on the same state.
//
// Who moves what: the scheduler (the engine holding the lease, through a
// Fenced store) materializes runs, admits and finishes them, enqueues and
// claims task instances and records attempts; operator commands (clear,
// pause, backfill, watermark) change the state through ClearTasks,
// SetPaused, ReprocessRuns, UpdateBackfill and SetWatermark, each of which
// bumps Epoch so that a running engine re-reads.
type Store interface {
	// Close closes the store (a Fenced store shares its connections with
	// the store it was made from: closing either closes both).
	Close() error

	// InTx runs fn with a Store whose operations all happen in one
	// transaction, committed when fn returns nil, rolled back otherwise. An
	// operation that fails inside it leaves no partial effect, and the
	// others stand (a database error in a batch form, EnqueueTasks or
	// ClaimReady excepted: see AdmitRuns). The scheduler batches a pass's
	// writes this way. Close must not be called on the inner Store; InTx
	// inside InTx joins the outer transaction.
	InTx(ctx context.Context, fn func(Store) error) error

	// Fenced returns a Store whose every write transaction (single
	// operations and InTx) checks, inside that transaction and before any
	// of its statements, that lease Name is held by Holder at Generation;
	// otherwise the write does nothing and returns ErrFenced. An InTx may
	// send the check with its first statements (PostgreSQL does, to save
	// round trips): its function may then run before the check fails, but
	// nothing it did stands and InTx returns ErrFenced. Reads aren't fenced.
	Fenced(lease, holder string, generation int64) Store

	// Epoch is a counter that every change made by an operator command
	// bumps in the same transaction: ClearTasks, MarkTasks, RetryNow,
	// SetPaused, ReprocessRuns, UpdateBackfill, SetWatermark. A running
	// engine polls it (one primary-key read) and re-reads its runs when it
	// moved. The engine's own transitions do not move it.
	Epoch(ctx context.Context) (int64, error)

	// UpsertPipeline records a pipeline and the hash of its definition (the
	// scheduler, at each start). A changed hash resets CatchupThrough.
	UpsertPipeline(ctx context.Context, p UpsertPipelineParams) (Pipeline, error)
	// SetPaused sets a pipeline's pause flag (operator; bumps Epoch).
	SetPaused(ctx context.Context, p SetPausedParams) error // ErrNotFound for an unknown pipeline
	// GetPipeline returns one pipeline (ErrNotFound).
	GetPipeline(ctx context.Context, name string) (Pipeline, error)
	// ListPipelines returns every pipeline, by name.
	ListPipelines(ctx context.Context) ([]Pipeline, error)
	// LatestTasks returns the task names of the pipeline's latest run (by
	// logical date), bytewise; none when it has no run. It costs one
	// index seek and that run's task instances, not the history.
	LatestTasks(ctx context.Context, pipeline string) ([]string, error)
	// RenamePipeline moves everything the state keeps under pipeline
	// From's name to To, in one transaction (operator: rewind rename;
	// bumps Epoch): its pipeline row (hash, pause flag, catchup cursor;
	// it replaces To's row, if any), runs (with their task instances,
	// attempts and outbox rows), watermark, probe results, notifications,
	// deadline checks and backfills (their pipeline, the consumer lists of
	// those that paused it, and the plans the caller rewrote), and
	// rewrites the recorded log paths as p.LogsFrom/LogsTo say. Run ids,
	// backfill ids and notification keys do not change.
	// ErrNotFound when From has no run; ErrConflict, changing nothing,
	// when To has runs, when an attempt of From is running, when a
	// running backfill is of From or To or paused one of them, or when a
	// plan changed since the caller read it.
	RenamePipeline(ctx context.Context, p RenamePipelineParams) (RenameResult, error)

	// MaterializeRuns creates the runs that do not exist yet (scheduler,
	// backfill apply) and returns how many it created.
	MaterializeRuns(ctx context.Context, p MaterializeRunsParams) (int, error)
	// ListRuns reads runs, and optionally their task instances and attempts.
	ListRuns(ctx context.Context, p ListRunsParams) ([]Run, error)
	// CountRuns counts runs by pipeline and state (ordered by those), in
	// the database: what a page of a long history shows as its totals.
	CountRuns(ctx context.Context, p CountRunsParams) ([]RunCount, error)
	// AdmitRun moves a run queued -> running (scheduler: max_active_runs).
	AdmitRun(ctx context.Context, p AdmitRunParams) error
	// FinishRun moves a run queued|running -> State (success or failed, by
	// the scheduler) only when the run's task instances say so, in the same
	// statement: none in scheduled/queued/running/up_for_retry, and for
	// success every one success or skipped. Otherwise ErrConflict (the
	// caller re-reads); ErrNotFound for an unknown run.
	FinishRun(ctx context.Context, p FinishRunParams) error
	// AdmitRuns, FinishRuns, StartAttempts and FinishAttempts are the batch
	// forms of AdmitRun, FinishRun, StartAttempt and FinishAttempt (the
	// scheduler's pass): one transaction, in which errs[i] is what the
	// single operation would have returned for ps[i] (nil, ErrConflict or
	// ErrNotFound: nothing of that item written); err fails the whole call,
	// and inside InTx (a database error) the whole transaction.
	AdmitRuns(ctx context.Context, ps []AdmitRunParams) (errs []error, err error)
	FinishRuns(ctx context.Context, ps []FinishRunParams) (errs []error, err error)
	StartAttempts(ctx context.Context, ps []StartAttemptParams) (errs []error, err error)
	FinishAttempts(ctx context.Context, ps []FinishAttemptParams) (errs []error, err error)

	// ClaimTask claims one task instance by id (scheduled|up_for_retry ->
	// running, with its attempt row). The scheduler uses EnqueueTasks and
	// ClaimReady instead.
	ClaimTask(ctx context.Context, p ClaimTaskParams) (Attempt, error)
	// EnqueueTasks moves each listed task instance scheduled -> queued, or
	// up_for_retry -> queued when its next_try_at <= Now (guarded, in one
	// transaction), setting pool, reason, priority and log_path (the
	// scheduler, when it decides a task instance is ready). Returns how
	// many moved; the others (unknown, or in another state) are left alone.
	// Inside InTx, a database error in it fails the whole transaction.
	EnqueueTasks(ctx context.Context, p EnqueueTasksParams) (int, error)
	// ClaimReady claims queued task instances: see ClaimReadyParams.
	// Inside InTx, a database error in it fails the whole transaction.
	ClaimReady(ctx context.Context, p ClaimReadyParams) ([]ClaimedAttempt, error)
	// Stats counts runs, attempts, queued task instances and backfills,
	// grouped in the database by pipeline, pool and state, from one
	// snapshot (the operators' metrics read it at each scrape).
	Stats(ctx context.Context) (Stats, error)
	// Usage counts, from the state, what is in flight: running attempts and
	// queued task instances, grouped by pool, pipeline, task and whether the
	// run is a backfill (ordered by those).
	Usage(ctx context.Context) ([]UsageRow, error)
	// InFlight is Usage and the running runs of p.Pipelines with their
	// task instances, in one round trip inside a PostgreSQL InTx.
	InFlight(ctx context.Context, p InFlightParams) (InFlight, error)
	// StartAttempt records the pid of a running attempt whose task instance
	// is running on its try (the process that claimed it, once started);
	// ErrConflict otherwise.
	StartAttempt(ctx context.Context, p StartAttemptParams) error
	// FinishAttempt records an attempt's outcome and moves its task instance
	// (the process that ran it, or recovery for lost attempts).
	FinishAttempt(ctx context.Context, p FinishAttemptParams) error
	// SetTaskStates moves task instances in one of From to To (scheduler:
	// upstream_failed, skipped, and the like).
	SetTaskStates(ctx context.Context, p SetTaskStatesParams) (int, error)
	// RunningAttempts lists attempts in state running, with their owner's
	// heartbeat expiry (for crash recovery).
	RunningAttempts(ctx context.Context) ([]RunningAttempt, error)
	// FindAttempt finds one attempt of a pipeline's task on a day (logs).
	FindAttempt(ctx context.Context, p FindAttemptParams) (Attempt, error)
	// ClearTasks puts task instances back to scheduled and their finished
	// runs back to queued (operator: rewind clear; bumps Epoch).
	ClearTasks(ctx context.Context, p ClearTasksParams) (int, error)
	// MarkTasks marks task instances success or failed, their runs
	// following (operator: rewind mark; bumps Epoch): see MarkTasksParams.
	MarkTasks(ctx context.Context, p MarkTasksParams) (MarkResult, error)
	// RetryNow: see RetryNowParams (operator; bumps Epoch).
	RetryNow(ctx context.Context, p RetryNowParams) (int, error)
	// RecordAudit adds to the audit trail; ListAudit reads it.
	RecordAudit(ctx context.Context, e AuditEntry) error
	ListAudit(ctx context.Context, p ListAuditParams) ([]AuditEntry, error)
	// TaskDurations returns, per task, how long its latest successful
	// attempts ran (newest first): the history that finds slow dates. It
	// costs the limit's worth of the pipeline's latest runs, not its history.
	TaskDurations(ctx context.Context, p TaskDurationsParams) (map[string][]time.Duration, error)

	// Heartbeat upserts the owner row {id, host, pid, pid_start,
	// heartbeat_at = Now, expires_at = Now+TTL}. Owners are the processes
	// that claim attempts; each beats its own row.
	Heartbeat(ctx context.Context, p HeartbeatParams) error
	// GetOwner returns an owner row (ErrNotFound).
	GetOwner(ctx context.Context, id string) (Owner, error)
	// RemoveOwner deletes the owner row (a clean exit with no running
	// attempts): ErrConflict while an attempt it owns is still running, and
	// nil when there is no such row.
	RemoveOwner(ctx context.Context, id string) error

	// RequestCommit, guarded like a success FinishRun (run queued|running,
	// every task instance success or skipped; ErrConflict otherwise),
	// inserts an outbox row for the run (at most one per run: an existing
	// one is returned) and returns it. The scheduler then commits outside
	// the transaction and calls CompleteCommit.
	RequestCommit(ctx context.Context, p RequestCommitParams) (OutboxItem, error)
	// ListOutbox lists the outbox rows of the given pipelines (empty: all),
	// oldest first: commits requested and not completed (a restarted
	// scheduler redoes them).
	ListOutbox(ctx context.Context, pipelines []string) ([]OutboxItem, error)
	// CompleteCommit deletes the outbox row and finishes its run as State
	// (success, or failed when the commit failed) in one transaction,
	// guarded as FinishRun; if the run's task instances no longer allow it
	// (cleared meanwhile) the row is deleted, the run is left alone and
	// ErrConflict is returned. ErrNotFound for an unknown row.
	CompleteCommit(ctx context.Context, p CompleteCommitParams) error

	// RecordProbes saves skew probe measurements: one row per pipeline,
	// task and logical date, a later measurement replacing an earlier one.
	RecordProbes(ctx context.Context, results []ProbeResult) error
	// ListProbes returns the recorded measurements of one pipeline's task
	// ("" the pipeline's skew block) within a window of logical dates
	// (inclusive; zero bounds are open), oldest first.
	ListProbes(ctx context.Context, p ListProbesParams) ([]ProbeResult, error)

	// EnqueueNotifications queues notifications, skipping those whose Key
	// is already queued, and returns how many were new.
	EnqueueNotifications(ctx context.Context, ns []Notification) (int, error)
	// ClaimNotifications claims due notifications for one deliverer.
	ClaimNotifications(ctx context.Context, p ClaimNotificationsParams) ([]Notification, error)
	// FinishNotification records a claimed notification delivered, given
	// up or to retry (ErrConflict when the claim was lost).
	FinishNotification(ctx context.Context, p FinishNotificationParams) error
	// ListNotifications lists notifications, oldest first.
	ListNotifications(ctx context.Context, p ListNotificationsParams) ([]Notification, error)
	// DeadlineChecked: up to when a pipeline's deadlines were looked at.
	DeadlineChecked(ctx context.Context, pipeline string) (until time.Time, ok bool, err error)
	// SetDeadlineChecked moves that instant forward (never back).
	SetDeadlineChecked(ctx context.Context, pipeline string, until time.Time) error
	// ForgetDeadlineChecks removes the looks of the pipelines not in keep.
	ForgetDeadlineChecks(ctx context.Context, keep []string) error

	// AdvanceWatermark recomputes the pipeline's watermark from its runs and
	// returns it (scheduler, after runs finish).
	AdvanceWatermark(ctx context.Context, p AdvanceWatermarkParams) (Watermark, error)
	// GetWatermark returns the stored watermark.
	GetWatermark(ctx context.Context, pipeline string) (Watermark, error) // ErrNotFound when none
	// SetWatermark sets or removes a watermark (operator; bumps Epoch).
	SetWatermark(ctx context.Context, p SetWatermarkParams) error

	// CreateBackfill records a new backfill (ErrConflict if its id exists).
	CreateBackfill(ctx context.Context, b Backfill) error
	// GetBackfill returns one backfill.
	GetBackfill(ctx context.Context, id string) (Backfill, error) // ErrNotFound
	// ListBackfills returns every backfill.
	ListBackfills(ctx context.Context) ([]Backfill, error) // newest first
	// UpdateBackfill changes a backfill (backfill apply, cancel; bumps Epoch).
	UpdateBackfill(ctx context.Context, p UpdateBackfillParams) error
	// ReprocessRuns hands existing runs to a backfill (backfill apply; bumps
	// Epoch) and returns how many runs it handed over.
	ReprocessRuns(ctx context.Context, p ReprocessRunsParams) (int, error)
	SetBatches(ctx context.Context, p SetBatchesParams) error // see SetBatchesParams

	// Now reads the state's clock: the database server's (PostgreSQL), or
	// this machine's (SQLite, a file of one machine). Leases, heartbeats
	// and their expiries are on it: AcquireLease, RenewLease and Heartbeat
	// with a zero Now read it themselves, so that no client's clock decides
	// who leads.
	Now(ctx context.Context) (time.Time, error)
	// AcquireLease takes the lease if it is free, expired, already held by
	// Holder, or held by p.Stale. It returns the current lease and whether the
	// caller holds it. Generation grows when the holder changes.
	AcquireLease(ctx context.Context, p AcquireLeaseParams) (Lease, bool, error)
	// GetLease reads a lease as it stands (a released or expired one
	// included: its ExpiresAt says), for the operators' view.
	GetLease(ctx context.Context, name string) (Lease, error) // ErrNotFound when never taken
	// RenewLease extends the lease of its holder.
	RenewLease(ctx context.Context, p RenewLeaseParams) error // ErrConflict when lost
	// ReleaseLease gives the lease up if Holder holds it (its generation is
	// kept, so that the next holder's is larger); otherwise it does nothing.
	ReleaseLease(ctx context.Context, p ReleaseLeaseParams) error
}
