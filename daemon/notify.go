package daemon

import (
	"context"
	"time"

	"github.com/rewind-dev/rewind/notify"
	"github.com/rewind-dev/rewind/scheduler"
)

// notifyEvery is how often the leader delivers due notifications.
const notifyEvery = time.Second

// notifyLoop runs while this scheduler leads: it delivers the state's due
// notifications every notifyEvery and looks for missed deadlines every
// poll, beside the executions (a slow webhook never holds a tick back).
// Only the leader does: a standby neither sends nor looks.
func (s *server) notifyLoop(ctx context.Context, owner string) {
	t := time.NewTicker(notifyEvery)
	defer t.Stop()
	var looked time.Time
	for {
		ws := s.current.Load()
		if ws != nil {
			if time.Since(looked) >= s.o.PollEvery {
				looked = time.Now()
				if _, err := scheduler.CheckDeadlines(ctx, s.o.Store, ws, s.o.Clock(), s.log); err != nil && ctx.Err() == nil {
					s.log.Warn("cannot look for missed deadlines: trying again", "error", ws.RedactError(err))
				}
			}
			d := notify.Deliverer{Store: s.o.Store, Workspace: ws, Owner: owner + ":notify", Log: s.log}
			if _, err := d.Round(ctx); err != nil && ctx.Err() == nil {
				s.log.Warn("cannot deliver notifications: trying again", "error", ws.RedactError(err), "in", notifyEvery)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
