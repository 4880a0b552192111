package executor

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Spare cgroups. Making a memory cgroup and removing it costs the kernel
// far more than renaming one (a v1 memory cgroup allocates its per-CPU
// counters and some thirty files), so that an attempt's cgroup, once its
// attempt is over, is kept as a spare, renamed "spare-<random>", and the
// next attempt's cgroup is a spare renamed to that attempt's name. An
// attempt's cgroup is therefore always named after it while it runs, and
// adoption, stale-cgroup cleaning and the wrapper see no difference.
//
// Only a cgroup whose counters can be made those of a new cgroup is kept:
// cgroup v1 (cgroup v2 can neither rename a cgroup nor reset memory.peak
// for every reader), memory controller only (no CPU quota, whose v1
// directory is in another hierarchy), no process left, little memory still
// charged (maxSpareResidue) and no OOM kill ever (memory.oom_control's
// oom_kill cannot be reset).
// Its memory limit is lifted and its peak reset before it is kept. A spare stays locked (lockCgroup) by the rewind that keeps it:
// one whose rewind died is removed by the next rewind as stale.

// maxSpares bounds how many spare cgroups a rewind keeps.
const maxSpares = 64

// maxSpareResidue bounds the memory still charged to a cgroup kept as a
// spare: kernel objects its attempt left cached (dentries, inodes: an
// attempt of `true` leaves 256 KiB), which stay charged to it until the
// kernel reclaims them. Its peak is reset to that charge, so the peak of
// its next attempt counts them too, as the kernel counts them against that
// attempt's limit: at most maxSpareResidue more than a new cgroup's.
const maxSpareResidue = 1 << 20

var spares struct {
	sync.Mutex
	list []*cgroup
}

// spareName is a new name for a spare cgroup.
func spareName() string { return "spare-" + NewNonce() }

// isSpareName reports whether s is the name of a spare cgroup.
func isSpareName(s string) bool {
	rest, ok := strings.CutPrefix(s, "spare-")
	return ok && isCgroupName(rest)
}

// reuse renames a spare cgroup to name, with the memory limit given (0:
// none); nil when there is no spare (or it cannot be used).
func (r *cgroupRoot) reuse(name string, memory int64) *cgroup {
	spares.Lock()
	n := len(spares.list)
	if n == 0 {
		spares.Unlock()
		return nil
	}
	c := spares.list[n-1]
	spares.list = spares.list[:n-1]
	spares.Unlock()
	dir := filepath.Join(r.memory, name)
	if filepath.Dir(c.memory) != r.memory || syscall.Rename(c.memory, dir) != nil {
		c.recyclable = false
		c.remove()
		return nil
	}
	c.memory = dir
	// A spare keeps the time it was made; another rewind's removeStale must
	// see this cgroup as new, like one made for the attempt.
	now := time.Now()
	_ = os.Chtimes(dir, now, now)
	if err := c.setMemoryLimit(memory); err != nil {
		c.recyclable = false
		c.remove()
		return nil
	}
	return c
}

// recycle ends an attempt's cgroup, which must be empty: it is kept as a
// spare if it can be made new again, else removed.
func (c *cgroup) recycle() {
	if c == nil {
		return
	}
	if !c.recyclable || c.v2 || c.cpu != "" || c.lock < 0 || !c.resetCounters() {
		c.remove()
		return
	}
	spares.Lock()
	full := len(spares.list) >= maxSpares
	spares.Unlock()
	if full {
		c.remove()
		return
	}
	dir := filepath.Join(filepath.Dir(c.memory), spareName())
	if syscall.Rename(c.memory, dir) != nil {
		c.remove()
		return
	}
	c.memory = dir
	spares.Lock()
	spares.list = append(spares.list, c)
	spares.Unlock()
}

// resetCounters makes an empty v1 memory cgroup what a new one is: no
// limit, no OOM kill, peak at most maxSpareResidue. It reports false for one that cannot be: a
// process or memory left in it, or an OOM kill counted.
func (c *cgroup) resetCounters() bool {
	if !c.empty() || c.usage() > maxSpareResidue || c.oomKills() != 0 {
		return false
	}
	if c.limit > 0 {
		// memory.memsw.limit_in_bytes may never be under
		// memory.limit_in_bytes: raise it first.
		if err := writeCgroup(c.memory, "memory.memsw.limit_in_bytes", "-1"); err != nil && !errors.Is(err, os.ErrNotExist) {
			return false
		}
		if writeCgroup(c.memory, "memory.limit_in_bytes", "-1") != nil {
			return false
		}
		c.limit = 0
	}
	// Reset to the usage, at most maxSpareResidue. memory.failcnt needs
	// no reset: oomKills is 0, and it is failcnt on kernels without an
	// oom_kill counter.
	return writeCgroup(c.memory, "memory.max_usage_in_bytes", "0") == nil
}

// DropSpareCgroups removes the spare cgroups this rewind keeps (at the end
// of an execution). Those of a rewind that died are removed as stale by the
// next.
func DropSpareCgroups() {
	spares.Lock()
	list := spares.list
	spares.list = nil
	spares.Unlock()
	for _, c := range list {
		c.recyclable = false
		c.remove()
	}
}
