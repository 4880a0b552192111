package main

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/rewind-dev/rewind/daemon"
	"github.com/rewind-dev/rewind/dsl"
	"github.com/rewind-dev/rewind/lease"
	"github.com/rewind-dev/rewind/metrics"
	"github.com/rewind-dev/rewind/store"
	"github.com/rewind-dev/rewind/web"
)

func init() { register(newSchedulerCmd) }

func newSchedulerCmd(g *globals) *cobra.Command {
	var (
		ws           workspaceFlags
		quiet        bool
		newState     bool
		pauseNewOver int
		grace        time.Duration
		poll         time.Duration
		ttl          time.Duration
		metricsAddr  string
		logFormat    string
	)
	c := &cobra.Command{
		Use:   "scheduler [PATH]",
		Short: "Run the pipelines at their ticks, long-running",
		Long: `Scheduler runs until it is stopped: at start it executes what is due
(catching up after downtime: every missed interval of a pipeline with
catchup = true, only the latest of one with catchup = false), then each
due interval at its tick, as 'rewind run' would.

It watches the *.hcl files of PATH (default ".") and reloads them when
they change (looked at every --poll; a change is loaded once the files
stay the same for one look) or on SIGHUP. A file with errors is not
loaded: the previous definition stays in use and the diagnostics are
logged with file:line.

Between ticks it holds no execution lease: 'rewind run' from cron keeps
working beside it, and the state's lease decides who executes; a tick that
comes while another rewind holds the lease waits for it.

Several schedulers may share one state (PostgreSQL, on several machines):
exactly one is active, elected by the state's leader lease, and the others
stand by. The active one renews the lease every --lease-ttl/8; if it dies,
a standby on the same host (REWIND_HOST, default the host name) takes over
at once, one on another host within --lease-ttl (plus a second), and
settles the dead one's attempts: adopted where they still run (a process of
its host, a Slurm job), otherwise run again.

--grace must be under 0.4 x --lease-ttl (default: 10s, or 0.3 x
--lease-ttl when that is less): a scheduler that loses its lease steps
down at half the TTL and stops its attempts within the rest, before a
standby can take over.

SIGTERM or SIGINT stops it: nothing new starts, running attempts get
--grace to end (then they are killed and recorded as interrupted; the
next scheduler or 'rewind run' runs them again), and it exits with code 0.
Attempts that run as Slurm jobs are not cancelled: they run on, and the
next scheduler adopts them by their job ids ('rewind run' interrupted
scancels its jobs).

Log lines go to stderr (--quiet: warnings and errors only), as text
(key=value) or, with --log-format json, one JSON object per line with the
keys time, level and msg, then the line's own keys.

--metrics-listen ADDR serves Prometheus metrics at http://ADDR/metrics:
the state's runs, attempts, queues, pools, backfills and leader, read at
each scrape, and this scheduler's executions and takeovers. The endpoint
has no authentication and shows names only (pipelines, pools, hosts):
listen on loopback or on a network that only Prometheus reaches.

Exit codes: 0 stopped by SIGTERM/SIGINT, 2 usage or configuration error
(the files do not load at start), 4 the state could not be opened.`,
		Example: `  rewind scheduler /etc/rewind/pipelines
  rewind scheduler --metrics-listen 127.0.0.1:9464 --log-format json .
  rewind scheduler --state postgres://rewind@db/rewind --lease-ttl 3m --grace 1m .`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkDurations(grace, ttl, poll); err != nil {
				return err
			}
			if err := checkLogFormat(logFormat); err != nil {
				return err
			}
			if metricsAddr != "" {
				if _, _, err := net.SplitHostPort(metricsAddr); err != nil {
					return exitWith(exitUsage, "--metrics-listen %q: want HOST:PORT (127.0.0.1:9464): %v", metricsAddr, err)
				}
			}
			grace, err := schedulerGrace(grace, ttl, cmd.Flags().Changed("grace"))
			if err != nil {
				return err
			}
			path, err := g.workspace(pathArg(args))
			if err != nil {
				return err
			}
			w, err := ws.load(g, path)
			if err != nil {
				return err
			}
			opts, err := loadOptions(ws.vars)
			if err != nil {
				return err
			}
			if _, _, err := g.stateDSN(); err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			reload, stopHUP := reloadOnHUP(ctx)
			defer stopHUP()
			if err := g.checkStateNotLost(newState); err != nil {
				return err
			}
			st, err := openStore(ctx, g)
			if err != nil {
				if ctx.Err() != nil {
					return nil // stopped before it started
				}
				return err
			}
			defer st.Close()
			out := &liveRedact{w: g.stderr, ws: w}
			log := schedulerLog(out, quiet, logFormat)
			var m *metrics.Scheduler
			if metricsAddr != "" {
				m = metrics.NewScheduler()
				stopMetrics, err := serveMetrics(ctx, metricsAddr, st, out, m, log)
				if err != nil {
					return err
				}
				defer stopMetrics()
			}
			err = daemon.Serve(ctx, daemon.ServeOptions{
				Store: st, Path: path, LoadOptions: opts, Workspace: w, Home: homeDir(g),
				Grace: grace, PollEvery: poll, Reload: reload, Log: log, LeaseTTL: ttl,
				EnsureAgent: agentStarter(g, ttl), PauseNewOver: pauseNewOver, Metrics: m,
				OnLoad: out.use,
				OnWarning: func(msg string) {
					log.Warn(msg)
				},
			})
			if err != nil {
				return exitWith(exitUsage, "%v", err)
			}
			return nil
		},
	}
	ws.add(c)
	c.Flags().BoolVarP(&quiet, "quiet", "q", false, "log only warnings and errors")
	c.Flags().IntVar(&pauseNewOver, "pause-new-over", 24, "a pipeline new to the state whose catchup would create more runs than this starts paused (0: never)")
	c.Flags().BoolVar(&newState, "new-state", false, "start a new SQLite state even though logs of an earlier one are there (its runs run again)")
	c.Flags().DurationVar(&grace, "grace", 10*time.Second, "on SIGTERM/SIGINT, how long running attempts get before they are killed (under 0.4 x --lease-ttl)")
	c.Flags().DurationVar(&ttl, "lease-ttl", lease.DefaultTTL, "how long the leadership and the attempts' lease.Heartbeat last without renewal: a standby takes over within it")
	c.Flags().DurationVar(&poll, "poll", daemon.DefaultPollEvery, "how often to look at the pipeline files for changes")
	c.Flags().StringVar(&metricsAddr, "metrics-listen", "", "serve Prometheus metrics at http://ADDR/metrics (HOST:PORT; no authentication: names only); default off")
	c.Flags().StringVar(&logFormat, "log-format", logText, "log lines as text (key=value) or json (one object per line: time, level, msg, ...)")
	return c
}

