package executor

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestMain lets the test binary stand in for a task that needs memory:
// REWIND_TEST_HOG_MB=N makes it hold N MiB for REWIND_TEST_HOG_HOLD (a
// duration, default 2s), then exit 0. REWIND_TEST_START=<Spec as JSON> makes
// it stand in for a rewind that dies right after starting an attempt: it
// starts the attempt, prints its pid and pid start time as JSON and exits
// without waiting for it (see startElsewhere).
func TestMain(m *testing.M) {
	if mb, err := strconv.Atoi(os.Getenv("REWIND_TEST_HOG_MB")); err == nil {
		hold := 2 * time.Second
		if d, err := time.ParseDuration(os.Getenv("REWIND_TEST_HOG_HOLD")); err == nil {
			hold = d
		}
		hog := make([]byte, mb<<20)
		for i := 0; i < len(hog); i += 4096 {
			hog[i] = 1
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
