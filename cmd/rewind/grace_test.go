package main

import (
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
)

// handlerScript is a task whose SIGTERM handler needs 2 s of cleanup: it
// writes its pid to pid.log when it starts and "cleaned" to cleaned.log when
// its cleanup is complete.
const handlerScript = `trap 'sleep 2; echo cleaned >> cleaned.log; exit 0' TERM
echo $$ >> pid.log
sleep 60 &
wait $!
`

func graceWorkspace(t *testing.T, timeout string) *workspace {
	t.Helper()
	attr := ""
	if timeout != "" {
		attr = fmt.Sprintf("timeout = %q", timeout)
	}
	return newWorkspace(t, map[string]string{
		"handler.sh": handlerScript,
		"main.hcl": fmt.Sprintf(`
pipeline "p" {
  schedule   = "@daily"
  start_date = "2025-07-01"
  end_date   = "2025-07-01"
  task "t" {
    command = ["/bin/sh", "handler.sh"]
    %s
  }
}
`, attr),
	})
}

// The grace period is the time a task's SIGTERM handler gets, on Ctrl-C and
// on its timeout alike: 5 s are enough for a 2 s cleanup; after 1 s the
// task is killed, its cleanup unfinished.
func TestGracePeriod(t *testing.T) {
	t.Parallel()
	now := "2025-08-01T00:00:00Z"
	for _, c := range []struct {
		name    string
		grace   string
		timeout string // "" stops the run with Ctrl-C
		cleaned bool
		state   string
	}{
		{"ctrl-c, grace 5s", "5s", "", true, "interrupted"},
		{"ctrl-c, grace 1s", "1s", "", false, "interrupted"},
		{"timeout, grace 5s", "5s", "1s", true, "failed"},
		{"timeout, grace 1s", "1s", "1s", false, "failed"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			w := graceWorkspace(t, c.timeout)
			p := w.start("run", "--quiet", "--grace", c.grace, "--now", now)
			waitFor(t, "the task to start", func() bool { return len(w.lines("pid.log")) == 1 })
			var pid int
			fmt.Sscan(w.lines("pid.log")[0], &pid)
			var signalled time.Time
			if c.timeout == "" {
				signalled = time.Now()
				p.signal(syscall.SIGINT)
			}
			code := p.wait()
			if signalled.IsZero() {
				// The timeout's SIGTERM came 1 s after the start.
				signalled = time.Now()
			}
			if c.timeout == "" && code != exitInterrupt {
				t.Fatalf("exit %d, want %d\n%s", code, exitInterrupt, p.stderr.String())
			}
			if got := w.exists("cleaned.log"); got != c.cleaned {
				t.Fatalf("cleanup finished: %v, want %v", got, c.cleaned)
			}
			if c.timeout == "" && !c.cleaned {
				// Killed no sooner than the grace period after Ctrl-C.
				if d := time.Since(signalled); d < time.Second {
					t.Fatalf("exited %s after Ctrl-C, within the 1 s grace", d)
				}
			}
			if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err == nil {
				if st, _, _ := procStat(pid); st != "Z" {
					t.Fatalf("task %d outlived rewind", pid)
				}
			}
			runs := w.runsJSON()
			ti := findTask(t, runs, "2025-07-01", "t")
			n := len(ti.Attempts)
			if n != 1 || ti.Attempts[0].State != c.state {
				t.Fatalf("attempts %+v, want one %s", ti.Attempts, c.state)
			}
			if c.timeout != "" {
				log, _ := os.ReadFile(ti.Attempts[0].LogPath)
				if ti.Attempts[0].Signal != "timeout" || !strings.Contains(string(log), "timed out") {
					t.Fatalf("attempt %+v, log %q: not a timeout", ti.Attempts[0], log)
				}
			}
		})
	}
}
