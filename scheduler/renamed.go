package scheduler

import (
	"context"
	"slices"

	"github.com/rewind-dev/rewind/dsl"
	"github.com/rewind-dev/rewind/store"
)

// Renamed is a pipeline of the workspace that looks like another one
// renamed in the pipeline files: it has no run in the state, and From, a
// pipeline that the state knows but the workspace no longer declares, has
// runs of the same tasks, or of largely the same (the tasks the two have
// in common are at least half of the tasks of either). Its catchup would
// run From's history again under the new name; `rewind rename From
// Pipeline` carries that history over instead.
type Renamed struct {
	Pipeline string // the name the workspace declares
	From     string // the name the state knows it by
	// Common are the tasks the two share, of Tasks, the tasks of either.
	Common, Tasks int
	// Paused: the pipeline is paused, so nothing of it runs until an
	// operator says which (set by the engine, for its summary).
	Paused bool
	// Held: the engine paused it in this execution, having found it new
	// to the state.
	Held bool
}

// RenameCommand is the command that carries the history over.
func (r Renamed) RenameCommand() string { return "rewind rename " + r.From + " " + r.Pipeline }

// FindRenamed returns the pipelines of ws (those named in names, or all)
// that look renamed, each with the vanished pipeline it matches best. It
// reads the state's pipelines and, only when some of them are no longer
// in ws, the tasks of their latest runs and whether the candidates without
// a catchup cursor have runs: one index seek each.
func FindRenamed(ctx context.Context, st store.Store, ws *dsl.Workspace, names []string) ([]Renamed, error) {
	known, err := st.ListPipelines(ctx)
	if err != nil {
		return nil, err
	}
	type gone struct {
		name  string
		tasks []string
	}
	var vanished []gone
	for _, p := range known {
		if ws.Pipeline(p.Name) != nil {
			continue
		}
		tasks, err := st.LatestTasks(ctx, p.Name)
		if err != nil {
			return nil, err
		}
		if len(tasks) > 0 {
			vanished = append(vanished, gone{p.Name, tasks})
		}
	}
	if len(vanished) == 0 {
		return nil, nil
	}
	inState := map[string]store.Pipeline{}
	for _, p := range known {
		inState[p.Name] = p
	}
	var out []Renamed
	for _, def := range ws.Pipelines {
		if len(names) > 0 && !slices.Contains(names, def.Name) {
			continue
		}
		if sp, ok := inState[def.Name]; ok {
			// Known to the state: a candidate only while it has no run. A
			// catchup cursor is only ever set with runs it created, and
			// runs are never deleted: most pipelines cost no query.
			if !sp.CatchupThrough.IsZero() {
				continue
			}
			tasks, err := st.LatestTasks(ctx, def.Name)
			if err != nil {
				return nil, err
			}
			if len(tasks) > 0 {
				continue
			}
		}
		var mine []string
		for _, t := range def.Tasks {
			mine = append(mine, t.Name)
		}
		best := Renamed{}
		for _, v := range vanished {
			common, union := overlap(mine, v.tasks)
			if 2*common < len(mine) || 2*common < len(v.tasks) {
				continue
			}
			if best.From == "" || common*best.Tasks > best.Common*union {
				best = Renamed{Pipeline: def.Name, From: v.name, Common: common, Tasks: union}
			}
		}
		if best.From != "" {
			out = append(out, best)
		}
	}
	return out, nil
}

// overlap counts the names a and b share and the names of either.
func overlap(a, b []string) (common, union int) {
	set := map[string]int{}
	for _, n := range a {
		set[n] |= 1
	}
	for _, n := range b {
		set[n] |= 2
	}
	for _, v := range set {
		if v == 3 {
			common++
		}
	}
	return common, len(set)
}
