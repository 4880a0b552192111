package executor

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestMain lets the test binary stand in for a task that needs memory:
// REWIND_TEST_HOG_MB=N makes it hold N MiB for a while, then exit 0.
func TestMain(m *testing.M) {
	if mb, err := strconv.Atoi(os.Getenv("REWIND_TEST_HOG_MB")); err == nil {
		hog := make([]byte, mb<<20)
		for i := 0; i < len(hog); i += 4096 {
			hog[i] = 1
		}
		time.Sleep(2 * time.Second)
		os.Exit(int(hog[0]) - 1)
	}
	os.Exit(m.Run())
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

func contains(s, sub string) bool { return strings.Contains(s, sub) }
