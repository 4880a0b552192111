package executor

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Enforcement says which cgroup is in use, or why none is.
func TestEnforcement(t *testing.T) {
	got := Enforcement()
	t.Logf("Enforcement() = %q", got)
	if _, err := attemptCgroups(); err == nil && !strings.HasPrefix(got, "memory: cgroup v") {
		t.Errorf("Enforcement() = %q; want the cgroup in use", got)
	}
	withoutCgroups(t)
	want := "memory: watchdog (PSS sampling every 100ms; no cgroup: turned off by the test), cpu: none (no cgroup)"
	if got := describeEnforcement(); got != want {
		t.Errorf("without cgroups: %q; want %q", got, want)
	}
}

// cgroupOf is the path of the cgroup of controller in a /proc/PID/cgroup.
func cgroupOf(procCgroup, controller string) string {
	for _, line := range strings.Split(procCgroup, "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) == 3 && (controller == "" && parts[1] == "" || controller != "" && contains(","+parts[1]+",", ","+controller+",")) {
			return parts[2]
		}
	}
	return ""
}

// Every process of an attempt, the command's first, is in the attempt's
// cgroup, with its CPU quota; the cgroup is gone once the attempt is.
func TestAttemptCgroup(t *testing.T) {
	r := needCgroups(t)
	for _, s := range []Spec{spec(t, "sh", "-c", "cat /proc/self/cgroup; touch ready; until [ -e go ]; do sleep 0.01; done"),
		shellSpec(t, "cat /proc/self/cgroup; touch ready; until [ -e go ]; do sleep 0.01; done")} {
		s.Nonce, s.MemoryLimit, s.CPUs = NewNonce(), 64<<20, 1
		name := cgroupName(s.Nonce, s.LogPath)
		h, err := Start(s)
		if err != nil {
			t.Fatal(err)
		}
		waitFile(t, filepath.Join(s.Dir, "ready"))
		mem := filepath.Join(r.memory, name)
		limit := "memory.limit_in_bytes"
		if r.v2 {
			limit = "memory.max"
		}
		if got := readInt(filepath.Join(mem, limit)); got != 64<<20 {
			t.Errorf("%s = %d; want %d", limit, got, 64<<20)
		}
		if r.cpu != "" && !r.v2 {
			if got := readInt(filepath.Join(r.cpu, name, "cpu.cfs_quota_us")); got != cpuPeriod {
				t.Errorf("cpu.cfs_quota_us = %d; want %d", got, cpuPeriod)
			}
		}
		os.WriteFile(filepath.Join(s.Dir, "go"), nil, 0o644)
		if res := h.Wait(context.Background()); !res.Success() {
			t.Errorf("result %+v", res)
		}
		b, _ := os.ReadFile(s.LogPath)
		t.Logf("the attempt's /proc/self/cgroup:\n%s", b)
		ctrl := "memory"
		if r.v2 {
			ctrl = ""
		}
		if got := cgroupOf(string(b), ctrl); !strings.HasSuffix(got, "/rewind/"+name) {
			t.Errorf("memory cgroup %q; want the attempt's, .../rewind/%s", got, name)
		}
		if r.cpu != "" && !r.v2 {
			if got := cgroupOf(string(b), "cpu"); !strings.HasSuffix(got, "/rewind/"+name) {
				t.Errorf("cpu cgroup %q; want the attempt's", got)
			}
		}
		for _, d := range []string{mem, filepath.Join(r.cpu, name)} {
			if _, err := os.Stat(d); err == nil {
				t.Errorf("cgroup %s left behind", d)
			}
		}
	}
}

// A wrapper that cannot enter its cgroup runs nothing, and says why.
func TestCgroupWrapperCannotEnter(t *testing.T) {
	dir := t.TempDir()
	for _, script := range []string{cgroupShellWrapper, cgroupArgvWrapper} {
		args := []string{"-c", script, "/bin/sh", "log", "abc ", filepath.Join(dir, "no-such-cgroup"), "", "echo ran"}
		if script == cgroupArgvWrapper {
			args = append(args[:len(args)-1], "echo", "ran")
		}
		out, err := exec.Command("/bin/sh", args...).CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 125 {
			t.Errorf("exit %v; want 125", err)
		}
		if s := string(out); contains(s, "ran") || !contains(s, "rewind: cannot enter the cgroup") || !strings.HasSuffix(s, statusLine("abc", 125)) {
			t.Errorf("output %q", out)
		}
	}
}

// The name of an attempt's cgroup comes from its nonce (or log), without
// giving it away.
func TestCgroupName(t *testing.T) {
	n := NewNonce()
	a, b := cgroupName(n, "x.log"), cgroupName(NewNonce(), "x.log")
	if a == b || a != cgroupName(n, "y.log") || !isCgroupName(a) || contains(a, n[:8]) {
		t.Errorf("names %q %q", a, b)
	}
	if cgroupName("", "x.log") == cgroupName("", "y.log") || !isCgroupName(cgroupName("", "x.log")) {
		t.Error("attempts without a nonce share a cgroup name")
	}
}

