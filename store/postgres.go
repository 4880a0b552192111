package store

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"
	"golang.org/x/sys/unix"
)

// pgDB is the PostgreSQL backend, on database/sql with pgx's stdlib
// driver: the same *sql.Tx, scanning and migration runner as the SQLite
// backend, pgx underneath for the protocol, arrays (= ANY($1)) and error codes.
//
// Transactions run at READ COMMITTED. What SQLite gets from its single
// writer, this backend gets from row locks and a few advisory locks:
//   - every transition is a guarded UPDATE ... WHERE state IN (...)
//     RETURNING: of two writers on one row the second waits, re-checks the
//     guard on the committed row and touches nothing;
//   - ClaimReady takes pg_advisory_xact_lock per pool (in key order), then
//     counts the running attempts of the pool and claims: two claimers
//     never exceed a pool;
//   - a Fenced store reads its lease row FOR SHARE in every write
//     transaction: a takeover waits until the fenced write has committed;
//   - the guards that read a run's task instances (FinishRun, RequestCommit,
//     CompleteCommit) read them FOR SHARE, so that a concurrent change to
//     those task instances waits for the decision or the decision waits for
//     the change;
//   - migrations run under pg_advisory_xact_lock, so concurrent openers of
//     a new database serialize.
//
// Serialization failures and deadlocks are retried for a single operation
// and reported as ErrConflict inside InTx; unique violations are ErrConflict.
//
// database/sql rather than pgxpool: the backends then share the migration
// runner, the scanning helpers and the shape of every operation, and the
// pool, its health checks and its retries on a broken connection come with
// database/sql; pgx still does the protocol, so arrays, error codes and the
// statement cache are pgx's.
type pgDB struct {
	db    *sql.DB
	where string // "postgres HOST/DB" for errors, without the password
	// tx is set on the Store that InTx hands to its function: every
	// operation then runs inside that transaction, under a savepoint.
	tx *pgTx
	// fence, when set, is checked at the start of every write transaction.
	fence *fence
	// txs is shared by the views of one InTx transaction (Fenced included).
	txs *pgTxState
}

// pgTxState is what one InTx transaction knows across its operations.
type pgTxState struct {
	// verified are the fences this transaction has checked outside any
	// savepoint that was rolled back: it holds their lease rows FOR SHARE
	// until it ends, so no one else can move those leases meanwhile, and
	// later operations need not check again. An operation of this
	// transaction that moves a lease (AcquireLease, ReleaseLease) forgets
	// them.
	verified map[fence]bool
	// moves counts the operations of this transaction that moved a lease.
	moves int
	// open: the savepoint of the last operation is still open (released
	// together with the next operation's SAVEPOINT, in one round trip).
	open bool
	// failed is the error of an operation run without a savepoint
	// (writeSet) that failed in the database: the transaction can only
	// roll back, and every later operation and InTx itself return it.
	failed error
}

// leaseMoved tells the transaction's state that a lease may have changed
// holder or generation in it.
func (s *pgDB) leaseMoved() {
	if s.txs != nil {
		clear(s.txs.verified)
		s.txs.moves++
	}
}

// checkFenceInTx checks s.fence inside the enclosing transaction unless
// this transaction holds it already; it returns whether it checked.
func (s *pgDB) checkFenceInTx(ctx context.Context) (checked bool, err error) {
	if s.fence == nil || s.txs.verified[*s.fence] {
		return false, nil
	}
	return true, s.fence.check(ctx, s.tx, pgFenceSQL)
}

var _ backend = (*pgDB)(nil)

// pgFenceSQL reads a Fenced view's lease row FOR SHARE: a takeover (an
// UPDATE of that row by AcquireLease) waits until the fenced transaction
// has ended, so none can come between the check and the commit.
const pgFenceSQL = "SELECT 1 FROM leases WHERE name = $1 AND holder = $2 AND generation = $3 FOR SHARE"

