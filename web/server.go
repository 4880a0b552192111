package web

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"net/netip"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/rewind-dev/rewind/dsl"
	"github.com/rewind-dev/rewind/metrics"
	"github.com/rewind-dev/rewind/scheduler"
	"github.com/rewind-dev/rewind/store"
)

// Reader is the part of the state the view uses: reads only, so that
// nothing the view does can change the state.
type Reader interface {
	ListPipelines(ctx context.Context) ([]store.Pipeline, error)
	ListRuns(ctx context.Context, p store.ListRunsParams) ([]store.Run, error)
	CountRuns(ctx context.Context, p store.CountRunsParams) ([]store.RunCount, error)
	Usage(ctx context.Context) ([]store.UsageRow, error)
	Now(ctx context.Context) (time.Time, error)
	GetWatermark(ctx context.Context, pipeline string) (store.Watermark, error)
	ListBackfills(ctx context.Context) ([]store.Backfill, error)
	GetBackfill(ctx context.Context, id string) (store.Backfill, error)
	GetLease(ctx context.Context, name string) (store.Lease, error)
	ListProbes(ctx context.Context, p store.ListProbesParams) ([]store.ProbeResult, error)
	TaskDurations(ctx context.Context, p store.TaskDurationsParams) (map[string][]time.Duration, error)
	Stats(ctx context.Context) (store.Stats, error)
	ListAudit(ctx context.Context, p store.ListAuditParams) ([]store.AuditEntry, error)
}

// Options configure a Server.
type Options struct {
	// State is the state the view reads (a store.Store is one).
	State Reader
	// Write is the state the actions change (clear, mark, retry, pause,
	// the backfill commands), the same as State; nil: the view only
	// reads. Writes also need Token: without one, every write is refused.
	Write store.Store
	// EnsureAgent is backfill.ApplyOptions.EnsureAgent for the backfills
	// the view applies, resumes and rolls back.
	EnsureAgent func() error
	// Workspace is the loaded workspace: schedules, task order, outputs,
	// and the sensitive values to redact. Required.
	Workspace *dsl.Workspace
	// Home is the state's home directory: logs are served only from
	// Home/logs, reports read from Home/backfills.
	Home string
	// Token, when not empty, is required on every request: the header
	// "Authorization: Bearer TOKEN", or the session cookie /login sets.
	Token string
	// TrustedProxies are the addresses of the reverse proxies whose
	// X-Forwarded-Proto is believed: a request from one of them that says
	// https gets the Secure session cookie, as a TLS request does. None
	// by default.
	TrustedProxies []netip.Prefix
	// Now is the clock (next due intervals, durations of running
	// attempts); nil is time.Now.
	Now func() time.Time
	// Log receives one line per failed request; nil discards.
	Log *slog.Logger
}

// Server is the view: an http.Handler.
type Server struct {
	o      Options
	mux    *http.ServeMux
	tmpl   *template.Template
	static http.Handler
	// assetVersion is a digest of the static files, in their URLs, so
	// that a browser never runs a stale app.js against a new server.
	assetVersion string

	lakesMu sync.Mutex
	lakes   *scheduler.Lakes

	// metrics serves /metrics: the state's counts, read at each scrape.
	metrics http.Handler

	// jobs are the backfills this process applies, resumes or rolls
	// back, by id; ctx ends them when the view stops.
	jobsMu sync.Mutex
	jobs   map[string]*job
	ctx    context.Context
	stop   context.CancelFunc
	wg     sync.WaitGroup
}

//go:embed assets
var assets embed.FS

