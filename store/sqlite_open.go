package store

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/mattn/go-sqlite3"
)

// sqliteMagic is the first 16 bytes of every SQLite database file.
var sqliteMagic = []byte("SQLite format 3\x00")

// ensureStateFile makes sure that the file at abs is a rewind state, or
// creates one there. An existing file that is not one (empty, not a SQLite
// database, or a SQLite database with tables but no schema_migrations) is
// refused with ErrCorrupt and left untouched. A new state is initialised
// under a temporary name in the same directory and then link(2)ed to the
// path, so that the path never shows a half-made (or 0-byte) state; if
// another opener linked its state first, that one is used.
func ensureStateFile(ctx context.Context, path, abs string) error {
	for range 10 {
		fi, err := os.Stat(abs)
		if err == nil {
			return checkStateFile(ctx, path, abs, fi)
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("store: sqlite %s: %w", path, err)
		}
		linked, err := createStateFile(ctx, path, abs)
		if err != nil || linked {
			return err
		}
		// Someone else's state appeared at the path meanwhile: check it.
	}
	// The path exists for link(2) and not for stat(2): a dangling symlink.
	return fmt.Errorf("store: sqlite %s: cannot create the state: the path exists but cannot be opened (a dangling symlink?)", path)
}

// checkStateFile refuses a file that is not a rewind state, reading it
// only: the header bytes, then (for a SQLite database) its table list
// through a read-only connection that changes nothing in the file.
func checkStateFile(ctx context.Context, path, abs string, fi fs.FileInfo) error {
	if fi.IsDir() {
		return fmt.Errorf("store: sqlite %s: is a directory", path)
	}
	if fi.Size() == 0 {
		return fmt.Errorf("store: sqlite %s: empty file: %w", path, ErrCorrupt)
	}
	f, err := os.Open(abs)
	if err != nil {
		return fmt.Errorf("store: sqlite %s: %w", path, err)
	}
	head := make([]byte, 100) // the database header
	_, err = io.ReadFull(f, head)
	_ = f.Close()
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) || err == nil && !bytes.Equal(head[:len(sqliteMagic)], sqliteMagic) {
		return fmt.Errorf("store: sqlite %s: not a SQLite database: %w", path, ErrCorrupt)
	}
	if err != nil {
		return fmt.Errorf("store: sqlite %s: %w", path, err)
	}
	// A database in WAL mode (header bytes 18 and 19 are 2) with no
	// write-ahead log beside it is all in the file: read it as immutable,
	// which creates no -shm or -wal file. Otherwise a read-only connection
	// also sees what the log holds.
	mode := "mode=ro"
	if _, err := os.Stat(abs + "-wal"); head[18] == 2 && head[19] == 2 && errors.Is(err, fs.ErrNotExist) {
		mode = "immutable=1"
	}
	db, err := sql.Open("sqlite3", sqliteURI(abs)+"?"+mode+"&_busy_timeout=10000")
	if err != nil {
		return fmt.Errorf("store: sqlite %s: open: %w", path, err)
	}
	defer db.Close()
	var tables, migrations int
	err = db.QueryRowContext(ctx, `
		SELECT COUNT(*), COALESCE(SUM(CASE WHEN name = 'schema_migrations' THEN 1 ELSE 0 END), 0)
		FROM sqlite_master WHERE type = 'table'`).Scan(&tables, &migrations)
	var se sqlite3.Error
	if errors.As(err, &se) && (se.Code == sqlite3.ErrNotADB || se.Code == sqlite3.ErrCorrupt) {
		return fmt.Errorf("store: sqlite %s: %v: %w", path, err, ErrCorrupt)
	}
	if err != nil {
		return fmt.Errorf("store: sqlite %s: read schema: %w", path, err)
	}
	if tables > 0 && migrations == 0 {
		return fmt.Errorf("store: sqlite %s: a SQLite database with %d tables but no schema_migrations: %w", path, tables, ErrCorrupt)
	}
	return nil
}

// createStateFile initialises a new state under a temporary name next to
// abs and links it to abs. linked is false when a file appeared at abs
// first (the temporary state is then removed).
func createStateFile(ctx context.Context, path, abs string) (linked bool, err error) {
	dir, base := filepath.Split(abs)
	tmp, err := os.CreateTemp(dir, "."+base+".new-*")
	if err != nil {
		return false, fmt.Errorf("store: sqlite %s: create: %w", path, err)
	}
	tmpPath := tmp.Name()
	defer removeSQLiteFiles(tmpPath)
	if err := tmp.Close(); err != nil {
		return false, fmt.Errorf("store: sqlite %s: create: %w", path, err)
	}
	s, err := connectSQLite(ctx, path, tmpPath)
	if err != nil {
		return false, err
	}
	// Closing the last connection checkpoints the WAL into the file and
	// removes it: the file alone is then the whole state.
	if err := s.Close(); err != nil {
		return false, fmt.Errorf("store: sqlite %s: close new state: %w", path, err)
	}
	if fi, err := os.Stat(tmpPath + "-wal"); err == nil && fi.Size() > 0 {
		return false, fmt.Errorf("store: sqlite %s: new state kept a write-ahead log after closing", path)
	}
	err = os.Link(tmpPath, abs)
	if errors.Is(err, fs.ErrExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("store: sqlite %s: link new state into place: %w", path, err)
	}
	return true, nil
}

// removeSQLiteFiles removes a database file's name and its companions.
func removeSQLiteFiles(path string) {
	for _, suffix := range []string{"", "-wal", "-shm", "-journal"} {
		_ = os.Remove(path + suffix)
	}
}

func init() {
	unavailableClassifiers = append(unavailableClassifiers, sqliteUnavailable)
}

// sqliteUnavailable classifies SQLite's errors for IsUnavailable: every
// code but a constraint violation means the state could not be read or
// written (disk full, I/O, busy or locked past the timeout, corrupt, not a
// database, read-only, ...).
func sqliteUnavailable(err error) (unavailable, known bool) {
	var se sqlite3.Error
	if !errors.As(err, &se) {
		return false, false
	}
	return se.Code != sqlite3.ErrConstraint, true
}
