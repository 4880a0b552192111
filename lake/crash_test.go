package lake

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"
)

// crashChildEnv names the directory whose lake the child process of
// TestFastForwardCrash cuts over.
const crashChildEnv = "REWIND_LAKE_CRASH_CHILD"

func TestMain(m *testing.M) {
	if dir := os.Getenv(crashChildEnv); dir != "" {
		os.Exit(crashChild(dir))
	}
	os.Exit(m.Run())
}

// crashChild is the body of the child process: one cutover.
func crashChild(dir string) int {
	l, err := Open(context.Background(), Config{
		URI:       dir + "/.rewind/catalog.db",
		Warehouse: dir + "/.rewind/warehouse",
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	defer l.Close()
	// Tell the parent the cutover starts now.
	fmt.Println("open")
	if err := l.FastForward(context.Background(), revenue.Table, "main", "backfill_k", "pre_backfill_k"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println("done")
	return 0
}

// TestFastForwardCrash kills (SIGKILL) a process in the middle of a cutover
// at random moments: main is then at the old snapshot (and there is no tag)
// or at the new one (and the tag is at the old one), never in between, and
// running the cutover again completes it.
func TestFastForwardCrash(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	setup := func() (dir string, mainID, branchID int64) {
		dir = t.TempDir()
		l := openAt(t, dir)
		if err := l.EnsureTable(context.Background(), revenue); err != nil {
			t.Fatal(err)
		}
		mainID, branchID = threeDaysAndBranch(t, l, dir, "backfill_k")
		l.Close()
		return dir, mainID, branchID
	}
	// start runs the child and returns once it has opened the catalog and
	// is about to cut over.
	start := func(dir string) (*exec.Cmd, *bufio.Reader) {
		cmd := exec.Command(exe)
		cmd.Env = append(os.Environ(), crashChildEnv+"="+dir)
		cmd.Stderr = os.Stderr
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		r := bufio.NewReader(out)
		line, err := r.ReadString('\n')
		if err != nil || line != "open\n" {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("child: %q, %v", line, err)
		}
		return cmd, r
	}

	// One uninterrupted run tells the range of moments to kill at.
	dir, _, branchID := setup()
	cmd, out := start(dir)
	began := time.Now()
	if line, err := out.ReadString('\n'); err != nil || line != "done\n" {
		t.Fatalf("child: %q, %v", line, err)
	}
	full := time.Since(began)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("child cutover: %v", err)
	}
	if refs, _ := openAt(t, dir).Refs(context.Background(), revenue.Table); refs["main"] != branchID {
		t.Fatalf("child cutover left main at %d, want %d", refs["main"], branchID)
	}

	outcomes := map[string]int{}
	for try := range 12 {
		dir, mainID, branchID := setup()
		delay := time.Duration(rand.Int64N(int64(full) * 3 / 2))
		cmd, _ := start(dir)
		time.Sleep(delay)
		cmd.Process.Signal(syscall.SIGKILL)
		cmd.Wait()

		l := openAt(t, dir)
		ctx := context.Background()
		refs, err := l.Refs(ctx, revenue.Table)
		if err != nil {
			t.Fatalf("try %d: table unreadable after kill at %v: %v", try, delay, err)
		}
		tag, tagged := refs["pre_backfill_k"]
		switch {
		case refs["main"] == mainID && !tagged:
			outcomes["old"]++
			checkStat(t, stats(t, l, "main"), days[1], 101, wantSum(101, 1))
		case refs["main"] == branchID && tagged && tag == mainID:
			outcomes["new"]++
			checkStat(t, stats(t, l, "main"), days[1], 101, wantSum(101, 2))
		default:
			t.Fatalf("try %d: kill at %v left refs %v (old main %d, branch %d)", try, delay, refs, mainID, branchID)
		}
		// Running the cutover again finishes it.
		if err := l.FastForward(ctx, revenue.Table, "main", "backfill_k", "pre_backfill_k"); err != nil {
			t.Fatalf("try %d: cutover after kill: %v", try, err)
		}
		refs, _ = l.Refs(ctx, revenue.Table)
		if refs["main"] != branchID || refs["pre_backfill_k"] != mainID {
			t.Fatalf("try %d: after re-run refs %v", try, refs)
		}
		l.Close()
	}
	t.Logf("uninterrupted cutover: %v; outcomes of 12 kills: %v", full, outcomes)
}