// New returns the view over o.State.
func New(o Options) (*Server, error) {
	if o.State == nil || o.Workspace == nil {
		return nil, errors.New("web: a state and a workspace are required")
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.Home != "" {
		abs, err := filepath.Abs(o.Home)
		if err != nil {
			return nil, err
		}
		o.Home = abs
	}
	static, err := fs.Sub(assets, "assets/static")
	if err != nil {
		return nil, err
	}
	s := &Server{o: o, mux: http.NewServeMux(), static: http.FileServerFS(static), lakes: scheduler.NewLakes(o.Workspace), jobs: map[string]*job{}}
	s.ctx, s.stop = context.WithCancel(context.Background())
	s.assetVersion, err = digestFS(static)
	if err != nil {
		return nil, err
	}
	s.tmpl, err = template.New("").Funcs(s.funcs()).ParseFS(assets, "assets/templates/*.html")
	if err != nil {
		return nil, err
	}
	s.metrics = metrics.Handler(metrics.NewRegistry(metrics.NewState(metrics.StateOptions{
		State: o.State, Workspace: func() *dsl.Workspace { return o.Workspace }, Log: o.Log,
	})), o.Log)
	s.routes()
	return s, nil
}

// Close stops the backfills the view runs (interrupted: each is resumed
// with apply --resume, or from the view) and waits for them, then
// releases the catalogs the view opened.
func (s *Server) Close() error {
	s.stop()
	s.wg.Wait()
	s.lakesMu.Lock()
	defer s.lakesMu.Unlock()
	return s.lakes.Close()
}

func (s *Server) routes() {
	m := s.mux
	m.HandleFunc("GET /{$}", s.pipelinesPage)
	m.HandleFunc("GET /pipelines/{name}", s.gridPage)
	m.HandleFunc("GET /pipelines/{name}/runs/{id}", s.ganttPage)
	m.HandleFunc("GET /backfills/{id}", s.backfillPage)
	m.HandleFunc("GET /login", s.loginPage)
	m.HandleFunc("POST /login", s.login)
	m.Handle("GET /static/", http.StripPrefix("/static/", s.staticFiles()))

	m.HandleFunc("GET /api/pipelines", s.apiPipelines)
	m.HandleFunc("GET /api/runs", s.apiRuns)
	m.HandleFunc("GET /api/grid", s.apiGrid)
	m.HandleFunc("GET /api/cell", s.apiCell)
	m.HandleFunc("GET /api/dates", s.apiDates)
	m.HandleFunc("GET /api/backfills", s.apiBackfills)
	m.HandleFunc("GET /api/scheduler", s.apiScheduler)
	m.HandleFunc("GET /api/backfills/{id}", s.apiBackfill)
	m.HandleFunc("GET /api/backfills/{id}/status", s.apiBackfillStatus)
	m.HandleFunc("GET /api/attempts/{id}/log", s.apiLog)
	m.HandleFunc("GET /api/audit", s.apiAudit)
	m.HandleFunc("GET /api/backfills/{id}/job", s.apiJob)
	s.actionRoutes()
	m.Handle("GET "+metrics.Path, s.metrics)
	m.HandleFunc("/", s.notFound)
}

// ServeHTTP answers a request: security headers on every response, the
// token rule, then the routes.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", contentSecurityPolicy)
	h.Set("X-Content-Type-Options", "nosniff")
	// same-origin, not no-referrer: a page's own form posts then carry
	// its Origin (under no-referrer a browser sends "Origin: null"), which
	// the writes check; no other origin ever gets a URL of the view.
	h.Set("Referrer-Policy", "same-origin")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Cross-Origin-Opener-Policy", "same-origin")
	h.Set("Cross-Origin-Resource-Policy", "same-origin")
	r, ok := s.allowed(w, r)
	if !ok {
		return
	}
	s.mux.ServeHTTP(w, r)
}

// contentSecurityPolicy: scripts, styles and fetches from this server
// only, no inline script or style, no framing, no plugins.
const contentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; " +
	"form-action 'self'; base-uri 'none'; frame-ancestors 'none'"

func (s *Server) staticFiles() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "" || strings.HasSuffix(r.URL.Path, "/") {
			s.fail(w, r, errorf(http.StatusNotFound, "no page at %s", r.URL.Path)) // no listings
			return
		}
		if r.URL.Query().Get("v") == s.assetVersion {
			w.Header().Set("Cache-Control", "public, max-age=31536000, immutable")
		} else {
			w.Header().Set("Cache-Control", "no-cache")
		}
		s.static.ServeHTTP(w, r)
	})
}

func digestFS(fsys fs.FS) (string, error) {
	h := sha256.New()
	err := fs.WalkDir(fsys, ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(fsys, path)
		if err != nil {
			return err
		}
		fmt.Fprintf(h, "%s\x00%d\x00", path, len(b))
		h.Write(b)
		return nil
	})
	return hex.EncodeToString(h.Sum(nil))[:12], err
}

// httpError is an error with the status code it answers.
type httpError struct {
	code int
	msg  string
}

func (e *httpError) Error() string { return e.msg }

func errorf(code int, format string, args ...any) error {
	return &httpError{code: code, msg: fmt.Sprintf(format, args...)}
}

// status is the code err answers: its own, 503 when the state could not
// be read, else 500.
func status(err error) int {
	var he *httpError
	switch {
	case errors.As(err, &he):
		return he.code
	case errors.Is(err, store.ErrNotFound):
		return http.StatusNotFound
	case store.IsUnavailable(err):
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}

func (s *Server) notFound(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		s.fail(w, r, errorf(http.StatusMethodNotAllowed, "the view is read-only: %s is not allowed", r.Method))
		return
	}
	s.fail(w, r, errorf(http.StatusNotFound, "no page at %s", r.URL.Path))
}

// fail answers err: JSON under /api/, a page elsewhere.
func (s *Server) fail(w http.ResponseWriter, r *http.Request, err error) {
	code := status(err)
	msg := err.Error()
	if code >= 500 {
		s.o.Log.Error("request failed", "path", r.URL.Path, "err", s.o.Workspace.Redact(msg))
	}
	if isAPI(r) {
		var buf bytes.Buffer
		_ = EncodeJSON(&buf, map[string]string{"error": s.o.Workspace.Redact(msg)})
		s.send(w, r, code, "application/json", buf.Bytes())
		return
	}
	s.page(w, r, code, "error.html", "Error", map[string]any{"Code": code, "Status": http.StatusText(code), "Message": s.o.Workspace.Redact(msg)})
}

