package web

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/rewind-dev/rewind/backfill"
	"github.com/rewind-dev/rewind/lease"
	"github.com/rewind-dev/rewind/ops"
	"github.com/rewind-dev/rewind/scheduler"
	"github.com/rewind-dev/rewind/store"
)

// A job is a backfill that this process applies, resumes or rolls back,
// as `backfill apply` and `rollback` do: a goroutine that holds the
// backfill's owner lease through its phases. The view runs one job at a
// time: two executions of one process would take the state's execution
// lease from each other (package lease counts a process as one holder).
type job struct {
	mu       sync.Mutex
	id       string
	kind     string // apply, resume, rollback
	started  time.Time
	ended    time.Time
	running  bool
	begun    bool // it holds the backfill and works on it
	phase    string
	progress *scheduler.Progress
	result   string
	err      string
}

// JobJSON is what /api/backfills/ID/job says of the job of the backfill
// in this view.
type JobJSON struct {
	Backfill  string           `json:"backfill"`
	Kind      string           `json:"kind"`
	Running   bool             `json:"running"`
	StartedAt string           `json:"started_at"`
	EndedAt   string           `json:"ended_at,omitempty"`
	Phase     string           `json:"phase,omitempty"`
	Progress  *JobProgressJSON `json:"progress,omitempty"`
	Result    string           `json:"result,omitempty"`
	Error     string           `json:"error,omitempty"`
}

// JobProgressJSON counts the runs of the job's run (or rebuild) phase.
type JobProgressJSON struct {
	Total     int `json:"total"`
	Succeeded int `json:"succeeded"`
	Failed    int `json:"failed"`
	Running   int `json:"running"`
	Queued    int `json:"queued"`
	Attempts  int `json:"attempts"`
}

func (j *job) json() *JobJSON {
	j.mu.Lock()
	defer j.mu.Unlock()
	out := &JobJSON{Backfill: j.id, Kind: j.kind, Running: j.running, StartedAt: j.started.UTC().Format(time.RFC3339),
		Phase: j.phase, Result: j.result, Error: j.err}
	if !j.ended.IsZero() {
		out.EndedAt = j.ended.UTC().Format(time.RFC3339)
	}
	if p := j.progress; p != nil {
		out.Progress = &JobProgressJSON{Total: p.Total, Succeeded: p.Succeeded, Failed: p.Failed, Running: p.Running, Queued: p.Queued, Attempts: p.Attempts}
	}
	return out
}

// jobOf is the view's last job of backfill id (nil: none).
func (s *Server) jobOf(id string) *JobJSON {
	s.jobsMu.Lock()
	j := s.jobs[id]
	s.jobsMu.Unlock()
	if j == nil {
		return nil
	}
	return j.json()
}

func (s *Server) apiJob(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	j := s.jobOf(id)
	if j == nil {
		s.fail(w, r, errorf(http.StatusNotFound, "this view has run nothing of backfill %s", id))
		return
	}
	s.sendJSON(w, r, j)
}

// owned is the refusal of a second job of backfill id while one runs:
// the error `backfill apply --resume` gives when another rewind owns it.
func (s *Server) owned(ctx context.Context, id string) error {
	l, err := s.o.Write.GetLease(ctx, backfill.OwnerLease(id))
	if err != nil {
		host := os.Getenv(lease.EnvHost)
		if host == "" {
			host, _ = os.Hostname()
		}
		l = store.Lease{Host: host, PID: os.Getpid(), ExpiresAt: time.Now().Add(lease.DefaultTTL)}
	}
	return &backfill.OwnedError{ID: id, Lease: l}
}

// busy refuses a job while another runs in this view.
func (s *Server) busy(ctx context.Context, id string) error {
	s.jobsMu.Lock()
	defer s.jobsMu.Unlock()
	if j := s.jobs[id]; j != nil && j.running {
		return s.owned(ctx, id)
	}
	for other, j := range s.jobs {
		if j.running {
			return errorf(http.StatusConflict, "this view is running backfill %s (%s); it runs one backfill at a time: wait for it to end", other, j.kind)
		}
	}
	return nil
}

// probe checks, as `backfill apply` does first, that no other rewind
// executes on the state (a *lease.BusyError). Called only while the view
// runs no job, so that the execution lease it finds is another process's.
func (s *Server) probe(ctx context.Context) error {
	err := lease.Probe(ctx, s.o.Write, lease.Self(), false, nil)
	var busy *lease.BusyError
	if errors.As(err, &busy) {
		return busy
	}
	return err
}

