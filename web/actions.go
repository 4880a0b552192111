package web

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/rewind-dev/rewind/backfill"
	"github.com/rewind-dev/rewind/lease"
	"github.com/rewind-dev/rewind/ops"
	"github.com/rewind-dev/rewind/store"
)

// The actions: each POST calls the package function the CLI command
// calls (package ops: clear, mark, retry, pause; package backfill: the
// backfill commands), answers the CLI's message or its error (with the
// status of the CLI's exit code: usage 400, unknown 404, refused by the
// state 409, held by another rewind 409 or 423), and is recorded in the
// audit trail. Each is guarded by write: the token, the origin, the
// session's CSRF token.

func (s *Server) actionRoutes() {
	m := s.mux
	m.HandleFunc("POST /api/pipelines/{name}/clear", s.write(s.actClear))
	m.HandleFunc("POST /api/pipelines/{name}/mark/{state}", s.write(s.actMark))
	m.HandleFunc("POST /api/pipelines/{name}/retry", s.write(s.actRetry))
	m.HandleFunc("POST /api/pipelines/{name}/pause", s.write(s.actPause(true)))
	m.HandleFunc("POST /api/pipelines/{name}/unpause", s.write(s.actPause(false)))
	m.HandleFunc("POST /api/backfills/{id}/pause", s.write(s.actBackfillOp("backfill.pause", "paused: nothing new starts until rewind backfill unpause", hold(true))))
	m.HandleFunc("POST /api/backfills/{id}/unpause", s.write(s.actBackfillOp("backfill.unpause", "unpaused", hold(false))))
	m.HandleFunc("POST /api/backfills/{id}/cancel", s.write(s.actBackfillOp("backfill.cancel", "cancelled", backfill.CancelBackfill)))
	m.HandleFunc("POST /api/backfills/{id}/resume", s.write(s.actResume))
	m.HandleFunc("POST /api/backfills/{id}/rollback", s.write(s.actRollback))
	m.HandleFunc("GET /pipelines/{name}/backfill", s.backfillForm)
	m.HandleFunc("POST /pipelines/{name}/backfill", s.write(s.actBackfillForm))
}

// ActionRoutes are the paths of every write the view takes ({name} a
// pipeline, {id} a backfill, {state} success or failed), for the tests
// that check that each one is guarded.
var ActionRoutes = []string{
	"/api/pipelines/{name}/clear", "/api/pipelines/{name}/mark/success", "/api/pipelines/{name}/mark/failed",
	"/api/pipelines/{name}/retry", "/api/pipelines/{name}/pause", "/api/pipelines/{name}/unpause",
	"/api/backfills/{id}/pause", "/api/backfills/{id}/unpause", "/api/backfills/{id}/cancel",
	"/api/backfills/{id}/resume", "/api/backfills/{id}/rollback", "/pipelines/{name}/backfill",
}

func hold(h bool) func(context.Context, store.Store, string) (store.Backfill, error) {
	return func(ctx context.Context, st store.Store, id string) (store.Backfill, error) {
		return backfill.HoldBackfill(ctx, st, id, h)
	}
}

// canWrite says whether the view takes writes at all: a state to write,
// and a token that every write must carry.
func (s *Server) canWrite() bool { return s.o.Write != nil && s.o.Token != "" }

// ErrNoToken refuses every write of a view started without a token.
var ErrNoToken = errors.New("this view was started without a token, so it only reads: start rewind ui with --token or " + EnvToken + " to act from it")

// actor is who a write comes from, for the audit trail.
type actor = ops.Actor

// write guards an action: the view takes writes (a token), the request
// comes from a page of this server (Origin, else Referer) and carries the
// session's CSRF token (a cookie session) or the token itself (a bearer
// client). Anything else is a 403 that changes nothing.
func (s *Server) write(h func(w http.ResponseWriter, r *http.Request, a actor)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if s.o.Token == "" {
			s.fail(w, r, errorf(http.StatusForbidden, "%v", ErrNoToken))
			return
		}
		if s.o.Write == nil {
			s.fail(w, r, errorf(http.StatusForbidden, "this view only reads"))
			return
		}
		p := principalOf(r)
		if p.who == "" {
			s.fail(w, r, errorf(http.StatusForbidden, "%s needs the token", r.Method))
			return
		}
		if err := s.sameOrigin(r, p); err != nil {
			s.fail(w, r, err)
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
		if err := r.ParseForm(); err != nil {
			s.fail(w, r, errorf(http.StatusBadRequest, "bad form: %v", err))
			return
		}
		if !p.bearer {
			sent := r.Header.Get("X-CSRF-Token")
			if sent == "" {
				sent = r.PostForm.Get("csrf")
			}
			if sent == "" || sent != p.csrf {
				s.fail(w, r, errorf(http.StatusForbidden, "write refused: the request lacks this session's CSRF token (reload the page and try again)"))
				return
			}
		}
		h(w, r, actor{Who: p.who, From: r.RemoteAddr})
	}
}

