package store

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
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

// sqliteDB is the SQLite backend. Writes go through one connection
// (SQLite has one writer at a time; queuing in database/sql is cheaper than
// spinning on SQLITE_BUSY), and write transactions begin IMMEDIATE so that
// two processes on the same file wait for each other under busy_timeout
// instead of failing on a lock upgrade. Reads use a separate pool: in WAL
// mode they see the last committed state without blocking the writer.
type sqliteDB struct {
	path string
	w    *sql.DB
	r    *sql.DB
	// tx is set on the view that InTx hands to its function: every
	// operation then runs inside that transaction, under a savepoint.
	tx *sql.Tx
	// fence is set on the view that Fenced returns: every write
	// transaction checks it first.
	fence *fence
}

var _ backend = (*sqliteDB)(nil)

// sqliteFenceSQL reads a Fenced view's lease row. It runs under the write
// lock that the transaction holds from BEGIN IMMEDIATE, so no takeover can
// come between the check and the write.
const sqliteFenceSQL = "SELECT 1 FROM leases WHERE name = ? AND holder = ? AND generation = ?"

// sqliteParams are the connection settings every connection gets.
const sqliteParams = "_busy_timeout=10000&_journal_mode=WAL&_synchronous=NORMAL&_foreign_keys=on&_stmt_cache_size=64"

func openSQLite(ctx context.Context, path string) (*sqliteDB, error) {
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
func connectSQLite(ctx context.Context, path, abs string) (*sqliteDB, error) {
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

	s := &sqliteDB{path: path, w: w, r: r}
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

func (s *sqliteDB) init(ctx context.Context) error {
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
func (s *sqliteDB) Close() error {
	return errors.Join(s.w.Close(), s.r.Close())
}

// write runs fn in an IMMEDIATE transaction on the writer connection and
// commits it if fn returns nil. Inside InTx it runs under a savepoint of the
// enclosing transaction instead, so that a failed operation leaves nothing
// half-done while the others of the batch stand.
// writeSet is write: a savepoint costs no round trip here.
func (s *sqliteDB) writeSet(ctx context.Context, fn func(tx querier) error) error {
	return s.write(ctx, fn)
}

func (s *sqliteDB) write(ctx context.Context, fn func(tx querier) error) error {
	if s.tx != nil {
		if _, err := s.tx.ExecContext(ctx, "SAVEPOINT op"); err != nil {
			return fmt.Errorf("store: savepoint: %w", err)
		}
		err := s.fence.check(ctx, s.tx, sqliteFenceSQL)
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
	err = s.fence.check(ctx, tx, sqliteFenceSQL)
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
func (s *sqliteDB) read(ctx context.Context, fn func(tx querier) error) error {
	if s.tx != nil {
		return fn(s.tx)
	}
	return readTx(ctx, s.r, nil, fn)
}

// inTx runs fn with a view whose operations share one transaction,
// committed when fn returns nil and rolled back otherwise.
func (s *sqliteDB) inTx(ctx context.Context, fn func(backend) error) error {
	if s.tx != nil {
		return fn(s)
	}
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("store: begin: %w", err)
	}
	if err := s.fence.check(ctx, tx, sqliteFenceSQL); err != nil {
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

// fenced returns a view of the backend whose write transactions check f.
func (s *sqliteDB) fenced(f fence) backend {
	v := *s
	v.fence = &f
	return &v
}

// leaseMoved: SQLite's writer holds the whole database, so a moved lease
// needs no bookkeeping.
func (s *sqliteDB) leaseMoved() {}

// rq is where a single-statement read goes: the enclosing transaction, or
// the reader pool.
func (s *sqliteDB) rq() querier {
	if s.tx != nil {
		return s.tx
	}
	return s.r
}

// migrate brings the SQLite file's schema up to date.
func (s *sqliteDB) migrate(ctx context.Context) error {
	return runMigrations(ctx, migrationTarget{
		dialect: sqliteDialect,
		where:   "sqlite " + s.path,
		db:      s.w,
		write:   s.write,
	})
}
