package scheduler

import (
	"context"
	"path/filepath"
	"sort"
	"time"

	"github.com/rewind-dev/rewind/dsl"
	"github.com/rewind-dev/rewind/skew"
	"github.com/rewind-dev/rewind/store"
)

// cache is what an engine knows of the runs it drives: a copy of the store,
// changed only by what a committed pass wrote (settle) and rebuilt from the
// store (reload) whenever another command changed the state or a guarded
// transition found the store different from the copy.
type cache struct {
	e      *engine
	pipes  map[string]*pipe
	order  []*pipe
	active []*runNode // admitted, unfinished
	byTI   map[int64]*tiNode
	byRun  map[int64]*runNode
	// held are the unfinished runs of other backfills of the selected
	// pipelines: only their own apply runs them (Summary.Held).
	held []store.Run
}

type pipe struct {
	def    *dsl.Pipeline
	paused bool
	// The watermark is recomputed at most every watermarkEvery while runs
	// succeed, and once at the end.
	watermarkDirty bool
	watermarkAt    time.Time
	maxRuns        int
	maxFills       int                      // max_active_runs of the backfill's runs
	activeRuns     int                      // admitted scheduled and manual runs
	activeFills    int                      // admitted backfill runs: their own max_active_runs
	queued         []*runNode               // not admitted, oldest first, backfill runs after the others
	medians        map[string]time.Duration // per task: median of recent successful attempts
	all            []*runNode               // every loaded run, oldest first (for depends_on_past)
}

type runNode struct {
	run   store.Run
	p     *pipe
	tis   []*tiNode // in the pipeline's topological order
	prev  *runNode  // previous loaded run of the pipeline
	key   string    // directory name of the run
	done  bool
	begun time.Time
	// committing: its outputs are being committed (an outbox row exists).
	committing bool
	// producersOK: every run of the pipelines this one consumes, within its
	// data interval, has succeeded (checked until true; the state is
	// re-read at most every producerRecheck: external is what the last
	// read found of the producers outside this execution).
	producersOK      bool
	producersChecked time.Time
	external         bool
	// upstreamWaiting: the last check found a producer's run unfinished
	// or failed (the run holds no slot while none of its tasks started).
	upstreamWaiting bool
}

type tiNode struct {
	ti   store.TaskInstance
	task *dsl.Task // nil when the task no longer exists in the pipeline
	run  *runNode
	idx  int
	// hist is every attempt so far, oldest first: history routes hot dates
	// and OOM escalations.
	hist  []store.Attempt
	route *skew.Route // cached until the next attempt ends
}

func newCache(e *engine, defs []*dsl.Pipeline) *cache {
	c := &cache{e: e, pipes: map[string]*pipe{}, byTI: map[int64]*tiNode{}, byRun: map[int64]*runNode{}}
	for _, def := range defs {
		p := &pipe{def: def, maxRuns: def.MaxActiveRuns}
		if e.o.MaxActiveRuns > 0 {
			p.maxRuns = e.o.MaxActiveRuns
		}
		p.maxFills = p.maxRuns
		if b := e.o.Backfill; b != nil && b.Pipeline == def.Name && b.MaxActiveRuns > 0 {
			p.maxFills = b.MaxActiveRuns
		}
		c.pipes[def.Name] = p
		c.order = append(c.order, p)
	}
	return c
}

// names are the selected pipelines.
func (c *cache) names() []string {
	out := make([]string, len(c.order))
	for i, p := range c.order {
		out[i] = p.def.Name
	}
	return out
}

// loadChunk bounds the pipelines named in one ListRuns.
const loadChunk = 500

// load reads the unfinished runs of the selected pipelines (every run, for a
// pipeline with depends_on_past tasks, which needs the previous runs'
// states), the paused flags, and, for pipelines with work, the durations
// that route slow dates.
func (c *cache) load(ctx context.Context, st store.Store) error {
	sps, err := st.ListPipelines(ctx)
	if err != nil {
		return err
	}
	for _, sp := range sps {
		if p := c.pipes[sp.Name]; p != nil {
			p.paused = sp.Paused
		}
	}
	var plain []string
	for _, p := range c.order {
		if !hasDependsOnPast(p.def) {
			plain = append(plain, p.def.Name)
			continue
		}
		runs, err := st.ListRuns(ctx, store.ListRunsParams{Pipelines: []string{p.def.Name}, WithTasks: true, WithAttempts: true})
		if err != nil {
			return err
		}
		c.addRuns(p, runs)
	}
	for start := 0; start < len(plain); start += loadChunk {
		names := plain[start:min(start+loadChunk, len(plain))]
		runs, err := st.ListRuns(ctx, store.ListRunsParams{Pipelines: names, States: []store.RunState{store.RunQueued, store.RunRunning}, WithTasks: true, WithAttempts: true})
		if err != nil {
			return err
		}
		byPipe := map[string][]store.Run{}
		for _, r := range runs {
			byPipe[r.Pipeline] = append(byPipe[r.Pipeline], r)
		}
		for _, name := range names {
			if rs := byPipe[name]; len(rs) > 0 {
				c.addRuns(c.pipes[name], rs)
			}
		}
	}
	outbox, err := st.ListOutbox(ctx, c.names())
	if err != nil {
		return err
	}
	for _, item := range outbox {
		if n := c.run(item.RunID); n != nil && !n.done {
			n.committing = true
			c.e.commits.queue(c.e.commitJob(item, n))
		}
	}
	c.recount()
	return nil
}

func (p *pipe) hasWork() bool {
	for _, r := range p.all {
		if !r.done {
			return true
		}
	}
	return false
}

// run finds a loaded run by id.
func (c *cache) run(id int64) *runNode { return c.byRun[id] }