// An attempt whose rewind died is adopted with its cgroup: its OOM kills and
// its peak, counted by the kernel while no rewind watched, are read there,
// whether the attempt still runs or has ended.
func TestAdoptCgroup(t *testing.T) {
	r := needCgroups(t)
	const limit = 100 << 20
	hog := func(t *testing.T, script string) Spec {
		s := hogSpec(t, script, "REWIND_TEST_HOG_MB=300", "REWIND_TEST_HOG_HOLD=30s")
		s.MemoryLimit = limit
		return s
	}
	check := func(t *testing.T, s Spec, res Result) {
		t.Helper()
		t.Logf("adopted: %+v, peak %s", res, formatBytes(res.PeakRSS))
		if !res.OOM || res.Success() || res.Signal != "killed" || res.NoStatus {
			t.Errorf("result %+v; want killed for memory", res)
		}
		if res.PeakRSS > limit+256<<10 || res.PeakRSS < limit-(1<<20) {
			t.Errorf("peak %d; want the limit", res.PeakRSS)
		}
		if b, _ := os.ReadFile(s.LogPath); !contains(string(b), "over the pool's limit of 100.0 MiB") && !contains(string(b), "out of memory") {
			t.Errorf("log %q does not say why the attempt was killed", b)
		}
		if d := filepath.Join(r.memory, cgroupName(s.Nonce, s.LogPath)); fileExists(d) {
			t.Errorf("cgroup %s left behind", d)
		}
	}
	t.Run("handle dropped", func(t *testing.T) {
		s := hog(t, `"$0"; touch after; sleep 30`)
		h, err := Start(s)
		if err != nil {
			t.Fatal(err)
		}
		// The kernel kills the hog at the limit with no rewind watching.
		waitFile(t, filepath.Join(s.Dir, "after"))
		res := AdoptWait(context.Background(), AdoptSpec{
			PID: h.PID, PIDStart: h.PIDStart, LogPath: s.LogPath, Nonce: s.Nonce, StartedAt: h.start, Grace: time.Second,
		})
		check(t, s, res)
		waitGroupGone(t, h.PID)
	})
	t.Run("started elsewhere", func(t *testing.T) {
		s := hog(t, `"$0"; sleep 30`)
		a := startElsewhere(t, s)
		check(t, s, AdoptWait(context.Background(), a))
		waitGroupGone(t, a.PID)
	})
	t.Run("ended before adoption", func(t *testing.T) {
		s := hog(t, `"$0"; exit 0`)
		a := startElsewhere(t, s)
		waitStatus(t, s.LogPath, s.Nonce)
		waitEnded(t, a.PID)
		check(t, s, AdoptWait(context.Background(), a))
	})
}

// An attempt of an older rewind, with a wrapper that enters no cgroup, is
// still known and adopted.
func TestAdoptPlainWrapper(t *testing.T) {
	s := shellSpec(t, "")
	s.Nonce = NewNonce()
	os.MkdirAll(filepath.Dir(s.LogPath), 0o755)
	logf, err := os.Create(s.LogPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	c := exec.Command("/bin/sh", "-c", shellWrapper, "/bin/sh", s.LogPath, s.Nonce+" ", "sleep 0.3; exit 6")
	c.Stdout, c.Stderr = logf, logf
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	go c.Wait()
	waitExec(t, c.Process.Pid)
	if !Alive(c.Process.Pid, s.LogPath) || FindWrapper(s.LogPath) != c.Process.Pid {
		t.Error("the plain wrapper is not recognized")
	}
	st, _ := ProcessStart(c.Process.Pid)
	res := AdoptWait(context.Background(), AdoptSpec{PID: c.Process.Pid, PIDStart: st, LogPath: s.LogPath, Nonce: s.Nonce, MemoryLimit: 1 << 30})
	if res.ExitCode == nil || *res.ExitCode != 6 || res.OOM {
		t.Errorf("result %+v; want exit code 6", res)
	}
}

// Empty attempt cgroups that no rewind holds are removed once stale; those
// in use, held or fresh stay.
func TestStaleCgroups(t *testing.T) {
	r := needCgroups(t)
	mk := func() string {
		d := filepath.Join(r.memory, cgroupName(NewNonce(), ""))
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { removeCgroupDir(d) })
		return d
	}
	old := time.Now().Add(-2 * cgroupStaleAge)
	stale, held, fresh := mk(), mk(), mk()
	for _, d := range []string{stale, held} {
		if err := os.Chtimes(d, old, old); err != nil {
			t.Skipf("cannot age a cgroup directory here: %v", err)
		}
	}
	fd, ok := lockCgroup(held)
	if !ok {
		t.Fatal("cannot lock a cgroup")
	}
	defer syscall.Close(fd)
	removeStale(r.memory)
	if fileExists(stale) || !fileExists(held) || !fileExists(fresh) {
		t.Errorf("after removeStale: stale %v, held %v, fresh %v; want false true true", fileExists(stale), fileExists(held), fileExists(fresh))
	}
}

