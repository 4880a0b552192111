package web

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/rewind-dev/rewind/store"
)

// Log tails: the view serves the log of an attempt by its id only (GET
// /api/attempts/ID/log); the file is the one the state records for that
// attempt, and only if it lies inside the state's log directory.
const (
	defaultTail = 64 << 10
	maxTail     = 1 << 20
)

// LogTail is the end of one attempt's log.
type LogTail struct {
	Text      string
	Truncated bool // the log is longer than Text
	Size      int64
}

// findAttempt finds an attempt by id: among the runs of one run
// (pipeline and run given), of one pipeline, or of every pipeline.
func (s *Server) findAttempt(ctx context.Context, idText, pipeline, run string) (store.Attempt, error) {
	id, err := strconv.ParseInt(idText, 10, 64)
	if err != nil || id <= 0 || strconv.FormatInt(id, 10) != idText {
		return store.Attempt{}, errorf(http.StatusBadRequest, "attempt %q: an attempt is named by its id, a number (no paths)", idText)
	}
	var runs []store.Run
	switch {
	case pipeline != "" && run != "":
		r, err := s.run(ctx, pipeline, run)
		if err != nil {
			return store.Attempt{}, err
		}
		runs = []store.Run{r}
	default:
		p := store.ListRunsParams{WithTasks: true, WithAttempts: true}
		if pipeline != "" {
			if err := s.knownPipeline(ctx, pipeline); err != nil {
				return store.Attempt{}, err
			}
			p.Pipelines = []string{pipeline}
		}
		if runs, err = s.o.State.ListRuns(ctx, p); err != nil {
			return store.Attempt{}, err
		}
	}
	for _, r := range runs {
		for _, t := range r.Tasks {
			for _, a := range t.Attempts {
				if a.ID == id {
					return a, nil
				}
			}
		}
	}
	return store.Attempt{}, errorf(http.StatusNotFound, "no attempt %d", id)
}

// tailLog reads the last n bytes of an attempt's log.
func (s *Server) tailLog(a store.Attempt, n int64) (LogTail, error) {
	f, err := s.openLog(a.LogPath)
	if err != nil {
		return LogTail{}, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return LogTail{}, err
	}
	if !fi.Mode().IsRegular() {
		return LogTail{}, errorf(http.StatusNotFound, "the log of attempt %d is not a regular file", a.ID)
	}
	t := LogTail{Size: fi.Size()}
	off := int64(0)
	if fi.Size() > n {
		off, t.Truncated = fi.Size()-n, true
	}
	b := make([]byte, fi.Size()-off)
	if _, err := f.ReadAt(b, off); err != nil && !errors.Is(err, io.EOF) {
		return LogTail{}, err
	}
	text := string(b)
	if t.Truncated {
		if i := strings.IndexByte(text, '\n'); i >= 0 && i < len(text)-1 {
			text = text[i+1:] // from a whole line
		}
	}
	if a.Nonce != "" {
		// The wrapper's status line carries the attempt's secret: not
		// the reader's business.
		text = strings.ReplaceAll(text, a.Nonce+" ", "")
	}
	t.Text = text
	return t, nil
}

// openLog opens a log path the state recorded: only inside Home/logs
// (symbolic links resolved, the file itself never one).
func (s *Server) openLog(path string) (*os.File, error) {
	if s.o.Home == "" || path == "" {
		return nil, errorf(http.StatusNotFound, "no log")
	}
	logs := filepath.Join(s.o.Home, "logs")
	clean := filepath.Clean(path)
	if !filepath.IsAbs(clean) {
		// The engine records absolute paths; an older relative one is
		// taken from the working directory, as rewind logs takes it.
		abs, err := filepath.Abs(clean)
		if err != nil {
			return nil, err
		}
		clean = abs
	}
	if !inside(logs, clean) {
		return nil, errorf(http.StatusNotFound, "the log is outside the state's log directory")
	}
	realLogs, err := filepath.EvalSymlinks(logs)
	if err != nil {
		return nil, notFoundLog(err)
	}
	realDir, err := filepath.EvalSymlinks(filepath.Dir(clean))
	if err != nil {
		return nil, notFoundLog(err)
	}
	if !inside(realLogs, filepath.Join(realDir, filepath.Base(clean))) {
		return nil, errorf(http.StatusNotFound, "the log is outside the state's log directory")
	}
	f, err := os.OpenFile(filepath.Join(realDir, filepath.Base(clean)), os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if errors.Is(err, syscall.ELOOP) {
		return nil, errorf(http.StatusNotFound, "the log is a symbolic link: not followed")
	}
	if err != nil {
		return nil, notFoundLog(err)
	}
	return f, nil
}

func notFoundLog(err error) error {
	if errors.Is(err, fs.ErrNotExist) {
		return errorf(http.StatusNotFound, "no log yet")
	}
	return err
}

// inside reports whether path is dir or below it.
func inside(dir, path string) bool {
	rel, err := filepath.Rel(dir, path)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) && !filepath.IsAbs(rel)
}

// apiLog serves the tail of an attempt's log as text: ?tail=BYTES
// (default 64 KiB, at most 1 MiB); pipeline= and run= narrow the search.
func (s *Server) apiLog(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	for k := range q {
		if k != "pipeline" && k != "run" && k != "tail" {
			s.fail(w, r, errorf(http.StatusBadRequest, "unknown parameter %q: a log is named by its attempt id only", k))
			return
		}
	}
	n := int64(defaultTail)
	if t := q.Get("tail"); t != "" {
		v, err := strconv.ParseInt(t, 10, 64)
		if err != nil || v <= 0 {
			s.fail(w, r, errorf(http.StatusBadRequest, "tail=%q: want a number of bytes", t))
			return
		}
		n = min(v, maxTail)
	}
	a, err := s.findAttempt(r.Context(), r.PathValue("id"), q.Get("pipeline"), q.Get("run"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	t, err := s.tailLog(a, n)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	w.Header().Set("X-Rewind-Log-Size", fmt.Sprint(t.Size))
	if t.Truncated {
		w.Header().Set("X-Rewind-Log-Truncated", "true")
	}
	s.send(w, r, http.StatusOK, "text/plain; charset=utf-8", []byte(t.Text))
}