// reload rebuilds the copy from the store. Attempts in flight are found
// again by their task instance ids.
func (c *cache) reload(ctx context.Context, st store.Store) error {
	for _, p := range c.order {
		p.queued, p.all, p.activeRuns, p.activeFills = nil, nil, 0, 0
	}
	c.active, c.byTI, c.byRun, c.held = nil, map[int64]*tiNode{}, map[int64]*runNode{}, nil
	return c.load(ctx, st)
}

// recount sets the progress counts from the copy.
func (c *cache) recount() {
	pr := &c.e.progress
	pr.Queued, pr.Running = 0, 0
	for _, p := range c.order {
		pr.Queued += len(p.queued)
		pr.Running += p.activeRuns + p.activeFills
	}
	pr.Total = pr.Succeeded + pr.Failed + pr.Queued + pr.Running
}

func (c *cache) unfinished() int {
	n := 0
	for _, p := range c.order {
		for _, r := range p.all {
			if !r.done {
				n++
			}
		}
	}
	return n
}

// addRuns adds loaded runs (oldest first, newer than those already loaded)
// to a pipeline's queues.
func (c *cache) addRuns(p *pipe, runs []store.Run) {
	var prev *runNode
	if len(p.all) > 0 {
		prev = p.all[len(p.all)-1]
	}
	bf := c.e.o.Backfill
	for _, r := range runs {
		if r.Kind == store.KindBackfill && r.State != store.RunSuccess && r.State != store.RunFailed &&
			(bf == nil || r.BackfillID != bf.ID) {
			c.held = append(c.held, r) // another backfill's run: its apply runs it
			continue
		}
		if r.BatchOf != 0 && r.State != store.RunSuccess && r.State != store.RunFailed {
			continue // covered by a batch: it never runs, it ends with its leader
		}
		if c.byRun[r.ID] != nil {
			continue
		}
		n := c.node(p, r)
		c.byRun[r.ID] = n
		n.prev = prev
		prev = n
		p.all = append(p.all, n)
		switch r.State {
		case store.RunQueued:
			p.queued = append(p.queued, n)
		case store.RunRunning:
			c.active = append(c.active, n)
			if n.run.Kind == store.KindBackfill {
				p.activeFills++
			} else {
				p.activeRuns++
			}
			n.begun = r.StartedAt
			if n.begun.IsZero() {
				n.begun = time.Now()
			}
		default:
			n.done = true
		}
	}
	// Scheduled and manual runs outrank backfill runs in the queue; a
	// reverse backfill runs newest first.
	reverse := bf != nil && bf.Reverse
	sort.SliceStable(p.queued, func(i, j int) bool {
		a, b := p.queued[i].run, p.queued[j].run
		if fa, fb := a.Kind == store.KindBackfill, b.Kind == store.KindBackfill; fa != fb {
			return fb
		} else if fa && reverse {
			return a.LogicalDate.After(b.LogicalDate)
		}
		return false
	})
}

func hasDependsOnPast(p *dsl.Pipeline) bool {
	for _, t := range p.Tasks {
		if t.DependsOnPast {
			return true
		}
	}
	return false
}

func (c *cache) node(p *pipe, r store.Run) *runNode {
	n := &runNode{run: r, p: p, key: runKey(r.LogicalDate.In(p.def.Timezone))}
	byName := make(map[string]store.TaskInstance, len(r.Tasks))
	for _, ti := range r.Tasks {
		byName[ti.Task] = ti
	}
	for i, t := range p.def.Tasks {
		ti, ok := byName[t.Name]
		if !ok {
			continue // a task added after the run was created
		}
		delete(byName, t.Name)
		tn := &tiNode{ti: ti, task: t, run: n, idx: i, hist: ti.Attempts}
		n.tis = append(n.tis, tn)
		c.byTI[ti.ID] = tn
	}
	for _, ti := range r.Tasks {
		if _, gone := byName[ti.Task]; gone {
			// The task was removed from the pipeline: it can never run again.
			tn := &tiNode{ti: ti, run: n, idx: len(p.def.Tasks)}
			n.tis = append(n.tis, tn)
			c.byTI[ti.ID] = tn
		}
	}
	for _, tn := range n.tis {
		tn.ti.Attempts = nil
	}
	n.run.Tasks = nil
	return n
}

// runKey names a run's directories: its logical date in the pipeline's
// timezone with the offset, so the two runs of a repeated DST hour differ.
func runKey(t time.Time) string { return t.Format("2006-01-02T150405-0700") }

// OutputErrorLog is the file in which the engine keeps why the outputs of
// a run (logical date in the pipeline's timezone) could not be committed.
func OutputErrorLog(home, pipeline string, logical time.Time) string {
	return filepath.Join(home, "logs", pipeline, "outputs", runKey(logical)+".log")
}

// runVars are the run.* values of a run.
func (e *engine) runVars(r *runNode) dsl.RunVars {
	def := r.p.def
	tz := def.Timezone
	return dsl.RunVars{
		ID:                store.RunID(r.run.Kind, r.run.LogicalDate.In(tz)),
		Pipeline:          def.Name,
		LogicalDate:       r.run.LogicalDate.In(tz),
		DataIntervalStart: r.run.DataIntervalStart.In(tz),
		DataIntervalEnd:   r.run.DataIntervalEnd.In(tz),
		Kind:              string(r.run.Kind),
		Dir:               filepath.Join(e.o.Home, "runs", def.Name, r.key),
	}
}

// checkEpoch says whether another command changed the state since the
// copy was read.
func (e *engine) checkEpoch(ctx context.Context) (bool, error) {
	ep, err := e.base.Epoch(ctx)
	if err != nil {
		return false, err
	}
	moved := ep != e.epoch
	e.epoch = ep
	return moved, nil
}
