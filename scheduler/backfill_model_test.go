package scheduler_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rewind-dev/rewind/backfill"
	"github.com/rewind-dev/rewind/dsl"
	"github.com/rewind-dev/rewind/lake"
	"github.com/rewind-dev/rewind/scheduler"
	"github.com/rewind-dev/rewind/store"
)

// A model-based test of backfills: seeded random sequences of the commands
// an operator mixes (apply, in batches or not, Ctrl-C, kill -9, --resume, --force, cancel,
// pause and unpause of the pipeline and of the backfill, clear, the nightly
// run, rollback) on a 20-date window of a pipeline whose output encodes
// the version of its code. After each sequence every backfill is resumed
// until it ends, and the invariants hold:
//   - a backfill that succeeded left on main, for every date of its
//     window, what its branch holds (checked when it succeeds), and its
//     report counts what the state says;
//   - a rollback restores the window from the tag;
//   - at the end, main holds for each date the version the last event
//     that touched it put there, and a version some attempt produced;
//   - no run is left queued or running, no backfill running.
//   - a rollback is possible exactly when main holds the backfill's cutover
//     (backfill.Cutover), whatever the backfill's state; a cancel at or
//     after the cutover is refused and changes nothing;
//   - the consumer (kpis) is rebuilt after every change of main: once
//     every backfill has ended, each date that a cutover or a rollback
//     changed has a kpis attempt that started after the change;
//   - a report that cannot be delivered (notify broken) leaves the
//     backfill success; a second apply of a backfill while another owns it
//     is refused; no backfill is left unable to finish.
//
// REWIND_MODEL_SEQUENCES (default 8) and REWIND_MODEL_SEED choose the
// sequences; a failing sequence is printed with its seed.
//
// apply and resume run in a child process (this test binary), so that
// kill -9 is a real one: the attempts it started live on and the next
// resume adopts them.

const modelHCL = `
catalog "local" {
  uri       = ".rewind/catalog.db"
  warehouse = ".rewind/warehouse"
}
pipeline "revenue" {
  schedule        = "@daily"
  start_date      = "2025-07-01"
  max_active_runs = 4
  task "compute" {
    command = "sh ./compute.sh"
    depends_on_past = DOP
  }
  output "revenue" {
    table     = "analytics.fct_daily_revenue"
    from      = "${run.dir}/revenue.csv"
    columns   = { ds = "date", currency = "string", amount_usd = "double" }
    partition = "ds"
    validate {
      max_change = { amount_usd = 1000 }
    }
  }
}
pipeline "kpis" {
  schedule   = "@daily"
  start_date = "2025-07-01"
  consumes   = [pipeline.revenue]
  task "t" { command = "echo $REWIND_DS >> kpis.log" }
}
notify "report" {
  command = "test ! -f notify_broken || exit 1; if [ -f notify_hold ]; then touch notify_reached; while [ -f notify_hold ]; do sleep 0.05; done; fi"
}
`

// modelCompute is the revenue task: a row per day of its data interval
// (one day for a run of its own, each day of its batch for a batch's run)
// holding 100 times the version of the code, and a ledger line for each.
const modelCompute = `f=$(cat factor)
s=$(date -u -d "$REWIND_DATA_INTERVAL_START" +%s)
e=$(date -u -d "$REWIND_DATA_INTERVAL_END" +%s)
out="$REWIND_RUN_DIR/revenue.csv"
echo ds,currency,amount_usd > "$out.tmp"
while [ "$s" -lt "$e" ]; do
  ds=$(date -u -d "@$s" +%F)
  echo "$ds $f" >> ledger.log
  echo "$ds,EUR,$((100 * f))" >> "$out.tmp"
  s=$((s + 86400))
done
sleep 0.05
mv "$out.tmp" "$out"
`

const (
	modelFrom = "2025-07-01"
	modelTo   = "2025-07-20"
	modelNow  = "2025-07-21T00:00:00Z"
)

