package web

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/rewind-dev/rewind/lease"
	"github.com/rewind-dev/rewind/store"
)

// SchedulerJSON is who runs the state (/api/scheduler): the active
// `rewind scheduler` (the holder of the leader lease) and the rewind that
// is executing (the holder of the execution lease: that scheduler during
// a tick, or a `rewind run`, `backfill apply`). Null when no live holder.
type SchedulerJSON struct {
	Leader    *HolderJSON `json:"leader"`
	Executing *HolderJSON `json:"executing"`
	// Warning is what every page's banner says ("" when nothing is
	// wrong): that no scheduler holds the leader lease, or that the
	// active one has missed its renewals (stalled, or cut off from the
	// state) on the state's clock.
	Warning string `json:"warning"`
}

// HolderJSON is the holder of a lease.
type HolderJSON struct {
	Host string `json:"host"`
	PID  int    `json:"pid"`
	// Generation grows by one each time the lease changes holder.
	Generation int64 `json:"generation"`
	// ExpiresAt is when the lease ends unless renewed (RFC 3339, UTC).
	ExpiresAt string `json:"expires_at"`
	// AcquiredAt is when the holder took the lease, RenewedAt when it
	// last renewed it (RFC 3339, UTC, on the state's clock; "" when the
	// rewind that took it did not record them).
	AcquiredAt string `json:"acquired_at,omitempty"`
	RenewedAt  string `json:"renewed_at,omitempty"`
}

func (s *Server) schedulerState(ctx context.Context) (SchedulerJSON, error) {
	var out SchedulerJSON
	var leader store.Lease
	now := s.o.Now()
	for _, l := range []struct {
		name string
		to   **HolderJSON
	}{{lease.Leader, &out.Leader}, {lease.Execution, &out.Executing}} {
		cur, err := s.o.State.GetLease(ctx, l.name)
		if errors.Is(err, store.ErrNotFound) {
			continue
		}
		if err != nil {
			return out, err
		}
		if cur.Holder == "" || !cur.ExpiresAt.After(now) {
			continue // released, or expired: its holder is gone
		}
		*l.to = &HolderJSON{Host: cur.Host, PID: cur.PID, Generation: cur.Generation, ExpiresAt: cur.ExpiresAt.UTC().Format(time.RFC3339),
			AcquiredAt: stamp(cur.AcquiredAt), RenewedAt: stamp(cur.RenewedAt)}
		if l.name == lease.Leader {
			leader = cur
		}
	}
	var err error
	out.Warning, err = s.schedulerWarning(ctx, out, leader)
	return out, err
}

// schedulerWarning says what is wrong with the scheduling of the state:
// no `rewind scheduler` holds the leader lease, or the one that holds it
// has not renewed it for two of its renewal periods (lease.RenewEvery of
// its TTL: a renewal missed), by the state's clock, on which leases are
// written. A renewal is what the state sees of a scheduler's life between
// its executions.
func (s *Server) schedulerWarning(ctx context.Context, sch SchedulerJSON, l store.Lease) (string, error) {
	if sch.Leader == nil {
		return "No rewind scheduler holds the leader lease: nothing runs on schedule unless a rewind scheduler is started (or cron runs rewind run).", nil
	}
	if l.RenewedAt.IsZero() || !l.ExpiresAt.After(l.RenewedAt) {
		return "", nil
	}
	now, err := s.o.State.Now(ctx)
	if err != nil {
		return "", err
	}
	every := lease.RenewEvery(l.ExpiresAt.Sub(l.RenewedAt))
	if age := now.Sub(l.RenewedAt); age > 2*every {
		return fmt.Sprintf("The active scheduler (%s pid %d) has not renewed its lease for %s; it renews it every %s: it is stalled or cannot reach the state. A standby takes over once the lease expires (%s).",
			l.Host, l.PID, short(age.Round(time.Second)), short(every), l.ExpiresAt.UTC().Format("2006-01-02 15:04:05Z")), nil
	}
	return "", nil
}

func (s *Server) apiScheduler(w http.ResponseWriter, r *http.Request) {
	st, err := s.schedulerState(r.Context())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.sendJSON(w, r, st)
}
