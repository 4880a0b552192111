package store_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	_ "github.com/mattn/go-sqlite3"

	"github.com/rewind-dev/rewind/store"
	"github.com/rewind-dev/rewind/store/storetest"
)

func openSQLite(t testing.TB, path string) store.Store {
	t.Helper()
	st, err := store.Open(context.Background(), "sqlite:"+path)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return st
}

func TestSQLiteConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store {
		return openSQLite(t, filepath.Join(t.TempDir(), "state.db"))
	})
}

// Two stores on one file behave as two rewind processes on one state.
func TestSQLiteTwoProcessesClaim(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	a, b := openSQLite(t, path), openSQLite(t, path)
	defer a.Close()
	defer b.Close()
	storetest.ClaimRace(t, []store.Store{a, b}, 4)
}

// rawDB opens the state file directly, as an operator with sqlite3 would.
func rawDB(t *testing.T, path string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite3", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func TestSQLiteWAL(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	st := openSQLite(t, path)
	defer st.Close()
	var mode string
	if err := rawDB(t, path).QueryRow("PRAGMA journal_mode").Scan(&mode); err != nil {
		t.Fatal(err)
	}
	if mode != "wal" {
		t.Errorf("journal_mode = %q, want wal", mode)
	}
}

func TestSQLiteMigrations(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	ctx := context.Background()
	st := openSQLite(t, path)
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	if _, err := st.UpsertPipeline(ctx, store.UpsertPipelineParams{Name: "p", Hash: "h", Now: now}); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	// Reopening applies nothing twice and keeps the data.
	for i := 0; i < 2; i++ {
		st := openSQLite(t, path)
		if p, err := st.GetPipeline(ctx, "p"); err != nil || p.Hash != "h" {
			t.Errorf("reopen %d: GetPipeline = %+v, %v", i, p, err)
		}
		if err := st.Close(); err != nil {
			t.Fatal(err)
		}
	}
	db := rawDB(t, path)
	rows, err := db.Query("SELECT version, name FROM schema_migrations ORDER BY version")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var versions []string
	for rows.Next() {
		var v int
		var name string
		if err := rows.Scan(&v, &name); err != nil {
			t.Fatal(err)
		}
		versions = append(versions, name)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(versions) == 0 || versions[0] != "0001_init" {
		t.Errorf("schema_migrations = %v, want 0001_init first", versions)
	}
	entries, err := os.ReadDir("migrations")
	if err != nil {
		t.Fatal(err)
	}
	if len(versions) != len(entries) {
		t.Errorf("%d migrations recorded, %d embedded", len(versions), len(entries))
	}
}

func TestSQLiteRefusesNewerSchema(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	if err := openSQLite(t, path).Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := rawDB(t, path).Exec("INSERT INTO schema_migrations (version, name, applied_at) VALUES (9999, '9999_future', 0)"); err != nil {
		t.Fatal(err)
	}
	_, err := store.Open(context.Background(), "sqlite:"+path)
	if err == nil || !strings.Contains(err.Error(), "newer") {
		t.Errorf("Open of a newer schema = %v, want an upgrade error", err)
	}
}

func TestSQLiteConstraints(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	openSQLite(t, path).Close()
	db := rawDB(t, path)
	bad := []string{
		"INSERT INTO runs (pipeline, logical_date, logical_unix, ds, data_interval_start, data_interval_end, kind, state) VALUES ('p', 'x', 1, 'd', 'x', 'x', 'nightly', 'queued')",
		"INSERT INTO runs (pipeline, logical_date, logical_unix, ds, data_interval_start, data_interval_end, kind, state) VALUES ('p', 'x', 1, 'd', 'x', 'x', 'manual', 'done')",
		"INSERT INTO task_instances (run_id, task, state) VALUES (12345, 't', 'scheduled')",
	}
	if _, err := db.Exec("PRAGMA foreign_keys = on"); err != nil {
		t.Fatal(err)
	}
	for _, q := range bad {
		if _, err := db.Exec(q); err == nil {
			t.Errorf("accepted: %s", q)
		}
	}
}

func TestOpenDSN(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	for _, dsn := range []string{
		"sqlite:" + filepath.Join(dir, "a", "b", "state.db"),
		filepath.Join(dir, "plain", "state.db"),
		"sqlite://" + filepath.Join(dir, "url", "state.db"),
		"sqlite:" + filepath.Join(dir, "with space", "50% done?", "state.db"),
	} {
		st, err := store.Open(ctx, dsn)
		if err != nil {
			t.Errorf("Open(%q): %v", dsn, err)
			continue
		}
		st.Close()
	}
	for _, path := range []string{
		filepath.Join(dir, "a", "b", "state.db"),
		filepath.Join(dir, "url", "state.db"),
		filepath.Join(dir, "with space", "50% done?", "state.db"),
	} {
		if _, err := os.Stat(path); err != nil {
			t.Errorf("state file not where the DSN says: %v", err)
		}
	}
	for _, dsn := range []string{"postgres://u:secret@db/rewind", "postgresql://db/rewind"} {
		st, err := store.Open(ctx, dsn)
		if !errors.Is(err, store.ErrPostgresUnavailable) || st != nil {
			t.Errorf("Open(%q) = %v, %v; want ErrPostgresUnavailable", dsn, st, err)
		}
		if err != nil && strings.Contains(err.Error(), "secret") {
			t.Errorf("error shows the password: %v", err)
		}
	}
}

func TestOpenDefault(t *testing.T) {
	t.Chdir(t.TempDir())
	st, err := store.Open(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := os.Stat(filepath.Join(".rewind", "state.db")); err != nil {
		t.Errorf("default state not at .rewind/state.db: %v", err)
	}
}

func TestSQLitePath(t *testing.T) {
	cases := []struct {
		dsn, path string
		ok        bool
	}{
		{"", ".rewind/state.db", true},
		{"sqlite:state/x.db", "state/x.db", true},
		{"sqlite:///var/lib/rewind/state.db", "/var/lib/rewind/state.db", true},
		{"/tmp/state.db", "/tmp/state.db", true},
		{"postgres://db/rewind", "", false},
		{"POSTGRESQL://db/rewind", "", false},
	}
	for _, c := range cases {
		if path, ok := store.SQLitePath(c.dsn); path != c.path || ok != c.ok {
			t.Errorf("SQLitePath(%q) = %q, %v; want %q, %v", c.dsn, path, ok, c.path, c.ok)
		}
	}
}

func TestDSNFromEnv(t *testing.T) {
	t.Setenv(store.EnvState, "")
	if got := store.DSNFromEnv(""); got != store.DefaultDSN {
		t.Errorf("no flag, no env: %q", got)
	}
	t.Setenv(store.EnvState, "sqlite:/tmp/x.db")
	if got := store.DSNFromEnv(""); got != "sqlite:/tmp/x.db" {
		t.Errorf("env: %q", got)
	}
	if got := store.DSNFromEnv("postgres://db/rewind"); got != "postgres://db/rewind" {
		t.Errorf("flag wins: %q", got)
	}
}

// Two rewinds that open a new state at the same moment (cron overlapping
// itself on the first night) both succeed.
func TestSQLiteConcurrentOpenOfNewState(t *testing.T) {
	for i := range 20 {
		path := filepath.Join(t.TempDir(), fmt.Sprintf("state-%d.db", i))
		var wg sync.WaitGroup
		errs := make([]error, 4)
		for j := range errs {
			wg.Go(func() {
				st, err := store.Open(context.Background(), "sqlite:"+path)
				if err == nil {
					err = st.Close()
				}
				errs[j] = err
			})
		}
		wg.Wait()
		for _, err := range errs {
			if err != nil {
				t.Fatalf("concurrent open: %v", err)
			}
		}
	}
}