// The log formats of --log-format.
const (
	logText = "text"
	logJSON = "json"
)

func checkLogFormat(format string) error {
	if format != logText && format != logJSON {
		return exitWith(exitUsage, "--log-format %q: want text or json", format)
	}
	return nil
}

// serveMetrics listens on addr and serves the metrics of the state st
// and of the scheduler m there until ctx ends; stop waits for the server
// to close. The pools and sensitive values are those of the definition in
// use (ws).
func serveMetrics(ctx context.Context, addr string, st store.Store, ws *liveRedact, m *metrics.Scheduler, log *slog.Logger) (stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, exitWith(exitUsage, "--metrics-listen %s: %v", addr, err)
	}
	reg := metrics.NewRegistry(metrics.NewState(metrics.StateOptions{State: st, Workspace: ws.workspace, Log: log}), m)
	mux := http.NewServeMux()
	mux.Handle("GET "+metrics.Path, metrics.Handler(reg, log))
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := web.Serve(ctx, ln, mux); err != nil {
			log.Error("metrics: the server stopped", "error", err)
		}
	}()
	log.Info("serving metrics", "url", "http://"+ln.Addr().String()+metrics.Path)
	return func() { cancel(); <-done }, nil
}

// schedulerGrace checks --grace against --lease-ttl: a scheduler that
// loses its lease steps down at TTL/2 and must have stopped its attempts
// before a standby takes over at the TTL, so the grace is under 0.4 x TTL.
// Not given, it is 10s or 0.3 x TTL, whichever is less.
func schedulerGrace(grace, ttl time.Duration, given bool) (time.Duration, error) {
	limit := ttl * 2 / 5
	if !given {
		return min(grace, ttl*3/10), nil
	}
	if grace >= limit {
		return 0, exitWith(exitUsage, "--grace %s with --lease-ttl %s: the grace must be under 0.4 x the lease TTL (%s): a scheduler that loses its lease stops its attempts within it, before a standby takes over; lower --grace or raise --lease-ttl", grace, ttl, limit)
	}
	return grace, nil
}