// modelChild, in the child process, applies or resumes a backfill and
// prints the result as JSON on stdout.
func modelChild() {
	dir := os.Getenv("REWIND_MODEL_CHILD")
	ctx := context.Background()
	ws, diags := dsl.Load(dir, dsl.LoadOptions{})
	if diags.HasErrors() {
		fmt.Fprintln(os.Stderr, diags.Error())
		os.Exit(2)
	}
	st, err := store.Open(ctx, os.Getenv("REWIND_MODEL_STATE"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(4)
	}
	defer st.Close()
	sig, stop := signalContext(ctx)
	defer stop()
	o := backfill.ApplyOptions{Store: st, Workspace: ws, Home: filepath.Join(dir, ".rewind"), Now: utc(modelNow), Wait: true,
		Grace: 2 * time.Second, ResumeID: os.Getenv("REWIND_MODEL_RESUME"), Force: os.Getenv("REWIND_MODEL_FORCE") != "", IncludePaused: true}
	if o.ResumeID == "" {
		from, _ := time.Parse(time.DateOnly, modelFrom)
		to, _ := time.Parse(time.DateOnly, modelTo)
		pp := backfill.PlanParams{Workspace: ws, Pipeline: "revenue", Start: from, End: to, Reprocess: "completed", Now: utc(modelNow)}
		if b := os.Getenv("REWIND_MODEL_BATCH"); b != "" {
			if pp.Batch, err = dsl.ParseBatch(b); err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(2)
			}
		}
		plan, err := backfill.MakePlan(ctx, st, pp)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		o.Plan = plan
	}
	res, err := backfill.ApplyBackfill(sig, o)
	out := map[string]string{}
	if res != nil {
		out["id"], out["state"] = res.ID, string(res.State)
	}
	if err != nil {
		out["error"] = err.Error()
	}
	json.NewEncoder(os.Stdout).Encode(out)
}

// model is one sequence's workspace and what the test knows of it.
type model struct {
	t       *testing.T
	e       *env
	version int
	night   time.Time         // the nightly run's clock
	log     []string          // the steps, for a failure report
	expect  map[string]string // date -> the value main must hold ("" unknown)
	checked map[string]bool   // the backfills whose success was checked
	// changedAt: when a cutover or a rollback last changed main's date
	changedAt map[string]time.Time
	paused    bool
	batch     string // the batch of the next apply ("": none)
}

// step logs a step.
func (m *model) step(format string, args ...any) {
	m.log = append(m.log, fmt.Sprintf(format, args...))
}

func (m *model) fail(format string, args ...any) {
	m.t.Helper()
	m.t.Fatalf("%s\nsteps:\n  %s", fmt.Sprintf(format, args...), strings.Join(m.log, "\n  "))
}

