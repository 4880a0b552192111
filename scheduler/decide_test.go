package scheduler

import (
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rewind-dev/rewind/dsl"
	"github.com/rewind-dev/rewind/executor"
	"github.com/rewind-dev/rewind/store"
)

// world builds the snapshot of one pass: pipelines and their runs, each
// run queued (in its pipeline's queue), running (admitted: its rows as the
// pass's transaction read them) or finished.
type world struct {
	s      *snapshot
	nextID int64
}

func newWorld(now time.Time) *world {
	return &world{s: &snapshot{
		now: now, byName: map[string]*pipe{}, runs: map[int64]store.Run{}, tis: map[int64]store.TaskInstance{},
		external: map[int64]bool{}, starts: map[string][]time.Time{}, limits: map[string]*dsl.Limit{},
		escalate: map[string]string{},
		usage:    usage{poolRunning: map[string]int{}, poolFill: map[string]int{}, pipeTasks: map[string]int{}, limitUsed: map[string]int{}},
		claim:    store.ClaimReadyParams{Owner: "me", Limit: claimLimit, Now: now},
	}}
}

func task(name string, deps ...string) *dsl.Task {
	return &dsl.Task{Name: name, DependsOn: deps, Pool: dsl.DefaultPoolName}
}

func (w *world) pipeline(def *dsl.Pipeline) *pipe {
	if def.Timezone == nil {
		def.Timezone = time.UTC
	}
	if def.MaxActiveRuns == 0 {
		def.MaxActiveRuns = 16
	}
	p := &pipe{def: def, maxRuns: def.MaxActiveRuns, maxFills: def.MaxActiveRuns}
	w.s.pipes = append(w.s.pipes, p)
	w.s.byName[def.Name] = p
	return p
}

// run adds the run of date ds in state, with its task instances in the
// given states (tasks not named are scheduled).
func (w *world) run(p *pipe, ds string, state store.RunState, states map[string]store.TaskState) *runNode {
	day, err := time.Parse(time.DateOnly, ds)
	if err != nil {
		panic(err)
	}
	w.nextID++
	r := &runNode{p: p, run: store.Run{
		ID: w.nextID, Pipeline: p.def.Name, DS: ds, LogicalDate: day, State: state, Kind: store.KindScheduled,
		DataIntervalStart: day, DataIntervalEnd: day.AddDate(0, 0, 1),
	}}
	if len(p.all) > 0 {
		r.prev = p.all[len(p.all)-1]
	}
	p.all = append(p.all, r)
	for i, t := range p.def.Tasks {
		w.nextID++
		st := states[t.Name]
		if st == "" {
			st = store.TaskScheduled
		}
		n := &tiNode{ti: store.TaskInstance{ID: w.nextID, RunID: r.run.ID, Task: t.Name, State: st}, task: t, run: r, idx: i}
		if st == store.TaskRunning {
			n.ti.TryNumber = 1
		}
		r.tis = append(r.tis, n)
	}
	switch state {
	case store.RunQueued:
		p.queued = append(p.queued, r)
	case store.RunRunning:
		w.s.active = append(w.s.active, r)
		w.s.runs[r.run.ID] = r.run
		for _, n := range r.tis {
			w.s.tis[n.ti.ID] = n.ti
		}
	default:
		r.done = true
	}
	return r
}

func (r *runNode) task(name string) *tiNode {
	for _, n := range r.tis {
		if n.ti.Task == name {
			return n
		}
	}
	panic("no task " + name)
}

// ended is the completion of the running attempt of task instance n.
func ended(n *tiNode, code int) completion {
	return completion{
		attempt: store.Attempt{ID: 100 + n.ti.ID, TaskInstanceID: n.ti.ID, TryNumber: n.ti.TryNumber, Pool: n.task.Pool},
		res:     executor.Result{ExitCode: &code},
		node:    n,
	}
}

