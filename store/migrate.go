package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Migrations are written once, in store/migrations/NNNN_name.sql, with a few
// tokens for what SQLite and PostgreSQL spell differently; a dialect renders
// them for its backend. Everything else in a migration must be SQL that both
// accept.

var tokenRE = regexp.MustCompile(`\{\{\s*([A-Za-z0-9_]*)\s*\}\}`)

// render replaces the tokens of a migration with d's spelling. An unknown
// token is an error, so that a typo cannot reach a database.
func (d dialect) render(src string) (string, error) {
	var bad []string
	out := tokenRE.ReplaceAllStringFunc(src, func(tok string) string {
		name := tokenRE.FindStringSubmatch(tok)[1]
		v, ok := d.tokens[name]
		if !ok {
			bad = append(bad, tok)
			return tok
		}
		return v
	})
	if len(bad) > 0 {
		return "", fmt.Errorf("store: %s: unknown migration token(s) %s", d.name, strings.Join(bad, ", "))
	}
	return out, nil
}

// schemaMigrationsDDL records which migrations a state has seen.
const schemaMigrationsDDL = `CREATE TABLE IF NOT EXISTS schema_migrations (
		version    {{int}} PRIMARY KEY,
		name       TEXT    NOT NULL,
		applied_at {{int}} NOT NULL
	) {{strict}}`

// migrationTarget is one backend's state as the migration runner sees it.
type migrationTarget struct {
	dialect dialect
	// where names the state in errors ("sqlite PATH", "postgres HOST/DB").
	where string
	// db runs the statements outside a migration's transaction.
	db querier
	// write runs fn in a write transaction and commits it when fn returns
	// nil. It must serialize concurrent openers of the same state (SQLite:
	// the write lock of BEGIN IMMEDIATE; PostgreSQL: pg_advisory_xact_lock).
	write func(ctx context.Context, fn func(tx querier) error) error
}

// loadMigrations reads the embedded migrations, ordered by version.
func loadMigrations() ([]migration, error) {
	entries, err := fs.ReadDir(migrationFS, "migrations")
	if err != nil {
		return nil, fmt.Errorf("store: read migrations: %w", err)
	}
	var ms []migration
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".sql") {
			continue
		}
		num, _, ok := strings.Cut(name, "_")
		if !ok {
			return nil, fmt.Errorf("store: migration %s: name is not NNNN_name.sql", name)
		}
		v, err := strconv.Atoi(num)
		if err != nil || v <= 0 {
			return nil, fmt.Errorf("store: migration %s: bad version %q", name, num)
		}
		body, err := fs.ReadFile(migrationFS, "migrations/"+name)
		if err != nil {
			return nil, fmt.Errorf("store: migration %s: %w", name, err)
		}
		ms = append(ms, migration{version: v, name: strings.TrimSuffix(name, ".sql"), sql: string(body)})
	}
	sort.Slice(ms, func(i, j int) bool { return ms[i].version < ms[j].version })
	for i := 1; i < len(ms); i++ {
		if ms[i].version == ms[i-1].version {
			return nil, fmt.Errorf("store: migrations %s and %s share version %d", ms[i-1].name, ms[i].name, ms[i].version)
		}
	}
	if len(ms) == 0 {
		return nil, errors.New("store: no migrations embedded")
	}
	return ms, nil
}

// runMigrations applies the embedded migrations that the state has not seen
// yet, each in its own transaction together with its schema_migrations row.
// Concurrent openers serialize on t.write and skip what the other one
// applied.
func runMigrations(ctx context.Context, t migrationTarget) error {
	ms, err := loadMigrations()
	if err != nil {
		return err
	}
	ddl, err := t.dialect.render(schemaMigrationsDDL)
	if err != nil {
		return err
	}
	// PostgreSQL: two openers of a new database may race on CREATE TABLE IF
	// NOT EXISTS (a unique violation in pg_type), so it runs under the lock.
	if err := t.write(ctx, func(tx querier) error {
		_, err := tx.ExecContext(ctx, ddl)
		return err
	}); err != nil {
		return fmt.Errorf("store: %s: create schema_migrations: %w", t.where, err)
	}
	var newest sql.NullInt64
	if err := t.db.QueryRowContext(ctx, "SELECT MAX(version) FROM schema_migrations").Scan(&newest); err != nil {
		return fmt.Errorf("store: %s: read schema version: %w", t.where, err)
	}
	if known := ms[len(ms)-1].version; newest.Valid && int(newest.Int64) > known {
		return fmt.Errorf("store: %s: schema version %d is newer than this rewind knows (%d): upgrade rewind", t.where, newest.Int64, known)
	}
	for _, m := range ms {
		if err := applyMigration(ctx, t, m); err != nil {
			return err
		}
	}
	return nil
}

// applyMigration applies m unless schema_migrations says it was applied.
func applyMigration(ctx context.Context, t migrationTarget, m migration) error {
	body, err := t.dialect.render(m.sql)
	if err != nil {
		return fmt.Errorf("store: migration %s: %w", m.name, err)
	}
	d := t.dialect
	return t.write(ctx, func(tx querier) error {
		var one int
		err := tx.QueryRowContext(ctx, "SELECT 1 FROM schema_migrations WHERE version = "+d.ph(1), m.version).Scan(&one)
		if err == nil {
			return nil
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("store: migration %s: %w", m.name, err)
		}
		if _, err := tx.ExecContext(ctx, body); err != nil {
			return fmt.Errorf("store: migration %s: %w", m.name, err)
		}
		if _, err := tx.ExecContext(ctx,
			"INSERT INTO schema_migrations (version, name, applied_at) VALUES ("+d.ph(1)+", "+d.ph(2)+", "+d.ph(3)+")",
			m.version, m.name, time.Now().UnixNano()); err != nil {
			return fmt.Errorf("store: migration %s: record: %w", m.name, err)
		}
		return nil
	})
}
