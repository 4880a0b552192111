package executor

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// An attempt's cgroup is a directory named after the attempt (cgroupName)
// in a directory "rewind" below rewind's own cgroup, in each controller
// used: the memory controller always, the cpu controller for a CPU quota.
// Nested so, the limits of rewind's own cgroup still hold for its attempts.
// The wrapper moves itself into it before it runs the command, so that every
// process of the attempt starts inside it and stays there, detached or not.
//
// With cgroup v2 (its memory controller delegated to rewind's cgroup) the
// directory has memory.max, memory.peak, memory.events and cgroup.kill;
// with cgroup v1 memory.limit_in_bytes (and memory.memsw.limit_in_bytes:
// swap does not hide the limit), memory.max_usage_in_bytes,
// memory.oom_control, and kill by pid until cgroup.procs is empty.

// cpuPeriod is the period of a CPU quota, in microseconds.
const cpuPeriod = 100000

// cgroupStaleAge is how old an empty attempt cgroup that no rewind holds
// must be for a rewind to remove it as a leftover (of an attempt whose
// rewind died): a fresh one may be waiting for its wrapper.
const cgroupStaleAge = time.Minute

// cgroupRoot is where this rewind makes the cgroups of its attempts.
type cgroupRoot struct {
	v2     bool
	memory string // <own memory cgroup>/rewind (v2: <own cgroup>/rewind)
	cpu    string // <own cpu cgroup>/rewind (v2: memory's, when cpu is enabled there); "" without
	noCPU  string // why there is no CPU quota, when cpu is ""
}

// attemptCgroups finds (once) where attempt cgroups go, or why there are
// none. A variable: tests turn cgroups off with it.
var attemptCgroups = sync.OnceValues(findCgroupRoot)

// Enforcement describes how the limits of attempts are enforced on this
// machine, for rewind to log: "memory: cgroup v1 (DIR), cpu: cgroup v1
// quota (DIR)", or "memory: watchdog (PSS sampling every 100ms; no cgroup:
// REASON), cpu: none (no cgroup)".
func Enforcement() string { return enforcement() }

var enforcement = sync.OnceValue(describeEnforcement)

// describeEnforcement is Enforcement, computed.
func describeEnforcement() string {
	r, err := attemptCgroups()
	if err != nil {
		return fmt.Sprintf("memory: watchdog (PSS sampling every %s; no cgroup: %v), cpu: none (no cgroup)", memoryPoll, err)
	}
	v := "cgroup v1"
	if r.v2 {
		v = "cgroup v2"
	}
	cpu := "cpu: none (" + r.noCPU + ")"
	if r.cpu != "" {
		cpu = "cpu: " + v + " quota (" + r.cpu + ")"
	}
	return "memory: " + v + " (" + r.memory + "), " + cpu
}

// findCgroupRoot finds rewind's own cgroups and makes the "rewind"
// directories below them: cgroup v2 where its memory controller can be
// used, else cgroup v1. It removes the stale cgroups of dead attempts.
func findCgroupRoot() (*cgroupRoot, error) {
	own, err := parseProcCgroup("/proc/self/cgroup")
	if err != nil {
		return nil, err
	}
	mounts, err := cgroupMounts("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	r, err2 := findV2(own, mounts)
	if err2 != nil {
		var err1 error
		r, err1 = findV1(own, mounts)
		if err1 != nil {
			return nil, fmt.Errorf("cgroup v2: %v; cgroup v1: %v", err2, err1)
		}
	}
	removeStale(r.memory)
	if r.cpu != "" && r.cpu != r.memory {
		removeStale(r.cpu)
	}
	return r, nil
}

// ownCgroup is a line of /proc/PID/cgroup.
type ownCgroup struct {
	controllers []string // none for v2
	path        string
}

// parseProcCgroup reads a /proc/PID/cgroup.
func parseProcCgroup(path string) ([]ownCgroup, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var out []ownCgroup
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		c := ownCgroup{path: parts[2]}
		if parts[1] != "" {
			c.controllers = strings.Split(parts[1], ",")
		}
		out = append(out, c)
	}
	return out, nil
}

// cgroupMount is a mounted cgroup hierarchy.
type cgroupMount struct {
	v2          bool
	root        string // the cgroup mounted (field 4 of mountinfo)
	point       string
	controllers []string // v1: from the super options
}

// cgroupMounts lists the cgroup hierarchies of a /proc/PID/mountinfo.
func cgroupMounts(path string) ([]cgroupMount, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []cgroupMount
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		if !ok {
			continue
		}
		a, b := strings.Fields(pre), strings.Fields(post)
		if len(a) < 5 || len(b) < 3 {
			continue
		}
		switch b[0] {
		case "cgroup2":
			out = append(out, cgroupMount{v2: true, root: unescapeMount(a[3]), point: unescapeMount(a[4])})
		case "cgroup":
			out = append(out, cgroupMount{root: unescapeMount(a[3]), point: unescapeMount(a[4]), controllers: strings.Split(b[2], ",")})
		}
	}
	return out, sc.Err()
}

