package executor

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// The cost of an attempt of a no-op command, Start + Wait (log file
// included), against the cost of running the same process with os/exec, in
// the same run: 8 at a time, as `rewind run` with max_active_runs = 8 and
// `xargs -P 8` do.
//
//	go test -run '^$' -bench . -benchtime 2000x -count 5 ./executor/
//
// The logs of all benchmarks go to one directory, removed at exit: on ext4
// without a journal, creating files is much slower for ~30 s after many were
// deleted, which would tax the next benchmark. TMPDIR picks its filesystem.

const benchConcurrency = 8

var benchLogs struct {
	once sync.Once
	dir  string
	n    atomic.Int64
}

// benchLog returns a new log path in the benchmarks' directory.
func benchLog(b *testing.B) string {
	benchLogs.once.Do(func() {
		dir, err := os.MkdirTemp("", "executor-bench-")
		if err != nil {
			b.Fatal(err)
		}
		benchLogs.dir = dir
	})
	return filepath.Join(benchLogs.dir, strconv.FormatInt(benchLogs.n.Add(1), 10)+".log")
}

func removeBenchLogs() {
	if benchLogs.dir != "" {
		os.RemoveAll(benchLogs.dir)
	}
}

// concurrently runs f b.N times, benchConcurrency at a time. Besides the
// wall time per op, it reports the CPU time per op of the process and its
// children (cpu-ns/op), which a busy machine disturbs less.
func concurrently(b *testing.B, f func()) {
	var left atomic.Int64
	left.Store(int64(b.N))
	var wg sync.WaitGroup
	cpu0 := cpuTime()
	b.ResetTimer()
	for range benchConcurrency {
		wg.Go(func() {
			for left.Add(-1) >= 0 {
				f()
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/op")
}

// cpuTime is the user and system time of this process and its reaped
// children.
func cpuTime() time.Duration {
	var t time.Duration
	for _, who := range []int{syscall.RUSAGE_SELF, syscall.RUSAGE_CHILDREN} {
		var ru syscall.Rusage
		if err := syscall.Getrusage(who, &ru); err == nil {
			t += time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
		}
	}
	return t
}

func BenchmarkExecTrue(b *testing.B) {
	concurrently(b, func() {
		if err := exec.Command("true").Run(); err != nil {
			b.Error(err)
		}
	})
}

func BenchmarkExecShTrue(b *testing.B) {
	concurrently(b, func() {
		if err := exec.Command("/bin/sh", "-c", "true").Run(); err != nil {
			b.Error(err)
		}
	})
}

func benchAttempt(b *testing.B, argv ...string) {
	env := []string{"PATH=" + os.Getenv("PATH")}
	dir := b.TempDir()
	concurrently(b, func() {
		h, err := Start(Spec{Argv: argv, Env: env, Dir: dir, LogPath: benchLog(b), Nonce: NewNonce()})
		if err != nil {
			b.Error(err)
			return
		}
		if res := h.Wait(context.Background()); !res.Success() {
			b.Errorf("%+v", res)
		}
	})
}

// BenchmarkAttemptArgv is an attempt of command = ["true"].
func BenchmarkAttemptArgv(b *testing.B) { benchAttempt(b, "true") }

// BenchmarkAttemptString is an attempt of command = "true".
func BenchmarkAttemptString(b *testing.B) { benchAttempt(b, "/bin/sh", "-c", "true") }

// BenchmarkAttemptFiles is what an attempt leaves on disk by contract, with
// no process started: its run's scratch directory (REWIND_RUN_DIR, one per
// run: here one per attempt, as in a pipeline of one task) and its log file.
// No launch path can remove this part of an attempt's cost; `xargs`
// creates nothing.
func BenchmarkAttemptFiles(b *testing.B) {
	concurrently(b, func() {
		log := benchLog(b)
		if err := os.Mkdir(log+".run", 0o700); err != nil {
			b.Error(err)
			return
		}
		f, err := openAppend(log)
		if err != nil {
			b.Error(err)
			return
		}
		f.Close()
	})
}