// Advisory lock keys: pg_advisory_xact_lock(pgLockSpace, key) with key a
// small constant or the FNV-32a hash of a name (pgPoolLockKey). Advisory
// locks are per database, so two states on one server never contend.
const (
	pgLockSpace    = 0x52574e44 // "RWND"
	pgLockMigrate  = 1
	pgPoolLockBase = "rewind.pool:"
)

// pgSessionDefaults are set on every connection unless the DSN sets them
// (?idle_in_transaction_session_timeout=0 turns that one off). A rewind
// that dies or freezes (SIGSTOP, a VM paused) inside a fenced transaction
// holds the lease row FOR SHARE: without them the server would keep that
// backend "idle in transaction", and the standby's takeover waiting behind
// it, until TCP notices, about two hours by the OS defaults.
//   - idle_in_transaction_session_timeout ends such a session (and its
//     locks) after 10 s; rewind's transactions never wait that long
//     between statements.
//   - lock_timeout bounds any wait for a lock (15 s), so no statement hangs
//     behind a holder that went away some other way.
//   - tcp_keepalives_* make the server notice a dead client machine in
//     about 11 s.
var pgSessionDefaults = map[string]string{
	"application_name":                    "rewind",
	"idle_in_transaction_session_timeout": "10s",
	"lock_timeout":                        "15s",
	"tcp_keepalives_idle":                 "5",
	"tcp_keepalives_interval":             "2",
	"tcp_keepalives_count":                "3",
}

// pgDialer dials the server with TCP keepalives (5 s idle, then every 2 s,
// 3 probes) and TCP_USER_TIMEOUT (15 s): a server that stops answering (a
// partition that drops packets, a dead machine) fails the calls on that
// connection within seconds instead of the OS's retransmission timeout of
// about 15 minutes.
func pgDialer() *net.Dialer {
	return &net.Dialer{
		KeepAliveConfig: net.KeepAliveConfig{Enable: true, Idle: 5 * time.Second, Interval: 2 * time.Second, Count: 3},
		Control: func(network, _ string, c syscall.RawConn) error {
			if !strings.HasPrefix(network, "tcp") {
				return nil
			}
			var serr error
			err := c.Control(func(fd uintptr) {
				serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT, int(pgUserTimeout/time.Millisecond))
			})
			return errors.Join(err, serr)
		},
	}
}

// pgUserTimeout is TCP_USER_TIMEOUT on connections to the server.
const pgUserTimeout = 15 * time.Second

// pgMaxConns bounds each Store's pool of connections.
func pgMaxConns() int { return max(4, min(16, 2*runtime.GOMAXPROCS(0))) }

func openPostgres(ctx context.Context, dsn string) (*pgDB, error) {
	where := "postgres " + pgWhere(dsn)
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("store: %s: parse DSN: %w", where, redactErr(err, dsn))
	}
	if cfg.ConnectTimeout == 0 {
		cfg.ConnectTimeout = 15 * time.Second
	}
	if cfg.RuntimeParams == nil {
		cfg.RuntimeParams = map[string]string{}
	}
	for name, value := range pgSessionDefaults {
		if _, ok := cfg.RuntimeParams[name]; !ok {
			cfg.RuntimeParams[name] = value
		}
	}
	cfg.DialFunc = pgDialer().DialContext
	// TIMESTAMP-free schema: every time is BIGINT nanoseconds, every date
	// RFC 3339 text, so the session time zone does not matter.
	db := stdlib.OpenDB(*cfg)
	n := pgMaxConns()
	db.SetMaxOpenConns(n)
	db.SetMaxIdleConns(n)
	db.SetConnMaxIdleTime(5 * time.Minute)
	s := &pgDB{db: db, where: where}
	if err := db.PingContext(ctx); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("store: %s: connect: %w", where, errors.Join(ErrPostgresUnavailable, redactErr(err, dsn)))
	}
	if err := s.migrate(ctx); err != nil {
		_ = db.Close()
		return nil, redactErr(err, dsn)
	}
	return s, nil
}

