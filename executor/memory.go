package executor

import (
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// memoryPoll is how often the watchdog samples an attempt's memory, and how
// often an attempt's cgroup is looked at for OOM kills.
const memoryPoll = 100 * time.Millisecond

// groupScanEvery: without a limit (the peak only), one sample in this many
// scans /proc for members of the attempt's process group that it has never
// seen (a process started and reparented to init between two samples);
// with a limit, every sample does.
const groupScanEvery = 10

// watchdog measures the memory of an attempt that has no cgroup, by
// sampling: the proportional set size (PSS: a page shared by n processes
// counts 1/n in each, so copy-on-write pages count once in the sum) of
// every process of the attempt — the wrapper's tree, the members of its
// process group (a backgrounded child reparented to init stays there), and
// every process once seen in either while it lives — summed.
type watchdog struct {
	pid   int   // the wrapper: root of the tree, id of the process group
	limit int64 // 0: none, the peak only
	over  chan int64
	stop  chan struct{}
	once  sync.Once

	mu   sync.Mutex
	peak int64
	// known are the processes of the attempt seen so far, with their start
	// times (a reused pid is another process); used by the sampling
	// goroutine, and by kill under mu.
	known map[int]uint64
	// execd: the wrapper has exec'd /bin/sh (before, it is a copy of
	// rewind, whose memory is not the attempt's).
	execd bool
}

// startWatchdog samples the memory of the attempt whose wrapper is pid, at
// once and every memoryPoll, until done is closed or stop is called. Once a
// sample goes over limit (if > 0), it is sent on over and sampling ends.
func startWatchdog(pid int, limit int64, done <-chan struct{}) *watchdog {
	d := &watchdog{pid: pid, limit: limit, over: make(chan int64, 1), stop: make(chan struct{}), known: map[int]uint64{}}
	go d.run(done)
	return d
}

// run samples until done, stop, or a sample over the limit.
func (d *watchdog) run(done <-chan struct{}) {
	t := time.NewTicker(memoryPoll)
	defer t.Stop()
	for n := 0; ; n++ {
		total := d.sample(d.limit > 0 || n%groupScanEvery == 0)
		if d.limit > 0 && total > d.limit {
			d.over <- total
			return
		}
		select {
		case <-done:
			return
		case <-d.stop:
			return
		case <-t.C:
		}
	}
}

// close stops the sampling.
func (d *watchdog) close() { d.once.Do(func() { close(d.stop) }) }

// maxPSS is the largest sample so far.
func (d *watchdog) maxPSS() int64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.peak
}

// sample sums the PSS of the attempt's processes, scanning its process
// group too if scan; it records the peak.
func (d *watchdog) sample(scan bool) int64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.execd {
		b, err := readFile("/proc/" + strconv.Itoa(d.pid) + "/cmdline")
		d.execd = err == nil && strings.HasPrefix(b, "/bin/sh\x00")
	}
	found := tree(d.pid)
	if scan {
		found = append(found, liveMembers(d.pid)...)
	}
	for _, p := range found {
		if _, ok := d.known[p]; !ok && (p != d.pid || d.execd) {
			if st, err := ProcessStart(p); err == nil {
				d.known[p] = st
			}
		}
	}
	var total int64
	for p, st := range d.known {
		if s, err := ProcessStart(p); err != nil || s != st {
			delete(d.known, p)
			continue
		}
		total += pss(p)
	}
	d.peak = max(d.peak, total)
	return total
}

// kill SIGKILLs every process of the attempt the watchdog knows, and the
// wrapper's tree.
func (d *watchdog) kill() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for p, st := range d.known {
		if s, err := ProcessStart(p); err == nil && s == st {
			_ = syscall.Kill(p, syscall.SIGKILL)
		}
	}
	killTree(d.pid)
}

var pageSize = int64(os.Getpagesize())

// pss is the proportional set size of process pid (Pss of
// /proc/PID/smaps_rollup, Linux 4.14), or its resident size where that
// cannot be read; 0 for a process that is gone.
func pss(pid int) int64 {
	if s, err := readProc(pid, "smaps_rollup"); err == nil {
		for _, line := range strings.Split(s, "\n") {
			if v, ok := strings.CutPrefix(line, "Pss:"); ok {
				kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
				return kb << 10
			}
		}
	}
	s, err := readProc(pid, "statm")
	if err != nil {
		return 0
	}
	f := strings.Fields(s)
	if len(f) < 2 {
		return 0
	}
	pages, _ := strconv.ParseInt(f[1], 10, 64)
	return pages * pageSize
}

// tree lists pid and its descendants, from /proc/PID/task/TID/children.
func tree(pid int) []int {
	out := []int{pid}
	for i := 0; i < len(out); i++ {
		p := strconv.Itoa(out[i])
		tasks, err := os.ReadDir("/proc/" + p + "/task")
		if err != nil {
			continue
		}
		for _, t := range tasks {
			b, err := readFile("/proc/" + p + "/task/" + t.Name() + "/children")
			if err != nil {
				continue
			}
			for _, c := range strings.Fields(b) {
				if n, err := strconv.Atoi(c); err == nil {
					out = append(out, n)
				}
			}
		}
	}
	return out
}

// killTree SIGKILLs the process group of pid and every descendant of pid.
func killTree(pid int) {
	procs := tree(pid)
	signalGroup(pid, syscall.SIGKILL)
	for _, p := range procs {
		_ = syscall.Kill(p, syscall.SIGKILL)
	}
}

// formatBytes writes n in MiB, for people.
func formatBytes(n int64) string {
	return strconv.FormatFloat(float64(n)/(1<<20), 'f', 1, 64) + " MiB"
}