// Rewind's own cgroups are read from /proc/self/cgroup and mountinfo.
func TestCgroupMounts(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "mountinfo")
	os.WriteFile(path, []byte(`31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu,cpuacct
35 31 0:32 /outer /sys/fs/cgroup/mem\040ory rw,relatime - cgroup cgroup rw,memory
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime shared:1 - cgroup2 cgroup2 rw
`), 0o644)
	ms, err := cgroupMounts(path)
	if err != nil || len(ms) != 3 {
		t.Fatalf("cgroupMounts = %+v, %v", ms, err)
	}
	if !ms[2].v2 || ms[0].v2 || !contains(strings.Join(ms[0].controllers, " "), "cpuacct") || ms[1].point != "/sys/fs/cgroup/mem ory" {
		t.Errorf("mounts %+v", ms)
	}
	if d, err := cgroupDir(ms[1], "/outer/x"); err != nil || d != "/sys/fs/cgroup/mem ory/x" {
		t.Errorf("cgroupDir = %q, %v", d, err)
	}
	if _, err := cgroupDir(ms[1], "/outerx"); err == nil {
		t.Error("a cgroup outside the mount")
	}
	os.WriteFile(path, []byte("4:memory:/process_api/abc\n1:cpu,cpuacct:/\n0::/\n"), 0o644)
	own, err := parseProcCgroup(path)
	if err != nil || len(own) != 3 || own[0].path != "/process_api/abc" || own[2].controllers != nil || len(own[1].controllers) != 2 {
		t.Errorf("parseProcCgroup = %+v, %v", own, err)
	}
}

// pss reads a process's proportional set size.
func TestPSS(t *testing.T) {
	if n := pss(os.Getpid()); n <= 0 {
		t.Errorf("pss(self) = %d", n)
	}
	if n := pss(1 << 30); n != 0 {
		t.Errorf("pss of no process = %d", n)
	}
}

// The cgroup v2 side, which this machine may lack, on a mock of its files:
// finding a delegated memory controller, and an attempt's limit, peak and
// OOM kills.
func TestCgroupV2Files(t *testing.T) {
	mnt := t.TempDir()
	own := filepath.Join(mnt, "svc")
	write := func(path, s string) {
		t.Helper()
		os.MkdirAll(filepath.Dir(path), 0o755)
		if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(own, "cgroup.controllers"), "cpuset cpu io memory pids\n")
	write(filepath.Join(own, "cgroup.subtree_control"), "")
	write(filepath.Join(own, "rewind", "cgroup.subtree_control"), "memory cpu\n")
	mounts := []cgroupMount{{v2: true, root: "/", point: mnt}}
	r, err := findV2([]ownCgroup{{path: "/svc"}}, mounts)
	if err != nil || !r.v2 || r.memory != filepath.Join(own, "rewind") || r.cpu != r.memory {
		t.Fatalf("findV2 = %+v, %v", r, err)
	}
	// A plain file keeps the last write, over the first: "+cpu" over "+memory".
	if b, _ := os.ReadFile(filepath.Join(own, "cgroup.subtree_control")); !strings.HasPrefix(string(b), "+cpu") {
		t.Errorf("subtree_control written %q; want +memory then +cpu", b)
	}
	write(filepath.Join(mnt, "bare", "cgroup.controllers"), "cpu io\n")
	if _, err := findV2([]ownCgroup{{path: "/bare"}}, mounts); err == nil || !contains(err.Error(), "no memory controller") {
		t.Errorf("findV2 without memory: %v", err)
	}

	c := &cgroup{v2: true, memory: filepath.Join(t.TempDir(), "a"), lock: -1}
	write(filepath.Join(c.memory, "memory.max"), "max")
	write(filepath.Join(c.memory, "memory.swap.max"), "max")
	write(filepath.Join(c.memory, "memory.peak"), "123456\n")
	write(filepath.Join(c.memory, "memory.events"), "low 0\nhigh 0\nmax 4\noom 1\noom_kill 1\noom_group_kill 1\n")
	if c.limitInForce() != 0 {
		t.Errorf("limit of max = %d; want none", c.limitInForce())
	}
	if err := c.setMemoryLimit(512); err != nil || c.limit != 512 || c.limitInForce() != 512 {
		t.Errorf("setMemoryLimit: %v, limit %d, in force %d", err, c.limit, c.limitInForce())
	}
	if b, _ := os.ReadFile(filepath.Join(c.memory, "memory.swap.max")); string(b)[:1] != "0" {
		t.Errorf("memory.swap.max %q; want 0", b)
	}
	if c.peak() != 123456 || c.oomKills() != 1 {
		t.Errorf("peak %d, OOM kills %d; want 123456, 1", c.peak(), c.oomKills())
	}
}