// actionStatus is the status and message of an action's error: the CLI's
// message, the status of its exit code.
func actionStatus(err error) int {
	var owned *backfill.OwnedError
	var busy *lease.BusyError
	var he *httpError
	switch {
	case errors.As(err, &he):
		return he.code
	case ops.KindOf(err) == ops.Usage:
		return http.StatusBadRequest
	case ops.KindOf(err) == ops.Unknown, errors.Is(err, store.ErrNotFound):
		return http.StatusNotFound
	case ops.KindOf(err) == ops.Refused, errors.Is(err, backfill.ErrBackfillState), errors.Is(err, backfill.ErrPipelinePaused),
		errors.Is(err, store.ErrConflict), errors.As(err, &owned):
		return http.StatusConflict
	case errors.As(err, &busy), errors.Is(err, store.ErrFenced):
		return http.StatusLocked
	case store.IsUnavailable(err):
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}

// done answers an action: recorded in the audit trail, then its message
// (code 200, or 202 for one that goes on in this process) or its error.
func (s *Server) done(w http.ResponseWriter, r *http.Request, a actor, e ops.Entry, code int, msg string) {
	s.audit(r.Context(), a, e)
	if e.Err != nil {
		s.fail(w, r, &httpError{code: actionStatus(e.Err), msg: e.Err.Error()})
		return
	}
	var buf strings.Builder
	_ = EncodeJSON(&buf, map[string]string{"message": msg})
	s.send(w, r, code, "application/json", []byte(buf.String()))
}

// audit records an action; a state that cannot record it is logged.
func (s *Server) audit(ctx context.Context, a actor, e ops.Entry) {
	if err := ops.Record(ctx, s.o.Write, a, e); err != nil {
		s.o.Log.Error("audit", "action", e.Action, "err", err)
	}
}

// selection reads the task instances an action names: start and end (a
// ds or an RFC 3339 logical date: one run is start = end = its logical
// date), task, downstream.
func selection(r *http.Request) (ops.Selection, map[string]any) {
	f := r.PostForm
	sel := ops.Selection{Pipeline: r.PathValue("name"), Start: f.Get("start"), End: f.Get("end"), Task: f.Get("task"), Downstream: f.Get("downstream") == "true"}
	args := map[string]any{"start": sel.Start, "end": sel.End}
	if sel.Task != "" {
		args["task"] = sel.Task
	}
	if sel.Downstream {
		args["downstream"] = true
	}
	return sel, args
}

func (s *Server) actClear(w http.ResponseWriter, r *http.Request, a actor) {
	sel, args := selection(r)
	onlyFailed := r.PostForm.Get("only_failed") == "true"
	if onlyFailed {
		args["only_failed"] = true
	}
	n, err := ops.Clear(r.Context(), s.o.Write, s.o.Workspace, ops.ClearParams{Selection: sel, OnlyFailed: onlyFailed, Now: time.Now()})
	s.done(w, r, a, ops.Entry{Action: "clear", Target: sel.Pipeline, Pipeline: sel.Pipeline, Args: args, Err: err}, http.StatusOK,
		fmt.Sprintf("cleared %d task instances of %s from %s to %s", n, sel.Pipeline, sel.Start, sel.End))
}

func (s *Server) actMark(w http.ResponseWriter, r *http.Request, a actor) {
	sel, args := selection(r)
	state := store.TaskState(r.PathValue("state"))
	if state != store.TaskSuccess && state != store.TaskFailed {
		s.fail(w, r, errorf(http.StatusNotFound, "no page at %s", r.URL.Path))
		return
	}
	res, err := ops.Mark(r.Context(), s.o.Write, s.o.Workspace, ops.MarkParams{Selection: sel, State: state, Now: time.Now()})
	s.done(w, r, a, ops.Entry{Action: "mark." + string(state), Target: sel.Pipeline, Pipeline: sel.Pipeline, Args: args, Err: err}, http.StatusOK,
		fmt.Sprintf("marked %d task instances of %s %s from %s to %s; %d runs changed state", res.Tasks, sel.Pipeline, state, sel.Start, sel.End, res.Runs))
}

func (s *Server) actRetry(w http.ResponseWriter, r *http.Request, a actor) {
	sel, args := selection(r)
	n, err := ops.RetryNow(r.Context(), s.o.Write, s.o.Workspace, sel, time.Now())
	s.done(w, r, a, ops.Entry{Action: "retry", Target: sel.Pipeline, Pipeline: sel.Pipeline, Args: args, Err: err}, http.StatusOK,
		fmt.Sprintf("%d task instances of %s from %s to %s retry now", n, sel.Pipeline, sel.Start, sel.End))
}

func (s *Server) actPause(paused bool) func(http.ResponseWriter, *http.Request, actor) {
	verb := "unpause"
	if paused {
		verb = "pause"
	}
	return func(w http.ResponseWriter, r *http.Request, a actor) {
		name := r.PathValue("name")
		err := ops.SetPaused(r.Context(), s.o.Write, s.o.Workspace, name, paused, time.Now())
		s.done(w, r, a, ops.Entry{Action: verb, Target: name, Pipeline: name, Err: err}, http.StatusOK, fmt.Sprintf("%s: %sd", name, verb))
	}
}

// findBackfill is backfill id, or the CLI's error for an unknown id.
func (s *Server) findBackfill(ctx context.Context, id string) (store.Backfill, error) {
	b, err := s.o.Write.GetBackfill(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return b, errorf(http.StatusNotFound, "no backfill %q (rewind backfill list shows them)", id)
	}
	return b, err
}

// actBackfillOp is backfill pause, unpause or cancel: one change of the
// state, which the backfill's apply (here or elsewhere) sees within a
// second.
func (s *Server) actBackfillOp(action, did string, op func(context.Context, store.Store, string) (store.Backfill, error)) func(http.ResponseWriter, *http.Request, actor) {
	return func(w http.ResponseWriter, r *http.Request, a actor) {
		id := r.PathValue("id")
		b, err := s.findBackfill(r.Context(), id)
		if err == nil {
			b, err = op(r.Context(), s.o.Write, b.ID)
		}
		s.done(w, r, a, ops.Entry{Action: action, Target: id, Pipeline: b.Pipeline, Err: err}, http.StatusOK, fmt.Sprintf("backfill %s: %s", id, did))
	}
}
