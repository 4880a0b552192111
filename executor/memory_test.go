package executor

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// needCgroups skips t where attempts get no cgroup: rewind is not root, or
// the kernel offers no memory controller to make one with.
func needCgroups(t *testing.T) *cgroupRoot {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("attempt cgroups are made as root here: not root")
	}
	r, err := attemptCgroups()
	if err != nil {
		t.Skipf("no memory controller for attempt cgroups: %v", err)
	}
	return r
}

// withoutCgroups gives the attempts of t no cgroup, as on a machine without
// any: the watchdog measures them.
func withoutCgroups(t *testing.T) {
	saved := attemptCgroups
	attemptCgroups = func() (*cgroupRoot, error) { return nil, errors.New("turned off by the test") }
	t.Cleanup(func() { attemptCgroups = saved })
}

// bothWays runs f with cgroups (where the machine has them), then with the
// watchdog.
func bothWays(t *testing.T, f func(t *testing.T, cgroups bool)) {
	t.Run("cgroup", func(t *testing.T) {
		needCgroups(t)
		f(t, true)
	})
	t.Run("watchdog", func(t *testing.T) {
		withoutCgroups(t)
		f(t, false)
	})
}

// hogSpec is an attempt of the shell script run as sh -c SCRIPT HOG: $0 is
// the test binary, a hog with the REWIND_TEST_HOG_* variables of env.
func hogSpec(t *testing.T, script string, env ...string) Spec {
	dir := t.TempDir()
	return Spec{
		Argv:    []string{"/bin/sh", "-c", script, os.Args[0]},
		Env:     append(os.Environ(), env...),
		Dir:     dir,
		LogPath: filepath.Join(dir, "hog.1.log"),
		Nonce:   NewNonce(),
		Grace:   time.Second,
	}
}

// startWait starts s and waits for it.
func startWait(t *testing.T, s Spec) Result {
	t.Helper()
	h, err := Start(s)
	if err != nil {
		t.Fatal(err)
	}
	return h.Wait(context.Background())
}

// alive reports whether process pid runs (not gone, not a zombie).
func alive(pid int) bool {
	_, err := ProcessStart(pid)
	return err == nil
}

// An attempt over its limit is killed whole and reported out of memory,
// however its memory is spread: in a child that left the process tree, in
// many small children, or in a burst too short for sampling to see (only a
// cgroup catches that one). With a cgroup, the kernel stops the attempt at
// its limit: the peak is the limit, give or take what the kernel lets a
// process that it is killing charge as it exits.
func TestOutOfMemoryKilled(t *testing.T) {
	const limit, slack = 100 << 20, 256 << 10
	type hogCase struct {
		name, script string
		env          []string
	}
	bothWays(t, func(t *testing.T, cgroups bool) {
		cases := []hogCase{
			{"backgrounded child of 500 MiB", `( "$0" & echo $! > hog.pid ); sleep 5`,
				[]string{"REWIND_TEST_HOG_MB=500", "REWIND_TEST_HOG_HOLD=10s"}},
			{"20 children of 30 MiB", `i=0; while [ $i -lt 20 ]; do "$0" & i=$((i+1)); done; wait`,
				[]string{"REWIND_TEST_HOG_MB=30", "REWIND_TEST_HOG_HOLD=10s"}},
		}
		if cgroups {
			cases = append(cases, hogCase{"1 GiB for 50 ms", `"$0"; sleep 5`, []string{"REWIND_TEST_HOG_MB=1024", "REWIND_TEST_HOG_HOLD=50ms"}})
		}
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				s := hogSpec(t, c.script, c.env...)
				s.MemoryLimit = limit
				h, err := Start(s)
				if err != nil {
					t.Fatal(err)
				}
				res := h.Wait(context.Background())
				t.Logf("peak %s (limit %s), %v", formatBytes(res.PeakRSS), formatBytes(limit), res.Duration.Round(time.Millisecond))
				if !res.OOM || res.Success() || res.Signal != "killed" || res.ExitCode != nil {
					t.Errorf("result %+v; want killed for memory", res)
				}
				if cgroups && (res.PeakRSS > limit+slack || res.PeakRSS < limit-(1<<20)) {
					t.Errorf("peak %d; want the limit, %d", res.PeakRSS, limit)
				}
				if !cgroups && res.PeakRSS <= limit {
					t.Errorf("peak %d; want the sample over the limit", res.PeakRSS)
				}
				if b, _ := os.ReadFile(s.LogPath); !contains(string(b), "over the pool's limit of 100.0 MiB") {
					t.Errorf("log %q does not say why the attempt was killed", b)
				}
				if live := liveMembers(h.PID); len(live) > 0 {
					t.Errorf("processes %v of the attempt outlived it", live)
				}
				if b, err := os.ReadFile(filepath.Join(s.Dir, "hog.pid")); err == nil {
					if pid, _ := strconv.Atoi(string(b[:len(b)-1])); alive(pid) {
						t.Errorf("the backgrounded hog %d outlived the attempt", pid)
					}
				}
			})
		}
	})
}

