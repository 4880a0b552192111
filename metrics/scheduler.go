package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Scheduler is what one `rewind scheduler` counts in its own process:
// its executions (how many, how they ended, how long they took), whether
// it leads, and how often it took the leadership over. It is a
// prometheus.Collector; its methods do nothing on a nil *Scheduler, so
// that a scheduler without metrics passes none.
type Scheduler struct {
	executions *prometheus.CounterVec
	duration   prometheus.Histogram
	leading    prometheus.Gauge
	takeovers  prometheus.Counter
}

// Execution results (the result label of rewind_scheduler_executions_total).
const (
	ResultOK    = "ok"    // the execution ran (its runs may have failed)
	ResultError = "error" // it could not run: the state was unavailable, the lease was lost
)

// ExecutionBuckets are the bounds (seconds) of the executions' histogram:
// from a tick with nothing to do to a catchup of hours.
var ExecutionBuckets = []float64{0.1, 0.5, 1, 5, 15, 60, 300, 900, 3600, 4 * 3600}

// NewScheduler returns the metrics of a scheduler process, every series
// at zero.
func NewScheduler() *Scheduler {
	m := &Scheduler{
		executions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rewind_scheduler_executions_total",
			Help: "Executions of the engine this scheduler ran (one per tick, reload or operator's change), by result (ok, error).",
		}, []string{"result"}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "rewind_scheduler_execution_duration_seconds",
			Help:    "How long this scheduler's executions took, from the lease to the last attempt's end.",
			Buckets: ExecutionBuckets,
		}),
		leading: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "rewind_scheduler_leading",
			Help: "1 while this scheduler is the active one (holds the leader lease), 0 while it stands by.",
		}),
		takeovers: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "rewind_scheduler_takeovers_total",
			Help: "Times this scheduler became the active one after standing by behind another (that stopped, died or lost the lease).",
		}),
	}
	m.executions.WithLabelValues(ResultOK)
	m.executions.WithLabelValues(ResultError)
	return m
}

// Executed records one execution: how long it took and whether it ran.
func (m *Scheduler) Executed(took time.Duration, err error) {
	if m == nil {
		return
	}
	result := ResultOK
	if err != nil {
		result = ResultError
	}
	m.executions.WithLabelValues(result).Inc()
	m.duration.Observe(took.Seconds())
}

// Leading records that this scheduler became the active one (takeover:
// it stood by behind another leader first) or, with lead false, that it
// stands by again.
func (m *Scheduler) Leading(lead, takeover bool) {
	if m == nil {
		return
	}
	if !lead {
		m.leading.Set(0)
		return
	}
	m.leading.Set(1)
	if takeover {
		m.takeovers.Inc()
	}
}

// Describe sends the descriptions of the scheduler's metrics.
func (m *Scheduler) Describe(ch chan<- *prometheus.Desc) {
	m.executions.Describe(ch)
	m.duration.Describe(ch)
	m.leading.Describe(ch)
	m.takeovers.Describe(ch)
}

// Collect sends the scheduler's metrics.
func (m *Scheduler) Collect(ch chan<- prometheus.Metric) {
	m.executions.Collect(ch)
	m.duration.Collect(ch)
	m.leading.Collect(ch)
	m.takeovers.Collect(ch)
}
