package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
)

// pipelinedClaimer is a backend that can run a ClaimReady outside any
// transaction in one round trip (PostgreSQL); done false: it did not, the
// caller claims the usual way.
type pipelinedClaimer interface {
	claimPipelined(ctx context.Context, d *dialect, p ClaimReadyParams) (out []ClaimedAttempt, done bool, err error)
}

// claimPipelined runs a ClaimReady of an unfenced store outside InTx as one
// pipeline on one connection: the pools' advisory locks (in key order) and
// claim's statement, in the implicit transaction that ends at the
// pipeline's Sync. Each statement of a pipeline takes its snapshot when it
// starts, after the one before has finished, so the claim sees every claim
// committed before it got the locks, as in a transaction of its own; but
// the locks are held only while the server runs the claim and commits,
// never across a round trip to this process, which is what every other
// claimer of the pool waits for.
func (s *pgDB) claimPipelined(ctx context.Context, d *dialect, p ClaimReadyParams) ([]ClaimedAttempt, bool, error) {
	if s.tx != nil || s.fence != nil {
		return nil, false, nil
	}
	keys := pgPoolLockKeys(p.Pools)
	var out []ClaimedAttempt
	var err error
	for attempt := 0; ; attempt++ {
		out, err = s.claimOnce(ctx, d, p, keys)
		if err == nil || !pgRetryable(err) || attempt == pgRetries {
			break
		}
		select {
		case <-ctx.Done():
			return nil, true, pgMap(err)
		case <-time.After(time.Duration(1+attempt*attempt) * time.Millisecond):
		}
	}
	if err != nil {
		return nil, true, fmt.Errorf("store: claim ready: %w", pgMap(err))
	}
	return out, true, nil
}

func (s *pgDB) claimOnce(ctx context.Context, d *dialect, p ClaimReadyParams, keys []int32) ([]ClaimedAttempt, error) {
	c, err := s.db.Conn(ctx)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	var out []ClaimedAttempt
	err = c.Raw(func(dc any) error {
		pc := dc.(*stdlib.Conn).Conn()
		b := &pgx.Batch{}
		for _, k := range keys {
			b.Queue("SELECT pg_advisory_xact_lock($1, $2)", pgLockSpace, k)
		}
		q, a := pgClaimQuery(d, p)
		b.Queue(q, a...)
		br := pc.SendBatch(ctx, b)
		for range keys {
			if _, err := br.Exec(); err != nil {
				_ = br.Close()
				return fmt.Errorf("lock pools: %w", err)
			}
		}
		rows, err := br.Query()
		if err == nil {
			for rows.Next() {
				ca, err := pgClaimed(p, rows.Scan)
				if err != nil {
					rows.Close()
					_ = br.Close()
					return err
				}
				out = append(out, ca)
			}
			rows.Close()
			err = rows.Err()
		}
		return errorsJoin(err, br.Close())
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// errorsJoin is the first error, else the second.
func errorsJoin(first, second error) error {
	if first != nil {
		return first
	}
	return second
}
