package store

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"math"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/mattn/go-sqlite3"
)

//go:embed migrations/*.sql
var migrationFS embed.FS

// sqliteStore is the SQLite backend. Writes go through one connection
// (SQLite has one writer at a time; queuing in database/sql is cheaper than
// spinning on SQLITE_BUSY), and write transactions begin IMMEDIATE so that
// two processes on the same file wait for each other under busy_timeout
// instead of failing on a lock upgrade. Reads use a separate pool: in WAL
// mode they see the last committed state without blocking the writer.
type sqliteStore struct {
	path string
	w    *sql.DB
	r    *sql.DB
	// tx is set on the Store that InTx hands to its function: every
	// operation then runs inside that transaction, under a savepoint.
	tx *sql.Tx
	// fence is set on the Store that Fenced returns: every write
	// transaction checks it first (sqlite_fence.go).
	fence *fence
}

var _ Store = (*sqliteStore)(nil)

// sqliteParams are the connection settings every connection gets.
const sqliteParams = "_busy_timeout=10000&_journal_mode=WAL&_synchronous=NORMAL&_foreign_keys=on&_stmt_cache_size=64"

func openSQLite(ctx context.Context, path string) (*sqliteStore, error) {
	if path == "" {
		return nil, errors.New("store: sqlite: empty path")
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("store: sqlite %s: %w", path, err)
	}
	if err := os.MkdirAll(filepath.Dir(abs), 0o755); err != nil {
		return nil, fmt.Errorf("store: sqlite %s: create directory: %w", path, err)
	}
	// A file at the path must be a rewind state; a new one is created under
	// a temporary name and linked into place (sqlite_open.go).
	if err := ensureStateFile(ctx, path, abs); err != nil {
		return nil, err
	}
	return connectSQLite(ctx, path, abs)
}

// sqliteURI is the file: URI of an absolute path.
func sqliteURI(abs string) string {
	return "file:" + (&url.URL{Path: abs}).EscapedPath()
}

// connectSQLite opens the writer and reader pools on the file at abs and
// brings its schema up to date.
func connectSQLite(ctx context.Context, path, abs string) (*sqliteStore, error) {
	uri := sqliteURI(abs)

	w, err := sql.Open("sqlite3", uri+"?"+sqliteParams+"&_txlock=immediate&_cache_size=-32768")
	if err != nil {
		return nil, fmt.Errorf("store: sqlite %s: open: %w", path, err)
	}
	w.SetMaxOpenConns(1)
	w.SetMaxIdleConns(1)
	w.SetConnMaxLifetime(0)
	w.SetConnMaxIdleTime(0)

	r, err := sql.Open("sqlite3", uri+"?"+sqliteParams+"&_txlock=deferred")
	if err != nil {
		_ = w.Close()
		return nil, fmt.Errorf("store: sqlite %s: open: %w", path, err)
	}
	n := max(4, runtime.GOMAXPROCS(0))
	r.SetMaxOpenConns(n)
	r.SetMaxIdleConns(n)

	s := &sqliteStore{path: path, w: w, r: r}
	// Two rewinds opening a new state at once race to switch it to WAL;
	// SQLite reports that as busy without calling the busy handler, so
	// initialisation retries for a while.
	for attempt := 0; ; attempt++ {
		err = s.init(ctx)
		if err == nil {
			return s, nil
		}
		if !isBusy(err) || attempt == 100 {
			_ = s.Close()
			return nil, err
		}
		select {
		case <-ctx.Done():
			_ = s.Close()
			return nil, ctx.Err()
		case <-time.After(time.Duration(10+attempt) * time.Millisecond):
		}
	}
}

// isBusy reports whether err is SQLite's "database is locked/busy".
func isBusy(err error) bool {
	var se sqlite3.Error
	if errors.As(err, &se) {
		return se.Code == sqlite3.ErrBusy || se.Code == sqlite3.ErrLocked
	}
	return false
}

