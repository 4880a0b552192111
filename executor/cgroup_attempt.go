package executor

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// learns nothing of the nonce.
func cgroupName(nonce, logPath string) string {
	key := "rewind attempt cgroup\x00nonce\x00" + nonce
	if nonce == "" {
		key = "rewind attempt cgroup\x00log\x00" + logPath
	}
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:16])
}

// isCgroupName reports whether s is the name of an attempt cgroup.
func isCgroupName(s string) bool { return len(s) == 32 && validNonce(s) }

// cgroup is the cgroup of one attempt.
type cgroup struct {
	v2     bool
	memory string // its directory in the memory controller (v2: its only one)
	cpu    string // v1: its directory in the cpu controller; "" without
	// limit is the memory limit in force (0: none known).
	limit int64
	lock  int // an fd of memory with an exclusive flock (-1: none)
	// recyclable: made by this rewind for an attempt (cgroup v1, memory
	// only), so that once its attempt is over it may be kept as a spare
	// (recycle) rather than removed.
	recyclable bool
}

// newCgroup makes the cgroup of an attempt, with its memory limit (0:
// none) and CPU quota (0: none). A quota that cannot be set leaves the
// cgroup without one, with cpuErr saying why.
func (r *cgroupRoot) newCgroup(name string, memory int64, cpus int) (c *cgroup, cpuErr, err error) {
	if cpus <= 0 && !r.v2 {
		if c := r.reuse(name, memory); c != nil {
			return c, nil, nil
		}
	}
	c = &cgroup{v2: r.v2, memory: filepath.Join(r.memory, name), lock: -1, recyclable: !r.v2 && cpus <= 0}
	if err := makeAttemptDir(c.memory); err != nil {
		return nil, nil, err
	}
	c.lock, _ = lockCgroup(c.memory)
	if err := c.setMemoryLimit(memory); err != nil {
		c.remove()
		return nil, nil, err
	}
	if c.v2 {
		_ = writeCgroup(c.memory, "memory.oom.group", "1") // the kernel kills all of it
	}
	if cpus > 0 {
		cpuErr = r.setCPUs(c, name, cpus)
	}
	return c, cpuErr, nil
}

// makeAttemptDir makes an attempt's cgroup directory; one left by an earlier
// start of the same attempt is made afresh if it is empty.
func makeAttemptDir(dir string) error {
	err := os.Mkdir(dir, 0o755)
	if errors.Is(err, os.ErrExist) {
		if rerr := removeCgroupDir(dir); rerr != nil {
			return fmt.Errorf("cgroup %s exists and cannot be removed: %w", dir, rerr)
		}
		err = os.Mkdir(dir, 0o755)
	}
	return err
}

// setCPUs gives the attempt's cgroup a quota of cpus CPUs.
func (r *cgroupRoot) setCPUs(c *cgroup, name string, cpus int) error {
	if r.cpu == "" {
		return errors.New(r.noCPU)
	}
	quota := strconv.Itoa(cpus * cpuPeriod)
	if c.v2 {
		return writeCgroup(c.memory, "cpu.max", quota+" "+strconv.Itoa(cpuPeriod))
	}
	dir := filepath.Join(r.cpu, name)
	if err := makeAttemptDir(dir); err != nil {
		return err
	}
	err := writeCgroup(dir, "cpu.cfs_period_us", strconv.Itoa(cpuPeriod))
	if err == nil {
		err = writeCgroup(dir, "cpu.cfs_quota_us", quota)
	}
	if err != nil {
		_ = removeCgroupDir(dir)
		return err
	}
	c.cpu = dir
	return nil
}

// errOverLimit: a memory limit could not be set because the cgroup uses
// more already.
var errOverLimit = errors.New("memory in use is over the limit")