// child runs apply (resume "" ) or resume ID in a child process. With
// killAfter > 0 it is killed (sig) once that many attempts more have
// started.
func (m *model) child(resume string, force bool, killAfter int, sig syscall.Signal) map[string]string {
	m.t.Helper()
	cmd, stdout, stderr := m.command(resume, force)
	if resume == "" && m.batch != "" {
		cmd.Env = append(cmd.Env, "REWIND_MODEL_BATCH="+m.batch)
	}
	base := len(m.e.events("ledger.log"))
	started := time.Now()
	if err := cmd.Start(); err != nil {
		m.t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	if killAfter > 0 {
		deadline := time.Now().Add(60 * time.Second)
	wait:
		for len(m.e.events("ledger.log")) < base+killAfter {
			select {
			case <-done:
				done <- nil
				break wait
			case <-time.After(10 * time.Millisecond):
			}
			if time.Now().After(deadline) {
				m.fail("no attempt started")
			}
		}
		_ = cmd.Process.Signal(sig)
	}
	select {
	case <-done:
	case <-time.After(120 * time.Second):
		_ = cmd.Process.Kill()
		m.fail("apply hung:\n%s", stderr.String())
	}
	return m.settle(started, stdout.String())
}

// settle takes in what an apply that started at started and printed
// stdout did.
func (m *model) settle(started time.Time, stdout string) map[string]string {
	m.t.Helper()
	// The scheduled runs that are due run beside a backfill: those of the
	// window that finished now committed to main.
	main := m.amounts("main")
	for _, r := range m.e.runs("revenue") {
		if r.Kind != store.KindBackfill && r.State == store.RunSuccess && !r.EndedAt.Before(started) && r.DS >= modelFrom && r.DS <= modelTo {
			m.expect[r.DS] = main[r.DS]
		}
	}
	out := map[string]string{}
	if s := strings.TrimSpace(stdout); s != "" {
		lines := strings.Split(s, "\n")
		_ = json.Unmarshal([]byte(lines[len(lines)-1]), &out)
	}
	// A backfill killed or stopped as it ended may have succeeded: every
	// success is checked once, when it is first seen.
	list, err := m.e.st.ListBackfills(context.Background())
	if err != nil {
		m.t.Fatal(err)
	}
	for i := len(list) - 1; i >= 0; i-- {
		if b := list[i]; b.State == store.BackfillSuccess && !m.checked[b.ID] {
			m.checked[b.ID] = true
			m.succeeded(b.ID)
		}
	}
	return out
}

// command is the child process of apply (resume "") or resume ID.
func (m *model) command(resume string, force bool) (*exec.Cmd, *strings.Builder, *strings.Builder) {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "REWIND_MODEL_CHILD="+m.e.dir, "REWIND_MODEL_STATE="+m.e.state, "REWIND_MODEL_RESUME="+resume)
	if force {
		cmd.Env = append(cmd.Env, "REWIND_MODEL_FORCE=1")
	}
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	return cmd, &stdout, &stderr
}

// latest is the newest backfill in one of the states (nil if none).
func (m *model) latest(states ...store.BackfillState) *store.Backfill {
	list, err := m.e.st.ListBackfills(context.Background())
	if err != nil {
		m.t.Fatal(err)
	}
	for _, b := range list {
		for _, s := range states {
			if b.State == s {
				return &b
			}
		}
	}
	return nil
}

// amounts reads a ref's amount per date (the version times 100).
func (m *model) amounts(ref string) map[string]string {
	lakes := scheduler.NewLakes(m.e.ws)
	defer lakes.Close()
	lk, err := lakes.Get(context.Background(), "local")
	if err != nil {
		m.t.Fatal(err)
	}
	st, err := lk.PartitionStats(context.Background(), "analytics.fct_daily_revenue", ref, []string{"amount_usd"})
	if err != nil {
		if errors.Is(err, lake.ErrNoSuchRef) {
			return nil
		}
		m.t.Fatal(err)
	}
	out := map[string]string{}
	for ds, s := range st {
		out[ds] = strconv.FormatFloat(s.Sums["amount_usd"], 'f', -1, 64)
	}
	return out
}

