package store

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"io/fs"
	"net"
	"strings"
	"syscall"
)

// IsUnavailable reports whether err means that the state could not be read
// or written: a driver error (SQLite: any code but a constraint violation,
// e.g. disk full, I/O, locked or busy past the timeout, corrupt or not a
// database; PostgreSQL: connection failures and server errors other than
// integrity constraint violations), ErrCorrupt, a *fs.PathError, ENOSPC or
// EIO, or a network error. It is false for nil, ErrNotFound, ErrConflict,
// ErrFenced, context.Canceled and context.DeadlineExceeded, and for errors
// that are rewind's own (bad input, a newer schema). The CLI maps true to
// exit code 4.
func IsUnavailable(err error) bool {
	if err == nil {
		return false
	}
	for _, answered := range []error{ErrNotFound, ErrConflict, ErrFenced, context.Canceled, context.DeadlineExceeded} {
		if errors.Is(err, answered) {
			return false
		}
	}
	if errors.Is(err, ErrCorrupt) {
		return true
	}
	for _, classify := range unavailableClassifiers {
		if unavailable, known := classify(err); known {
			return unavailable
		}
	}
	// PostgreSQL (pgconn.PgError) and any other driver error with an
	// SQLSTATE: class 23 is an integrity constraint violation (unique,
	// check, foreign key, not null), the state answering; the rest is the
	// server failing to.
	var coded interface{ SQLState() string }
	if errors.As(err, &coded) {
		return !strings.HasPrefix(coded.SQLState(), "23")
	}
	if errors.Is(err, driver.ErrBadConn) || errors.Is(err, sql.ErrConnDone) ||
		errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EIO) {
		return true
	}
	var pathErr *fs.PathError
	if errors.As(err, &pathErr) {
		return true
	}
	var netErr net.Error
	return errors.As(err, &netErr)
}

// unavailableClassifiers are the backends' own tests for IsUnavailable: each
// returns known = false for an error it does not recognise. Backends append
// to it in an init function.
var unavailableClassifiers []func(err error) (unavailable, known bool)