// describe writes commands as a data engineer reads them.
func describe(cmds []command) []string {
	var out []string
	name := func(r *runNode) string { return r.p.def.Name + " " + r.run.DS }
	for _, c := range cmds {
		switch c := c.(type) {
		case recordAttempt:
			s := fmt.Sprintf("record %s %s try %d: %s", name(c.c.node.run), c.c.node.ti.Task, c.c.attempt.TryNumber, c.p.State)
			if c.moves {
				s += " -> " + string(c.p.TaskState)
			}
			out = append(out, s)
		case completeCommit:
			out = append(out, fmt.Sprintf("complete commit %s: %s", name(c.res.job.run), c.state))
		case admitRun:
			out = append(out, "admit "+name(c.run))
		case taskMove:
			out = append(out, fmt.Sprintf("move %s %s: %s -> %s", name(c.node.run), c.node.ti.Task, c.from, c.to))
		case finishRun:
			out = append(out, fmt.Sprintf("finish %s: %s %v", name(c.run), c.state, c.failed))
		case requestCommit:
			out = append(out, "request commit "+name(c.run))
		case advanceWatermark:
			out = append(out, "advance watermark "+c.p.def.Name)
		case enqueueTask:
			out = append(out, fmt.Sprintf("queue %s %s", name(c.node.run), c.node.ti.Task))
		case claimWork:
			out = append(out, "claim")
		default:
			out = append(out, fmt.Sprintf("%T", c))
		}
	}
	return out
}