// succeeded checks a backfill that just succeeded: main holds its
// branch's values for the whole window, and its report counts the state.
func (m *model) succeeded(id string) {
	m.t.Helper()
	b, err := m.e.st.GetBackfill(context.Background(), id)
	if err != nil {
		m.t.Fatal(err)
	}
	var plan backfill.Plan
	if err := json.Unmarshal([]byte(b.Plan), &plan); err != nil {
		m.t.Fatal(err)
	}
	branch, main := m.amounts(scheduler.BranchName(id)), m.amounts("main")
	selected := 0
	for _, d := range plan.Dates {
		if d.Action == "skip" {
			continue // in progress when planned: not this backfill's
		}
		selected++
		if main[d.DS] != branch[d.DS] {
			m.fail("backfill %s succeeded but main %s = %s, its branch %s", id, d.DS, main[d.DS], branch[d.DS])
		}
		m.expect[d.DS] = main[d.DS]
	}
	ok := 0
	for _, r := range m.e.runs("revenue") {
		if r.BackfillID == id && r.State == store.RunSuccess {
			ok++
		}
	}
	if ok != selected {
		m.fail("backfill %s succeeded with %d of its %d dates succeeded in the state", id, ok, selected)
	}
	if !b.RolledBack {
		var window []string
		for _, d := range plan.Dates {
			if d.Action != "skip" {
				window = append(window, d.DS)
			}
		}
		m.changed(window, b.CreatedAt)
		if !m.cutover(id) && selected > 0 {
			m.fail("backfill %s succeeded but main holds no cutover of it", id)
		}
	}
	report, err := os.ReadFile(filepath.Join(m.e.home, "backfills", id+".md"))
	if err != nil {
		m.fail("backfill %s: no report: %v", id, err)
	}
	if want := fmt.Sprintf("- dates: %d planned, %d succeeded, 0 failed", selected, selected); !strings.Contains(string(report), want) {
		m.fail("backfill %s: the report does not count the state (%s):\n%s", id, want, report)
	}
}

// unfinished is the newest backfill running or failed and not rolled
// back (nil if none).
func (m *model) unfinished() *store.Backfill {
	list, err := m.e.st.ListBackfills(context.Background())
	if err != nil {
		m.t.Fatal(err)
	}
	for _, b := range list {
		if (b.State == store.BackfillRunning || b.State == store.BackfillFailed) && !b.RolledBack {
			return &b
		}
	}
	return nil
}

// undelivered is the newest backfill that succeeded but whose report was
// not delivered (nil if none): apply --resume sends it.
func (m *model) undelivered() *store.Backfill {
	list, err := m.e.st.ListBackfills(context.Background())
	if err != nil {
		m.t.Fatal(err)
	}
	for _, b := range list {
		if b.State == store.BackfillSuccess && b.Phase == backfill.PhaseReport && !b.RolledBack {
			return &b
		}
	}
	return nil
}

// signalContext is cancelled by SIGINT or SIGTERM (the child's Ctrl-C).
func signalContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
}

// apply is a new backfill with a new version of the code, maybe stopped.
func (m *model) apply(r *rand.Rand) {
	m.version++
	m.e.setFactor(strconv.Itoa(m.version))
	m.batch = []string{"", "", "3d", "1w"}[r.IntN(4)]
	defer func() { m.batch = "" }()
	if m.batch != "" {
		m.step("batches of %s:", m.batch)
	}
	switch k := r.IntN(3); k {
	case 0:
		m.step("apply v%d", m.version)
		m.child("", false, 0, 0)
	case 1:
		n := 1 + r.IntN(15)
		m.step("apply v%d, Ctrl-C after %d attempts", m.version, n)
		m.child("", false, n, syscall.SIGINT)
	default:
		n := 1 + r.IntN(15)
		m.step("apply v%d, kill -9 after %d attempts", m.version, n)
		m.child("", false, n, syscall.SIGKILL)
	}
}

// resume resumes the newest unfinished backfill (unpausing it first if it
// is on hold), maybe stopped again.
func (m *model) resume(r *rand.Rand, force bool) {
	b := m.latest(store.BackfillRunning, store.BackfillFailed)
	if b == nil {
		return
	}
	if b.OnHold {
		m.step("backfill unpause %s", b.ID)
		if _, err := backfill.HoldBackfill(context.Background(), m.e.st, b.ID, false); err != nil && !errors.Is(err, backfill.ErrBackfillState) {
			m.fail("unpause: %v", err)
		}
	}
	kill := r.IntN(4) == 0
	switch {
	case kill:
		n := 1 + r.IntN(10)
		m.step("resume %s (force %v), kill -9 after %d attempts", b.ID, force, n)
		m.child(b.ID, force, n, syscall.SIGKILL)
	default:
		m.step("resume %s (force %v)", b.ID, force)
		m.child(b.ID, force, 0, 0)
	}
}

