package web

import (
	"fmt"
	"net/http"
	"time"

	"github.com/rewind-dev/rewind/dsl"
	"github.com/rewind-dev/rewind/store"
)

// A run's Gantt chart: one row per task, one bar per attempt, on the wall
// clock from the first attempt's start to the last one's end (now for a
// running attempt). Drawn on the server as SVG: no script needed.
const (
	ganttLabel = 180.0 // width of the task names
	ganttWidth = 1000.0
	ganttRowH  = 26.0
	ganttTop   = 28.0
)

type ganttChart struct {
	Pipeline string
	Run      store.Run
	RunKey   string
	Rows     []ganttRow
	Bars     []ganttBar
	Ticks    []ganttTick
	Span     time.Duration
	Height   float64
	Width    float64
	Label    float64
	Empty    bool
}

type ganttRow struct {
	Task string
	Y    float64
}

type ganttBar struct {
	Task, Pool, State, Reason string
	Try                       int
	X, Y, W, H                float64
	Duration                  time.Duration
	Running                   bool
}

type ganttTick struct {
	X     float64
	Label string
}

func gantt(def *dsl.Pipeline, r store.Run, now time.Time) ganttChart {
	g := ganttChart{Pipeline: r.Pipeline, Run: r, RunKey: store.RunID(r.Kind, r.LogicalDate), Width: ganttWidth, Label: ganttLabel}
	order := map[string]int{}
	if def != nil {
		for i, t := range def.Tasks {
			order[t.Name] = i
		}
	}
	tasks := append([]store.TaskInstance(nil), r.Tasks...)
	for i := 0; i < len(tasks); i++ { // insertion sort: a handful of tasks
		for j := i; j > 0 && less(order, tasks[j].Task, tasks[j-1].Task); j-- {
			tasks[j], tasks[j-1] = tasks[j-1], tasks[j]
		}
	}
	var t0, t1 time.Time
	for _, t := range tasks {
		for _, a := range t.Attempts {
			end := a.EndedAt
			if end.IsZero() {
				end = now
			}
			if t0.IsZero() || a.StartedAt.Before(t0) {
				t0 = a.StartedAt
			}
			if end.After(t1) {
				t1 = end
			}
		}
	}
	g.Span = t1.Sub(t0)
	span := float64(g.Span)
	if span <= 0 {
		span = float64(time.Second)
	}
	plot := ganttWidth - ganttLabel - 10
	for i, t := range tasks {
		y := ganttTop + float64(i)*ganttRowH
		g.Rows = append(g.Rows, ganttRow{Task: t.Task, Y: y})
		for _, a := range t.Attempts {
			end, running := a.EndedAt, a.EndedAt.IsZero()
			if running {
				end = now
			}
			x := ganttLabel + plot*float64(a.StartedAt.Sub(t0))/span
			w := max(plot*float64(end.Sub(a.StartedAt))/span, 2)
			g.Bars = append(g.Bars, ganttBar{Task: t.Task, Pool: a.Pool, State: string(a.State), Reason: a.Reason, Try: a.TryNumber,
				X: x, Y: y + 4, W: w, H: ganttRowH - 8, Duration: end.Sub(a.StartedAt), Running: running})
		}
	}
	g.Empty = len(g.Bars) == 0
	g.Height = ganttTop + float64(max(len(tasks), 1))*ganttRowH + 10
	if !g.Empty {
		for i := 0; i <= 4; i++ {
			at := time.Duration(float64(g.Span) * float64(i) / 4)
			g.Ticks = append(g.Ticks, ganttTick{X: ganttLabel + plot*float64(i)/4, Label: "+" + short(at)})
		}
	}
	return g
}

func less(order map[string]int, a, b string) bool {
	oa, okA := order[a]
	ob, okB := order[b]
	switch {
	case okA && okB:
		return oa < ob
	case okA != okB:
		return okA
	}
	return a < b
}

// short writes a duration for people: 850ms, 12.3s, 4m05s, 2h10m.
func short(d time.Duration) string {
	switch {
	case d < time.Second:
		return fmt.Sprintf("%dms", d.Milliseconds())
	case d < time.Minute:
		return fmt.Sprintf("%.1fs", d.Seconds())
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	}
	return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
}

func (s *Server) ganttPage(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	if err := s.knownPipeline(r.Context(), name); err != nil {
		s.fail(w, r, err)
		return
	}
	run, err := s.run(r.Context(), name, r.PathValue("id"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.page(w, r, http.StatusOK, "gantt.html", name+" "+run.DS, gantt(s.o.Workspace.Pipeline(name), run, s.o.Now()))
}