func (s *sqliteStore) init(ctx context.Context) error {
	for _, db := range []*sql.DB{s.w, s.r} {
		var mode string
		if err := db.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&mode); err != nil {
			return fmt.Errorf("store: sqlite %s: read journal mode: %w", s.path, err)
		}
		if !strings.EqualFold(mode, "wal") {
			return fmt.Errorf("store: sqlite %s: journal mode is %q, want \"wal\" (is the file on a filesystem without shared memory?)", s.path, mode)
		}
	}
	var fk int
	if err := s.w.QueryRowContext(ctx, "PRAGMA foreign_keys").Scan(&fk); err != nil {
		return fmt.Errorf("store: sqlite %s: read foreign_keys: %w", s.path, err)
	}
	if fk != 1 {
		return fmt.Errorf("store: sqlite %s: foreign keys are off", s.path)
	}
	return s.migrate(ctx)
}

// migration is one embedded schema change, NNNN_name.sql.
type migration struct {
	version int
	name    string
	sql     string
}

// Close closes both connection pools.
func (s *sqliteStore) Close() error {
	return errors.Join(s.w.Close(), s.r.Close())
}

// write runs fn in an IMMEDIATE transaction on the writer connection and
// commits it if fn returns nil. Inside InTx it runs under a savepoint of the
// enclosing transaction instead, so that a failed operation leaves nothing
// half-done while the others of the batch stand.
func (s *sqliteStore) write(ctx context.Context, fn func(tx *sql.Tx) error) error {
	if s.tx != nil {
		if _, err := s.tx.ExecContext(ctx, "SAVEPOINT op"); err != nil {
			return fmt.Errorf("store: savepoint: %w", err)
		}
		err := s.checkFence(ctx, s.tx)
		if err == nil {
			err = fn(s.tx)
		}
		if err != nil {
			_, _ = s.tx.ExecContext(ctx, "ROLLBACK TO op")
			_, _ = s.tx.ExecContext(ctx, "RELEASE op")
			return err
		}
		if _, err := s.tx.ExecContext(ctx, "RELEASE op"); err != nil {
			return fmt.Errorf("store: release savepoint: %w", err)
		}
		return nil
	}
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("store: begin: %w", err)
	}
	err = s.checkFence(ctx, tx)
	if err == nil {
		err = fn(tx)
	}
	if err != nil {
		_ = tx.Rollback()
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("store: commit: %w", err)
	}
	return nil
}

// read runs fn in a read transaction: one consistent snapshot. Inside InTx
// it reads the enclosing transaction, writes of the batch included.
func (s *sqliteStore) read(ctx context.Context, fn func(tx *sql.Tx) error) error {
	if s.tx != nil {
		return fn(s.tx)
	}
	tx, err := s.r.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("store: begin read: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	return fn(tx)
}

// InTx runs fn with a Store whose operations share one transaction,
// committed when fn returns nil and rolled back otherwise.
func (s *sqliteStore) InTx(ctx context.Context, fn func(Store) error) error {
	if s.tx != nil {
		return fn(s)
	}
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("store: begin: %w", err)
	}
	if err := s.checkFence(ctx, tx); err != nil {
		_ = tx.Rollback()
		return err
	}
	inner := *s
	inner.tx = tx
	if err := fn(&inner); err != nil {
		_ = tx.Rollback()
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("store: commit: %w", err)
	}
	return nil
}

// missingOr tells a guarded update that touched no row apart: ErrNotFound
// when the row does not exist, ErrConflict when it is in another state.
func missingOr(ctx context.Context, tx *sql.Tx, table string, id int64) error {
	var one int
	err := tx.QueryRowContext(ctx, "SELECT 1 FROM "+table+" WHERE id = ?", id).Scan(&one)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return ErrNotFound
	case err != nil:
		return err
	}
	return ErrConflict
}

// Time encoding.

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

// placeholders returns "?, ?, ?" for n values.
func placeholders(n int) string {
	if n <= 0 {
		return ""
	}
	return strings.Repeat("?, ", n-1) + "?"
}

// querier is what *sql.DB and *sql.Tx share.
type querier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// rq is where a single-statement read goes: the enclosing transaction, or
// the reader pool.
func (s *sqliteStore) rq() querier {
	if s.tx != nil {
		return s.tx
	}
	return s.r
}