func (m *model) cancel() {
	if b := m.latest(store.BackfillRunning, store.BackfillFailed); b != nil {
		m.step("cancel %s", b.ID)
		_, err := backfill.CancelBackfill(context.Background(), m.e.st, b.ID)
		if errors.Is(err, backfill.ErrBackfillState) && (backfill.PastCutover(b.Phase) || b.RolledBack) {
			return // main holds its data (or it was rolled back): refused
		}
		if err != nil {
			m.fail("cancel: %v", err)
		}
	}
}

func (m *model) hold() {
	if b := m.latest(store.BackfillRunning); b != nil {
		m.step("backfill pause %s", b.ID)
		if _, err := backfill.HoldBackfill(context.Background(), m.e.st, b.ID, true); err != nil {
			m.fail("backfill pause: %v", err)
		}
	}
}

func (m *model) pausePipeline(paused bool) {
	m.step("pause revenue: %v", paused)
	if err := m.e.st.SetPaused(context.Background(), store.SetPausedParams{Name: "revenue", Paused: paused, Now: time.Now()}); err != nil {
		m.fail("pause: %v", err)
	}
	m.paused = paused
}

func (m *model) clear(r *rand.Rand) {
	a, b := r.IntN(20), r.IntN(20)
	if a > b {
		a, b = b, a
	}
	from, to := utc(modelFrom+"T00:00:00Z").AddDate(0, 0, a), utc(modelFrom+"T00:00:00Z").AddDate(0, 0, b)
	m.step("clear %s..%s", from.Format(time.DateOnly), to.Format(time.DateOnly))
	if _, err := m.e.st.ClearTasks(context.Background(), store.ClearTasksParams{Pipeline: "revenue", From: from, To: to, Now: time.Now()}); err != nil {
		m.fail("clear: %v", err)
	}
}

// nightly is the cron's rewind run of the next day: it runs the new date
// and whatever is the pipeline's own and waiting (cleared dates).
func (m *model) nightly() {
	m.night = m.night.AddDate(0, 0, 1)
	m.step("run --now %s", m.night.Format(time.DateOnly))
	sum, err := scheduler.Run(context.Background(), scheduler.Options{Store: m.e.st, Workspace: m.e.ws, Home: m.e.home, Now: m.night, Wait: true, Grace: 2 * time.Second})
	if err != nil {
		m.fail("run: %v", err)
	}
	main := m.amounts("main")
	for _, f := range sum.Finished {
		if f.State == store.RunSuccess && f.DS >= modelFrom && f.DS <= modelTo {
			m.expect[f.DS] = main[f.DS] // a scheduled run of a window date committed it
			if want := strconv.Itoa(100 * m.version); main[f.DS] != want {
				m.fail("the nightly run committed %s = %s; the code is at version %d", f.DS, main[f.DS], m.version)
			}
		}
	}
}

