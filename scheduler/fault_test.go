package scheduler_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rewind-dev/rewind/lease"
	"github.com/rewind-dev/rewind/scheduler"
	"github.com/rewind-dev/rewind/store"
)

// Faults of the state under a running execution: the database goes away
// while attempts run. The attempts are neither killed nor run twice: the
// execution that lost the state leaves them running, and the next one (of
// the same process, as in `rewind scheduler`, or a new rewind) takes them
// over.

// errBlip is what a broken blipStore answers.
var errBlip = errors.New("test: the database is unavailable")

// blipStore answers errBlip to the calls an execution makes after broken is
// set: every transaction, the epoch and the running attempts. The lease and
// the heartbeat still renew (the server may be back for them).
type blipStore struct {
	store.Store
	broken *atomic.Bool
}

func (b *blipStore) Fenced(lease, holder string, gen int64) store.Store {
	return &blipStore{Store: b.Store.Fenced(lease, holder, gen), broken: b.broken}
}

func (b *blipStore) InTx(ctx context.Context, fn func(store.Store) error) error {
	if b.broken.Load() {
		return errBlip
	}
	return b.Store.InTx(ctx, fn)
}

func (b *blipStore) Epoch(ctx context.Context) (int64, error) {
	if b.broken.Load() {
		return 0, errBlip
	}
	return b.Store.Epoch(ctx)
}

func (b *blipStore) RunningAttempts(ctx context.Context) ([]store.RunningAttempt, error) {
	if b.broken.Load() {
		return nil, errBlip
	}
	return b.Store.RunningAttempts(ctx)
}

const slowTasks = `
pipeline "p" {
  schedule        = "@daily"
  start_date      = "2025-07-01"
  end_date        = "2025-07-04"
  max_active_runs = 4
  task "t" {
    command = "echo \"start $REWIND_DS\" >> ledger.log; sleep 4; echo \"end $REWIND_DS\" >> ledger.log"
  }
}
`

// A state error while attempts run (a database restart): the execution
// returns the error after --grace without signalling its attempts, which
// finish by themselves; the next execution of the same process (the same
// Holder, as `rewind scheduler` runs one after another) adopts them and
// records their exits. Each task instance starts once, ends once and has
// one attempt, a success.
func TestStateErrorLeavesAttemptsToTheNextExecution(t *testing.T) {
	backends(t, func(t *testing.T, dsn stateFor) {
		e := newEnvOn(t, slowTasks, dsn)
		now := utc("2025-07-10T00:00:00Z")
		self := lease.Self()
		broken := &atomic.Bool{}
		go func() {
			for !broken.Load() {
				if n := len(e.events("ledger.log")); n >= 4 {
					broken.Store(true)
				}
				time.Sleep(20 * time.Millisecond)
			}
		}()
		start := time.Now()
		_, err := scheduler.Run(context.Background(), scheduler.Options{
			Store: &blipStore{Store: e.st, broken: broken}, Workspace: e.ws, Home: e.home,
			Catchup: true, Now: now, Grace: 500 * time.Millisecond, Holder: &self,
		})
		broken.Store(true)
		if !errors.Is(err, errBlip) {
			t.Fatalf("execution with a broken state: err = %v, want the state's error", err)
		}
		if d := time.Since(start); d > 4*time.Second {
			t.Logf("the broken execution returned after %s (its attempts sleep 4s)", d)
		}
		ends := 0
		for _, l := range e.events("ledger.log") {
			if strings.HasPrefix(l, "end ") {
				ends++
			}
		}
		if ends == 4 {
			t.Log("the attempts ended before the execution returned: nothing was left to adopt")
		}
		sum := e.run(scheduler.Options{Catchup: true, Now: now, Holder: &self})
		if sum.Failed() || sum.Interrupted || sum.Incomplete() {
			t.Fatalf("the next execution: %+v", sum)
		}
		starts, endsBy := map[string]int{}, map[string]int{}
		for _, l := range e.events("ledger.log") {
			f := strings.Fields(l)
			switch f[0] {
			case "start":
				starts[f[1]]++
			case "end":
				endsBy[f[1]]++
			}
		}
		for _, ds := range []string{"2025-07-01", "2025-07-02", "2025-07-03", "2025-07-04"} {
			if starts[ds] != 1 || endsBy[ds] != 1 {
				t.Errorf("%s: started %d times, ended %d times; want once each", ds, starts[ds], endsBy[ds])
			}
		}
		for _, r := range e.runs("p") {
			if r.State != store.RunSuccess {
				t.Errorf("run %s is %s", r.DS, r.State)
			}
			for _, ti := range r.Tasks {
				if len(ti.Attempts) != 1 || ti.Attempts[0].State != store.AttemptSuccess {
					t.Errorf("%s %s: attempts %+v, want one success", r.DS, ti.Task, ti.Attempts)
				}
			}
		}
		running, err := e.st.RunningAttempts(context.Background())
		if err != nil || len(running) != 0 {
			t.Errorf("running attempts left: %v %v", running, err)
		}
	})
}