// setMemoryLimit sets the cgroup's memory limit (n <= 0: leaves it as it
// is), swap included. Under v1 it fails with errOverLimit when the cgroup
// uses more than n already; under v2 the kernel then reclaims, or kills.
func (c *cgroup) setMemoryLimit(n int64) error {
	if n <= 0 {
		return nil
	}
	v := strconv.FormatInt(n, 10)
	if c.v2 {
		if err := writeCgroup(c.memory, "memory.max", v); err != nil {
			return err
		}
		_ = writeCgroup(c.memory, "memory.swap.max", "0") // absent without swap accounting
		c.limit = n
		return nil
	}
	// memory.memsw.limit_in_bytes (memory and swap; absent without swap
	// accounting) may never be under memory.limit_in_bytes: lower the
	// one, raise the other first.
	memsw := func() error {
		if err := writeCgroup(c.memory, "memory.memsw.limit_in_bytes", v); !errors.Is(err, os.ErrNotExist) {
			return err
		}
		return nil
	}
	err := writeCgroup(c.memory, "memory.limit_in_bytes", v)
	if err == nil {
		err = memsw()
	} else if errors.Is(err, syscall.EINVAL) {
		if err = memsw(); err == nil {
			err = writeCgroup(c.memory, "memory.limit_in_bytes", v)
		}
	}
	if errors.Is(err, syscall.EBUSY) {
		return fmt.Errorf("cgroup %s: %w", c.memory, errOverLimit)
	}
	if err != nil {
		return err
	}
	c.limit = n
	return nil
}

// dirs are the directories the wrapper moves itself into ("" for none).
func (c *cgroup) dirs() [2]string { return [2]string{c.memory, c.cpu} }

// peak is the most memory the cgroup has used at once (0 if unknown).
func (c *cgroup) peak() int64 {
	name := "memory.max_usage_in_bytes"
	if c.v2 {
		name = "memory.peak"
	}
	return readInt(filepath.Join(c.memory, name))
}

// usage is the memory the cgroup uses now.
func (c *cgroup) usage() int64 {
	name := "memory.usage_in_bytes"
	if c.v2 {
		name = "memory.current"
	}
	return readInt(filepath.Join(c.memory, name))
}

// oomKills is how many processes of the cgroup the kernel killed for
// memory: the oom_kill counter of memory.events (v2) or memory.oom_control
// (v1); on v1 kernels without it (before 4.13), the times the limit was
// hit (memory.failcnt).
func (c *cgroup) oomKills() int64 {
	name := "memory.oom_control"
	if c.v2 {
		name = "memory.events"
	}
	s, err := readFile(filepath.Join(c.memory, name))
	if err != nil {
		return 0
	}
	if n, ok := keyedValue(s, "oom_kill"); ok {
		return n
	}
	if c.v2 {
		return 0
	}
	return readInt(filepath.Join(c.memory, "memory.failcnt"))
}

// watchOOM looks at the cgroup's OOM kills every memoryPoll until stop is
// closed; once there is one, it sends the cgroup's peak. It is done with c
// when watching is done: only then may c be recycled (renamed).
func (c *cgroup) watchOOM(stop <-chan struct{}, watching *sync.WaitGroup) <-chan int64 {
	over := make(chan int64, 1)
	watching.Add(1)
	go func() {
		defer watching.Done()
		t := time.NewTicker(memoryPoll)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				if c.oomKills() > 0 {
					over <- c.peak()
					return
				}
			}
		}
	}()
	return over
}

// keyedValue reads "key N" from a flat keyed cgroup file.
func keyedValue(s, key string) (int64, bool) {
	for _, line := range strings.Split(s, "\n") {
		if v, ok := strings.CutPrefix(line, key+" "); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			return n, err == nil
		}
	}
	return 0, false
}

// procs lists the processes in the cgroup and in cgroups below it.
func (c *cgroup) procs() []int {
	var out []int
	for _, d := range c.dirs() {
		if d != "" {
			out = appendProcs(out, d)
		}
	}
	return out
}

// appendProcs appends the processes of the cgroup dir and of those below it.
func appendProcs(out []int, dir string) []int {
	s, _ := readFile(filepath.Join(dir, "cgroup.procs"))
	for _, f := range strings.Fields(s) {
		if pid, err := strconv.Atoi(f); err == nil {
			out = append(out, pid)
		}
	}
	if !hasSubdirs(dir) {
		return out
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if e.IsDir() {
			out = appendProcs(out, filepath.Join(dir, e.Name()))
		}
	}
	return out
}