// rollback rolls back the newest backfill not rolled back, whatever its
// state: it must work exactly when main holds its cutover, and then leave
// main's window as the tag and the consumer rebuilt.
func (m *model) rollback() {
	var b *store.Backfill
	list, err := m.e.st.ListBackfills(context.Background())
	if err != nil {
		m.t.Fatal(err)
	}
	for i := range list {
		if !list[i].RolledBack && (list[i].State != store.BackfillRunning || backfill.PastCutover(list[i].Phase)) {
			b = &list[i]
			break
		}
	}
	if b == nil {
		return
	}
	held := m.cutover(b.ID)
	m.step("rollback %s (%s at %s; main holds its cutover: %v)", b.ID, b.State, b.Phase, held)
	before := m.amounts("main")
	changed := time.Now()
	err = m.e.rollback(b.ID, m.night)
	switch {
	case !held && errors.Is(err, backfill.ErrBackfillState):
		return // nothing of it on main, and it says so
	case !held:
		m.fail("rollback of %s, whose cutover main does not hold: %v; want refused", b.ID, err)
	case err != nil:
		m.fail("rollback of %s, whose cutover main holds: %v", b.ID, err)
	}
	if m.cutover(b.ID) {
		m.fail("after the rollback of %s, main still holds its cutover", b.ID)
	}
	if got, _ := m.e.st.GetBackfill(context.Background(), b.ID); backfill.ShownState(got) != "rolled_back" || got.Phase != backfill.PhaseDone {
		m.fail("after the rollback of %s it is %s at %s; want rolled_back at done", b.ID, backfill.ShownState(got), got.Phase)
	}
	// The dates it ran are restored from the tag; the dates its plan
	// skipped (another backfill held them, and may have cut them over
	// since) are not its own: the rollback leaves them as they are.
	var plan backfill.Plan
	if err := json.Unmarshal([]byte(b.Plan), &plan); err != nil {
		m.fail("the plan of %s: %v", b.ID, err)
	}
	ran := map[string]bool{}
	var window []string
	for _, d := range plan.Dates {
		ran[d.DS] = d.Action != "skip"
		if ran[d.DS] {
			window = append(window, d.DS)
		}
	}
	tag, main := m.amounts(backfill.TagName(b.ID)), m.amounts("main")
	for _, ds := range dates(modelFrom, modelTo) {
		switch {
		case ran[ds] && main[ds] != tag[ds]:
			m.fail("after the rollback of %s, main %s = %s, the tag %s", b.ID, ds, main[ds], tag[ds])
		case !ran[ds] && main[ds] != before[ds]:
			m.fail("the rollback of %s changed %s, a date its plan skipped, from %s to %s", b.ID, ds, before[ds], main[ds])
		}
		m.expect[ds] = main[ds]
	}
	m.changed(window, changed)
}

// cutover says whether main holds backfill id's cutover.
func (m *model) cutover(id string) bool {
	m.t.Helper()
	lakes := scheduler.NewLakes(m.e.ws)
	defer lakes.Close()
	held, _, err := backfill.Cutover(context.Background(), lakes, m.e.ws.Pipeline("revenue"), id)
	if err != nil {
		m.fail("what main holds of %s: %v", id, err)
	}
	return held
}

// changed records that main changed, at or after at, for the dates.
func (m *model) changed(dates []string, at time.Time) {
	for _, ds := range dates {
		if at.After(m.changedAt[ds]) {
			m.changedAt[ds] = at
		}
	}
}

// rebuiltSince checks that the consumer ran each of the dates after main
// changed at since (the consumer is not paused by anyone but backfills).
func (m *model) rebuiltSince(what string, since time.Time, window []string) {
	m.t.Helper()
	last := map[string]time.Time{}
	for _, r := range m.e.runs("kpis") {
		if r.State != store.RunSuccess {
			continue
		}
		for _, ti := range r.Tasks {
			for _, at := range ti.Attempts {
				if at.StartedAt.After(last[r.DS]) {
					last[r.DS] = at.StartedAt
				}
			}
		}
	}
	for _, ds := range window {
		if !last[ds].After(since) {
			m.fail("after %s changed main, kpis %s was not rebuilt (its last attempt started %s, main changed %s)", what, ds, last[ds].Format(time.RFC3339Nano), since.Format(time.RFC3339Nano))
		}
	}
}