// checkDurations checks --grace, --lease-ttl and --poll.
func checkDurations(grace, ttl, poll time.Duration) error {
	switch {
	case grace < 0:
		return exitWith(exitUsage, "--grace %s: want a duration of 0 or more", grace)
	case ttl < time.Second:
		return exitWith(exitUsage, "--lease-ttl %s: want a duration of 1s or more", ttl)
	case poll <= 0:
		return exitWith(exitUsage, "--poll %s: want a duration above 0", poll)
	}
	return nil
}

// reloadOnHUP is the channel that asks the scheduler to reload its files:
// one request stands for any number of SIGHUPs until it is taken, until ctx
// ends. SIGHUP stays caught (a SIGHUP while stopping does not kill the
// scheduler) until stop is called.
func reloadOnHUP(ctx context.Context) (reload <-chan struct{}, stop func()) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	requests := make(chan struct{}, 1)
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				select {
				case requests <- struct{}{}:
				default:
				}
			}
		}
	}()
	return requests, func() { signal.Stop(hup) }
}

// schedulerLog is the scheduler's log on out: text lines, or JSON lines
// with format json (slog's keys: time, level, msg, then the attributes;
// durations as text, as in the text lines);
// warnings and errors only when quiet. Each string value (and error) is
// redacted before it is quoted or escaped, where out's redaction of the
// whole line could miss a secret whose escaped form differs.
func schedulerLog(out *liveRedact, quiet bool, format string) *slog.Logger {
	level := slog.LevelInfo
	if quiet {
		level = slog.LevelWarn
	}
	opts := &slog.HandlerOptions{Level: level, ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
		switch a.Value.Kind() {
		case slog.KindString:
			a.Value = slog.StringValue(out.redact(a.Value.String()))
		case slog.KindDuration:
			// "30s" in JSON as in text, not a count of nanoseconds.
			a.Value = slog.StringValue(a.Value.Duration().String())
		case slog.KindAny:
			if err, ok := a.Value.Any().(error); ok {
				a.Value = slog.StringValue(out.redact(err.Error()))
			}
		}
		return a
	}}
	if format == logJSON {
		return slog.New(slog.NewJSONHandler(out, opts))
	}
	return slog.New(slog.NewTextHandler(out, opts))
}

// liveRedact scrubs the sensitive values of the definition in use (the
// last one loaded) from the scheduler's log.
type liveRedact struct {
	mu sync.Mutex
	w  io.Writer
	ws *dsl.Workspace
}

func (r *liveRedact) use(ws *dsl.Workspace) {
	r.mu.Lock()
	r.ws = ws
	r.mu.Unlock()
}

// workspace is the definition in use.
func (r *liveRedact) workspace() *dsl.Workspace {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ws
}

// redact scrubs the sensitive values of the definition in use from s.
func (r *liveRedact) redact(s string) string { return r.workspace().Redact(s) }

func (r *liveRedact) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, err := io.WriteString(r.w, r.ws.Redact(string(p))); err != nil {
		return 0, err
	}
	return len(p), nil
}
