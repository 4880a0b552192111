package rename

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/rewind-dev/rewind/backfill"
	"github.com/rewind-dev/rewind/dsl"
	"github.com/rewind-dev/rewind/lease"
	"github.com/rewind-dev/rewind/store"
)

// Options say what to rename.
type Options struct {
	Store store.Store
	// Workspace is the workspace as its files are now: To is expected to
	// be one of its pipelines, and From no longer one.
	Workspace *dsl.Workspace
	// Home is the directory of logs/ and runs/ (.rewind of the workspace
	// by default), as the executions that wrote them had it.
	Home     string
	From, To string
	// Force renames although the workspace does not declare To, or still
	// declares From.
	Force bool
	// Wait for another rewind that holds the state's lease, instead of
	// refusing.
	Wait bool
}

// Result is what a rename did.
type Result struct {
	store.RenameResult
	// Moved are the directories moved, as [from, to] paths.
	Moved [][2]string
	// Kept are files left under the old name because a file of the same
	// name was under the new one already.
	Kept []string
	// Finished: the state was under the new name already (an earlier
	// rename stopped before it had moved the files); this one moved them.
	Finished bool
}

// Refusal is a rename that the workspace or the state does not allow: its
// message says why and what to do. Busy: another rewind holds the state
// (its execution lease, or attempts of the pipeline still running).
type Refusal struct {
	Msg  string
	Busy bool
}

func (r *Refusal) Error() string { return r.Msg }

func refuse(format string, args ...any) error {
	return &Refusal{Msg: fmt.Sprintf(format, args...)}
}

// dirs are the directories under Home that are named after a pipeline, in
// the order a rename moves them: the logs last, since the state's log
// paths are what tells an unfinished rename.
var dirs = []string{"runs", "logs"}

// Pipeline renames pipeline From to To: the state, then the files.
func Pipeline(ctx context.Context, o Options) (Result, error) {
	if err := o.checkNames(); err != nil {
		return Result{}, err
	}
	if o.Home == "" {
		o.Home = ".rewind"
	}
	home, err := filepath.Abs(o.Home)
	if err != nil {
		return Result{}, err
	}
	o.Home = home
	self := lease.Self()
	held, err := lease.AcquireExecution(ctx, o.Store, self, o.Wait)
	var busy *lease.BusyError
	if errors.As(err, &busy) {
		return Result{}, &Refusal{Busy: true, Msg: busy.Error()}
	}
	if err != nil {
		return Result{}, err
	}
	defer lease.ReleaseExecution(context.WithoutCancel(ctx), o.Store, self)
	st := o.Store.Fenced(lease.Execution, self.ID, held.Generation)

	fromTasks, err := st.LatestTasks(ctx, o.From)
	if err != nil {
		return Result{}, err
	}
	if len(fromTasks) == 0 {
		done, err := o.renamedBefore(ctx, st)
		if err != nil || !done {
			if err == nil {
				err = refuse("%s has no run in the state: there is no history to carry over", o.From)
			}
			return Result{}, err
		}
		res := Result{Finished: true}
		return res, o.moveFiles(&res)
	}
	p, err := o.check(ctx, st)
	if err != nil {
		return Result{}, err
	}
	var res Result
	if res.RenameResult, err = st.RenamePipeline(ctx, p); err != nil {
		switch {
		case errors.Is(err, store.ErrConflict), errors.Is(err, store.ErrNotFound):
			// Changed since the checks above: they were made without a lock.
			return Result{}, refuse("the state changed while renaming (nothing was renamed): %v", err)
		case errors.Is(err, store.ErrFenced):
			return Result{}, &Refusal{Busy: true, Msg: fmt.Sprintf("another rewind took the state's lease (nothing was renamed): %v", err)}
		}
		return Result{}, err
	}
	return res, o.moveFiles(&res)
}

// checkNames refuses names that are not pipeline names of the workspace
// as the flags ask.
func (o Options) checkNames() error {
	switch {
	case o.From == o.To:
		return refuse("%s and %s are the same name", o.From, o.To)
	case !dsl.ValidName(o.To):
		return refuse("%q is not a pipeline name: use letters, digits, underscores and dashes, starting with a letter or underscore", o.To)
	case !dsl.ValidName(o.From):
		return refuse("%q is not a pipeline name", o.From)
	}
	if o.Force {
		return nil
	}
	if o.Workspace.Pipeline(o.To) == nil {
		return refuse("%s is not a pipeline of the workspace: rename the pipeline in its file first (or pass --force to carry the history over to a name the files do not declare)", o.To)
	}
	if o.Workspace.Pipeline(o.From) != nil {
		return refuse("%s is still a pipeline of the workspace: its next run would run its history again under %s; rename it in its file first (or pass --force)", o.From, o.From)
	}
	return nil
}

