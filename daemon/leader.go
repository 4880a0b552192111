package daemon

import (
	"context"
	"errors"
	"time"

	"github.com/rewind-dev/rewind/lease"
	"github.com/rewind-dev/rewind/store"
)

// Several `rewind scheduler` processes may share one state (PostgreSQL,
// on several machines): the leader lease elects the active one, and the
// others stand by, trying to take it every standbyPoll. The active one
// renews it every TTL/8; when it dies, a standby of the same host takes it
// over at once (the holder's pid is gone), one of another host once the
// lease has expired: within the TTL (plus one poll) of the last renewal.
//
// The leader lease elects; it does not fence. Every write of an execution
// is fenced by the execution lease (lease.Execution), which the active scheduler
// takes for each execution, as `rewind run` does: a scheduler that lost the
// leadership while its execution still ran cannot write once another holds
// that lease, and the new leader takes the attempts of the dead one over
// through their owner's heartbeat (or their Slurm job ids).

// standbyPoll is how often a standby scheduler tries to take the leadership.
func standbyPoll(ttl time.Duration) time.Duration {
	return min(time.Second, max(ttl/10, 50*time.Millisecond))
}

// loop stands by until this scheduler is elected, leads until ctx ends or
// the leadership is lost, and stands by again after a loss.
func (s *server) loop(ctx context.Context) error {
	h := *s.o.Holder
	s.log.Info("scheduler started", "path", s.o.Path, "pipelines", len(s.ws.Pipelines), "host", h.Host, "pid", h.PID, "lease_ttl", h.Lifetime())
	defer s.log.Info("scheduler stopped")
	for {
		held, followed, ok := s.elect(ctx, h)
		if !ok {
			return nil
		}
		s.log.Info("active: this scheduler leads", "generation", held.Generation)
		s.o.Metrics.Leading(true, followed)
		leadCtx, lose := context.WithCancelCause(ctx)
		renewed := make(chan struct{})
		go func() {
			defer close(renewed)
			lease.Keep(leadCtx, s.o.Store, lease.Leader, h, false, func(err error) {
				lose(&lostLeadership{err})
			})
		}()
		notified := make(chan struct{})
		go func() {
			defer close(notified)
			s.notifyLoop(leadCtx, h.ID)
		}()
		s.lead(leadCtx)
		lose(nil)
		<-notified
		<-renewed
		s.o.Metrics.Leading(false, false)
		if ctx.Err() != nil {
			// Stopped: a standby takes over at once, not after the TTL.
			_ = lease.Release(context.WithoutCancel(ctx), s.o.Store, lease.Leader, h)
			return nil
		}
		s.log.Error("lost the leadership: standing by", "error", context.Cause(leadCtx))
	}
}

// lostLeadership is the cause of the end of a leadership that was lost.
type lostLeadership struct{ err error }

func (e *lostLeadership) Error() string { return "lost the leader lease: " + e.err.Error() }
func (e *lostLeadership) Unwrap() error { return e.err }

// elect returns once h holds the leader lease (ok false when ctx ended
// first), and whether it stood by behind another leader before: a
// takeover. While another scheduler leads it logs, once per leader, that
// it stands by; a state it cannot reach is tried again.
func (s *server) elect(ctx context.Context, h lease.Holder) (store.Lease, bool, bool) {
	poll := standbyPoll(h.Lifetime())
	var leader string
	for {
		l, err := lease.Acquire(ctx, s.o.Store, lease.Leader, h, poll, func(l store.Lease) {
			if l.Holder != leader {
				leader = l.Holder
				s.log.Info("standing by: another scheduler leads", "host", l.Host, "pid", l.PID, "until", l.ExpiresAt.Format(time.RFC3339))
			}
		})
		if err == nil {
			return l, leader != "", true
		}
		if ctx.Err() != nil {
			return l, false, false
		}
		var busy *lease.BusyError
		if !errors.As(err, &busy) {
			s.log.Error("cannot reach the state: trying again", "error", err, "in", serveRetryEvery)
		}
		select {
		case <-ctx.Done():
			return l, false, false
		case <-time.After(serveRetryEvery):
		}
	}
}
