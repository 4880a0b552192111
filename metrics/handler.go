package metrics

import (
	"fmt"
	"log/slog"
	"net/http"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Path is where the metrics are served.
const Path = "/metrics"

// NewRegistry returns a registry of the given collectors (a State, a
// Scheduler) and of the serving process's own Go runtime and process
// metrics (go_*, process_*: memory, goroutines, open files), the ones
// every Prometheus client exports.
func NewRegistry(cs ...prometheus.Collector) *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	reg.MustRegister(cs...)
	return reg
}

// Handler serves reg in the exposition format a scraper asks for (the
// text format by default). A collector that fails answers 500 with the
// reason, logged on log (nil discards it).
func Handler(reg *prometheus.Registry, log *slog.Logger) http.Handler {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{
		ErrorLog:            slogPrinter{log},
		ErrorHandling:       promhttp.HTTPErrorOnError,
		MaxRequestsInFlight: 4,
	})
}

// slogPrinter is promhttp's error log on a slog.Logger.
type slogPrinter struct{ log *slog.Logger }

func (p slogPrinter) Println(v ...any) {
	p.log.Error("metrics: scrape failed", "error", strings.TrimSpace(fmt.Sprintln(v...)))
}
