package scheduler

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/rewind-dev/rewind/executor"
	"github.com/rewind-dev/rewind/store"
)

// A panic while waiting for an attempt reaches the loop as a completion
// that says so (the loop stops the execution on it), instead of being
// swallowed by the goroutine while the engine waits for ever.
func TestWatchSendsAPanic(t *testing.T) {
	e := &engine{events: make(chan completion, 1), gone: make(chan struct{})}
	e.attemptsCtx, e.stopAttempts = context.WithCancelCause(context.Background())
	e.watch(store.Attempt{ID: 7}, false, func(context.Context) executor.Result { panic("boom") })
	select {
	case c := <-e.events:
		if c.panicked == nil || !strings.Contains(c.panicked.Error(), "boom") || c.attempt.ID != 7 {
			t.Fatalf("completion %+v, want the panic of attempt 7", c)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no completion after a panic")
	}
}

// An attempt left running (executor.ErrLeave) sends nothing: the next
// rewind adopts it. One that ends once nobody waits (gone) does not block.
func TestWatchLeaveAndGone(t *testing.T) {
	e := &engine{events: make(chan completion), gone: make(chan struct{})}
	e.attemptsCtx, e.stopAttempts = context.WithCancelCause(context.Background())
	e.watch(store.Attempt{ID: 1}, false, func(ctx context.Context) executor.Result {
		<-ctx.Done()
		return executor.Result{Left: true}
	})
	e.stopAttempts(executor.ErrLeave)
	close(e.gone)
	e.watch(store.Attempt{ID: 2}, false, func(context.Context) executor.Result { return executor.Result{} })
	done := make(chan struct{})
	go func() { e.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("a watcher blocked after the execution was gone")
	}
	select {
	case c := <-e.events:
		t.Fatalf("sent %+v", c)
	default:
	}
}