// unescapeMount undoes the octal escapes of mountinfo (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// cgroupDir is the directory of cgroup path in mount m.
func cgroupDir(m cgroupMount, path string) (string, error) {
	rel := path
	if m.root != "/" {
		r, ok := strings.CutPrefix(path, m.root)
		if !ok || r != "" && r[0] != '/' {
			return "", fmt.Errorf("own cgroup %s is not below the cgroup mounted at %s (%s)", path, m.point, m.root)
		}
		rel = r
	}
	return filepath.Join(m.point, rel), nil
}

// findV2 uses the unified hierarchy if rewind's cgroup there has the memory
// controller and may give it to its children.
func findV2(own []ownCgroup, mounts []cgroupMount) (*cgroupRoot, error) {
	path, mount := "", -1
	for _, c := range own {
		if c.controllers == nil {
			path = c.path
		}
	}
	for i, m := range mounts {
		if m.v2 {
			mount = i
			break
		}
	}
	if path == "" || mount < 0 {
		return nil, errors.New("not mounted")
	}
	dir, err := cgroupDir(mounts[mount], path)
	if err != nil {
		return nil, err
	}
	ctrls, err := readFile(filepath.Join(dir, "cgroup.controllers"))
	if err != nil {
		return nil, err
	}
	have := strings.Fields(ctrls)
	if !slices.Contains(have, "memory") {
		return nil, fmt.Errorf("no memory controller in %s (controllers: %q)", dir, strings.TrimSpace(ctrls))
	}
	if err := enableController(dir, "memory"); err != nil {
		return nil, fmt.Errorf("memory controller not delegated below %s: %w", dir, err)
	}
	base := filepath.Join(dir, "rewind")
	if err := mkdirCgroup(base); err != nil {
		return nil, err
	}
	if err := enableController(base, "memory"); err != nil {
		return nil, fmt.Errorf("memory controller not delegated below %s: %w", base, err)
	}
	r := &cgroupRoot{v2: true, memory: base}
	switch {
	case !slices.Contains(have, "cpu"):
		r.noCPU = "no cpu controller in " + dir
	case enableController(dir, "cpu") != nil || enableController(base, "cpu") != nil:
		r.noCPU = "cpu controller not delegated below " + dir
	default:
		r.cpu = base
	}
	return r, nil
}

// enableController enables a controller for the children of the cgroup dir,
// unless it is already.
func enableController(dir, controller string) error {
	on, err := readFile(filepath.Join(dir, "cgroup.subtree_control"))
	if err != nil {
		return err
	}
	if slices.Contains(strings.Fields(on), controller) {
		return nil
	}
	return writeCgroup(dir, "cgroup.subtree_control", "+"+controller)
}

// findV1 uses the v1 hierarchies of the memory controller and, if there
// is one, of the cpu controller.
func findV1(own []ownCgroup, mounts []cgroupMount) (*cgroupRoot, error) {
	mem, err := v1Base(own, mounts, "memory", "memory.limit_in_bytes")
	if err != nil {
		return nil, err
	}
	r := &cgroupRoot{memory: mem}
	if r.cpu, err = v1Base(own, mounts, "cpu", "cpu.cfs_quota_us"); err != nil {
		r.noCPU = err.Error()
	}
	return r, nil
}

// v1Base makes the "rewind" directory below rewind's own cgroup in the v1
// hierarchy of controller, which must have the file probe.
func v1Base(own []ownCgroup, mounts []cgroupMount, controller, probe string) (string, error) {
	path := ""
	for _, c := range own {
		if slices.Contains(c.controllers, controller) {
			path = c.path
		}
	}
	for _, m := range mounts {
		if m.v2 || !slices.Contains(m.controllers, controller) || path == "" {
			continue
		}
		dir, err := cgroupDir(m, path)
		if err != nil {
			return "", err
		}
		base := filepath.Join(dir, "rewind")
		if err := mkdirCgroup(base); err != nil {
			return "", err
		}
		if _, err := os.Stat(filepath.Join(base, probe)); err != nil {
			return "", fmt.Errorf("no %s controller in %s: %w", controller, base, err)
		}
		return base, nil
	}
	return "", fmt.Errorf("no %s controller mounted", controller)
}

// mkdirCgroup makes a cgroup directory that may exist already.
func mkdirCgroup(dir string) error {
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return err
	}
	return nil
}

// removeStale removes the cgroups of attempts that are over: empty, older
// than cgroupStaleAge, and held by no rewind; and the spare cgroups that no
// rewind holds (cgroup_spare.go).
func removeStale(base string) {
	entries, err := os.ReadDir(base)
	if err != nil {
		return
	}
	for _, e := range entries {
		spare := isSpareName(e.Name()) // locked by its rewind from the start
		if !e.IsDir() || !isCgroupName(e.Name()) && !spare {
			continue
		}
		dir := filepath.Join(base, e.Name())
		if st, err := os.Stat(dir); err != nil || !spare && time.Since(st.ModTime()) < cgroupStaleAge {
			continue
		}
		fd, ok := lockCgroup(dir)
		if !ok {
			continue
		}
		_ = removeCgroupDir(dir) // fails if processes are in it: not stale
		syscall.Close(fd)
	}
}

// cgroupName is the name of an attempt's cgroup, from its nonce (from its
// log's path without one): one-way, so that a task that reads its cgroup
