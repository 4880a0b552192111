package store

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// sqlStore is the one implementation of Store. Every operation's Go (its
// checks, its transaction, its guards, its scanning and its errors) is
// written once, in the files named after what it handles (meta.go, runs.go,
// tasks.go, claim.go, backfills.go); it runs over a backend, which owns the
// database's transactions, and a dialect, which spells the SQL and does the
// few steps one database does its own way.
type sqlStore struct {
	b backend
	d *dialect
	// limit, inside InTx, is the transaction's context: every statement of
	// the transaction ends by its deadline (dialect.callTimeout).
	limit context.Context
}

// bound gives an operation (a write, a read, a whole InTx) its deadline,
// unless it runs inside a transaction that has one: where the state is a
// server, no call waits for ever on a network that stopped answering.
func (s *sqlStore) bound(ctx context.Context) (context.Context, context.Context, context.CancelFunc) {
	if s.limit != nil {
		return ctx, s.limit, func() {}
	}
	if s.d.callTimeout <= 0 {
		return ctx, nil, func() {}
	}
	ctx, cancel := context.WithTimeout(ctx, s.d.callTimeout)
	return ctx, ctx, cancel
}

var _ Store = (*sqlStore)(nil)

// backend is a database's transactions: how a write is made atomic and
// fenced, how a read sees one snapshot, and how InTx shares one transaction
// between operations (sqlite.go, postgres.go).
type backend interface {
	Close() error
	// write runs fn in a write transaction, after checking the view's
	// fence, and commits it when fn returns nil; inside InTx it runs under
	// a savepoint of the enclosing transaction.
	write(ctx context.Context, fn func(tx querier) error) error
	// writeSet is write for an operation whose guards refuse by writing
	// nothing and report it in the result (the batch forms): inside InTx
	// a backend may run it without a savepoint, a database error in it
	// then failing the whole transaction.
	writeSet(ctx context.Context, fn func(tx querier) error) error
	// read runs fn on one snapshot (inside InTx: the enclosing transaction).
	read(ctx context.Context, fn func(tx querier) error) error
	// rq is where a single-statement read goes.
	rq() querier
	// inTx runs fn with the view of one transaction (InTx).
	inTx(ctx context.Context, fn func(backend) error) error
	// fenced returns a view whose write transactions check f first.
	fenced(f fence) backend
	// leaseMoved tells the view that an operation moved a lease.
	leaseMoved()
}

// steps are what a dialect does its own way inside an operation's
// transaction: set-wise statements over arrays in PostgreSQL, prepared
// statements and row-by-row guards in SQLite (sqlite_steps.go,
// postgres_steps.go).
type steps interface {
	// createRuns inserts the runs of p that do not exist yet and one
	// scheduled task instance per task for each run it created, and
	// returns how many runs it created.
	createRuns(ctx context.Context, c conn, p MaterializeRunsParams) (int, error)
	// insertAttempts inserts the running attempts of claims (see newAttempt).
	insertAttempts(ctx context.Context, c conn, as []*Attempt, now time.Time) error
	// enqueue moves the items' task instances to queued; returns how many moved.
	enqueue(ctx context.Context, c conn, p EnqueueTasksParams) (int, error)
	// claim is ClaimReady: it serializes the claimers of the same pools
	// (PostgreSQL's advisory locks; nothing in SQLite, whose writer holds
	// the whole database), reads what each pool
	// can still take (poolRooms), per pool with room its first queued task
	// instances in claim order, picks among them (pickCandidates), and
	// moves those queued -> running (guarded) with their attempts, in the
	// candidates' order; those no longer queued are skipped.
	claim(ctx context.Context, c conn, p ClaimReadyParams) ([]ClaimedAttempt, error)
	// clearTasks puts the task instances that match cond (on
	// task_instances ti JOIN runs r; their state is one of states) back to
	// scheduled and their finished runs back to queued; returns how many
	// task instances it cleared.
	clearTasks(ctx context.Context, c conn, cond func(*args) string, states []string, now any) (int, error)
	// admitRuns, finishRuns, startAttempts and finishAttempts apply the
	// items of a batch (many.go) marked in apply, each under its single
	// operation's guards, and report which ones the guards took.
	admitRuns(ctx context.Context, c conn, ps []AdmitRunParams, apply []bool) ([]bool, error)
	finishRuns(ctx context.Context, c conn, ps []FinishRunParams, apply []bool) ([]bool, error)
	startAttempts(ctx context.Context, c conn, ps []StartAttemptParams, apply []bool) ([]bool, error)
	finishAttempts(ctx context.Context, c conn, ps []FinishAttemptParams, apply []bool) ([]bool, error)
}

