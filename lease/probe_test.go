package lease

import (
	"context"
	"errors"
	"os"
	"testing"

	"github.com/rewind-dev/rewind/store"
)

// Probe is what a command that executes later asks first: may I execute
// now? It leaves the lease as it found it.
func TestProbe(t *testing.T) {
	ctx := context.Background()
	me := Holder{ID: "me", Host: "here", PID: os.Getpid()}
	other := Holder{ID: "other", Host: "elsewhere", PID: 4242}
	for _, c := range []struct {
		name    string
		held    bool // other holds the lease
		wait    bool
		waiting func(t *testing.T, st store.Store, cancel context.CancelFunc)
		want    string // "", "busy", "canceled"
		told    int    // calls of waiting
	}{
		{name: "free state", want: ""},
		{name: "held, no wait: busy at once", held: true, want: "busy"},
		{name: "held, wait: told who, then free", held: true, wait: true, told: 1,
			waiting: func(t *testing.T, st store.Store, _ context.CancelFunc) {
				if err := ReleaseExecution(ctx, st, other); err != nil {
					t.Fatal(err)
				}
			}},
		{name: "held, wait, interrupted", held: true, wait: true, told: 1, want: "canceled",
			waiting: func(_ *testing.T, _ store.Store, cancel context.CancelFunc) { cancel() }},
	} {
		t.Run(c.name, func(t *testing.T) {
			st := openTestStore(t)
			if c.held {
				if _, err := AcquireExecution(ctx, st, other, false); err != nil {
					t.Fatal(err)
				}
			}
			pctx, cancel := context.WithCancel(ctx)
			defer cancel()
			told := 0
			err := Probe(pctx, st, me, c.wait, func(l store.Lease) {
				told++
				if l.Host != other.Host || l.PID != other.PID {
					t.Errorf("told %s pid %d, want the holder %s pid %d", l.Host, l.PID, other.Host, other.PID)
				}
				if c.waiting != nil {
					c.waiting(t, st, cancel)
				}
			})
			var busy *BusyError
			switch c.want {
			case "":
				if err != nil {
					t.Fatalf("Probe: %v", err)
				}
			case "busy":
				if !errors.As(err, &busy) || busy.Lease.Holder != other.ID {
					t.Fatalf("Probe: %v, want busy with %s", err, other.ID)
				}
			case "canceled":
				if !errors.Is(err, context.Canceled) {
					t.Fatalf("Probe: %v, want context.Canceled", err)
				}
			}
			if told != c.told {
				t.Errorf("waiting called %d times, want %d", told, c.told)
			}
			// The lease is as it was: given back by me, still other's if
			// it held it and did not leave.
			_, err = AcquireExecution(ctx, st, Holder{ID: "third", Host: "there", PID: 1}, false)
			stillHeld := c.held && c.want != ""
			if gotBusy := errors.As(err, &busy); gotBusy != stillHeld {
				t.Errorf("after Probe the lease is busy=%v (%v), want %v", gotBusy, err, stillHeld)
			}
		})
	}
}
