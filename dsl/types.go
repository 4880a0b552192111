package dsl

import (
	"time"

	"github.com/hashicorp/hcl/v2"
)

// DefaultPoolName is the pool that exists even where no file declares it.
const DefaultPoolName = "default"

// DefaultPoolSlots is the slot count of the implicit default pool.
const DefaultPoolSlots = 16

// Workspace is every *.hcl file of one directory, decoded and validated.
type Workspace struct {
	Dir string
	// Files maps each parsed file name to its AST, for diagnostic snippets.
	Files map[string]*hcl.File
	// Pools always holds DefaultPoolName.
	Pools map[string]*Pool
	// Pipelines, sorted by name.
	Pipelines []*Pipeline
	// Limits are the declared limit blocks, by name.
	Limits map[string]*Limit
	// Notifies are the notify blocks: where backfill reports go, by name.
	Notifies []*Notify
	// Catalogs are the catalog blocks by name; "local" (type sql,
	// .rewind/catalog.db, .rewind/warehouse) exists even when not declared.
	Catalogs map[string]*Catalog
	// Environment is the environment block: the variables of rewind's
	// own environment that its processes get beyond the default set.
	Environment Environment

	secrets *secrets // the sensitive values, for Redact and the commands' environment
}

// Catalog is an Iceberg catalog: type "sql" (a SQLite file and a local
// warehouse directory) or "rest".
type Catalog struct {
	Name      string
	Type      string
	URI       string // absolute for sql (relative paths are to the declaring file's directory)
	Warehouse string // absolute for sql
	DeclRange hcl.Range
}

// Output is a versioned table a pipeline writes: when a run succeeds, the
// files it wrote replace that date's partition.
type Output struct {
	Name      string
	Catalog   string // default "local"
	Table     string // "namespace.table"
	Columns   []OutputColumn
	Partition string        // the partition column (default "ds"): a date (one partition per logical date) or a timestamp (one per data interval)
	Retention time.Duration // default 14 days
	// MaxChange: per column, the largest |new - old| / |old| of the column's
	// sum per date that validation accepts.
	MaxChange map[string]float64
	// Rules are the validate rules as written in the file, in order: each
	// a bool expression over old.* and new.*, checked per date by
	// CheckRules.
	Rules     []string
	DeclRange hcl.Range

	from     hcl.Expression // glob templated with run.*
	fromText string         // from as written, for FromText
	ctx      *hcl.EvalContext
	dir      string
	loc      *time.Location
	pipe     string
	rules    []outputRule // the validate rules, as Rules
	ruleCols []string     // the numeric columns the rules refer to, sorted
}

// OutputColumn is one column of an output table.
type OutputColumn struct {
	Name, Type string // date | string | double | long | int | boolean | timestamp
}

// Consumers returns the pipelines that consume pipeline name (consumes =
// [pipeline.name]), sorted by name.
func (w *Workspace) Consumers(name string) []*Pipeline {
	var out []*Pipeline
	for _, p := range w.Pipelines {
		for _, c := range p.Consumes {
			if c == name {
				out = append(out, p)
				break
			}
		}
	}
	return out
}

// Requirement is a check of a pipeline's source data for one date: a path
// glob that must match at least one file, or a command that must exit 0.
type Requirement struct {
	Name      string
	DeclRange hcl.Range

	path    hcl.Expression // nil when unset
	command hcl.Expression // nil when unset
	text    string         // the path or command as written, for Describe
	ctx     *hcl.EvalContext
	dir     string
	loc     *time.Location
	pipe    string
	pass    []string // Environment.Pass
}

// Notify is where a backfill's report is sent: a command (the report's path
// in $REWIND_REPORT, its text on stdin) and/or a webhook (a JSON POST).
type Notify struct {
	Name    string
	Webhook string // "" when unset
	// On are the events the block gets (on = [...]), sorted; default
	// [backfill_report]. See NotifyEvents.
	On []string
	// Timeout bounds one delivery's command and webhook (timeout = "30s";
	// default DefaultNotifyTimeout).
	Timeout   time.Duration
	DeclRange hcl.Range

	command hcl.Expression // nil when unset
	ctx     *hcl.EvalContext
	dir     string
	secrets *secrets
	pass    []string // Environment.Pass
}