// check refuses what the state does not allow, with what to do about it,
// and returns the store's operation: the plans that name From rewritten,
// the log paths that move. The store checks the same again in its
// transaction.
func (o Options) check(ctx context.Context, st store.Store) (store.RenamePipelineParams, error) {
	p := store.RenamePipelineParams{From: o.From, To: o.To, Now: time.Now(),
		LogsFrom: filepath.Join(o.Home, "logs", o.From) + string(filepath.Separator),
		LogsTo:   filepath.Join(o.Home, "logs", o.To) + string(filepath.Separator)}
	if runs, err := st.ListRuns(ctx, store.ListRunsParams{Pipelines: []string{o.To}}); err != nil {
		return p, err
	} else if len(runs) > 0 {
		return p, refuse("%s has %s in the state already: a rename would mix two histories (rewind runs --pipeline %s lists them)", o.To, count(len(runs), "run"), o.To)
	}
	running, err := st.RunningAttempts(ctx)
	if err != nil {
		return p, err
	}
	n := 0
	for _, a := range running {
		if a.Pipeline == o.From {
			n++
		}
	}
	if n > 0 {
		return p, &Refusal{Busy: true, Msg: fmt.Sprintf("%s has %s still running, left by a rewind that stopped: 'rewind run' settles them (it adopts or records every attempt left running); rename once they have ended", o.From, count(n, "attempt"))}
	}
	bfs, err := st.ListBackfills(ctx)
	if err != nil {
		return p, err
	}
	for _, b := range bfs {
		names := append([]string{b.Pipeline}, b.Paused...)
		if b.State == store.BackfillRunning && (slices.Contains(names, o.From) || slices.Contains(names, o.To)) {
			return p, refuse("backfill %s of %s is running, or stopped midway: let it finish, or cancel it (rewind backfill cancel %s), then rename", b.ID, b.Pipeline, b.ID)
		}
		plan, renamed, err := backfill.RenamePlan(b.Plan, o.From, o.To)
		if err != nil {
			return p, fmt.Errorf("backfill %s: %w", b.ID, err)
		}
		if renamed {
			p.Plans = append(p.Plans, store.PlanRewrite{ID: b.ID, Old: b.Plan, New: plan})
		}
	}
	for _, sub := range dirs {
		dst := filepath.Join(o.Home, sub, o.To)
		if files, err := countFiles(dst); err != nil {
			return p, err
		} else if files > 0 {
			return p, refuse("%s holds %s of an earlier pipeline named %s: move them away, then rename", dst, count(files, "file"), o.To)
		}
	}
	return p, nil
}

// renamedBefore says whether the state holds From's history under To
// already, with files of it still under From's directories: a rename that
// stopped after its transaction. The evidence is a log path recorded under
// To whose file is missing there and present under From.
func (o Options) renamedBefore(ctx context.Context, st store.Store) (bool, error) {
	runs, err := st.ListRuns(ctx, store.ListRunsParams{Pipelines: []string{o.To}, WithAttempts: true})
	if err != nil {
		return false, err
	}
	to := filepath.Join(o.Home, "logs", o.To) + string(filepath.Separator)
	for _, r := range runs {
		for _, ti := range r.Tasks {
			for _, a := range ti.Attempts {
				rel, ok := strings.CutPrefix(a.LogPath, to)
				if !ok {
					continue
				}
				if _, err := os.Lstat(a.LogPath); !errors.Is(err, fs.ErrNotExist) {
					continue
				}
				if _, err := os.Lstat(filepath.Join(o.Home, "logs", o.From, rel)); err == nil {
					return true, nil
				}
			}
		}
	}
	return false, nil
}

// moveFiles moves From's directories under Home to To's: one rename of
// each directory, or, where To's exists already, of each file into it (a
// file that exists there is kept, and From's left where it is).
func (o Options) moveFiles(res *Result) error {
	for _, sub := range dirs {
		src, dst := filepath.Join(o.Home, sub, o.From), filepath.Join(o.Home, sub, o.To)
		if _, err := os.Lstat(src); errors.Is(err, fs.ErrNotExist) {
			continue
		}
		kept, err := move(src, dst)
		if err != nil {
			return fmt.Errorf("the state is renamed; moving %s to %s: %w (run the same rename again to move the rest)", src, dst, err)
		}
		res.Moved = append(res.Moved, [2]string{src, dst})
		res.Kept = append(res.Kept, kept...)
	}
	return nil
}

// move moves directory src to dst: at once when dst does not exist, else
// file by file, then removes what is left of src (empty directories).
func move(src, dst string) (kept []string, err error) {
	if err := os.Rename(src, dst); err == nil {
		return nil, nil
	} else if _, serr := os.Lstat(dst); serr != nil {
		return nil, err
	}
	err = filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		if _, err := os.Lstat(target); err == nil {
			kept = append(kept, path)
			return nil
		}
		if err := os.MkdirAll(filepath.Dir(target), 0o700); err != nil {
			return err
		}
		return os.Rename(path, target)
	})
	if err != nil {
		return kept, err
	}
	removeEmpty(src)
	return kept, nil
}

// removeEmpty removes dir and the directories below it that hold no file.
func removeEmpty(dir string) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		if e.IsDir() {
			removeEmpty(filepath.Join(dir, e.Name()))
		}
	}
	_ = os.Remove(dir) // fails, as it should, when a file is left
}

// countFiles counts the files below dir (0 when it does not exist).
func countFiles(dir string) (int, error) {
	n := 0
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err == nil && !d.IsDir() {
			n++
		}
		return err
	})
	return n, err
}

// count is "1 run", "2 runs".
func count(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return fmt.Sprintf("%d %ss", n, word)
}