// Close closes the backend's connections.
func (s *sqlStore) Close() error { return s.b.Close() }

// InTx runs fn with a Store whose operations share one transaction,
// committed when fn returns nil and rolled back otherwise.
func (s *sqlStore) InTx(ctx context.Context, fn func(Store) error) error {
	ctx, limit, cancel := s.bound(ctx)
	defer cancel()
	return s.b.inTx(ctx, func(b backend) error {
		return fn(&sqlStore{b: b, d: s.d, limit: limit})
	})
}

// Fenced returns a view of the store whose every write transaction first
// checks, inside that transaction, that the lease is held by holder at
// generation (see the backends for why no takeover can come between the
// check and the commit). The view shares the store's connections (and the
// enclosing transaction when made from InTx's Store).
func (s *sqlStore) Fenced(lease, holder string, generation int64) Store {
	return &sqlStore{b: s.b.fenced(fence{lease: lease, holder: holder, generation: generation}), d: s.d, limit: s.limit}
}

// write runs fn in a write transaction of the backend.
func (s *sqlStore) write(ctx context.Context, fn func(c conn) error) error {
	ctx, limit, cancel := s.bound(ctx)
	defer cancel()
	return s.b.write(ctx, func(tx querier) error { return fn(conn{q: tx, d: s.d, limit: limit}) })
}

// writeSet runs fn as the backend's writeSet.
func (s *sqlStore) writeSet(ctx context.Context, fn func(c conn) error) error {
	ctx, limit, cancel := s.bound(ctx)
	defer cancel()
	return s.b.writeSet(ctx, func(tx querier) error { return fn(conn{q: tx, d: s.d, limit: limit}) })
}

// read runs fn on one snapshot.
func (s *sqlStore) read(ctx context.Context, fn func(c conn) error) error {
	ctx, limit, cancel := s.bound(ctx)
	defer cancel()
	return s.b.read(ctx, func(tx querier) error { return fn(conn{q: tx, d: s.d, limit: limit}) })
}

// rq is where a single-statement read goes.
func (s *sqlStore) rq() conn {
	c := conn{q: s.b.rq(), d: s.d, limit: s.limit}
	if s.limit == nil {
		c.timeout = s.d.callTimeout
	}
	return c
}

// querier is what *sql.DB and *sql.Tx share.
type querier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
	PrepareContext(ctx context.Context, query string) (*sql.Stmt, error)
}

// conn runs SQL written with PostgreSQL's numbered placeholders ($1, $2,
// ...) on one backend: the dialect rewrites them for its database.
type conn struct {
	q querier
	d *dialect
	// limit is the context of the operation or transaction the statements
	// belong to: each ends by its deadline, and when it is cancelled. A
	// single statement outside one gets timeout instead (0: none).
	limit   context.Context
	timeout time.Duration
}

// bound is ctx (the operation's own, with its values and cancellation)
// ending no later than the statement's limit.
func (c conn) bound(ctx context.Context) context.Context {
	switch {
	case c.limit != nil:
		dl, ok := c.limit.Deadline()
		if !ok {
			return ctx
		}
		bctx, cancel := context.WithDeadline(ctx, dl)
		context.AfterFunc(c.limit, cancel) // released with the operation
		return bctx
	case c.timeout > 0:
		bctx, cancel := context.WithTimeout(ctx, c.timeout)
		context.AfterFunc(bctx, cancel) // released at its deadline at the latest
		return bctx
	}
	return ctx
}

