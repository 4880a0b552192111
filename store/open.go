package store

import (
	"context"
	"errors"
	"os"
	"strings"
)

// DefaultDSN is the state used when neither --state nor REWIND_STATE names
// one: a SQLite file under the working directory.
const DefaultDSN = "sqlite:.rewind/state.db"

// EnvState is the environment variable that names the state when --state is not given.
const EnvState = "REWIND_STATE"

// ErrPostgresUnavailable is wrapped by the error of Open when the PostgreSQL
// server of a postgres:// DSN cannot be reached (together with the driver's
// error).
var ErrPostgresUnavailable = errors.New("postgres state is unavailable")

// DSNFromEnv returns the state DSN to use: flag if it is set, else
// $REWIND_STATE, else DefaultDSN.
func DSNFromEnv(flag string) string {
	if flag != "" {
		return flag
	}
	if env := os.Getenv(EnvState); env != "" {
		return env
	}
	return DefaultDSN
}

// Open opens the state named by dsn and brings its schema up to date.
//
//	""                    the default, sqlite:.rewind/state.db
//	sqlite:PATH           a SQLite file (parent directories are created)
//	PATH                  likewise
//	postgres://...        PostgreSQL (postgresql:// too)
func Open(ctx context.Context, dsn string) (Store, error) {
	if IsPostgres(dsn) {
		b, err := openPostgres(ctx, dsn) // its errors name the state, without credentials
		if err != nil {
			return nil, err
		}
		return &sqlStore{b: b, d: &postgresDialect}, nil
	}
	path, _ := SQLitePath(dsn)
	b, err := openSQLite(ctx, path)
	if err != nil {
		return nil, err
	}
	return &sqlStore{b: b, d: &sqliteDialect}, nil
}

// IsPostgres reports whether dsn names a PostgreSQL state.
func IsPostgres(dsn string) bool {
	lower := strings.ToLower(dsn)
	return strings.HasPrefix(lower, "postgres://") || strings.HasPrefix(lower, "postgresql://")
}

// SQLitePath returns the file a SQLite DSN names ("" is the default state;
// "sqlite:PATH", "sqlite://PATH" and a plain PATH are files), and false for a
// PostgreSQL DSN. Logs and run directories live beside that file.
func SQLitePath(dsn string) (string, bool) {
	if IsPostgres(dsn) {
		return "", false
	}
	if dsn == "" {
		dsn = DefaultDSN
	}
	lower := strings.ToLower(dsn)
	switch {
	case strings.HasPrefix(lower, "sqlite://"):
		return dsn[len("sqlite://"):], true
	case strings.HasPrefix(lower, "sqlite:"):
		return dsn[len("sqlite:"):], true
	}
	return dsn, true
}

// redact hides the password of a URL-style DSN in error messages: the one
// in the user information and a password= query parameter.
func redact(dsn string) string {
	scheme, rest, ok := strings.Cut(dsn, "://")
	if !ok {
		return dsn
	}
	if userinfo, host, ok := strings.Cut(rest, "@"); ok && !strings.Contains(userinfo, "/") {
		if user, _, hasPass := strings.Cut(userinfo, ":"); hasPass {
			rest = user + ":xxxxx@" + host
		}
	}
	if path, query, ok := strings.Cut(rest, "?"); ok {
		params := strings.Split(query, "&")
		for i, kv := range params {
			if k, _, _ := strings.Cut(kv, "="); strings.EqualFold(k, "password") {
				params[i] = k + "=xxxxx"
			}
		}
		rest = path + "?" + strings.Join(params, "&")
	}
	return scheme + "://" + rest
}
