package scheduler_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rewind-dev/rewind/dsl"
	"github.com/rewind-dev/rewind/scheduler"
	"github.com/rewind-dev/rewind/store"
)

// rewrite replaces the workspace's pipeline file and loads it again.
func (e *env) rewrite(hcl string) {
	e.t.Helper()
	if err := os.WriteFile(filepath.Join(e.dir, "main.hcl"), []byte(hcl), 0o644); err != nil {
		e.t.Fatal(err)
	}
	ws, diags := dsl.Load(e.dir, dsl.LoadOptions{})
	if diags.HasErrors() {
		e.t.Fatal(diags.Error())
	}
	e.ws = ws
}

const renamedBefore = `
pipeline "sales" {
  schedule   = "@daily"
  start_date = "2025-07-01"
  task "extract" { command = "echo \"$REWIND_PIPELINE extract $REWIND_DS\" >> events.log" }
  task "load" {
    depends_on = [task.extract]
    command    = "echo \"$REWIND_PIPELINE load $REWIND_DS\" >> events.log"
  }
}
pipeline "other" {
  schedule   = "@daily"
  start_date = "2025-07-01"
  task "t" { command = "echo \"$REWIND_PIPELINE t $REWIND_DS\" >> events.log" }
}
`

// A pipeline renamed in the files is new to the state: the execution
// records it paused rather than run its history again, and its summary
// says which pipeline it looks renamed from, until an operator decides.
// Once unpaused, it runs under the new name and the summary still says so.
func TestRenamedPipelineHeldBack(t *testing.T) {
	e := newEnv(t, renamedBefore)
	now := utc("2025-07-04T00:00:00Z")
	e.run(scheduler.Options{Now: now})
	if n := len(e.events("events.log")); n != 9 {
		t.Fatalf("%d task runs before the rename, want 9", n)
	}

	e.rewrite(strings.Replace(renamedBefore, `pipeline "sales"`, `pipeline "revenue"`, 1))
	sum := e.run(scheduler.Options{Now: now})
	want := scheduler.Renamed{Pipeline: "revenue", From: "sales", Common: 2, Tasks: 2, Paused: true, Held: true}
	if len(sum.Renamed) != 1 || sum.Renamed[0] != want {
		t.Fatalf("Renamed = %+v, want [%+v]", sum.Renamed, want)
	}
	if sum.Created != 0 || len(e.runs("revenue")) != 0 || len(e.events("events.log")) != 9 {
		t.Fatalf("the renamed pipeline ran: created %d, %d runs, %d task runs", sum.Created, len(e.runs("revenue")), len(e.events("events.log")))
	}
	if got := sum.Renamed[0].RenameCommand(); got != "rewind rename sales revenue" {
		t.Errorf("RenameCommand = %q", got)
	}
	// The next execution finds it paused and says the same, without holding it again.
	sum = e.run(scheduler.Options{Now: now})
	want.Held = false
	if len(sum.Renamed) != 1 || sum.Renamed[0] != want || len(e.runs("revenue")) != 0 {
		t.Fatalf("second execution: Renamed = %+v, %d runs", sum.Renamed, len(e.runs("revenue")))
	}

	// The operator runs it under the new name.
	if err := e.st.SetPaused(context.Background(), store.SetPausedParams{Name: "revenue", Paused: false, Now: now}); err != nil {
		t.Fatal(err)
	}
	sum = e.run(scheduler.Options{Now: now})
	want.Paused = false
	if len(sum.Renamed) != 1 || sum.Renamed[0] != want || sum.Created != 3 {
		t.Fatalf("after unpause: Renamed = %+v, created %d", sum.Renamed, sum.Created)
	}
	if sum = e.run(scheduler.Options{Now: now}); len(sum.Renamed) != 0 {
		t.Errorf("a pipeline with runs still looks renamed: %+v", sum.Renamed)
	}
}

// Which pipelines look renamed: the same tasks, or largely the same (half
// of either's tasks in common), from a pipeline that has runs and is no
// longer declared (one without runs, never_ran, is no source); a pipeline
// with runs is none.
func TestFindRenamed(t *testing.T) {
	e := newEnv(t, `
pipeline "a" {
  schedule   = "@daily"
  start_date = "2025-07-01"
  task "x" { command = "true" }
  task "y" { command = "true" }
  task "z" { command = "true" }
}
pipeline "b" {
  schedule   = "@daily"
  start_date = "2025-07-01"
  task "x" { command = "true" }
  task "q" { command = "true" }
}
pipeline "keep" {
  schedule   = "@daily"
  start_date = "2025-07-01"
  task "x" { command = "true" }
}
`)
	ctx := context.Background()
	e.run(scheduler.Options{Now: utc("2025-07-02T00:00:00Z")})
	if _, err := e.st.UpsertPipeline(ctx, store.UpsertPipelineParams{Name: "never_ran", Hash: "h"}); err != nil {
		t.Fatal(err)
	}
	e.rewrite(`
pipeline "a2" {
  schedule   = "@daily"
  start_date = "2025-07-01"
  task "x" { command = "true" }
  task "y" { command = "true" }
  task "w" { command = "true" }
}
pipeline "b2" {
  schedule   = "@daily"
  start_date = "2025-07-01"
  task "q" { command = "true" }
  task "r" { command = "true" }
  task "s" { command = "true" }
}
pipeline "keep" {
  schedule   = "@daily"
  start_date = "2025-07-01"
  task "x" { command = "true" }
}
pipeline "fresh" {
  schedule   = "@daily"
  start_date = "2025-07-01"
  task "never" { command = "true" }
}
`)
	got, err := scheduler.FindRenamed(ctx, e.st, e.ws, nil)
	if err != nil {
		t.Fatal(err)
	}
	// a2 shares x, y with a (2 of 3 each) and x with b (1 of 3, 1 of 2:
	// not half of a2's); b2 shares q with b (1 of 3); keep has runs.
	want := []scheduler.Renamed{{Pipeline: "a2", From: "a", Common: 2, Tasks: 4}}
	if len(got) != 1 || got[0] != want[0] {
		t.Errorf("FindRenamed = %+v, want %+v", got, want)
	}
	if got, err := scheduler.FindRenamed(ctx, e.st, e.ws, []string{"b2", "fresh"}); err != nil || len(got) != 0 {
		t.Errorf("FindRenamed(b2, fresh) = %+v, %v; want none", got, err)
	}
}
