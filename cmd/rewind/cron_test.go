package main

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/rewind-dev/rewind/dsl"
	"github.com/rewind-dev/rewind/timetable"
)

// cronDaemon is the Debian cron daemon .ci/cron.sh starts: the user whose
// crontab a test may replace ($REWIND_TEST_CRON_USER) and the timezone
// the daemon schedules in ($REWIND_TEST_CRON_TZ). Without them the test is
// skipped, except in CI ($CI set), where it fails: CI must not pass by
// skipping the real cron.
func cronDaemon(t *testing.T) (*user.User, *time.Location) {
	t.Helper()
	name, tz := os.Getenv("REWIND_TEST_CRON_USER"), os.Getenv("REWIND_TEST_CRON_TZ")
	if name == "" || tz == "" {
		if os.Getenv("CI") != "" {
			t.Fatal("CI is set but REWIND_TEST_CRON_USER or REWIND_TEST_CRON_TZ is not: start cron with .ci/cron.sh start")
		}
		t.Skip("REWIND_TEST_CRON_USER is unset (eval \"$(.ci/cron.sh start)\" to run the cron tests)")
	}
	u, err := user.Lookup(name)
	if err != nil {
		t.Fatalf("REWIND_TEST_CRON_USER=%s: %v", name, err)
	}
	loc, err := time.LoadLocation(tz)
	if err != nil {
		t.Fatalf("REWIND_TEST_CRON_TZ=%s: %v", tz, err)
	}
	for _, cmd := range []string{"crontab", "cron"} {
		if _, err := exec.LookPath(cmd); err != nil {
			t.Fatalf("REWIND_TEST_CRON_USER is set but: %v", err)
		}
	}
	return u, loc
}

// copyFile copies the file src to dst with mode.
func copyFile(t *testing.T, src, dst string, mode os.FileMode) {
	t.Helper()
	in, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}