// Memory shared copy-on-write counts once: a worker that touches 200 MiB,
// then forks 8 children that only read it, fits in 300 MiB.
func TestSharedMemoryCountedOnce(t *testing.T) {
	bothWays(t, func(t *testing.T, cgroups bool) {
		s := hogSpec(t, `exec "$0"`, "REWIND_TEST_HOG_MB=200", "REWIND_TEST_HOG_FORKS=8", "REWIND_TEST_HOG_HOLD=2s")
		s.MemoryLimit = 300 << 20
		res := startWait(t, s)
		t.Logf("peak %s of 9 processes sharing 200 MiB", formatBytes(res.PeakRSS))
		if !res.Success() || res.OOM {
			b, _ := os.ReadFile(s.LogPath)
			t.Fatalf("result %+v, log %q; want success", res, b)
		}
		if res.PeakRSS < 190<<20 || res.PeakRSS >= s.MemoryLimit {
			t.Errorf("peak %d; want about 200 MiB", res.PeakRSS)
		}
	})
}

// The peak is the attempt's own memory, never rewind's (which a forked
// process holds until it execs).
func TestPeakRSS(t *testing.T) {
	bothWays(t, func(t *testing.T, cgroups bool) {
		res := startWait(t, spec(t, "true"))
		t.Logf("peak of true: %s", formatBytes(res.PeakRSS))
		if !res.Success() || res.PeakRSS >= 5<<20 || cgroups && res.PeakRSS <= 0 {
			t.Errorf("true: %+v; want success, a peak under 5 MiB", res)
		}
		const want = 200 << 20
		res = startWait(t, hogSpec(t, `exec "$0"`, "REWIND_TEST_HOG_MB=200", "REWIND_TEST_HOG_HOLD=1s"))
		t.Logf("peak of a 200 MiB hog: %s", formatBytes(res.PeakRSS))
		if !res.Success() || res.PeakRSS < want*9/10 || res.PeakRSS > want*11/10 {
			t.Errorf("200 MiB hog: %+v; want success, a peak within 10%% of 200 MiB", res)
		}
	})
}

// No process of an attempt outlives it: what it left behind gets SIGTERM,
// SIGKILL after the grace period if it ignores it, and is gone when Wait
// returns; the attempt keeps its own exit status.
func TestNothingOutlivesTheAttempt(t *testing.T) {
	bothWays(t, func(t *testing.T, cgroups bool) {
		script := `sleep 1000 & echo $! > sleep.pid
(trap '' TERM; exec sleep 1000) & echo $! > stubborn.pid`
		if cgroups { // out of the process group: only the cgroup knows it
			script += "\nsetsid sleep 1000 & echo $! > setsid.pid"
		}
		s := shellSpec(t, script+"\nexit 0")
		s.Nonce = NewNonce()
		h, err := Start(s)
		if err != nil {
			t.Fatal(err)
		}
		res := h.Wait(context.Background())
		if !res.Success() || res.Signal != "" {
			t.Errorf("result %+v; want success", res)
		}
		for _, name := range []string{"sleep.pid", "stubborn.pid", "setsid.pid"} {
			if name == "setsid.pid" && !cgroups {
				continue
			}
			if pid := readPID(t, filepath.Join(s.Dir, name)); alive(pid) {
				t.Errorf("%s: process %d outlived the attempt", name, pid)
			}
		}
		if live := liveMembers(h.PID); len(live) > 0 {
			t.Errorf("processes %v of the attempt's group outlived it", live)
		}
	})
}