// pgWhere names the server and database of a DSN, without credentials.
func pgWhere(dsn string) string {
	u, err := url.Parse(dsn)
	if err != nil {
		return redact(dsn)
	}
	host := u.Host
	if host == "" {
		host = u.Query().Get("host")
	}
	return host + u.Path
}

// migrate brings the database's schema up to date under an advisory lock.
func (s *pgDB) migrate(ctx context.Context) error {
	return runMigrations(ctx, migrationTarget{
		dialect: postgresDialect,
		where:   s.where,
		db:      s.db,
		write: func(ctx context.Context, fn func(tx querier) error) error {
			tx, err := s.db.BeginTx(ctx, nil)
			if err != nil {
				return fmt.Errorf("store: %s: begin: %w", s.where, err)
			}
			if _, err := tx.ExecContext(ctx, "SELECT pg_advisory_xact_lock($1, $2)", pgLockSpace, pgLockMigrate); err != nil {
				_ = tx.Rollback()
				return fmt.Errorf("store: %s: migration lock: %w", s.where, err)
			}
			if err := fn(tx); err != nil {
				_ = tx.Rollback()
				return err
			}
			if err := tx.Commit(); err != nil {
				return fmt.Errorf("store: %s: commit: %w", s.where, err)
			}
			return nil
		},
	})
}

// Close closes the pool of connections.
func (s *pgDB) Close() error {
	return s.db.Close()
}

// pgRetries is how often a single operation is retried after a
// serialization failure or a deadlock.
const pgRetries = 8

// write runs fn in a transaction and commits it if fn returns nil (a
// serialization failure or deadlock runs it again, a few times). Inside InTx
// it runs under a savepoint of the enclosing transaction instead, so that a
// failed operation leaves nothing half-done while the others of the batch
// stand (PostgreSQL aborts the whole transaction on an error; rolling back
// to the savepoint makes it usable again).
func (s *pgDB) write(ctx context.Context, fn func(tx querier) error) error {
	if s.tx != nil {
		if s.txs.failed != nil {
			return s.txs.failed
		}
		// The previous operation's savepoint is released with this one's
		// creation: one round trip, and never more than one open.
		sp := "SAVEPOINT op"
		if s.txs.open {
			sp = "RELEASE SAVEPOINT op; SAVEPOINT op"
		}
		if _, err := s.tx.ExecContext(ctx, sp); err != nil {
			return fmt.Errorf("store: savepoint: %w", pgMap(err))
		}
		s.txs.open = true
		moves := s.txs.moves
		checked, err := s.checkFenceInTx(ctx)
		if err == nil {
			err = fn(s.tx)
		}
		if err != nil {
			// Undo this operation; the savepoint stays (empty) until the
			// next operation releases it or the transaction ends.
			if _, rerr := s.tx.ExecContext(ctx, "ROLLBACK TO SAVEPOINT op"); rerr != nil {
				return errors.Join(pgMap(err), fmt.Errorf("store: rollback to savepoint: %w", rerr))
			}
			return pgMap(err)
		}
		if checked && s.txs.moves == moves { // the lease row stays locked until the transaction ends
			s.txs.verified[*s.fence] = true
		}
		return nil
	}
	var err error
	for attempt := 0; ; attempt++ {
		err = s.writeOnce(ctx, fn)
		if err == nil || !pgRetryable(err) || attempt == pgRetries {
			return pgMap(err)
		}
		select {
		case <-ctx.Done():
			return pgMap(err)
		case <-time.After(time.Duration(1+attempt*attempt) * time.Millisecond):
		}
	}
}