// empty reports whether no process is left in the cgroup.
func (c *cgroup) empty() bool { return c == nil || len(c.procs()) == 0 }

// signal sends sig to every process in the cgroup.
func (c *cgroup) signal(sig syscall.Signal) {
	if c == nil {
		return
	}
	for _, pid := range c.procs() {
		_ = syscall.Kill(pid, sig)
	}
}

// kill SIGKILLs every process in the cgroup: at once with cgroup.kill (v2,
// Linux 5.14), else pid by pid (callers repeat it until the cgroup is
// empty: a process may fork meanwhile).
func (c *cgroup) kill() {
	if c == nil {
		return
	}
	if c.v2 && writeCgroup(c.memory, "cgroup.kill", "1") == nil {
		return
	}
	c.signal(syscall.SIGKILL)
}

// remove removes the cgroup's directories (they must be empty) and lets
// go of its lock.
func (c *cgroup) remove() {
	if c == nil {
		return
	}
	for _, d := range c.dirs() {
		if d != "" {
			_ = removeCgroupDir(d)
		}
	}
	c.release()
}

// release lets the cgroup go without removing it: its attempt runs on, and
// the rewind that adopts it takes the lock.
func (c *cgroup) release() {
	if c == nil {
		return
	}
	if c.lock >= 0 {
		syscall.Close(c.lock)
		c.lock = -1
	}
}

// rmdirPatience bounds how long removeCgroupDir retries a cgroup that is
// still busy: processes that were killed leave it as they end.
const rmdirPatience = time.Second

// hasSubdirs reports whether the cgroup directory has cgroups below it: the
// links of a directory of cgroupfs count them (2 without), cheaper to read
// than the directory.
func hasSubdirs(dir string) bool {
	var st syscall.Stat_t
	return syscall.Stat(dir, &st) == nil && st.Nlink > 2
}

// removeCgroupDir removes an empty cgroup directory and those below it.
func removeCgroupDir(dir string) error {
	if err := syscall.Rmdir(dir); err == nil || err == syscall.ENOENT {
		return nil
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		return err
	}
	for _, e := range entries {
		if e.IsDir() {
			if err := removeCgroupDir(filepath.Join(dir, e.Name())); err != nil {
				return err
			}
		}
	}
	deadline := time.Now().Add(rmdirPatience)
	for {
		err := syscall.Rmdir(dir)
		switch {
		case err == nil || err == syscall.ENOENT:
			return nil
		case err != syscall.EBUSY || time.Now().After(deadline) || len(appendProcs(nil, dir)) > 0:
			return &os.PathError{Op: "rmdir", Path: dir, Err: err}
		}
		time.Sleep(groupPoll)
	}
}

// lockCgroup takes the exclusive flock that marks an attempt's cgroup as
// held by a rewind (stale-cgroup cleaning skips it); ok is false if another
// holds it. The lock is let go when fd is closed.
func lockCgroup(dir string) (fd int, ok bool) {
	fd, err := syscall.Open(dir, syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return -1, false
	}
	if err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB); err != nil {
		syscall.Close(fd)
		return -1, false
	}
	return fd, true
}

// attemptCgroup makes the cgroup of an attempt about to start. It returns
// nil where cgroups are not in use (Enforcement says why) or this one
// cannot be made; note is then what to write in the attempt's log.
func attemptCgroup(spec Spec) (c *cgroup, note string) {
	r, err := attemptCgroups()
	if err != nil {
		return nil, ""
	}
	c, cpuErr, err := r.newCgroup(cgroupName(spec.Nonce, spec.LogPath), spec.MemoryLimit, spec.CPUs)
	if err != nil {
		return nil, fmt.Sprintf("rewind: no cgroup for this attempt (%v): its memory is watched by sampling, with no CPU quota", err)
	}
	if cpuErr != nil {
		note = fmt.Sprintf("rewind: no CPU quota for this attempt: %v", cpuErr)
	}
	return c, note
}

