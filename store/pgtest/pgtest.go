// Package pgtest gives tests a fresh PostgreSQL database each. The server is
// the one $REWIND_TEST_POSTGRES names (a postgres:// URL of a role that may
// CREATE DATABASE, e.g. the one .ci/postgres.sh starts). Without it, tests
// that ask for a database are skipped, except in CI ($CI set), where they
// fail: CI must not pass by skipping the PostgreSQL backend.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// EnvServer names the server the tests create their databases on.
const EnvServer = "REWIND_TEST_POSTGRES"

// Server returns $REWIND_TEST_POSTGRES, skipping the test when it is unset
// outside CI and failing it in CI.
func Server(t testing.TB) string {
	t.Helper()
	dsn := os.Getenv(EnvServer)
	if dsn == "" {
		if os.Getenv("CI") != "" {
			t.Fatalf("pgtest: %s is not set in CI: start a server with .ci/postgres.sh", EnvServer)
		}
		t.Skipf("pgtest: %s is not set: no PostgreSQL server to test on (eval \"$(.ci/postgres.sh start)\")", EnvServer)
	}
	return dsn
}

var unsafe = regexp.MustCompile(`[^a-z0-9]+`)

// DSN creates an empty database for this test on the server and returns its
// DSN; the database is dropped when the test ends.
func DSN(t testing.TB) string {
	t.Helper()
	server := Server(t)
	u, err := url.Parse(server)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		t.Fatalf("pgtest: %s must be a postgres:// URL: %v", EnvServer, redact(server))
	}
	var rnd [6]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	prefix := strings.Trim(unsafe.ReplaceAllString(strings.ToLower(t.Name()), "_"), "_")
	if len(prefix) > 36 {
		prefix = prefix[len(prefix)-36:]
	}
	name := "rw_" + prefix + "_" + hex.EncodeToString(rnd[:])

	if err := admin(server, func(ctx context.Context, conn *pgx.Conn) error {
		create := "CREATE DATABASE " + pgx.Identifier{name}.Sanitize()
		// FILE_COPY (PostgreSQL 15+) copies template1's files instead of
		// writing every page to the WAL: several times faster on a test
		// server (wal_level=minimal, fsync=off), where the WAL is the cost.
		var version int
		if err := conn.QueryRow(ctx, "SELECT current_setting('server_version_num')::int").Scan(&version); err == nil && version >= 150000 {
			create += " STRATEGY = FILE_COPY"
		}
		_, err := conn.Exec(ctx, create)
		return err
	}); err != nil {
		t.Fatalf("pgtest: create database %s on %s: %v", name, redact(server), err)
	}
	t.Cleanup(func() {
		if err := admin(server, func(ctx context.Context, conn *pgx.Conn) error {
			_, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
			return err
		}); err != nil {
			t.Errorf("pgtest: drop database %s: %v", name, err)
		}
	})
	db := *u
	db.Path = "/" + name
	db.RawPath = ""
	return db.String()
}

// admin runs fn on a connection to the server's own database.
func admin(server string, fn func(ctx context.Context, conn *pgx.Conn) error) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, server)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer conn.Close(context.Background())
	return fn(ctx, conn)
}

// redact hides the password of a URL.
func redact(dsn string) string {
	u, err := url.Parse(dsn)
	if err != nil {
		return "(unparsable DSN)"
	}
	return u.Redacted()
}