// writeSet is write for an operation whose guards refuse by writing
// nothing and say so in its result, not as an error (the batch forms):
// inside InTx it runs without a savepoint of its own, one round trip less.
// A database error in it fails the enclosing transaction (see
// pgTxState.failed): nothing of that transaction stands.
func (s *pgDB) writeSet(ctx context.Context, fn func(tx querier) error) error {
	if s.tx == nil {
		return s.write(ctx, fn)
	}
	if s.txs.failed != nil {
		return s.txs.failed
	}
	moves := s.txs.moves
	checked, err := s.checkFenceInTx(ctx)
	if errors.Is(err, ErrFenced) {
		return err // a read that found another holder: nothing happened
	}
	if err == nil {
		err = fn(s.tx)
	}
	if err != nil {
		err = pgMap(err)
		s.txs.failed = fmt.Errorf("store: an earlier operation of the transaction failed: %w", err)
		return err
	}
	if checked && s.txs.moves == moves {
		s.txs.verified[*s.fence] = true
	}
	return nil
}

func (s *pgDB) writeOnce(ctx context.Context, fn func(tx querier) error) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("store: begin: %w", err)
	}
	committed := false
	defer func() {
		if !committed { // an error, or fn panicked
			_ = tx.Rollback()
		}
	}()
	if err := s.fence.check(ctx, tx, pgFenceSQL); err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		return err
	}
	committed = true
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("store: commit: %w", err)
	}
	return nil
}

// read runs fn on one snapshot (a read-only REPEATABLE READ transaction).
// Inside InTx it reads the enclosing transaction, writes of the batch
// included.
func (s *pgDB) read(ctx context.Context, fn func(tx querier) error) error {
	if s.tx != nil {
		return fn(s.tx)
	}
	return readTx(ctx, s.db, &sql.TxOptions{Isolation: sql.LevelRepeatableRead, ReadOnly: true}, fn)
}

// rq is where a single-statement read goes: the enclosing transaction, or
// the pool.
func (s *pgDB) rq() querier {
	if s.tx != nil {
		return s.tx
	}
	return s.db
}

// inTx runs fn with a view whose operations share one transaction,
// committed when fn returns nil and rolled back otherwise. The transaction
// begins with its first statement (see pgTx).
func (s *pgDB) inTx(ctx context.Context, fn func(backend) error) error {
	if s.tx != nil {
		return fn(s)
	}
	c, err := s.db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("store: begin: %w", pgMap(err))
	}
	defer c.Close()
	tx := &pgTx{c: c, unsent: true, fence: s.fence}
	done := false
	defer func() {
		if !done { // fn panicked: give the connection back clean
			tx.rollback()
		}
	}()
	inner := *s
	inner.tx = tx
	inner.txs = &pgTxState{verified: map[fence]bool{}}
	if s.fence != nil {
		inner.txs.verified[*s.fence] = true // checked with the BEGIN
	}
	err = fn(&inner)
	done = true
	switch {
	case tx.err != nil:
		// the BEGIN or the lease check failed: what the statements after
		// it said ("context canceled") is not the cause
		err = pgMap(tx.err)
	case inner.txs.failed != nil:
		// the first database error, not what a later statement of the
		// aborted transaction said of it
		err = inner.txs.failed
	}
	if err != nil {
		tx.rollback()
		if cerr := ctx.Err(); cerr != nil && errors.Is(err, driver.ErrBadConn) {
			// a statement sent after the operation ended (see canceled)
			err = fmt.Errorf("%w: %w", cerr, err)
		}
		return err
	}
	if err := tx.commit(ctx); err != nil {
		tx.rollback()
		if tx.err != nil {
			return pgMap(tx.err) // the lease check of an empty transaction
		}
		return fmt.Errorf("store: commit: %w", pgMap(err))
	}
	return nil
}

// fenced returns a view of the backend whose write transactions check f
// (reading its lease row FOR SHARE, see pgFenceSQL).
func (s *pgDB) fenced(f fence) backend {
	v := *s
	v.fence = &f
	return &v
}

// Errors.

