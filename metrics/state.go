package metrics

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/rewind-dev/rewind/dsl"
	"github.com/rewind-dev/rewind/lease"
	"github.com/rewind-dev/rewind/store"
)

// Reader is the part of the state the metrics read: reads only.
type Reader interface {
	Stats(ctx context.Context) (store.Stats, error)
	GetLease(ctx context.Context, name string) (store.Lease, error)
}

// DefaultReadTimeout bounds the reads of one scrape: Prometheus's default
// scrape timeout.
const DefaultReadTimeout = 10 * time.Second

// StateOptions configure a State collector.
type StateOptions struct {
	State Reader
	// Workspace returns the definition in use (the scheduler reloads it):
	// its pools' slots and reservations, and its pipelines and pools,
	// whose series exist (at 0) before the state counts anything of
	// them. nil, or returning nil: only what the state holds.
	Workspace func() *dsl.Workspace
	// ReadTimeout bounds the reads of one scrape (default DefaultReadTimeout).
	ReadTimeout time.Duration
	// Log receives the reason of a failed read (nil discards it).
	Log *slog.Logger
}

// State is a prometheus.Collector that reads the state at each scrape:
// one store.Stats and the leader lease, within ReadTimeout.
type State struct {
	o StateOptions
}

// NewState returns the collector of the state o.State reads.
func NewState(o StateOptions) *State {
	if o.ReadTimeout <= 0 {
		o.ReadTimeout = DefaultReadTimeout
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	return &State{o: o}
}

// snapshot is what one scrape read, with the names its series cover.
type snapshot struct {
	stats store.Stats
	// leader is the leader lease when a live holder has it.
	leader *store.Lease
	// generation is the leader lease's (0 when never taken).
	generation int64
	ws         *dsl.Workspace
	// pipelines and pools: of the workspace and of the state, sorted.
	pipelines, pools []string
}

// family is one metric of the state: its description and its samples
// in a snapshot.
type family struct {
	desc    *prometheus.Desc
	kind    prometheus.ValueType
	samples func(s *snapshot, emit func(v float64, labels ...string))
}

func newFamily(name, help string, kind prometheus.ValueType, labels []string, samples func(*snapshot, func(float64, ...string))) family {
	return family{desc: prometheus.NewDesc(name, help, labels, nil), kind: kind, samples: samples}
}

var (
	runStates      = []store.RunState{store.RunQueued, store.RunRunning, store.RunSuccess, store.RunFailed}
	outcomes       = []store.AttemptState{store.AttemptSuccess, store.AttemptFailed, store.AttemptOOM, store.AttemptSkipped, store.AttemptInterrupted, store.AttemptLost}
	backfillStates = []store.BackfillState{store.BackfillRunning, store.BackfillSuccess, store.BackfillFailed, store.BackfillCancelled}

	gauge   = prometheus.GaugeValue
	counter = prometheus.CounterValue
)

// stateFamilies are the metrics read from the state.
var stateFamilies = []family{
	newFamily("rewind_notifications_pending", "Notifications waiting in the state to be delivered (the outbox's depth).",
		gauge, nil, func(s *snapshot, emit func(float64, ...string)) {
			emit(float64(s.stats.Notifications.Pending))
		}),
	newFamily("rewind_notifications_failing", "Pending notifications whose delivery failed at least once (retried with backoff).",
		gauge, nil, func(s *snapshot, emit func(float64, ...string)) {
			emit(float64(s.stats.Notifications.Failing))
		}),
	newFamily("rewind_notifications_oldest_pending_age_seconds", "Age of the oldest pending notification (0 when none).",
		gauge, nil, func(s *snapshot, emit func(float64, ...string)) {
			age := 0.0
			if o := s.stats.Notifications.OldestPending; !o.IsZero() {
				age = max(0, s.stats.Now.Sub(o).Seconds())
			}
			emit(age)
		}),
	newFamily("rewind_notifications_delivered_total", "Notifications delivered since the state began.",
		counter, nil, func(s *snapshot, emit func(float64, ...string)) {
			emit(float64(s.stats.Notifications.Delivered))
		}),
	newFamily("rewind_notifications_given_up_total", "Notifications given up after a day of failed tries.",
		counter, nil, func(s *snapshot, emit func(float64, ...string)) {
			emit(float64(s.stats.Notifications.GaveUp))
		}),
	newFamily("rewind_runs", "Runs in the state, by pipeline and state (queued, running, success, failed).",
		gauge, []string{"pipeline", "state"}, func(s *snapshot, emit func(float64, ...string)) {
			byRun := map[[2]string]int{}
			for _, r := range s.stats.Runs {
				byRun[[2]string{r.Pipeline, string(r.State)}] += r.Count
			}
			for _, p := range s.pipelines {
				for _, st := range runStates {
					emit(float64(byRun[[2]string{p, string(st)}]), p, string(st))
				}
			}
		}),
	newFamily("rewind_attempts_total", "Attempts that ended, by pool and outcome (success, failed, oom, skipped, interrupted, lost).",
		counter, []string{"pool", "outcome"}, func(s *snapshot, emit func(float64, ...string)) {
			n := map[[2]string]int{}
			for _, a := range s.stats.Attempts {
				n[[2]string{a.Pool, string(a.State)}] += a.Count
			}
			for _, p := range s.pools {
				for _, o := range outcomes {
					emit(float64(n[[2]string{p, string(o)}]), p, string(o))
				}
			}
		}),
	newFamily("rewind_attempts_running", "Attempts running now, by pool.",
		gauge, []string{"pool"}, func(s *snapshot, emit func(float64, ...string)) {
			running := s.running()
			for _, p := range s.pools {
				emit(float64(running[p]), p)
			}
		}),
	newFamily("rewind_tasks_queued", "Task instances queued (ready and routed, waiting for a slot), by pool.",
		gauge, []string{"pool"}, func(s *snapshot, emit func(float64, ...string)) {
			n := map[string]int{}
			for _, q := range s.stats.Queued {
				n[q.Pool] += q.Count
			}
			for _, p := range s.pools {
				emit(float64(n[p]), p)
			}
		}),
	newFamily("rewind_tasks_queued_oldest_age_seconds", "How long the oldest queued task instance of the pool has waited (0 when none waits).",
		gauge, []string{"pool"}, func(s *snapshot, emit func(float64, ...string)) {
			age := map[string]float64{}
			for _, q := range s.stats.Queued {
				if !q.Oldest.IsZero() {
					age[q.Pool] = max(0, s.stats.Now.Sub(q.Oldest).Seconds())
				}
			}
			for _, p := range s.pools {
				emit(age[p], p)
			}
		}),
	newFamily("rewind_pool_slots", "Slots of the pool: the most attempts it runs at once (the workspace's definition).",
		gauge, []string{"pool"}, func(s *snapshot, emit func(float64, ...string)) {
			for _, p := range s.wsPools() {
				emit(float64(p.Slots), p.Name)
			}
		}),
	newFamily("rewind_pool_slots_reserved", "Slots of the pool reserved for scheduled and manual runs: never given to backfills (reserved_for_scheduled).",
		gauge, []string{"pool"}, func(s *snapshot, emit func(float64, ...string)) {
			for _, p := range s.wsPools() {
				emit(float64(p.ReservedForScheduled), p.Name)
			}
		}),
	newFamily("rewind_pool_slots_used", "Slots of the pool in use: its running attempts.",
		gauge, []string{"pool"}, func(s *snapshot, emit func(float64, ...string)) {
			running := s.running()
			for _, p := range s.pools {
				emit(float64(running[p]), p)
			}
		}),
	newFamily("rewind_backfills", "Backfills in the state, by state (running, success, failed, cancelled).",
		gauge, []string{"state"}, func(s *snapshot, emit func(float64, ...string)) {
			n := map[store.BackfillState]int{}
			for _, b := range s.stats.Backfills {
				n[b.State] += b.Count
			}
			for _, st := range backfillStates {
				emit(float64(n[st]), string(st))
			}
		}),
	newFamily("rewind_backfill_runs", "Runs (dates, or batches of dates) of the backfills in progress, by pipeline and run state.",
		gauge, []string{"pipeline", "state"}, func(s *snapshot, emit func(float64, ...string)) {
			n := map[[2]string]int{}
			var pipelines []string
			for _, r := range s.stats.BackfillRuns {
				n[[2]string{r.Pipeline, string(r.State)}] += r.Count
				if !slices.Contains(pipelines, r.Pipeline) {
					pipelines = append(pipelines, r.Pipeline)
				}
			}
			for _, p := range pipelines {
				for _, st := range runStates {
					emit(float64(n[[2]string{p, string(st)}]), p, string(st))
				}
			}
		}),
	newFamily("rewind_leader", "1 for the host of the active rewind scheduler (the live holder of the leader lease); absent when none leads.",
		gauge, []string{"host"}, func(s *snapshot, emit func(float64, ...string)) {
			if s.leader != nil {
				emit(1, s.leader.Host)
			}
		}),
	newFamily("rewind_leader_lease_age_seconds", "How long the active scheduler has held the leader lease, on the state's clock.",
		gauge, nil, func(s *snapshot, emit func(float64, ...string)) {
			if s.leader != nil && !s.leader.AcquiredAt.IsZero() {
				emit(max(0, s.stats.Now.Sub(s.leader.AcquiredAt).Seconds()))
			}
		}),
	newFamily("rewind_leader_lease_renewal_age_seconds", "How long since the active scheduler last renewed the leader lease, on the state's clock (it renews every TTL/8 and steps down past TTL/2).",
		gauge, nil, func(s *snapshot, emit func(float64, ...string)) {
			if s.leader != nil && !s.leader.RenewedAt.IsZero() {
				emit(max(0, s.stats.Now.Sub(s.leader.RenewedAt).Seconds()))
			}
		}),
	newFamily("rewind_leader_generation", "Generation of the leader lease: it grows by one each time another scheduler takes the leadership.",
		gauge, nil, func(s *snapshot, emit func(float64, ...string)) {
			if s.generation > 0 {
				emit(float64(s.generation))
			}
		}),
}

var (
	stateUpDesc = prometheus.NewDesc("rewind_state_up",
		"1 when this scrape could read the state, 0 when it could not (the reason is logged).", nil, nil)
	stateReadDesc = prometheus.NewDesc("rewind_state_read_duration_seconds",
		"How long this scrape's reads of the state took.", nil, nil)
)

// Describe sends the descriptions of every metric of the state.
func (c *State) Describe(ch chan<- *prometheus.Desc) {
	ch <- stateUpDesc
	ch <- stateReadDesc
	for _, f := range stateFamilies {
		ch <- f.desc
	}
}

// Collect reads the state and sends its metrics: only rewind_state_up 0
// (and the read's duration) when it could not be read.
func (c *State) Collect(ch chan<- prometheus.Metric) {
	start := time.Now()
	s, err := c.read()
	ch <- prometheus.MustNewConstMetric(stateReadDesc, gauge, time.Since(start).Seconds())
	if err != nil {
		c.o.Log.Error("metrics: cannot read the state", "error", c.redact(err.Error()))
		ch <- prometheus.MustNewConstMetric(stateUpDesc, gauge, 0)
		return
	}
	ch <- prometheus.MustNewConstMetric(stateUpDesc, gauge, 1)
	for _, f := range stateFamilies {
		f.samples(s, func(v float64, labels ...string) {
			for i, l := range labels {
				labels[i] = c.redact(l)
			}
			ch <- prometheus.MustNewConstMetric(f.desc, f.kind, v, labels...)
		})
	}
}

// redact scrubs the workspace's sensitive values from a label value or a
// message: names never hold them, and this makes sure.
func (c *State) redact(s string) string {
	if c.o.Workspace == nil {
		return s
	}
	return c.o.Workspace().Redact(s)
}

// read takes one snapshot of the state.
func (c *State) read() (*snapshot, error) {
	ctx, cancel := context.WithTimeout(context.Background(), c.o.ReadTimeout)
	defer cancel()
	stats, err := c.o.State.Stats(ctx)
	if err != nil {
		return nil, err
	}
	s := &snapshot{stats: stats}
	l, err := c.o.State.GetLease(ctx, lease.Leader)
	switch {
	case errors.Is(err, store.ErrNotFound):
	case err != nil:
		return nil, err
	default:
		s.generation = l.Generation
		if l.Holder != "" && l.ExpiresAt.After(stats.Now) {
			s.leader = &l
		}
	}
	if c.o.Workspace != nil {
		s.ws = c.o.Workspace()
	}
	s.names()
	return s, nil
}

// names lists the pipelines and pools the series cover: those of the
// workspace, and those the state counts (a pipeline removed from the
// files keeps its runs).
func (s *snapshot) names() {
	pipelines, pools := map[string]bool{}, map[string]bool{}
	if s.ws != nil {
		for _, p := range s.ws.Pipelines {
			pipelines[p.Name] = true
		}
		for name := range s.ws.Pools {
			pools[name] = true
		}
	}
	for _, r := range s.stats.Runs {
		pipelines[r.Pipeline] = true
	}
	for _, a := range s.stats.Attempts {
		pools[a.Pool] = true
	}
	for _, q := range s.stats.Queued {
		pools[q.Pool] = true
	}
	delete(pipelines, "")
	delete(pools, "")
	s.pipelines, s.pools = sortedKeys(pipelines), sortedKeys(pools)
}

// running counts the running attempts by pool.
func (s *snapshot) running() map[string]int {
	n := map[string]int{}
	for _, a := range s.stats.Attempts {
		if a.State == store.AttemptRunning {
			n[a.Pool] += a.Count
		}
	}
	return n
}

// wsPools are the workspace's pools, by name.
func (s *snapshot) wsPools() []*dsl.Pool {
	if s.ws == nil {
		return nil
	}
	var out []*dsl.Pool
	for _, name := range sortedKeys(s.ws.Pools) {
		out = append(out, s.ws.Pools[name])
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