// isAPI reports whether a request is a program's: the JSON API, and the
// metrics a scraper reads. Its errors are JSON, never a page.
func isAPI(r *http.Request) bool {
	return strings.HasPrefix(r.URL.Path, "/api/") || r.URL.Path == metrics.Path
}

// sendJSON answers v encoded as the CLI encodes it.
func (s *Server) sendJSON(w http.ResponseWriter, r *http.Request, v any) {
	var buf bytes.Buffer
	if err := EncodeJSON(&buf, s.o.Workspace.Redacted(v)); err != nil {
		s.fail(w, r, err)
		return
	}
	s.send(w, r, http.StatusOK, "application/json", buf.Bytes())
}

// pageData is what every page template gets.
type pageData struct {
	Title   string
	Version string
	Data    any
	// Write: the page shows the actions (the view has a token and a state
	// to write, and the request carries the token). CSRF is the session's
	// token, which every write of the page sends back; Who is the sign-in.
	Write     bool
	CSRF, Who string
	// Banner is the scheduler's banner of a page served to a reader who
	// may see the state (nil on the sign-in page and on errors).
	Banner *banner
}

// banner is what the top of a page says of the scheduling (Text "" when
// nothing is wrong: hidden, until the page's poll finds otherwise).
type banner struct{ Text string }

// page renders a page template (into a buffer: a template error is a 500,
// never half a page).
func (s *Server) page(w http.ResponseWriter, r *http.Request, code int, name, title string, data any) {
	var buf bytes.Buffer
	// Redacted before the template escapes it: an escaped secret no longer
	// matches its text.
	data = s.o.Workspace.Redacted(data)
	pd := pageData{Title: s.o.Workspace.Redact(title), Version: s.assetVersion, Data: data}
	if p := principalOf(r); s.canWrite() && p.who != "" {
		pd.Write, pd.CSRF, pd.Who = true, p.csrf, p.who
	}
	if code == http.StatusOK && name != "login.html" {
		// Pages only a reader who passed the token rule gets.
		if sch, err := s.schedulerState(r.Context()); err == nil {
			pd.Banner = &banner{Text: s.o.Workspace.Redact(sch.Warning)}
		}
	}
	if err := s.tmpl.ExecuteTemplate(&buf, name, pd); err != nil {
		s.o.Log.Error("template", "name", name, "err", err)
		http.Error(w, "template error", http.StatusInternalServerError)
		return
	}
	s.send(w, r, code, "text/html; charset=utf-8", buf.Bytes())
}

// send writes a dynamic response: sensitive values redacted (a second
// line of defence: the data was redacted before it was encoded), never
// cached, an ETag (a poll that finds nothing new gets 304), gzip when the
// client takes it.
func (s *Server) send(w http.ResponseWriter, r *http.Request, code int, contentType string, body []byte) {
	if s.o.Workspace.HasSecrets() {
		body = []byte(s.o.Workspace.Redact(string(body)))
	}
	h := w.Header()
	h.Set("Content-Type", contentType)
	h.Set("Cache-Control", "no-store")
	if code == http.StatusOK {
		sum := sha256.Sum256(body)
		etag := `"` + hex.EncodeToString(sum[:12]) + `"`
		h.Set("ETag", etag)
		if match := r.Header.Get("If-None-Match"); match != "" && match == etag {
			w.WriteHeader(http.StatusNotModified)
			return
		}
	}
	h.Add("Vary", "Accept-Encoding")
	if len(body) > 1024 && strings.Contains(r.Header.Get("Accept-Encoding"), "gzip") {
		var z bytes.Buffer
		gw, _ := gzip.NewWriterLevel(&z, gzip.BestSpeed)
		gw.Write(body)
		gw.Close()
		h.Set("Content-Encoding", "gzip")
		body = z.Bytes()
	}
	h.Set("Content-Length", fmt.Sprint(len(body)))
	w.WriteHeader(code)
	if r.Method != http.MethodHead {
		w.Write(body)
	}
}

// pipeline is the workspace's pipeline called name, or a 404.
func (s *Server) pipeline(name string) (*dsl.Pipeline, error) {
	if p := s.o.Workspace.Pipeline(name); p != nil {
		return p, nil
	}
	return nil, errorf(http.StatusNotFound, "unknown pipeline %q", name)
}

// knownPipeline accepts a pipeline of the workspace or of the state.
func (s *Server) knownPipeline(ctx context.Context, name string) error {
	if s.o.Workspace.Pipeline(name) != nil {
		return nil
	}
	ps, err := s.o.State.ListPipelines(ctx)
	if err != nil {
		return err
	}
	for _, p := range ps {
		if p.Name == name {
			return nil
		}
	}
	return errorf(http.StatusNotFound, "unknown pipeline %q", name)
}