// cancelAfterCutover cancels the newest backfill at or past its cutover
// (not rolled back): refused, naming rollback, and nothing changes.
func (m *model) cancelAfterCutover() {
	list, err := m.e.st.ListBackfills(context.Background())
	if err != nil {
		m.t.Fatal(err)
	}
	for _, b := range list {
		if b.RolledBack || b.State == store.BackfillCancelled || !backfill.PastCutover(b.Phase) {
			continue
		}
		m.step("cancel %s (%s at %s, past its cutover)", b.ID, b.State, b.Phase)
		_, err := backfill.CancelBackfill(context.Background(), m.e.st, b.ID)
		if !errors.Is(err, backfill.ErrBackfillState) || !strings.Contains(err.Error(), "rewind backfill rollback "+b.ID) {
			m.fail("cancel of %s past its cutover: %v; want refused, naming rollback", b.ID, err)
		}
		if got, _ := m.e.st.GetBackfill(context.Background(), b.ID); got.State != b.State || got.Phase != b.Phase {
			m.fail("the refused cancel of %s moved it from %s at %s to %s at %s", b.ID, b.State, b.Phase, got.State, got.Phase)
		}
		return
	}
}

// notifyBroken breaks or mends the notify command that gets the reports.
func (m *model) notifyBroken(broken bool) {
	m.step("notify broken: %v", broken)
	if broken {
		m.e.touch("notify_broken")
	} else if _, err := os.Stat(filepath.Join(m.e.dir, "notify_broken")); err == nil {
		m.e.remove("notify_broken")
	}
}

