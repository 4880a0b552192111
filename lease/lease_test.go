package lease

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rewind-dev/rewind/store"
)

// flakyRenew is a store whose next RenewLease calls fail with an
// unavailable state: as many as budget says (a negative budget: all).
type flakyRenew struct {
	store.Store
	budget atomic.Int32
	fails  atomic.Int32
	hang   atomic.Bool
	slow   atomic.Int64 // each renewal takes this long (a loaded server)
}

var errUnreachable = fmt.Errorf("dial tcp 10.0.0.5:5432: connect: connection refused")

func (f *flakyRenew) RenewLease(ctx context.Context, p store.RenewLeaseParams) error {
	if f.hang.Load() {
		// A partition that drops packets, with a driver that does not
		// even honour ctx: the call returns long after.
		time.Sleep(time.Minute)
		return errUnreachable
	}
	if d := time.Duration(f.slow.Load()); d > 0 {
		select {
		case <-time.After(d):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if f.budget.Load() != 0 {
		f.budget.Add(-1)
		f.fails.Add(1)
		return errUnreachable
	}
	return f.Store.RenewLease(ctx, p)
}

func openTestStore(t *testing.T) store.Store {
	t.Helper()
	st, err := store.Open(context.Background(), "sqlite:"+filepath.Join(t.TempDir(), "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// A state that cannot be reached for a while does not lose the lease: the
// renewal is tried again until it works. One that stays unreachable loses
// it after half the TTL without a renewal, before the lease expires; and a
// lease taken by another holder is lost at the next renewal.
func TestKeepLease(t *testing.T) {
	ttl := 3 * time.Second
	h := Holder{ID: "me", Host: "here", PID: 1, TTL: ttl}
	for _, c := range []struct {
		name string
		run  func(t *testing.T, f *flakyRenew, lost <-chan error)
	}{
		{"brief outage", func(t *testing.T, f *flakyRenew, lost <-chan error) {
			// One renewal fails; the next try, TTL/20 later, works.
			f.budget.Store(1)
			select {
			case err := <-lost:
				t.Fatalf("lost after a brief outage: %v", err)
			case <-time.After(ttl):
			}
			if f.fails.Load() != 1 {
				t.Fatalf("%d failed renewals, want 1", f.fails.Load())
			}
		}},
		{"slow renewals", func(t *testing.T, f *flakyRenew, lost <-chan error) {
			// A loaded server answers every renewal in a sixth of the
			// TTL: the lease is held (a renewal is sent well before the
			// step-down, and the next one as it returns), not given up.
			f.slow.Store(int64(ttl / 6))
			select {
			case err := <-lost:
				t.Fatalf("lost while every renewal succeeded, slowly: %v", err)
			case <-time.After(2 * ttl):
			}
		}},
		{"long outage", func(t *testing.T, f *flakyRenew, lost <-chan error) {
			f.budget.Store(-1)
			select {
			case err := <-lost:
				if !errors.Is(err, errUnreachable) {
					t.Fatalf("lost with %v, want the state's error", err)
				}
			case <-time.After(time.Minute):
				t.Fatal("the lease was never reported lost")
			}
		}},
		{"renewal that never returns", func(t *testing.T, f *flakyRenew, lost <-chan error) {
			// The step-down comes from this process's timer at half the
			// TTL after the last renewal, while the lease still holds in
			// the state: before anyone else can take it.
			f.hang.Store(true)
			select {
			case err := <-lost:
				l, gerr := f.Store.GetLease(context.Background(), Leader)
				if gerr != nil {
					t.Fatal(gerr)
				}
				if now, _ := f.Store.Now(context.Background()); !now.Before(l.ExpiresAt) {
					t.Fatalf("stepped down at %s, after the lease expired at %s", now, l.ExpiresAt)
				}
				if !strings.Contains(err.Error(), "did not answer") {
					t.Fatalf("lost with %v", err)
				}
			case <-time.After(time.Minute):
				t.Fatal("a renewal that never returns held the step-down back")
			}
		}},
		{"taken", func(t *testing.T, f *flakyRenew, lost <-chan error) {
			p := store.AcquireLeaseParams{Name: Leader, Holder: "thief", Host: "there", PID: 2, TTL: ttl, Now: time.Now(), Stale: "me"}
			if _, ok, err := f.Store.AcquireLease(context.Background(), p); err != nil || !ok {
				t.Fatalf("take: %v %v", ok, err)
			}
			select {
			case err := <-lost:
				if !errors.Is(err, store.ErrConflict) {
					t.Fatalf("lost with %v, want ErrConflict", err)
				}
			case <-time.After(time.Minute):
				t.Fatal("the lease was never reported lost")
			}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			f := &flakyRenew{Store: openTestStore(t)}
			if _, err := Acquire(context.Background(), f, Leader, h, 0, nil); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			lost := make(chan error, 1)
			var wg sync.WaitGroup
			wg.Go(func() { Keep(ctx, f, Leader, h, false, func(err error) { lost <- err }) })
			c.run(t, f, lost)
			cancel()
			wg.Wait()
		})
	}
}

// A lease held by a process of another pid namespace (a container that
// shares this host's name) is not taken over for its pid being unknown
// here: its holder may well be alive. Only its expiry frees it. A lease of
// an earlier execution of this very process is taken at once.
func TestAcquireAcrossPidNamespaces(t *testing.T) {
	st := openTestStore(t)
	ctx := context.Background()
	self := Self()
	if nodeOf(self.ID) == "" || self.node == "" {
		t.Fatalf("Self() has no node: %+v", self)
	}
	other := Holder{
		ID:   fmt.Sprintf("%s:%d:%d:%s:%s", self.Host, 999999, 1, "0123456789ab-4026531999", "deadbeef"),
		Host: self.Host, PID: 999999, PIDStart: 1, TTL: time.Minute,
	}
	if self.SameNode(other.ID, other.Host) {
		t.Fatal("a holder of another pid namespace counts as of this node")
	}
	if _, err := AcquireExecution(ctx, st, other, false); err != nil {
		t.Fatal(err)
	}
	var busy *BusyError
	if _, err := AcquireExecution(ctx, st, self, false); !errors.As(err, &busy) {
		t.Fatalf("took the lease of a live-looking holder of another pid namespace: err = %v", err)
	}
	// An id of a rewind before nodes, on this host with a dead pid: taken
	// at once, as before.
	old := Holder{ID: fmt.Sprintf("%s:%d:%d:%s", self.Host, 999998, 1, "cafecafe"), Host: self.Host, PID: 999998, PIDStart: 1, TTL: time.Minute}
	if !self.SameNode(old.ID, old.Host) {
		t.Fatal("an id without a node is not of this host")
	}
	// An earlier execution of this process: over, taken at once.
	st2 := openTestStore(t)
	first := self.ForExecution()
	if _, err := AcquireExecution(ctx, st2, first, false); err != nil {
		t.Fatal(err)
	}
	if _, err := AcquireExecution(ctx, st2, self.ForExecution(), false); err != nil {
		t.Fatalf("the next execution of this process waits for the earlier one: %v", err)
	}
}

// clockSpy records the Now of every lease and heartbeat write.
type clockSpy struct {
	store.Store
	mu   sync.Mutex
	nows []time.Time
}

func (c *clockSpy) saw(now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.nows = append(c.nows, now)
}

func (c *clockSpy) AcquireLease(ctx context.Context, p store.AcquireLeaseParams) (store.Lease, bool, error) {
	c.saw(p.Now)
	return c.Store.AcquireLease(ctx, p)
}

func (c *clockSpy) RenewLease(ctx context.Context, p store.RenewLeaseParams) error {
	c.saw(p.Now)
	return c.Store.RenewLease(ctx, p)
}

func (c *clockSpy) Heartbeat(ctx context.Context, p store.HeartbeatParams) error {
	c.saw(p.Now)
	return c.Store.Heartbeat(ctx, p)
}

// No clock of a rewind process decides who leads: every lease and
// heartbeat write leaves Now to the state's clock (the database server's),
// so a standby whose clock runs 21 s ahead cannot find a healthy leader's
// lease expired, and a leader whose clock is behind cannot stretch its own.
// The store suite (LeasesOnTheStateClock) checks that a zero Now is the
// state's time, on both backends.
func TestClockOffsetDoesNotDecideLeadership(t *testing.T) {
	spy := &clockSpy{Store: openTestStore(t)}
	h := Holder{ID: "me", Host: "here", PID: 1, TTL: 1500 * time.Millisecond}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if _, err := Acquire(ctx, spy, Leader, h, 0, nil); err != nil {
		t.Fatal(err)
	}
	if err := Heartbeat(ctx, spy, h); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		Keep(ctx, spy, Leader, h, true, func(err error) { t.Errorf("lost: %v", err) })
	}()
	deadline := time.Now().Add(time.Minute)
	for {
		spy.mu.Lock()
		n := len(spy.nows)
		spy.mu.Unlock()
		if n >= 6 || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	cancel()
	<-done
	spy.mu.Lock()
	defer spy.mu.Unlock()
	if len(spy.nows) < 6 {
		t.Fatalf("%d lease writes in a minute", len(spy.nows))
	}
	for i, now := range spy.nows {
		if !now.IsZero() {
			t.Errorf("write %d carried this process's clock (%s): the state's clock must decide", i, now)
		}
	}
}
