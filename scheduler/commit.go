package scheduler

import (
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	"github.com/rewind-dev/rewind/dsl"
	"github.com/rewind-dev/rewind/executor"
	"github.com/rewind-dev/rewind/lake"
	"github.com/rewind-dev/rewind/store"
)

// Output commits leave the store's transactions: a run whose tasks all
// succeeded gets an outbox entry in the pass that sees it complete
// (Store.RequestCommit), one worker writes its outputs to Iceberg with no
// transaction of the state open, and the next pass records the outcome
// (Store.CompleteCommit). The Iceberg commit carries the entry's key, so a
// crash between it and the state's update neither loses nor doubles it: the
// next rewind finds the entry, sees the key in the table, and only records.

// commitJob is one outbox entry to carry out: the worker reads only its
// own copies of the run, never the cache.
type commitJob struct {
	item store.OutboxItem
	run  *runNode // the engine's, for recording the outcome
	def  *dsl.Pipeline
	row  store.Run
	vars dsl.RunVars
}

func (e *engine) commitJob(item store.OutboxItem, r *runNode) commitJob {
	return commitJob{item: item, run: r, def: r.p.def, row: r.run, vars: e.runVars(r)}
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
func (c *committer) queue(job commitJob) {
	c.mu.Lock()
	defer c.mu.Unlock()
	k := keyOf(job.item)
	if c.seen[k] {
		return
	}
	c.seen[k] = true
	c.pending = append(c.pending, job)
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

func (c *committer) submit(jobs []commitJob) {
	for _, j := range jobs {
		c.queue(j)
	}
}

// idle: nothing pending, nothing being written, nothing to record.
func (c *committer) idle() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.pending) == 0 && !c.inflight && len(c.results) == 0
}

// take returns the results to record. Their entries stay known (a reload
// does not queue them again) until settle says a pass recorded them.
func (c *committer) take() []commitResult {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.results
	c.results = nil
	return out
}

// settle forgets the entries of recorded results.
func (c *committer) settle(results []commitResult) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, r := range results {
		delete(c.seen, keyOf(r.job.item))
	}
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

// commitRetries is how many times a failed output commit is tried again,
// after 1 s, 2 s, 4 s, 8 s and 16 s: a catalog that answers 503 or is
// locked for a moment, a commit that lost a race too often.
const commitRetries = 5

// write commits the outputs of one entry, trying again with backoff after
// an error that may pass (not bad input, a schema conflict or a missing
// branch). The entry's key makes every try after an unknown outcome safe:
// an output whose table already has a snapshot with the key is not
// committed again. It gives up when the execution loses its lease (fence):
// a rewind that no longer leads commits nothing more, and the new leader
// finds the entry in the outbox.
func (c *committer) write(job commitJob) error {
	key := fmt.Sprintf("%s/%d/%d/%d", job.def.Name, job.item.RunID, job.item.ID, job.item.CreatedAt.UnixNano())
	var err error
	for try := 0; ; try++ {
		err = commitOutputsOnce(c.e.fence, c.e.lakes, job.def, job.row, job.vars, key)
		if err == nil || permanentCommitError(err) || try == commitRetries || c.e.fence.Err() != nil {
			return err
		}
		wait := time.Second << try
		c.e.log.Warn("committing the run's outputs failed: trying again", "pipeline", job.def.Name, "ds", job.row.DS, "in", wait, "error", err)
		select {
		case <-time.After(wait):
		case <-c.e.fence.Done():
			return err
		case <-c.quit:
			return err
		}
	}
}

// permanentCommitError: trying again cannot help.
func permanentCommitError(err error) bool {
	return errors.Is(err, lake.ErrBadInput) || errors.Is(err, lake.ErrSchemaConflict) || errors.Is(err, lake.ErrNoSuchRef) || errors.As(err, new(noOutputFiles))
}

// outputError keeps why a run's outputs could not be committed, in
// logs/<pipeline>/outputs/<run>.log.
func (e *engine) outputError(r *runNode, err error) {
	path := filepath.Join(e.o.Home, "logs", r.p.def.Name, "outputs", r.key+".log")
	executor.AppendLine(path, time.Now().Format(time.RFC3339)+" "+err.Error())
}