// Pipeline returns the pipeline called name, or nil.
func (w *Workspace) Pipeline(name string) *Pipeline {
	for _, p := range w.Pipelines {
		if p.Name == name {
			return p
		}
	}
	return nil
}

// Pool is a named set of execution slots with optional resource limits.
type Pool struct {
	Name   string
	Slots  int
	Memory int64 // bytes; 0 when unset
	CPUs   int   // 0 when unset
	// EscalateTo names the pool an attempt killed for memory is retried on
	// (oom_escalate_to; "" = none).
	EscalateTo string
	// ReservedForScheduled slots are never given to backfill attempts
	// (reserved_for_scheduled; 0..Slots-1).
	ReservedForScheduled int
	// IdleTimeout: after this long without attempts, a pool that ran its
	// setup runs its teardown (idle_timeout; default 5m).
	IdleTimeout time.Duration
	// Executor runs the pool's attempts: ExecutorLocal (local processes,
	// the default) or ExecutorSlurm (Slurm batch jobs).
	Executor string
	// Partition is the Slurm partition of a Slurm pool ("" for the
	// cluster's default partition).
	Partition string
	DeclRange hcl.Range

	// launcher, setup and teardown templates over pool.* (nil when unset),
	// rendered by Launcher, SetupCommand and TeardownCommand.
	launcher hcl.Expression
	setup    hcl.Expression
	teardown hcl.Expression
	poolCtx  *hcl.EvalContext
	dir      string // directory of the declaring file: setup and teardown run there
	secrets  *secrets
	pass     []string // Environment.Pass
}

// Limit protects an external system: at most Concurrency attempts of the
// tasks that name it at once, and at most Rate attempt starts per Per.
type Limit struct {
	Name        string
	Concurrency int           // 0 = unlimited
	Rate        int           // 0 = unlimited
	Per         time.Duration // the rate's window ("60/m": Rate 60, Per 1m)
	DeclRange   hcl.Range
}

// Pipeline is one scheduled DAG of tasks.
type Pipeline struct {
	Name           string
	Schedule       string // cron expression or preset, as written
	Timezone       *time.Location
	StartDate      time.Time // in Timezone
	EndDate        time.Time // in Timezone; zero when unset
	Catchup        bool
	MaxActiveRuns  int
	MaxActiveTasks int // at least 1; default 16
	// ReprocessLookback (reprocess_lookback = "2d"): each new scheduled run
	// also runs again the pipeline's finished runs of that span before it,
	// so that late-arriving data lands without a manual backfill. 0: none.
	ReprocessLookback time.Duration
	DefaultPool       string
	Description       string
	Tags              []string
	Params            map[string]string // keys are identifiers: tasks see REWIND_PARAM_<key>
	// Tasks in a topological order (every task after its dependencies), ties by name.
	Tasks []*Task
	Skew  *Skew // nil when the pipeline has no skew block
	// Consumes names the pipelines this one reads (consumes =
	// [pipeline.NAME]): date D of this pipeline depends on date D of those.
	Consumes []string
	// Requires are the source checks a backfill runs for every date first.
	Requires []*Requirement
	// Outputs are the versioned tables the pipeline writes.
	Outputs []*Output
	// Notify names the notify blocks (notify = [notify.NAME]) that get
	// this pipeline's run events (run_failed, deadline_missed, ...), each
	// block only for the events of its on; sorted, without repeats.
	Notify []string
	// Deadline (deadline = "6h"): a run not succeeded this long after the
	// end of its data interval raises deadline_missed, once. 0: none.
	Deadline time.Duration
	// BackfillBatch (backfill { batch = "1d" }): the batch of its
	// backfills when `backfill plan` is given none.
	BackfillBatch Batch
	// Dir is the directory of the file that declares the pipeline.
	Dir string
	// Hash identifies the definition: it changes when anything that affects runs changes.
	Hash      string
	DeclRange hcl.Range

	// Label is the block label; Key is the for_each key that generated this
	// pipeline ("" without for_each). Name is Label, or Label_Key.
	Label string
	Key   string

	notifyRefs []depRef // notify, as written, resolved by resolveNotify
}

