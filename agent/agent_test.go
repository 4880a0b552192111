package agent

import (
	"context"
	"log/slog"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/rewind-dev/rewind/executor"
	"github.com/rewind-dev/rewind/lease"
	"github.com/rewind-dev/rewind/store"
)

// The agent settles the attempts of this machine whose rewind died, once
// their wrappers have ended (success on exit 0, lost otherwise), leaves the
// ones still running and those of other machines alone, and its heartbeat
// is what Alive reads. Real processes, a real SQLite state.
func TestAgentSettlesTheAttemptsOfADeadRewind(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	st, err := store.Open(ctx, "sqlite:"+filepath.Join(dir, "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	self := lease.Self()
	// The dead rewind: an execution of this machine whose process is gone.
	dead := self.ForExecution()
	dead.PID, dead.PIDStart = 999999, 1
	if err := lease.Heartbeat(ctx, st, dead); err != nil {
		t.Fatal(err)
	}
	// Another machine's rewind (host "elsewhere").
	other := lease.Holder{ID: "elsewhere:1:1:0123456789ab-1:cafe", Host: "elsewhere", PID: 1}
	day := time.Date(2025, 7, 1, 0, 0, 0, 0, time.UTC)
	if _, err := st.UpsertPipeline(ctx, store.UpsertPipelineParams{Name: "p", Hash: "h", Now: time.Now()}); err != nil {
		t.Fatal(err)
	}
	names := []string{"ok", "bad", "long", "theirs"}
	var tasks []store.TaskSpec
	for _, n := range names {
		tasks = append(tasks, store.TaskSpec{Name: n, Pool: "default"})
	}
	if _, err := st.MaterializeRuns(ctx, store.MaterializeRunsParams{Pipeline: "p", Kind: store.KindScheduled, Now: time.Now(),
		Runs:  []store.RunSpec{{LogicalDate: day, DS: "2025-07-01", DataIntervalStart: day, DataIntervalEnd: day.AddDate(0, 0, 1)}},
		Tasks: tasks}); err != nil {
		t.Fatal(err)
	}
	runs, err := st.ListRuns(ctx, store.ListRunsParams{WithTasks: true})
	if err != nil || len(runs) != 1 {
		t.Fatal(runs, err)
	}
	if err := st.AdmitRun(ctx, store.AdmitRunParams{RunID: runs[0].ID, Now: time.Now()}); err != nil {
		t.Fatal(err)
	}
	commands := map[string]string{"ok": "exit 0", "bad": "exit 3", "long": "sleep 30", "theirs": "exit 0"}
	handles := map[string]*executor.Handle{}
	ids := map[string]int64{}
	for _, ti := range runs[0].Tasks {
		owner, host := dead, self.Host
		if ti.Task == "theirs" {
			owner, host = other, other.Host
		}
		a, err := st.ClaimTask(ctx, store.ClaimTaskParams{TaskInstanceID: ti.ID, Pool: "default", Host: host, Owner: owner.ID,
			LogPath: filepath.Join(dir, ti.Task+".{try}.log"), Now: time.Now()})
		if err != nil {
			t.Fatal(err)
		}
		h, err := executor.Start(executor.Spec{Shell: commands[ti.Task], LogPath: a.LogPath, Nonce: a.Nonce, Dir: dir})
		if err != nil {
			t.Fatal(err)
		}
		if err := st.StartAttempt(ctx, store.StartAttemptParams{AttemptID: a.ID, PID: h.PID, PIDStart: h.PIDStart, Now: time.Now()}); err != nil {
			t.Fatal(err)
		}
		handles[ti.Task], ids[ti.Task] = h, a.ID
	}
	defer func() { _ = syscall.Kill(-handles["long"].PID, syscall.SIGKILL) }()
	for _, n := range []string{"ok", "bad", "theirs"} {
		handles[n].Wait(ctx) // their rewind is dead: nobody records them
	}

	n, err := settle(ctx, st, self, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if n != 3 {
		t.Errorf("%d running attempts of this machine, want 3 (ok, bad, long)", n)
	}
	got := map[string]store.AttemptState{}
	runs, err = st.ListRuns(ctx, store.ListRunsParams{WithTasks: true, WithAttempts: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, ti := range runs[0].Tasks {
		got[ti.Task] = ti.Attempts[0].State
	}
	want := map[string]store.AttemptState{"ok": store.AttemptSuccess, "bad": store.AttemptLost, "long": store.AttemptRunning, "theirs": store.AttemptRunning}
	for task, w := range want {
		if got[task] != w {
			t.Errorf("%s: %s, want %s", task, got[task], w)
		}
	}

	// Alive: the machine of the dead rewind has an agent while its
	// heartbeat lasts; a rewind before nodes has none.
	if alive, err := Alive(ctx, st, dead.ID, dead.Host); err != nil || alive {
		t.Fatalf("Alive before any agent heartbeat: %v %v", alive, err)
	}
	ag := self
	ag.ID, ag.TTL = self.AgentID(), time.Minute
	if err := lease.Heartbeat(ctx, st, ag); err != nil {
		t.Fatal(err)
	}
	if alive, err := Alive(ctx, st, dead.ID, dead.Host); err != nil || !alive {
		t.Fatalf("Alive with an agent heartbeat: %v %v", alive, err)
	}
	if alive, _ := Alive(ctx, st, "host:1:1:cafe", "host"); alive {
		t.Fatal("an owner id without a node has an agent")
	}
}

// One agent per machine and state: the lock is exclusive.
func TestAgentLock(t *testing.T) {
	path := filepath.Join(t.TempDir(), "agent.lock")
	fd, err := Lock(path)
	if err != nil {
		t.Fatal(err)
	}
	if held, err := Locked(path); err != nil || !held {
		t.Fatalf("Locked while held: %v %v", held, err)
	}
	if _, err := Lock(path); !ErrLocked(err) {
		t.Fatalf("a second Lock: %v", err)
	}
	_ = syscall.Close(fd)
	if held, err := Locked(path); err != nil || held {
		t.Fatalf("Locked once let go: %v %v", held, err)
	}
}

// The agent gets what rewind reads to reach the state, and neither the web
// view's token nor the workspace's variables.
func TestAgentEnv(t *testing.T) {
	got := agentEnv([]string{
		"PATH=/bin", "REWIND_STATE=postgres://u:pw@db/r", "PGPASSWORD=pw", "REWIND_HOST=h",
		"TMPDIR=/t", "REWIND_UI_TOKEN=tok", "REWIND_VAR_token=s", "REWIND_SECRET_token=s",
	})
	want := []string{"PATH=/bin", "REWIND_STATE=postgres://u:pw@db/r", "PGPASSWORD=pw", "REWIND_HOST=h", "TMPDIR=/t"}
	if !slices.Equal(got, want) {
		t.Fatalf("agentEnv:\n got %q\nwant %q", got, want)
	}
}