// concurrent is a new apply that, held in its report phase, meets a
// second apply of the same backfill in another process: the second is
// refused naming the owner, and the first ends as it would alone.
func (m *model) concurrent() {
	m.version++
	m.e.setFactor(strconv.Itoa(m.version))
	m.step("apply v%d, and a second apply --resume of it while it reports", m.version)
	m.e.touch("notify_hold")
	reached := filepath.Join(m.e.dir, "notify_reached")
	os.Remove(reached)
	cmd, stdout, stderr := m.command("", false)
	started := time.Now()
	if err := cmd.Start(); err != nil {
		m.t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	ended := false
	for !ended {
		if _, err := os.Stat(reached); err == nil {
			break
		}
		select {
		case <-done: // it ended before its report (it failed)
			ended = true
		case <-time.After(10 * time.Millisecond):
		}
	}
	if !ended {
		b := m.latest(store.BackfillRunning)
		if b == nil || b.Phase != backfill.PhaseReport {
			m.fail("the first apply reports, but no backfill is running at its report phase")
		}
		second := m.child(b.ID, false, 0, 0)
		if !strings.Contains(second["error"], "backfill "+b.ID+" is owned by another rewind") {
			m.fail("a second apply of %s while another reports: %v; want refused, naming the owner", b.ID, second)
		}
	}
	m.e.remove("notify_hold")
	if !ended {
		select {
		case <-done:
		case <-time.After(120 * time.Second):
			_ = cmd.Process.Kill()
			m.fail("the first apply hung after its report was let go:\n%s", stderr.String())
		}
	}
	m.step("  first apply: %s", strings.TrimSpace(stdout.String()))
	m.settle(started, stdout.String())
}

// finish resumes every unfinished backfill until it ends, as an operator
// would, then checks the invariants of the end state.
func (m *model) finish() {
	if m.paused {
		m.pausePipeline(false)
	}
	m.notifyBroken(false)
	for round := 0; ; round++ {
		b := m.unfinished()
		if b == nil {
			b = m.undelivered()
		}
		if b == nil {
			break
		}
		if round == 6 {
			m.fail("backfill %s is still %s after 6 resumes: no way out (%s)", b.ID, b.State, b.Detail)
		}
		if b.OnHold {
			backfill.HoldBackfill(context.Background(), m.e.st, b.ID, false)
		}
		m.step("finish: resume %s", b.ID)
		m.child(b.ID, false, 0, 0)
	}
	m.nightly() // what clears handed back to the pipeline runs now
	list, err := m.e.st.ListBackfills(context.Background())
	if err != nil {
		m.t.Fatal(err)
	}
	for _, b := range list {
		if b.State == store.BackfillRunning || b.State == store.BackfillSuccess && b.Phase != backfill.PhaseDone {
			m.fail("backfill %s is left %s at %s: it cannot finish (%s)", b.ID, backfill.ShownState(b), b.Phase, b.Detail)
		}
	}
	for _, r := range m.e.runs("revenue") {
		if r.State == store.RunQueued || r.State == store.RunRunning {
			m.fail("%s is left %s (kind %s, backfill %q)", r.DS, r.State, r.Kind, r.BackfillID)
		}
	}
	// The consumer was rebuilt after every change of main.
	for ds, at := range m.changedAt {
		m.rebuiltSince("a cutover or rollback", at, []string{ds})
	}
	main := m.amounts("main")
	produced := map[string]map[string]bool{}
	for _, line := range m.e.events("ledger.log") {
		f := strings.Fields(line)
		if len(f) != 2 {
			continue
		}
		v, _ := strconv.Atoi(f[1])
		if produced[f[0]] == nil {
			produced[f[0]] = map[string]bool{}
		}
		produced[f[0]][strconv.Itoa(100*v)] = true
	}
	for _, ds := range dates(modelFrom, modelTo) {
		if !produced[ds][main[ds]] {
			m.fail("main %s = %s: no attempt produced that version", ds, main[ds])
		}
		if want := m.expect[ds]; want != "" && main[ds] != want {
			m.fail("main %s = %s; the last event that touched it left %s", ds, main[ds], want)
		}
	}
}

func TestBackfillModel(t *testing.T) {
	if testing.Short() {
		t.Skip("the model replays real processes and commits: not in -short")
	}
	sequences := 8
	if n, err := strconv.Atoi(os.Getenv("REWIND_MODEL_SEQUENCES")); err == nil && n > 0 {
		sequences = n
	}
	seed := uint64(20261201)
	if s, err := strconv.ParseUint(os.Getenv("REWIND_MODEL_SEED"), 10, 64); err == nil {
		seed = s
	}
	for i := 0; i < sequences; i++ {
		seq := seed + uint64(i)
		t.Run(fmt.Sprintf("seed=%d", seq), func(t *testing.T) {
			r := rand.New(rand.NewPCG(seq, 0))
			// Odd sequences have a depends_on_past task: each date waits
			// for the one before it.
			e := newEnv(t, strings.Replace(modelHCL, "DOP", strconv.FormatBool(seq%2 == 1), 1))
			if err := os.WriteFile(filepath.Join(e.dir, "compute.sh"), []byte(modelCompute), 0o644); err != nil {
				t.Fatal(err)
			}
			m := &model{t: t, e: e, version: 1, night: utc(modelNow), expect: map[string]string{}, checked: map[string]bool{}, changedAt: map[string]time.Time{}}
			e.setFactor("1")
			if sum, err := scheduler.Run(context.Background(), scheduler.Options{Store: e.st, Workspace: e.ws, Home: e.home, Now: m.night}); err != nil || sum.Failed() {
				t.Fatalf("first catchup: %v", err)
			}
			for _, ds := range dates(modelFrom, modelTo) {
				m.expect[ds] = "100"
			}
			steps := 1 + r.IntN(12)
			for s := 0; s < steps; s++ {
				switch k := r.IntN(100); {
				case k < 25:
					m.apply(r)
				case k < 45:
					m.resume(r, false)
				case k < 50:
					m.resume(r, true)
				case k < 58:
					m.cancel()
				case k < 64:
					m.pausePipeline(!m.paused)
				case k < 70:
					m.hold()
				case k < 80:
					m.clear(r)
				case k < 84:
					m.nightly()
				case k < 88:
					m.rollback()
				case k < 91:
					m.cancelAfterCutover()
				case k < 95:
					m.notifyBroken(r.IntN(2) == 0)
				default:
					m.concurrent()
				}
			}
			m.finish()
			t.Logf("%d steps: %s", len(m.log), strings.Join(m.log, "; "))
		})
	}
}
