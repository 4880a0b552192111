package executor

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"
)

// TestMain lets the test binary stand in for a task that needs memory:
// REWIND_TEST_HOG_MB=N makes it hold N MiB (every page written) for
// REWIND_TEST_HOG_HOLD (a duration, default 2s), then exit 0; with
// REWIND_TEST_HOG_FORKS=K as well, it then forks K children that only read
// the N MiB (shared with it copy-on-write), which hold them as long, and
// exits 0 once they all have. REWIND_TEST_START=<Spec as JSON> makes
// it stand in for a rewind that dies right after starting an attempt: it
// starts the attempt, prints its pid and pid start time as JSON and exits
// without waiting for it (see startElsewhere).
func TestMain(m *testing.M) {
	if mb, err := strconv.Atoi(os.Getenv("REWIND_TEST_HOG_MB")); err == nil {
		hold := 2 * time.Second
		if d, err := time.ParseDuration(os.Getenv("REWIND_TEST_HOG_HOLD")); err == nil {
			hold = d
		}
		hog := hogMemory(mb << 20)
		touch(hog)
		if forks, err := strconv.Atoi(os.Getenv("REWIND_TEST_HOG_FORKS")); err == nil {
			os.Exit(cowReaders(hog, forks, hold))
		}
		time.Sleep(hold)
		os.Exit(int(hog[0]) - 1)
	}
	if js := os.Getenv("REWIND_TEST_START"); js != "" {
		var s Spec
		if err := json.Unmarshal([]byte(js), &s); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		h, err := Start(s)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		_ = json.NewEncoder(os.Stdout).Encode(started{h.PID, h.PIDStart})
		os.Exit(0)
	}
	code := m.Run()
	removeBenchLogs()
	os.Exit(code)
}

func TestMemoryLimitKillsTheTree(t *testing.T) {
	dir := t.TempDir()
	// The hog is a grandchild of the wrapper, behind a shell.
	s := Spec{
		Argv:        []string{"/bin/sh", "-c", `"$0"; echo after`, os.Args[0]},
		Env:         append(os.Environ(), "REWIND_TEST_HOG_MB=300"),
		Dir:         dir,
		LogPath:     filepath.Join(dir, "hog.1.log"),
		MemoryLimit: 100 << 20,
		Grace:       time.Second,
	}
	h, err := Start(s)
	if err != nil {
		t.Fatal(err)
	}
	res := h.Wait(context.Background())
	if !res.OOM || res.Success() {
		t.Fatalf("result %+v; want killed for memory", res)
	}
	if res.PeakRSS < 100<<20 {
		t.Errorf("peak RSS %d; want over the limit", res.PeakRSS)
	}
	b, _ := os.ReadFile(s.LogPath)
	if !contains(string(b), "over the pool's limit of 100.0 MiB") {
		t.Errorf("log %q does not say why the attempt was killed", b)
	}

	// Under the limit the same task succeeds.
	s.LogPath = filepath.Join(dir, "hog.2.log")
	s.MemoryLimit = 1 << 30
	h, err = Start(s)
	if err != nil {
		t.Fatal(err)
	}
	if res := h.Wait(context.Background()); !res.Success() || res.OOM || res.PeakRSS < 300<<20 {
		t.Errorf("under the limit: %+v; want success with a peak RSS of at least 300 MiB", res)
	}
}

// An adopted attempt keeps its memory limit.
func TestAdoptWaitMemoryLimit(t *testing.T) {
	dir := t.TempDir()
	s := Spec{
		Argv:    []string{"/bin/sh", "-c", `"$0"; echo after`, os.Args[0]},
		Env:     append(os.Environ(), "REWIND_TEST_HOG_MB=300", "REWIND_TEST_HOG_HOLD=30s"),
		Dir:     dir,
		LogPath: filepath.Join(dir, "hog.1.log"),
		Nonce:   NewNonce(),
	}
	a := startElsewhere(t, s)
	a.MemoryLimit, a.Grace = 100<<20, time.Second
	res := AdoptWait(context.Background(), a)
	if !res.OOM || res.Success() || res.Signal != "killed" || res.PeakRSS < 100<<20 {
		t.Fatalf("result %+v; want killed for memory, with a peak RSS over the limit", res)
	}
	if b, _ := os.ReadFile(s.LogPath); !contains(string(b), "over the pool's limit of 100.0 MiB") {
		t.Errorf("log %q does not say why the attempt was killed", b)
	}
	waitGroupGone(t, a.PID)
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }

// touch writes 1 in every page of b. Not instrumented by the race
// detector, whose shadow memory would double the memory used.
//
//go:norace
func touch(b []byte) {
	for i := 0; i < len(b); i += 4096 {
		b[i] = 1
	}
}

// cowReaders forks n children that read every page of b, shared with this
// process copy-on-write, and hold it for hold; it returns 0 once they all
// have exited 0, else 1.
// hogMemory maps n bytes of private anonymous memory that the kernel never
// backs with transparent huge pages: with THP "always", khugepaged may
// collapse the pages of a process that shares them copy-on-write with its
// children into a huge page of its own, a copy that breaks the sharing the
// memory tests measure.
func hogMemory(n int) []byte {
	b, err := syscall.Mmap(-1, 0, n, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANON)
	if err != nil {
		fmt.Fprintln(os.Stderr, "mmap:", err)
		os.Exit(2)
	}
	const madvNoHugepage = 15 // MADV_NOHUGEPAGE
	_ = syscall.Madvise(b, madvNoHugepage)
	return b
}

func cowReaders(b []byte, n int, hold time.Duration) int {
	ts := syscall.NsecToTimespec(int64(hold))
	var pids []int
	for range n {
		pid := forkReader(b, &ts)
		if pid < 0 {
			fmt.Fprintln(os.Stderr, "fork failed")
			return 1
		}
		pids = append(pids, pid)
	}
	code := 0
	for _, pid := range pids {
		var st syscall.WaitStatus
		for {
			_, err := syscall.Wait4(pid, &st, 0, nil)
			if err != syscall.EINTR {
				break
			}
		}
		if !st.Exited() || st.ExitStatus() != 0 {
			fmt.Fprintf(os.Stderr, "reader %d: %v\n", pid, st)
			code = 1
		}
	}
	return code
}

// forkReader forks (a raw clone, as fork(2)) a child that reads every page
// of b, sleeps ts, and exits 0 if every page it read held 1. It returns
// the child's pid (-1 on error). The child is a copy of the calling thread
// alone, without the Go runtime's other threads: it runs nothing but this
// loop and raw system calls, with no stack growth (nosplit) and no race
// instrumentation.
//
//go:nosplit
//go:norace
func forkReader(b []byte, ts *syscall.Timespec) int {
	pid, _, errno := syscall.RawSyscall(syscall.SYS_CLONE, uintptr(syscall.SIGCHLD), 0, 0)
	if errno != 0 {
		return -1
	}
	if pid != 0 {
		return int(pid)
	}
	ones := 0
	for i := 0; i < len(b); i += 4096 {
		if b[i] == 1 {
			ones++
		}
	}
	syscall.RawSyscall(syscall.SYS_NANOSLEEP, uintptr(unsafe.Pointer(ts)), 0, 0)
	code := uintptr(0)
	if ones != (len(b)+4095)/4096 {
		code = 1
	}
	syscall.RawSyscall(syscall.SYS_EXIT_GROUP, code, 0, 0)
	return 0
}