func TestDecide(t *testing.T) {
	now := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	const (
		queued  = store.RunQueued
		running = store.RunRunning
		success = store.RunSuccess
	)
	ts := func(kv ...string) map[string]store.TaskState {
		m := map[string]store.TaskState{}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = store.TaskState(kv[i+1])
		}
		return m
	}
	etl := func(name string) *dsl.Pipeline {
		return &dsl.Pipeline{Name: name, Tasks: []*dsl.Task{task("extract"), task("load", "extract")}}
	}
	cases := []struct {
		name      string
		build     func(w *world)
		want      []string
		nextRetry time.Time
	}{
		{
			name: "a run's first task is queued, then work is claimed",
			build: func(w *world) {
				w.run(w.pipeline(etl("sales")), "2025-02-28", running, nil)
			},
			want: []string{"queue sales 2025-02-28 extract", "claim"},
		},
		{
			name: "downstream of a failure is upstream_failed and the run fails",
			build: func(w *world) {
				w.run(w.pipeline(etl("sales")), "2025-02-28", running, ts("extract", "failed"))
			},
			want: []string{
				"move sales 2025-02-28 load: scheduled -> upstream_failed",
				"finish sales 2025-02-28: failed [extract load]",
				"claim",
			},
		},
		{
			name: "max_active_runs admits the oldest queued runs into the free slots",
			build: func(w *world) {
				def := etl("sales")
				def.MaxActiveRuns = 2
				p := w.pipeline(def)
				w.run(p, "2025-02-26", running, ts("extract", "running"))
				w.run(p, "2025-02-27", queued, nil)
				w.run(p, "2025-02-28", queued, nil)
			},
			want: []string{"admit sales 2025-02-27", "queue sales 2025-02-27 extract", "claim"},
		},
		{
			// The watermark is recomputed after every run the pass
			// finishes: one computed between them would miss the later ones.
			name: "two runs finish in one pass: the watermark after both",
			build: func(w *world) {
				def := etl("sales")
				def.MaxActiveRuns = 2
				p := w.pipeline(def)
				w.run(p, "2025-02-26", running, ts("extract", "success", "load", "success"))
				w.run(p, "2025-02-27", running, ts("extract", "success", "load", "success"))
			},
			want: []string{
				"finish sales 2025-02-26: success []",
				"finish sales 2025-02-27: success []",
				"advance watermark sales",
				"claim",
			},
		},
		{
			name: "a run that finishes frees its slot in the same pass",
			build: func(w *world) {
				def := etl("sales")
				def.MaxActiveRuns = 1
				p := w.pipeline(def)
				w.run(p, "2025-02-27", running, ts("extract", "success", "load", "success"))
				w.run(p, "2025-02-28", queued, nil)
			},
			want: []string{
				"finish sales 2025-02-27: success []",
				"admit sales 2025-02-28",
				"advance watermark sales",
				"queue sales 2025-02-28 extract",
				"claim",
			},
		},
		{
			name: "a failed attempt with retries left waits for its retry delay",
			build: func(w *world) {
				def := etl("sales")
				def.Tasks[0].Retries, def.Tasks[0].RetryDelay = 2, 5*time.Minute
				r := w.run(w.pipeline(def), "2025-02-28", running, ts("extract", "running"))
				w.s.pending = []completion{ended(r.task("extract"), 1)}
			},
			want:      []string{"record sales 2025-02-28 extract try 1: failed -> up_for_retry", "claim"},
			nextRetry: now.Add(5 * time.Minute),
		},
		{
			name: "a success is recorded and its downstream task queued in the same pass",
			build: func(w *world) {
				r := w.run(w.pipeline(etl("sales")), "2025-02-28", running, ts("extract", "running"))
				w.s.pending = []completion{ended(r.task("extract"), 0)}
			},
			want: []string{
				"record sales 2025-02-28 extract try 1: success -> success",
				"queue sales 2025-02-28 load",
				"claim",
			},
		},
		{
			name: "an attempt someone else recorded moves nothing",
			build: func(w *world) {
				r := w.run(w.pipeline(etl("sales")), "2025-02-28", running, ts("extract", "running"))
				c := ended(r.task("extract"), 0)
				ti := w.s.tis[c.attempt.TaskInstanceID]
				ti.State, ti.TryNumber = store.TaskScheduled, 1 // a takeover recorded it lost
				w.s.tis[ti.ID] = ti
				w.s.pending = []completion{c}
			},
			want: []string{
				"record sales 2025-02-28 extract try 1: success",
				"queue sales 2025-02-28 extract",
				"claim",
			},
		},
		{
			name: "max_active_tasks counts what is queued and running",
			build: func(w *world) {
				def := etl("sales")
				def.MaxActiveTasks = 2
				p := w.pipeline(def)
				w.run(p, "2025-02-26", running, nil)
				w.run(p, "2025-02-27", running, nil)
				w.run(p, "2025-02-28", running, nil)
				w.s.usage.pipeTasks["sales"] = 1
			},
			want: []string{"queue sales 2025-02-26 extract", "claim"},
		},
		{
			name: "a rate limit holds the task back and wakes the engine when it lets it through",
			build: func(w *world) {
				def := etl("sales")
				def.Tasks[0].Limits = []string{"oltp"}
				w.s.limits["oltp"] = &dsl.Limit{Name: "oltp", Rate: 1, Per: time.Minute}
				w.s.starts["oltp"] = []time.Time{now.Add(-40 * time.Second)}
				w.run(w.pipeline(def), "2025-02-28", running, nil)
			},
			want:      []string{"claim"},
			nextRetry: now.Add(20 * time.Second),
		},
		{
			name: "depends_on_past: a failed previous run fails this one's task",
			build: func(w *world) {
				def := etl("sales")
				def.Tasks[0].DependsOnPast = true
				p := w.pipeline(def)
				w.run(p, "2025-02-27", store.RunFailed, ts("extract", "failed", "load", "upstream_failed"))
				w.run(p, "2025-02-28", running, nil)
			},
			want: []string{
				"move sales 2025-02-28 extract: scheduled -> upstream_failed",
				"move sales 2025-02-28 load: scheduled -> upstream_failed",
				"finish sales 2025-02-28: failed [extract load]",
				"claim",
			},
		},
		{
			name: "depends_on_past: a previous run still running makes this one wait",
			build: func(w *world) {
				def := etl("sales")
				def.Tasks[0].DependsOnPast = true
				p := w.pipeline(def)
				w.run(p, "2025-02-27", running, ts("extract", "running"))
				w.run(p, "2025-02-28", running, nil)
			},
			want: []string{"claim"},
		},
		{
			name: "depends_on_past: a backfill's first run does not wait for the failed run before its window",
			build: func(w *world) {
				def := etl("sales")
				def.Tasks[0].DependsOnPast = true
				p := w.pipeline(def)
				w.run(p, "2025-02-26", store.RunFailed, ts("extract", "failed", "load", "upstream_failed"))
				first := w.run(p, "2025-02-27", running, nil)
				first.run.Kind, first.run.BackfillID = store.KindBackfill, "bf1"
				second := w.run(p, "2025-02-28", running, nil)
				second.run.Kind, second.run.BackfillID = store.KindBackfill, "bf1"
			},
			// The first runs; the second waits for it, as depends_on_past says.
			want: []string{"queue sales 2025-02-27 extract", "claim"},
		},
		{
			name: "a complete run with outputs asks for its commit instead of finishing",
			build: func(w *world) {
				def := etl("sales")
				def.Outputs = []*dsl.Output{{}}
				w.run(w.pipeline(def), "2025-02-28", running, ts("extract", "success", "load", "success"))
			},
			want: []string{"request commit sales 2025-02-28", "claim"},
		},
		{
			name: "a consumer waits in the queue, on no slot, until its producer's run succeeded",
			build: func(w *world) {
				prod := w.pipeline(etl("orders"))
				w.run(prod, "2025-02-28", running, ts("extract", "running"))
				cons := etl("report")
				cons.Consumes = []string{"orders"}
				w.run(w.pipeline(cons), "2025-02-28", queued, nil)
			},
			want: []string{"claim"},
		},
		{
			name: "a producer's run that finishes lets its consumer in within the pass",
			build: func(w *world) {
				prod := w.pipeline(etl("orders"))
				w.run(prod, "2025-02-28", running, ts("extract", "success", "load", "success"))
				cons := etl("report")
				cons.Consumes = []string{"orders"}
				w.run(w.pipeline(cons), "2025-02-28", queued, nil)
			},
			want: []string{
				"finish orders 2025-02-28: success []",
				"admit report 2025-02-28",
				"advance watermark orders",
				"queue report 2025-02-28 extract",
				"claim",
			},
		},
		{
			name: "a paused pipeline admits nothing",
			build: func(w *world) {
				p := w.pipeline(etl("sales"))
				p.paused = true
				w.run(p, "2025-02-28", queued, nil)
			},
			want: []string{"claim"},
		},
		{
			name: "a backfill on hold starts nothing new",
			build: func(w *world) {
				p := w.pipeline(etl("sales"))
				r := w.run(p, "2025-02-28", running, nil)
				r.run.Kind, r.run.BackfillID = store.KindBackfill, "bf1"
				hold := &atomic.Bool{}
				hold.Store(true)
				w.s.backfill = &BackfillRun{ID: "bf1", Pipeline: "sales", Hold: hold}
				w.s.held = true
				q := w.run(p, "2025-03-01", queued, nil)
				q.run.Kind, q.run.BackfillID = store.KindBackfill, "bf1"
			},
			want: []string{"claim"},
		},
		{
			name: "a run the transaction no longer reads as running is left to the re-read",
			build: func(w *world) {
				r := w.run(w.pipeline(etl("sales")), "2025-02-28", running, nil)
				w.s.runs[r.run.ID] = store.Run{ID: r.run.ID}
			},
			want: []string{"claim"},
		},
		{
			name: "an interrupted execution records what ended and decides nothing else",
			build: func(w *world) {
				r := w.run(w.pipeline(etl("sales")), "2025-02-28", running, ts("extract", "running"))
				c := ended(r.task("extract"), 0)
				c.res = executor.Result{Interrupted: true}
				w.s.pending = []completion{c}
				w.s.stopping = true
			},
			want: []string{"record sales 2025-02-28 extract try 1: interrupted -> scheduled"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(now)
			tc.build(w)
			before := fmt.Sprint(w.s.tis, w.s.runs, w.s.starts, w.s.usage)
			got := decide(w.s)
			if d := describe(got.commands); !slices.Equal(d, tc.want) {
				t.Errorf("commands:\n  got  %q\n  want %q", d, tc.want)
			}
			if !got.nextRetry.Equal(tc.nextRetry) {
				t.Errorf("nextRetry = %v, want %v", got.nextRetry, tc.nextRetry)
			}
			if after := fmt.Sprint(w.s.tis, w.s.runs, w.s.starts, w.s.usage); after != before {
				t.Errorf("decide changed its snapshot:\n  before %s\n  after  %s", before, after)
			}
		})
	}
}

