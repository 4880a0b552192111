package store_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rewind-dev/rewind/store"
	"github.com/rewind-dev/rewind/store/pgtest"
)

// freezeHelperEnv makes the test binary the frozen leader of
// TestPostgresFrozenLeaderInTransaction: it takes the lease, opens a fenced
// transaction, writes, and stops itself (SIGSTOP) before committing.
const freezeHelperEnv = "REWIND_TEST_FREEZE_DSN"

func init() {
	dsn := os.Getenv(freezeHelperEnv)
	if dsn == "" {
		return
	}
	os.Exit(frozenLeader(dsn))
}

func frozenLeader(dsn string) int {
	ctx := context.Background()
	st, err := store.Open(ctx, dsn)
	if err != nil {
		fmt.Println("open:", err)
		return 3
	}
	defer st.Close()
	l, ok, err := st.AcquireLease(ctx, store.AcquireLeaseParams{Name: "scheduler", Holder: "frozen", Host: "a", PID: os.Getpid(), TTL: 2 * time.Second})
	if err != nil || !ok {
		fmt.Println("acquire:", ok, err)
		return 3
	}
	err = st.Fenced("scheduler", "frozen", l.Generation).InTx(ctx, func(tx store.Store) error {
		if err := tx.SetPaused(ctx, store.SetPausedParams{Name: "p", Paused: true, Now: time.Now()}); err != nil {
			return err
		}
		fmt.Println("in transaction")
		_ = syscall.Kill(os.Getpid(), syscall.SIGSTOP) // frozen, holding the lease row FOR SHARE
		return nil
	})
	if err != nil {
		fmt.Println("commit after the thaw:", err)
		return 1
	}
	fmt.Println("committed after the thaw")
	return 0
}

// A leader frozen (SIGSTOP) inside a fenced transaction holds the lease row
// FOR SHARE. The standby's takeover must not wait for TCP to notice (hours):
// the server ends the idle transaction (idle_in_transaction_session_timeout)
// and the standby takes the lease once it has expired, within seconds. When
// the leader thaws, its transaction is gone: the write it made before
// freezing never lands.
func TestPostgresFrozenLeaderInTransaction(t *testing.T) {
	dsn := pgtest.DSN(t)
	ctx := context.Background()
	st := openState(t, dsn)
	defer st.Close()
	if _, err := st.UpsertPipeline(ctx, store.UpsertPipelineParams{Name: "p", Hash: "h", Now: time.Now()}); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), freezeHelperEnv+"="+dsn)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Kill()
	}()
	lines := bufio.NewScanner(out)
	if !lines.Scan() || lines.Text() != "in transaction" {
		t.Fatalf("the leader said %q", lines.Text())
	}
	frozenAt := time.Now()
	// The standby tries the lease as rewind does, on the state's clock.
	tctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	var took time.Duration
	for {
		_, ok, err := st.AcquireLease(tctx, store.AcquireLeaseParams{Name: "scheduler", Holder: "standby", Host: "b", PID: 2, TTL: 2 * time.Second})
		if err != nil && tctx.Err() != nil {
			t.Fatalf("the standby waited %s behind the frozen leader's transaction: %v", time.Since(frozenAt), err)
		}
		if ok {
			took = time.Since(frozenAt)
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("the standby took the lease %s after the leader froze in a transaction (lease TTL 2s, idle_in_transaction_session_timeout 10s)", took.Round(100*time.Millisecond))
	if err := cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	var rest []string
	for lines.Scan() {
		rest = append(rest, lines.Text())
	}
	err = cmd.Wait()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Fatalf("the thawed leader: %v, said %q", err, rest)
	}
	if !strings.Contains(strings.Join(rest, "\n"), "commit after the thaw") {
		t.Fatalf("the thawed leader said %q", rest)
	}
	p, err := st.GetPipeline(ctx, "p")
	if err != nil {
		t.Fatal(err)
	}
	if p.Paused {
		t.Fatal("the frozen leader's write landed after the standby took over")
	}
}
