package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
)

// pgTx is an InTx transaction on one connection of the pool, begun and
// ended by hand (BEGIN, COMMIT) rather than through database/sql, and begun
// lazily: BEGIN and the view's lease check go out with the transaction's
// first statement, and in the same round trip as all of them when those are
// a pipeline (see pipeline). On a loaded machine every round trip waits for
// the server's process to get a CPU; a scheduler pass, which opens its
// transaction with a pipeline of reads, saves three of them this way.
//
// A connection given back with a transaction still open (a ROLLBACK that
// failed) is discarded by the driver (stdlib.Conn.ResetSession), never
// reused.
type pgTx struct {
	c *sql.Conn
	// unsent: BEGIN has not been sent yet; fence is the lease to check with it.
	unsent bool
	fence  *fence
	// err is how the BEGIN or the lease check failed: every later
	// statement fails, and InTx returns err.
	err error
}

var _ querier = (*pgTx)(nil)

// begin sends BEGIN and the lease check, unless they went out already.
func (t *pgTx) begin(ctx context.Context) error {
	if !t.unsent || t.err != nil {
		return t.err
	}
	t.err = t.pipeline(ctx, nil)
	return t.err
}

// canceled is ctx cancelled, for a statement that must not reach the
// server: the driver fails it as a bad connection, database/sql closes that
// connection (the server rolls the transaction back), and InTx reports the
// cause (t.err or the context's error), never the bad connection.
func canceled(ctx context.Context) context.Context {
	c, cancel := context.WithCancel(ctx)
	cancel()
	return c
}

// A *sql.Conn, unlike a *sql.Tx, does not look at the context before a
// statement: these methods do, so that a cancelled or expired operation
// says so rather than that its connection went bad (unavailable).

func (t *pgTx) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := t.begin(ctx); err != nil {
		return nil, err
	}
	return t.c.ExecContext(ctx, query, args...)
}

func (t *pgTx) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := t.begin(ctx); err != nil {
		return nil, err
	}
	return t.c.QueryContext(ctx, query, args...)
}

// QueryRowContext can return its error only in a *sql.Row: when the context
// has ended or the BEGIN failed, the statement does not go out (canceled).
func (t *pgTx) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	if ctx.Err() != nil || t.begin(ctx) != nil {
		ctx = canceled(ctx)
	}
	return t.c.QueryRowContext(ctx, query, args...)
}

func (t *pgTx) PrepareContext(ctx context.Context, query string) (*sql.Stmt, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := t.begin(ctx); err != nil {
		return nil, err
	}
	return t.c.PrepareContext(ctx, query)
}

// pipeline runs stmts in the transaction in one round trip (a pgx batch),
// preceded by BEGIN and the lease check when they have not gone out yet.
// Each statement still takes its own snapshot when it starts, after the one
// before it ended, as when sent one by one. After an error the server skips
// the rest: the transaction can only roll back.
func (t *pgTx) pipeline(ctx context.Context, stmts []pipeStmt) error {
	if t.err != nil {
		return t.err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	first := t.unsent
	t.unsent = false
	err := t.c.Raw(func(dc any) error {
		pc := dc.(*stdlib.Conn).Conn()
		b := &pgx.Batch{}
		if first {
			b.Queue("BEGIN")
			if t.fence != nil {
				b.Queue(pgFencePipelineSQL, t.fence.lease, t.fence.holder, t.fence.generation)
			}
		}
		for _, st := range stmts {
			b.Queue(st.query, st.args...)
		}
		br := pc.SendBatch(ctx, b)
		err := pgBatchResults(br, first, t.fence, stmts)
		return errorsJoin(err, br.Close())
	})
	if first && err != nil && t.err == nil {
		t.err = err
	}
	return err
}

// pgFencePipelineSQL is pgFenceSQL for a pipeline: the lease row read FOR
// SHARE, and a division by zero when it is not there, so that the server
// skips the statements after it (a check that only returned no row would
// let them run, take their locks and hold them until the ROLLBACK).
const pgFencePipelineSQL = `SELECT 1 / (SELECT count(*)::int FROM (
	SELECT 1 FROM leases WHERE name = $1 AND holder = $2 AND generation = $3 FOR SHARE) AS held)`

// pgBatchResults reads a pipeline's results in order: BEGIN and the lease
// check when begun, then each statement's, its rows through its scan.
func pgBatchResults(br pgx.BatchResults, begun bool, f *fence, stmts []pipeStmt) error {
	if begun {
		if _, err := br.Exec(); err != nil {
			return fmt.Errorf("store: begin: %w", err)
		}
		if f != nil {
			_, err := br.Exec()
			switch {
			case pgCode(err) == pgDivisionByZero:
				return fmt.Errorf("store: lease %s generation %d of %s: %w", f.lease, f.generation, f.holder, ErrFenced)
			case err != nil:
				return fmt.Errorf("store: check lease %s: %w", f.lease, err)
			}
		}
	}
	for _, st := range stmts {
		if st.scan == nil {
			if _, err := br.Exec(); err != nil {
				return err
			}
			continue
		}
		rows, err := br.Query()
		if err := scanStmt(st, rows, err, func() error { rows.Close(); return rows.Err() }); err != nil {
			return err
		}
	}
	return nil
}

// commit ends the transaction; a server that answers ROLLBACK (the
// transaction had failed) fails it.
func (t *pgTx) commit(ctx context.Context) error {
	if t.unsent {
		// No statement ran: nothing to commit, but a fenced transaction
		// still says whether it held the lease.
		if t.fence == nil {
			return nil
		}
		if err := t.begin(ctx); err != nil {
			return err
		}
	}
	return t.c.Raw(func(dc any) error {
		tag, err := dc.(*stdlib.Conn).Conn().Exec(ctx, "COMMIT")
		if err == nil && tag.String() != "COMMIT" {
			err = errors.New("the transaction was rolled back: " + tag.String())
		}
		return err
	})
}

// rollback ends the transaction, if it began; a ROLLBACK that fails leaves
// the connection in its transaction, and the driver discards it when it is
// given back.
func (t *pgTx) rollback() {
	if !t.unsent {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		_, _ = t.c.ExecContext(ctx, "ROLLBACK")
		cancel()
	}
}