// Task returns the task called name, or nil.
func (p *Pipeline) Task(name string) *Task {
	for _, t := range p.Tasks {
		if t.Name == name {
			return t
		}
	}
	return nil
}

// Task is one step of a pipeline; its command is rendered per run.
type Task struct {
	Name                    string
	DependsOn               []string
	Retries                 int
	RetryDelay              time.Duration
	RetryExponentialBackoff bool
	Timeout                 time.Duration // 0 = none
	Pool                    string        // resolved: task pool, else pipeline default_pool, else "default"
	DependsOnPast           bool
	// Workdir is absolute; it defaults to the declaring file's directory. A
	// workdir that refers to run.* or pool.* is resolved per run by Render.
	Workdir   string
	DeclRange hcl.Range

	// Pipeline names the pipeline the task belongs to.
	Pipeline string
	// Label is the block label; Key is the for_each key that generated this
	// task ("" without for_each). Name is Label, or Label_Key.
	Label string
	Key   string
	// CommandText is the command expression as written in the file.
	CommandText string
	// Limits names the limit blocks the task uses (limits = [limit.oltp]),
	// sorted, without repeats.
	Limits []string
	// Skew is the task's own skew block; nil means the pipeline's applies.
	Skew *Skew
	// SkewHistory is the task's skew_history: whether the history detector
	// routes this task, whatever its skew block's history says; nil when
	// unset (the block decides).
	SkewHistory *bool

	// command, env and workdir templates, evaluated per run by Render.
	command   hcl.Expression
	env       hcl.Expression // nil when unset
	workdir   hcl.Expression // nil when unset
	dir       string         // directory of the declaring file
	loc       *time.Location // the pipeline's timezone
	ctx       *hcl.EvalContext
	depRanges map[string]hcl.Range // dependency name -> the reference in depends_on
	secrets   *secrets
	pass      []string // Environment.Pass
}

// Skew says which logical dates are hot and where they run.
type Skew struct {
	HotDates  []string // YYYY-MM-DD
	HotFactor float64  // probe: hot above HotFactor x the median of its reference dates (default 3)
	// ProbeWindow: a date's probe is compared with the median of the due
	// dates within ProbeWindow of it, before and after (default 14 days),
	// whatever dates are being run.
	ProbeWindow time.Duration
	// History turns the history detector on (the default): a task instance
	// whose last successful try ran longer than HotFactor x the task's
	// median duration is hot, when that try ran at least HistoryMinDuration
	// (default DefaultHistoryMinDuration; 0: no floor). A task's
	// skew_history overrides History for that task.
	History            bool
	HistoryMinDuration time.Duration
	Pool               string
	DeclRange          hcl.Range

	// HotWhenText and ProbeText are the expressions as written ("" when unset).
	HotWhenText string
	ProbeText   string

	hotWhen  hcl.Expression // nil when unset
	probe    hcl.Expression // nil when unset
	ctx      *hcl.EvalContext
	dir      string
	loc      *time.Location
	pipeline string
	pass     []string // Environment.Pass
}

// RunVars are the values of run.* for one run.
type RunVars struct {
	ID                string
	Pipeline          string
	LogicalDate       time.Time // in the pipeline's timezone
	DataIntervalStart time.Time
	DataIntervalEnd   time.Time
	Kind              string // scheduled | backfill | manual
	Dir               string // scratch directory of the run
}

// PoolVars are the values of pool.* for one attempt.
type PoolVars struct {
	Name   string
	Memory int64
	CPUs   int
}

// Command is a task's rendered command for one attempt.
type Command struct {
	// Argv is what is exec'd: for a string command, ["/bin/sh", "-c", cmd].
	Argv []string
	// Env holds the task's env block, rendered (without the REWIND_* variables
	// of the run), and the REWIND_SECRET_* variables that carry sensitive
	// values: set them in the process's environment.
	Env map[string]string
	Dir string
	// Pass are the workspace's environment.pass patterns: the variables of
	// rewind's own environment that the process gets beyond the default
	// pass-through set (see executor/procenv, which builds its environment
	// from Pass, the contract and Env).
	Pass []string
}