// adoptedCgroup finds the cgroup of an attempt started by another rewind:
// from the command line of its wrapper while it runs (a cgroup wrapper's
// arguments name its directories), else by its name below this rewind's
// cgroups. It returns nil for an attempt without one (started by an older
// rewind, or on a machine without cgroups).
func adoptedCgroup(a AdoptSpec, alive bool) *cgroup {
	if a.Nonce == "" && a.LogPath == "" {
		return nil
	}
	name := cgroupName(a.Nonce, a.LogPath)
	c := &cgroup{lock: -1}
	dirs, fromArgv := [2]string{}, false
	if alive {
		dirs, fromArgv = wrapperCgroups(a.PID, a.LogPath)
	}
	if fromArgv {
		if filepath.Base(dirs[0]) != name || !isCgroupDir(dirs[0]) {
			return nil
		}
		c.memory = dirs[0]
		if dirs[1] != "" && filepath.Base(dirs[1]) == name && isCgroupDir(dirs[1]) {
			c.cpu = dirs[1]
		}
	} else {
		r, err := attemptCgroups()
		if err != nil {
			return nil
		}
		c.memory = filepath.Join(r.memory, name)
		if !isCgroupDir(c.memory) {
			return nil
		}
		if r.cpu != "" && r.cpu != r.memory && isCgroupDir(filepath.Join(r.cpu, name)) {
			c.cpu = filepath.Join(r.cpu, name)
		}
	}
	c.v2 = fileExists(filepath.Join(c.memory, "memory.max"))
	c.limit = c.limitInForce()
	c.lock, _ = lockCgroup(c.memory)
	return c
}

// limitInForce reads the cgroup's memory limit (0: none).
func (c *cgroup) limitInForce() int64 {
	name := "memory.limit_in_bytes"
	if c.v2 {
		name = "memory.max"
	}
	n := readInt(filepath.Join(c.memory, name)) // v2 "max" reads as 0
	if n >= 1<<62 {                             // v1's "no limit"
		return 0
	}
	return n
}

// wrapperCgroups reads the cgroup directories from the command line of the
// wrapper pid of the attempt logging to logPath, if it is a cgroup wrapper.
func wrapperCgroups(pid int, logPath string) ([2]string, bool) {
	if pid <= 0 {
		return [2]string{}, false
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil || !isWrapperOf(b, logPath) {
		return [2]string{}, false
	}
	args := strings.Split(string(b), "\x00")
	// /bin/sh -c SCRIPT /bin/sh LOG NONCE CG1 CG2 ...
	if len(args) < 8 || args[2] != cgroupArgvWrapper && args[2] != cgroupShellWrapper {
		return [2]string{}, false
	}
	return [2]string{args[6], args[7]}, true
}

// isCgroupDir reports whether dir is a directory of a cgroup filesystem.
func isCgroupDir(dir string) bool {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return false
	}
	return st.Type == unix.CGROUP_SUPER_MAGIC || st.Type == unix.CGROUP2_SUPER_MAGIC
}

// writeCgroup writes value to the file name of a cgroup directory, in one
// write as cgroup files want.
func writeCgroup(dir, name, value string) error {
	path := filepath.Join(dir, name)
	fd, err := syscall.Open(path, syscall.O_WRONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return &os.PathError{Op: "open", Path: path, Err: err}
	}
	defer syscall.Close(fd)
	for {
		_, err = syscall.Write(fd, []byte(value))
		if err != syscall.EINTR {
			break
		}
	}
	if err != nil {
		return &os.PathError{Op: "write", Path: path, Err: err}
	}
	return nil
}

// readInt reads a file holding one number (0 if it cannot).
func readInt(path string) int64 {
	s, err := readFile(path)
	if err != nil {
		return 0
	}
	n, _ := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	return n
}

// fileExists reports whether path exists.
func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