// With many pipelines each holding due runs, the scheduled runs that hold
// a slot at once are bounded per default pool (admitPerSlot times its
// slots, at least minAdmitCap), so that a pass costs what can run, not
// what exists.
func TestAdmitBoundedPerPool(t *testing.T) {
	w := newWorld(time.Date(2025, 7, 2, 0, 0, 0, 0, time.UTC))
	w.s.pools = map[string]*dsl.Pool{dsl.DefaultPoolName: {Name: dsl.DefaultPoolName, Slots: 4}, "big": {Name: "big", Slots: 40}}
	for i := range 100 {
		p := w.pipeline(&dsl.Pipeline{Name: fmt.Sprintf("p%03d", i), Tasks: []*dsl.Task{task("t")}})
		w.run(p, "2025-07-01", store.RunQueued, nil)
		b := w.pipeline(&dsl.Pipeline{Name: fmt.Sprintf("b%03d", i), DefaultPool: "big", Tasks: []*dsl.Task{task("t")}})
		w.run(b, "2025-07-01", store.RunQueued, nil)
		w.run(b, "2025-07-02", store.RunQueued, nil)
	}
	admitted := map[string]int{}
	for _, c := range decide(w.s).commands {
		if a, ok := c.(admitRun); ok {
			admitted[poolOf(a.run.p)]++
		}
	}
	if admitted[dsl.DefaultPoolName] != minAdmitCap || admitted["big"] != 40*admitPerSlot {
		t.Errorf("admitted %v; want %d runs of the default pool (4 slots) and %d of big (40 slots)", admitted, minAdmitCap, 40*admitPerSlot)
	}
}