// pipeStmt is one statement of a pipeline; scan reads its rows (nil: the
// statement is run for its effect).
type pipeStmt struct {
	query string
	args  []any
	scan  func(rows rowScanner) error
}

// rowScanner is what *sql.Rows and pgx.Rows share.
type rowScanner interface {
	Next() bool
	Scan(dest ...any) error
}

// pipeliner is a querier that runs a pipeline in one round trip (pgTx).
type pipeliner interface {
	pipeline(ctx context.Context, stmts []pipeStmt) error
}

// pipeline runs stmts in order: in one round trip where the backend can
// (PostgreSQL inside InTx), else one by one. The statements must not depend
// on the client seeing the rows of the ones before them.
func (c conn) pipeline(ctx context.Context, stmts []pipeStmt) error {
	ctx = c.bound(ctx)
	if p, ok := c.q.(pipeliner); ok {
		for i := range stmts {
			stmts[i].query = c.d.rebind(stmts[i].query)
		}
		return p.pipeline(ctx, stmts)
	}
	for _, st := range stmts {
		if st.scan == nil {
			if _, err := c.q.ExecContext(ctx, c.d.rebind(st.query), st.args...); err != nil {
				return err
			}
			continue
		}
		rows, err := c.q.QueryContext(ctx, c.d.rebind(st.query), st.args...)
		if err := scanStmt(st, rows, err, func() error { rows.Close(); return rows.Err() }); err != nil {
			return err
		}
	}
	return nil
}

// scanStmt reads the rows of a pipeline's statement through its scan (err:
// how the statement failed); done closes them and says how their reading
// ended.
func scanStmt(st pipeStmt, rows rowScanner, err error, done func() error) error {
	if err != nil {
		return err
	}
	return errorsJoin(st.scan(rows), done())
}

func (c conn) exec(ctx context.Context, query string, args ...any) (sql.Result, error) {
	return c.q.ExecContext(c.bound(ctx), c.d.rebind(query), args...)
}

func (c conn) query(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	return c.q.QueryContext(c.bound(ctx), c.d.rebind(query), args...)
}

func (c conn) row(ctx context.Context, query string, args ...any) *sql.Row {
	return c.q.QueryRowContext(c.bound(ctx), c.d.rebind(query), args...)
}

func (c conn) prepare(ctx context.Context, query string) (*sql.Stmt, error) {
	return c.q.PrepareContext(c.bound(ctx), c.d.rebind(query))
}

// args builds the argument list of a query put together in Go: add appends
// a value and returns its placeholder.
type args []any

func (a *args) add(v any) string {
	*a = append(*a, v)
	return "$" + strconv.Itoa(len(*a))
}

// fence is the lease a Fenced store's writes are conditional on.
type fence struct {
	lease, holder string
	generation    int64
}

// check returns ErrFenced unless f is nil or its lease is held as it says;
// query is the backend's read of the lease row (name, holder, generation).
func (f *fence) check(ctx context.Context, tx querier, query string) error {
	if f == nil {
		return nil
	}
	var one int
	err := tx.QueryRowContext(ctx, query, f.lease, f.holder, f.generation).Scan(&one)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return fmt.Errorf("store: lease %s generation %d of %s: %w", f.lease, f.generation, f.holder, ErrFenced)
	case err != nil:
		return fmt.Errorf("store: check lease %s: %w", f.lease, err)
	}
	return nil
}