// The lines of `rewind cron`, installed as they are in the crontab of a
// user of Debian's real cron daemon, which schedules in Asia/Tokyo (CI:
// .ci/cron.sh), run a pipeline of America/New_York at its tick, one or two
// minutes from now: the run of the interval that ends at the tick, after
// it. Beside them, the line that rewind cron printed before (the
// schedule as written, under CRON_TZ=America/New_York) does not fire:
// Debian's cron ignores CRON_TZ.
func TestCronDebianCronRunsDueInterval(t *testing.T) {
	u, host := cronDaemon(t)
	t.Parallel()
	pzone := "America/New_York"
	if host.String() == pzone {
		pzone = "Asia/Kolkata"
	}
	ploc, err := time.LoadLocation(pzone)
	if err != nil {
		t.Fatal(err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)

	// The binary and the workspace where the cron user can reach them.
	base, err := os.MkdirTemp("", "rewind-cron-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(base, "rewind")
	copyFile(t, os.Args[0], bin, 0o755)
	dir := filepath.Join(base, "ws")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}

	// The tick: the next minute at least 20 s away, so that cron reads
	// the crontab before it.
	now := time.Now()
	tick := now.Truncate(time.Minute).Add(time.Minute)
	if tick.Sub(now) < 20*time.Second {
		tick = tick.Add(time.Minute)
	}
	pt := tick.In(ploc)
	schedule := fmt.Sprintf("%d %d * * *", pt.Minute(), pt.Hour())
	hcl := fmt.Sprintf(`
pipeline "nightly" {
  schedule   = %q
  timezone   = %q
  start_date = %q
  catchup    = false
  task "t" {
    command = "echo \"$REWIND_DATA_INTERVAL_END $(date -u +%%Y-%%m-%%dT%%H:%%M:%%SZ)\" >> fired.log"
  }
}
`, schedule, pzone, pt.AddDate(0, 0, -2).Format("2006-01-02"))
	if err := os.WriteFile(filepath.Join(dir, "main.hcl"), []byte(hcl), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(dir, uid, gid); err != nil {
		t.Fatal(err)
	}

	cmd := exec.Command(bin, "cron", "--host-timezone", host.String(), dir)
	cmd.Env = append(os.Environ(), "REWIND_TEST_AS_MAIN=1", "REWIND_STATE=")
	lines, err := cmd.Output()
	if err != nil {
		t.Fatalf("rewind cron: %v", err)
	}
	// One of the entries fires at the tick, in the daemon's zone.
	fires := false
	for _, l := range strings.Split(string(lines), "\n") {
		f := strings.Fields(l)
		if len(f) < 6 || strings.HasPrefix(l, "#") || strings.Contains(f[0], "=") {
			continue
		}
		sc, err := cron.ParseStandard(strings.Join(f[:5], " "))
		if err != nil {
			t.Fatalf("rewind cron printed %q: %v", l, err)
		}
		h := tick.In(host)
		fires = fires || sc.Next(h.Add(-time.Second)).Equal(h)
	}
	if !fires {
		t.Fatalf("rewind cron printed no entry that fires at %s in %s:\n%s", tick.In(host).Format("15:04"), host, lines)
	}
	crontab := "# the test binary runs as rewind\nREWIND_TEST_AS_MAIN=1\n" + string(lines) +
		// Which minutes cron has gone through, and the line rewind cron
		// printed before: the schedule as written, under CRON_TZ.
		fmt.Sprintf("* * * * * date -u +\\%%s >> %s/minutes.log\nCRON_TZ=%s\n%s touch %s/crontz-honored\n", dir, pzone, schedule, dir)
	install := exec.Command("crontab", "-u", u.Username, "-")
	install.Stdin = strings.NewReader(crontab)
	if out, err := install.CombinedOutput(); err != nil {
		t.Fatalf("crontab -u %s: %v: %s", u.Username, err, out)
	}
	t.Cleanup(func() { _ = exec.Command("crontab", "-u", u.Username, "-r").Run() })
	t.Logf("crontab of %s, daemon in %s, tick %s (%s in %s):\n%s", u.Username, host, tick.In(host).Format(time.RFC3339), pt.Format("15:04"), pzone, crontab)

	w := &workspace{t: t, dir: dir}
	// Cron has gone through the minute of the tick once it has written a
	// later minute.
	through := func() bool {
		for _, l := range w.lines("minutes.log") {
			if s, err := strconv.ParseInt(l, 10, 64); err == nil && s >= tick.Unix()+60 {
				return true
			}
		}
		return false
	}
	for deadline := tick.Add(3 * time.Minute); !through(); time.Sleep(time.Second) {
		if time.Now().After(deadline) {
			t.Fatalf("cron did not go through the minute after the tick: minutes.log %q, fired.log %q", w.lines("minutes.log"), w.lines("fired.log"))
		}
	}
	fired := w.lines("fired.log")
	t.Logf("fired.log (interval end, when the task ran): %q; minutes.log: %q", fired, w.lines("minutes.log"))
	if len(fired) != 1 {
		t.Fatalf("fired.log: %q, want one run (cron.log: %q)", fired, w.lines(".rewind/cron.log"))
	}
	f := strings.Fields(fired[0])
	if len(f) != 2 || f[0] != pt.Format(time.RFC3339) {
		t.Fatalf("the task ran for the interval ending %q, want the one ending at the tick %s", fired[0], pt.Format(time.RFC3339))
	}
	if ran, err := time.Parse(time.RFC3339, f[1]); err != nil || ran.Before(tick) {
		t.Errorf("the task ran at %s, before its interval ended at %s", f[1], tick.UTC().Format(time.RFC3339))
	}
	runs := w.runsJSON()
	if len(runs) != 1 || runs[0].State != "success" {
		t.Errorf("runs: %+v, want the one run of the tick, succeeded", runs)
	}
	if _, err := os.Stat(filepath.Join(dir, "crontz-honored")); err == nil {
		t.Errorf("the line under CRON_TZ=%s fired at its time in %s: this cron honours CRON_TZ", pzone, pzone)
	}
}

var elapseRE = regexp.MustCompile(`(?m)^\s+(?:Next elapse|Iter\. #\d+): \w{3} (\d{4}-\d\d-\d\d \d\d:\d\d:\d\d) UTC$`)

// The timer of `rewind cron --systemd`, read by systemd's own calendar
// code (systemd-analyze calendar), elapses at every tick of each pipeline
// over the 60 days after a spring and an autumn date: the daylight saving
// time changes of Europe and America included.
func TestCronSystemdTimerElapsesAtEveryTick(t *testing.T) {
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("CI is set but systemd-analyze is missing: .ci/cron.sh start installs it")
		}
		t.Skip("systemd-analyze is missing (.ci/cron.sh start installs it)")
	}
	t.Parallel()
	w := newWorkspace(t, map[string]string{"main.hcl": `
pipeline "rome" {
  schedule   = "0 6 * * 1-5"
  timezone   = "Europe/Rome"
  start_date = "2025-07-01"
  task "t" { command = "true" }
}
pipeline "rome_gap" {
  schedule   = "30 2 * * *"
  timezone   = "Europe/Rome"
  start_date = "2025-07-01"
  task "t" { command = "true" }
}
pipeline "india" {
  schedule   = "30 1 * * *"
  timezone   = "Asia/Kolkata"
  start_date = "2025-07-01"
  task "t" { command = "true" }
}
pipeline "new_york" {
  schedule   = "0 22 * * 1-5"
  timezone   = "America/New_York"
  start_date = "2025-07-01"
  task "t" { command = "true" }
}
pipeline "tokyo_monthly" {
  schedule   = "0 0 1 * *"
  timezone   = "Asia/Tokyo"
  start_date = "2025-07-01"
  task "t" { command = "true" }
}
pipeline "either" {
  schedule   = "0 12 1 * 1"
  timezone   = "UTC"
  start_date = "2025-07-01"
  task "t" { command = "true" }
}
`})
	const days = 60
	for _, from := range []string{"2026-03-01T00:00:00Z", "2026-10-01T00:00:00Z"} {
		base, _ := time.Parse(time.RFC3339, from)
		end := base.AddDate(0, 0, days)
		code, out, errs := w.rewind("cron", "--systemd", "--now", from)
		if code != 0 {
			t.Fatalf("cron --systemd: exit %d: %s", code, errs)
		}
		elapses := map[int64]bool{}
		n := 0
		for _, l := range strings.Split(out, "\n") {
			expr, ok := strings.CutPrefix(l, "OnCalendar=")
			if !ok {
				continue
			}
			n++
			cmd := exec.Command(analyze, "calendar", "--base-time=@"+strconv.FormatInt(base.Unix()-1, 10), "--iterations=200", expr)
			cmd.Env = append(os.Environ(), "TZ=UTC")
			got, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("systemd-analyze calendar %q: %v\n%s", expr, err, got)
			}
			for _, m := range elapseRE.FindAllStringSubmatch(string(got), -1) {
				at, err := time.Parse("2006-01-02 15:04:05", m[1])
				if err != nil {
					t.Fatal(err)
				}
				elapses[at.Unix()] = true
			}
		}
		if n == 0 {
			t.Fatalf("no OnCalendar= in:\n%s", out)
		}
		ws, diags := dsl.Load(w.dir, dsl.LoadOptions{})
		if diags.HasErrors() {
			t.Fatal(diags.Error())
		}
		for _, p := range ws.Pipelines {
			tt, err := timetable.New(p.Schedule, p.Timezone)
			if err != nil {
				t.Fatal(err)
			}
			for tick := tt.Next(base.Add(-time.Second)); tick.Before(end); tick = tt.Next(tick) {
				if !elapses[tick.Unix()] {
					t.Errorf("%s (%s in %s): the timer does not elapse at the tick %s (%s UTC)\n%s",
						p.Name, p.Schedule, p.Timezone, tick.Format(time.RFC3339), tick.UTC().Format("Mon 2006-01-02 15:04"), out)
				}
			}
		}
	}
}
