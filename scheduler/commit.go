package scheduler

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	"github.com/rewind-dev/rewind/executor"
	"github.com/rewind-dev/rewind/store"
)

// Output commits leave the store's transactions: a run whose tasks all
// succeeded gets an outbox entry in the pass that sees it complete
// (Store.RequestCommit), one worker writes its outputs to Iceberg with no
// transaction of the state open, and the next pass records the outcome
// (Store.CompleteCommit). The Iceberg commit carries the entry's key, so a
// crash between it and the state's update neither loses nor doubles it: the
// next rewind finds the entry, sees the key in the table, and only records.

// commitJob is one outbox entry to carry out.
type commitJob struct {
	item store.OutboxItem
	run  *runNode
}

// commitResult is how an entry's commit went.
type commitResult struct {
	job commitJob
	err error
}

type committer struct {
	e    *engine
	done chan struct{} // a result is ready (buffered: one wake-up is enough)
	wake chan struct{}
	quit chan struct{}
	wg   sync.WaitGroup

	mu      sync.Mutex
	pending []commitJob
	// seen: the entries queued and not yet recorded. An entry is known by
	// its id and creation time: SQLite reuses the id of a deleted row, so
	// a new entry may carry the id of one recorded before.
	seen     map[outboxKey]bool
	inflight bool
	results  []commitResult
}

func newCommitter(e *engine) *committer {
	c := &committer{e: e, done: make(chan struct{}, 1), wake: make(chan struct{}, 1), quit: make(chan struct{}), seen: map[outboxKey]bool{}}
	c.wg.Add(1)
	go c.work()
	return c
}

// queue adds an entry (once).
func (c *committer) queue(item store.OutboxItem, r *runNode) {
	c.mu.Lock()
	defer c.mu.Unlock()
	k := keyOf(item)
	if c.seen[k] {
		return
	}
	c.seen[k] = true
	c.pending = append(c.pending, commitJob{item: item, run: r})
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

func (c *committer) submit(jobs []commitJob) {
	for _, j := range jobs {
		c.queue(j.item, j.run)
	}
}

// idle: nothing pending, nothing being written, nothing to record.
func (c *committer) idle() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.pending) == 0 && !c.inflight && len(c.results) == 0
}

// take returns the results to record.
func (c *committer) take() []commitResult {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.results
	c.results = nil
	for _, r := range out {
		delete(c.seen, keyOf(r.job.item))
	}
	return out
}

type outboxKey struct{ id, created int64 }

func keyOf(item store.OutboxItem) outboxKey {
	return outboxKey{item.ID, item.CreatedAt.UnixNano()}
}

// stop lets the commit being written finish; entries not started stay in
// the outbox for the next rewind.
func (c *committer) stop() {
	close(c.quit)
	c.wg.Wait()
}

func (c *committer) work() {
	defer c.wg.Done()
	for {
		c.mu.Lock()
		var job commitJob
		have := len(c.pending) > 0
		if have {
			job, c.pending = c.pending[0], c.pending[1:]
			c.inflight = true
		}
		c.mu.Unlock()
		if !have {
			select {
			case <-c.wake:
				continue
			case <-c.quit:
				return
			}
		}
		select {
		case <-c.quit:
			c.mu.Lock()
			c.inflight = false
			c.mu.Unlock()
			return
		default:
		}
		err := c.write(job)
		c.mu.Lock()
		c.inflight = false
		c.results = append(c.results, commitResult{job: job, err: err})
		c.mu.Unlock()
		select {
		case c.done <- struct{}{}:
		default:
		}
	}
}

func (c *committer) write(job commitJob) error {
	e := c.e
	r := job.run
	key := fmt.Sprintf("%s/%d/%d/%d", r.p.def.Name, job.item.RunID, job.item.ID, job.item.CreatedAt.UnixNano())
	return commitOutputsOnce(context.Background(), e.lakes, r.p.def, r.run, e.runVars(r), key)
}

// recordCommits records, inside the pass's transaction, the commits the
// worker finished: the run becomes success (or failed, when its outputs
// could not be committed) only if its task instances still say so.
func (e *engine) recordCommits(ctx context.Context) error {
	for _, res := range e.commits.take() {
		r := e.cache.run(res.job.item.RunID)
		if r == nil {
			r = res.job.run // reloaded without it: record it all the same
		}
		state := store.RunSuccess
		var failed []string
		if res.err != nil {
			state = store.RunFailed
			failed = []string{res.err.Error()}
			e.log.Error("committing the run's outputs failed", "pipeline", r.p.def.Name, "ds", r.run.DS, "error", res.err)
			e.outputError(r, res.err)
		}
		now := time.Now()
		err := e.st.CompleteCommit(ctx, store.CompleteCommitParams{OutboxID: res.job.item.ID, State: state, Now: now})
		if errors.Is(err, store.ErrConflict) {
			e.cache.stale = true // cleared meanwhile: it runs again
			continue
		}
		if err != nil {
			return err
		}
		if r.done || !r.committing {
			e.cache.stale = true
			continue
		}
		// The next pass drops the finished run from the active list.
		if err := e.runFinished(ctx, r, state, failed, now); err != nil {
			return err
		}
	}
	return nil
}

// outputError keeps why a run's outputs could not be committed, in
// logs/<pipeline>/outputs/<run>.log.
func (e *engine) outputError(r *runNode, err error) {
	path := filepath.Join(e.o.Home, "logs", r.p.def.Name, "outputs", r.key+".log")
	executor.AppendLine(path, time.Now().Format(time.RFC3339)+" "+err.Error())
}