// readTx runs fn in a read transaction of db with opts (a view of InTx
// reads its enclosing transaction instead: see the backends' read).
func readTx(ctx context.Context, db *sql.DB, opts *sql.TxOptions, fn func(tx querier) error) error {
	tx, err := db.BeginTx(ctx, opts)
	if err != nil {
		return fmt.Errorf("store: begin read: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	return fn(tx)
}

// missingOr tells a guarded update that touched no row apart: ErrNotFound
// when the row does not exist, ErrConflict when it is in another state.
func missingOr(ctx context.Context, c conn, table string, id int64) error {
	var one int
	err := c.row(ctx, "SELECT 1 FROM "+table+" WHERE id = $1", id).Scan(&one)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return ErrNotFound
	case err != nil:
		return err
	}
	return ErrConflict
}

// guarded turns a guarded UPDATE that touched no row into ErrNotFound or ErrConflict.
func guarded(ctx context.Context, c conn, res sql.Result, table string, id int64, op string) error {
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("store: %s %d: %w", op, id, err)
	}
	if n > 0 {
		return nil
	}
	return fmt.Errorf("store: %s %d: %w", op, id, missingOr(ctx, c, table, id))
}

// affected is how many rows res touched, as an int.
func affected(res sql.Result, err error) (int, error) {
	if err != nil {
		return 0, err
	}
	n, err := res.RowsAffected()
	return int(n), err
}

// scanAll reads every row of rows with scan, or the first error.
func scanAll[T any](rows *sql.Rows, err error, scan func(*sql.Rows) (T, error)) ([]T, error) {
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []T
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

// boolInt is a flag as its INTEGER column holds it.
func boolInt(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// newNonce returns 32 hex characters from crypto/rand.
func newNonce() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read does not fail (it crashes the program instead)
	return hex.EncodeToString(b[:])
}

// newAttempt fills in the running attempt of a claim: a carries the task
// instance, try, pool, host, owner, reason and the log template; it gets
// its nonce, state, start time and log path ({try} replaced). The insert
// gives it its id.
func newAttempt(a *Attempt, now time.Time) {
	a.State = AttemptRunning
	a.StartedAt = stamp(now)
	a.Nonce = newNonce()
	a.LogPath = strings.ReplaceAll(a.LogPath, "{try}", strconv.Itoa(a.TryNumber))
}

func validTaskState(st TaskState) bool {
	switch st {
	case TaskScheduled, TaskQueued, TaskRunning, TaskSuccess, TaskFailed,
		TaskUpForRetry, TaskUpstreamFailed, TaskSkipped:
		return true
	}
	return false
}

func validKind(k RunKind) bool {
	switch k {
	case KindScheduled, KindBackfill, KindManual:
		return true
	}
	return false
}

// Time encoding: every time is BIGINT unix nanoseconds, every run date RFC
// 3339 text with its own offset, in both databases.

var (
	minNano = time.Unix(0, math.MinInt64)
	maxNano = time.Unix(0, math.MaxInt64)
)

// nanos is t in unix nanoseconds, clamped to the int64 range so that far
// bounds (year 9999) still compare correctly.
func nanos(t time.Time) int64 {
	switch {
	case t.Before(minNano):
		return math.MinInt64
	case t.After(maxNano):
		return math.MaxInt64
	}
	return t.UnixNano()
}

// nullNanos is nanos(t), or NULL for the zero time.
func nullNanos(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return nanos(t)
}

// fromNanos is the UTC time of a nullable nanosecond column; NULL is the zero time.
func fromNanos(n sql.NullInt64) time.Time {
	if !n.Valid {
		return time.Time{}
	}
	return time.Unix(0, n.Int64).UTC()
}

// stamp is t as a timestamp column gives it back: UTC, or zero.
func stamp(t time.Time) time.Time {
	if t.IsZero() {
		return time.Time{}
	}
	return time.Unix(0, nanos(t)).UTC()
}

// formatDate writes a run date as RFC 3339 with its own offset.
func formatDate(t time.Time) string {
	return t.Format(time.RFC3339Nano)
}

// parseDate reads a run date back; the result carries the stored offset.
func parseDate(s string) (time.Time, error) {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("store: bad stored date %q: %w", s, err)
	}
	return t, nil
}
