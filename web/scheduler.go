package web

import (
	"context"
	"errors"
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
}

// HolderJSON is the holder of a lease.
type HolderJSON struct {
	Host string `json:"host"`
	PID  int    `json:"pid"`
	// Generation grows by one each time the lease changes holder.
	Generation int64 `json:"generation"`
	// ExpiresAt is when the lease ends unless renewed (RFC 3339, UTC).
	ExpiresAt string `json:"expires_at"`
}

func (s *Server) schedulerState(ctx context.Context) (SchedulerJSON, error) {
	var out SchedulerJSON
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
		*l.to = &HolderJSON{Host: cur.Host, PID: cur.PID, Generation: cur.Generation, ExpiresAt: cur.ExpiresAt.UTC().Format(time.RFC3339)}
	}
	return out, nil
}

func (s *Server) apiScheduler(w http.ResponseWriter, r *http.Request) {
	st, err := s.schedulerState(r.Context())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.sendJSON(w, r, st)
}