// PostgreSQL error codes this backend tells apart.
const (
	pgUniqueViolation      = "23505"
	pgSerializationFailure = "40001"
	pgDeadlockDetected     = "40P01"
	pgDivisionByZero       = "22012"
)

func pgCode(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}

// pgRetryable reports whether a single operation may simply be run again.
func pgRetryable(err error) bool {
	switch pgCode(err) {
	case pgSerializationFailure, pgDeadlockDetected:
		return true
	}
	return false
}

// pgMap adds ErrConflict to serialization failures, deadlocks and unique
// violations that an operation did not already classify, keeping the
// driver's error in the chain.
func pgMap(err error) error {
	if err == nil || errors.Is(err, ErrConflict) || errors.Is(err, ErrNotFound) || errors.Is(err, ErrFenced) {
		return err
	}
	switch pgCode(err) {
	case pgSerializationFailure, pgDeadlockDetected, pgUniqueViolation:
		return fmt.Errorf("%w: %w", ErrConflict, err)
	}
	return err
}

func init() {
	unavailableClassifiers = append(unavailableClassifiers, pgClassify)
}

// pgClassify is IsUnavailable's PostgreSQL branch: it knows the errors of
// pgx and of this backend, and leaves every other error to the common rules.
func pgClassify(err error) (unavailable, known bool) {
	var pe *pgconn.PgError
	var ce *pgconn.ConnectError
	var pce *pgconn.ParseConfigError
	switch {
	case errors.As(err, &pce):
		return false, true // a malformed DSN: the caller's input, not the state
	case errors.As(err, &pe), errors.As(err, &ce), errors.Is(err, ErrPostgresUnavailable):
		return pgUnavailable(err), true
	}
	return false, false
}

// pgUnavailable reports whether err means the PostgreSQL state could not be
// read or written: the server could not be reached or the connection broke,
// or the server refused the statement for any reason but a constraint
// violation or a lost race (serialization failure, deadlock).
func pgUnavailable(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch {
		case strings.HasPrefix(pe.Code, "23"), pe.Code == pgSerializationFailure, pe.Code == pgDeadlockDetected:
			return false
		case pe.Code == "57014": // query_canceled: by our context, or by an operator
			return !errors.Is(err, context.Canceled)
		}
		return true
	}
	if errors.Is(err, ErrPostgresUnavailable) || errors.Is(err, driver.ErrBadConn) || errors.Is(err, sql.ErrConnDone) {
		return true
	}
	var ce *pgconn.ConnectError
	if errors.As(err, &ce) {
		return true
	}
	var ne net.Error
	if errors.As(err, &ne) {
		return true
	}
	var oe *net.OpError
	if errors.As(err, &oe) {
		return true
	}
	return errors.Is(err, io.ErrUnexpectedEOF) || pgconn.Timeout(err) || pgconn.SafeToRetry(err)
}

// redactErr hides the DSN's password wherever the driver's message shows it,
// keeping err in the chain.
func redactErr(err error, dsn string) error {
	if err == nil {
		return nil
	}
	u, perr := url.Parse(dsn)
	if perr != nil {
		return err
	}
	var secrets []string
	if u.User != nil {
		if pass, ok := u.User.Password(); ok && pass != "" {
			secrets = append(secrets, pass)
		}
	}
	if pass := u.Query().Get("password"); pass != "" {
		secrets = append(secrets, pass)
	}
	msg := err.Error()
	for _, sec := range secrets {
		if strings.Contains(msg, sec) {
			return &redactedError{err: err, secrets: secrets}
		}
	}
	return err
}

// redactedError is an error whose message must not show secrets.
type redactedError struct {
	err     error
	secrets []string
}

func (e *redactedError) Error() string {
	msg := e.err.Error()
	for _, sec := range e.secrets {
		msg = strings.ReplaceAll(msg, sec, "xxxxx")
	}
	return msg
}
func (e *redactedError) Unwrap() error { return e.err }