// startJob runs a job of backfill id ("" for a new apply: run names it
// when it starts) in the background. It returns once the job holds the
// backfill (begin was called: its id) or ended before that (its error,
// which the caller records and answers). A job that began records its
// outcome in the audit trail when it ends, as e says.
func (s *Server) startJob(ctx context.Context, kind, id string, a actor, e ops.Entry,
	run func(ctx context.Context, j *job, begin func(id string)) (string, error)) (string, error) {
	j := &job{id: id, kind: kind, started: time.Now(), running: true}
	s.jobsMu.Lock()
	for other, o := range s.jobs {
		if o.running {
			s.jobsMu.Unlock()
			if other == id {
				return "", s.owned(ctx, id)
			}
			return "", errorf(http.StatusConflict, "this view is running backfill %s (%s); it runs one backfill at a time: wait for it to end", other, o.kind)
		}
	}
	if id != "" {
		s.jobs[id] = j
	} else {
		s.jobs[""] = j // holds the place of a new apply until it has an id
	}
	s.jobsMu.Unlock()
	begun := make(chan string, 1)
	ended := make(chan error, 1)
	begin := func(id string) {
		j.mu.Lock()
		first := !j.begun
		j.begun = true
		j.id = id
		j.mu.Unlock()
		if first {
			s.jobsMu.Lock()
			delete(s.jobs, "")
			s.jobs[id] = j
			s.jobsMu.Unlock()
			begun <- id
		}
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		result, err := run(s.ctx, j, begin)
		if err != nil {
			err = s.o.Workspace.RedactError(err)
		}
		j.mu.Lock()
		j.running, j.ended, j.result = false, time.Now(), result
		if err != nil {
			j.err = err.Error()
		}
		began := j.begun
		id := j.id
		j.mu.Unlock()
		if began {
			e.Target, e.Err = id, err
			if e.Pipeline == "" {
				if b, gerr := s.o.Write.GetBackfill(context.Background(), id); gerr == nil {
					e.Pipeline = b.Pipeline
				}
			}
			s.audit(context.Background(), a, e)
		} else {
			s.jobsMu.Lock()
			if s.jobs[id] == j || s.jobs[""] == j {
				delete(s.jobs, id)
				delete(s.jobs, "")
			}
			s.jobsMu.Unlock()
		}
		ended <- err
	}()
	select {
	case id := <-begun:
		return id, nil
	case err := <-ended:
		j.mu.Lock()
		defer j.mu.Unlock()
		if j.begun {
			return j.id, nil
		}
		if err == nil {
			return j.id, nil
		}
		return "", err
	}
}

// applyResult is the outcome of an apply or a resume as the audit trail
// and the job say it: ok only when the backfill succeeded.
func applyResult(res *backfill.BackfillResult, err error) (string, error) {
	if res == nil {
		return "", err
	}
	if err == nil && res.State != store.BackfillSuccess {
		err = fmt.Errorf("backfill %s: %s", res.ID, res.State)
	}
	if res.Summary != nil && res.Summary.Interrupted && err == nil {
		err = fmt.Errorf("interrupted: continue with 'rewind backfill apply --resume %s'", res.ID)
	}
	return string(res.State), err
}

// applyOptions are the options of an apply or a resume run by job j:
// its phases and progress go to the job.
func (s *Server) applyOptions(j *job, begin func(string)) backfill.ApplyOptions {
	return backfill.ApplyOptions{Store: s.o.Write, Workspace: s.o.Workspace, Home: s.o.Home, Wait: true, Log: s.o.Log, EnsureAgent: s.o.EnsureAgent,
		OnPhase: func(id, phase string) {
			j.mu.Lock()
			j.phase = phase
			j.mu.Unlock()
			begin(id)
		},
		OnProgress: func(p scheduler.Progress) {
			j.mu.Lock()
			j.progress = &p
			j.mu.Unlock()
		},
	}
}

// actResume is `backfill apply --resume ID`, run by this view.
func (s *Server) actResume(w http.ResponseWriter, r *http.Request, a actor) {
	id := r.PathValue("id")
	e := ops.Entry{Action: "backfill.resume", Target: id}
	b, err := s.findBackfill(r.Context(), id)
	if err == nil {
		e.Pipeline = b.Pipeline
		err = s.busy(r.Context(), id)
	}
	if err == nil {
		err = s.probe(r.Context())
	}
	if err == nil {
		_, err = s.startJob(r.Context(), "resume", id, a, e, func(ctx context.Context, j *job, begin func(string)) (string, error) {
			o := s.applyOptions(j, begin)
			o.ResumeID = id
			return applyResult(backfill.ApplyBackfill(ctx, o))
		})
		if err == nil {
			s.answer(w, r, fmt.Sprintf("backfill %s: resuming in this view", id))
			return
		}
	}
	s.done(w, r, a, ops.Entry{Action: e.Action, Target: id, Pipeline: e.Pipeline, Err: err}, 0, "")
}

// actRollback is `backfill rollback ID`, run by this view.
func (s *Server) actRollback(w http.ResponseWriter, r *http.Request, a actor) {
	id := r.PathValue("id")
	e := ops.Entry{Action: "backfill.rollback", Target: id}
	b, err := s.findBackfill(r.Context(), id)
	if err == nil {
		e.Pipeline = b.Pipeline
		err = s.busy(r.Context(), id)
	}
	if err == nil {
		_, err = s.startJob(r.Context(), "rollback", id, a, e, func(ctx context.Context, j *job, begin func(string)) (string, error) {
			j.mu.Lock()
			j.phase = backfill.PhaseRebuild
			j.mu.Unlock()
			_, err := backfill.RollbackBackfill(ctx, backfill.RollbackOptions{Store: s.o.Write, Workspace: s.o.Workspace, ID: id, Home: s.o.Home,
				Log: s.o.Log, EnsureAgent: s.o.EnsureAgent, OnStart: func() { begin(id) }})
			if err != nil {
				return "failed", err
			}
			return "rolled_back", nil
		})
		if err == nil {
			s.answer(w, r, fmt.Sprintf("backfill %s: rolling back in this view", id))
			return
		}
	}
	s.done(w, r, a, ops.Entry{Action: e.Action, Target: id, Pipeline: e.Pipeline, Err: err}, 0, "")
}

// answer is the message of an action that goes on in this process: 202.
func (s *Server) answer(w http.ResponseWriter, r *http.Request, msg string) {
	var buf bytes.Buffer
	_ = EncodeJSON(&buf, map[string]string{"message": msg})
	s.send(w, r, http.StatusAccepted, "application/json", buf.Bytes())
}
