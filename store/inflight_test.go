package store

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/rewind-dev/rewind/store/pgtest"
)

// ifBackends runs fn on a fresh SQLite state and a fresh PostgreSQL one.
func ifBackends(t *testing.T, fn func(t *testing.T, st Store)) {
	for _, b := range []string{"sqlite", "postgres"} {
		t.Run(b, func(t *testing.T) {
			dsn := filepath.Join(t.TempDir(), "s.db")
			if b == "postgres" {
				dsn = pgtest.DSN(t)
			}
			st, err := Open(context.Background(), dsn)
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			fn(t, st)
		})
	}
}

// ifOpenPostgres opens a fresh PostgreSQL state, closed with the test.
func ifOpenPostgres(t *testing.T) (Store, string) {
	dsn := pgtest.DSN(t)
	st, err := Open(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st, dsn
}

// ifFixture makes, in pipelines p0..p{n-1}, two runs each with tasks a and
// b: the first admitted with a claimed (running) and b queued, the second
// left queued; in p0 the first run is a backfill's.
func ifFixture(t *testing.T, st Store, n int) []string {
	ctx := context.Background()
	var names []string
	for i := range n {
		name := fmt.Sprintf("p%d", i)
		names = append(names, name)
		if _, err := st.UpsertPipeline(ctx, UpsertPipelineParams{Name: name, Now: ckNow}); err != nil {
			t.Fatal(err)
		}
		for j, kind := range []RunKind{KindScheduled, KindScheduled} {
			bf := ""
			if i == 0 && j == 0 {
				kind, bf = KindBackfill, "bf"
			}
			d := time.Date(2025, 7, 1+j, 0, 0, 0, 0, time.UTC)
			if _, err := st.MaterializeRuns(ctx, MaterializeRunsParams{Pipeline: name, Kind: kind, BackfillID: bf,
				Runs:  []RunSpec{{LogicalDate: d, DS: d.Format(time.DateOnly), DataIntervalStart: d, DataIntervalEnd: d.AddDate(0, 0, 1)}},
				Tasks: []TaskSpec{{Name: "a", Pool: "default"}, {Name: "b", Pool: "small"}}, Now: ckNow}); err != nil {
				t.Fatal(err)
			}
		}
		runs, err := st.ListRuns(ctx, ListRunsParams{Pipelines: []string{name}, WithTasks: true})
		if err != nil || len(runs) != 2 {
			t.Fatalf("%d runs, %v", len(runs), err)
		}
		r := runs[0]
		if err := st.AdmitRun(ctx, AdmitRunParams{RunID: r.ID, Now: ckNow}); err != nil {
			t.Fatal(err)
		}
		if _, err := st.ClaimTask(ctx, ClaimTaskParams{TaskInstanceID: ckTI(r, "a"), Pool: "default", Owner: "o", Host: "h", Now: ckNow}); err != nil {
			t.Fatal(err)
		}
		if n, err := st.EnqueueTasks(ctx, EnqueueTasksParams{Items: []EnqueueItem{{TaskInstanceID: ckTI(r, "b")}}, Now: ckNow}); err != nil || n != 1 {
			t.Fatalf("enqueue: %d, %v", n, err)
		}
	}
	return names
}

// inFlightAsBefore checks InFlight against Usage and ListRuns, outside and
// inside InTx.
func inFlightAsBefore(t *testing.T, st Store, names []string) {
	ctx := context.Background()
	wantUsage, err := st.Usage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(wantUsage) == 0 {
		t.Fatal("the fixture has nothing in flight")
	}
	wantRuns, err := st.ListRuns(ctx, ListRunsParams{Pipelines: names, States: []RunState{RunRunning}, WithTasks: true})
	if err != nil {
		t.Fatal(err)
	}
	known := 0 // each pipeline of the fixture has one running run
	for _, n := range names {
		if n != "nope" {
			known++
		}
	}
	if len(wantRuns) != known {
		t.Fatalf("ListRuns found %d running runs, the fixture has %d", len(wantRuns), known)
	}
	check := func(what string, got InFlight) {
		t.Helper()
		if !reflect.DeepEqual(got.Usage, wantUsage) {
			t.Errorf("%s: Usage = %+v, want %+v", what, got.Usage, wantUsage)
		}
		if !reflect.DeepEqual(got.Runs, wantRuns) {
			t.Errorf("%s: Runs = %+v, want %+v", what, got.Runs, wantRuns)
		}
	}
	got, err := st.InFlight(ctx, InFlightParams{Pipelines: names})
	if err != nil {
		t.Fatal(err)
	}
	check("InFlight", got)
	if err := st.InTx(ctx, func(tx Store) error {
		got, err := tx.InFlight(ctx, InFlightParams{Pipelines: names})
		check("InFlight as the first call of InTx", got)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if err := st.InTx(ctx, func(tx Store) error {
		if _, err := tx.Epoch(ctx); err != nil {
			return err
		}
		got, err := tx.InFlight(ctx, InFlightParams{Pipelines: names})
		check("InFlight after a statement of InTx", got)
		return err
	}); err != nil {
		t.Fatal(err)
	}
}

// InFlight reads what Usage and ListRuns (running, with tasks) read, for a
// few pipelines and for more than one chunk of them.
func TestInFlightIsUsageAndRunningRuns(t *testing.T) {
	ifBackends(t, func(t *testing.T, st Store) {
		names := ifFixture(t, st, 5)
		inFlightAsBefore(t, st, names[:4]) // p4's run is running and not asked for
		defer func(n int) { inFlightChunk = n }(inFlightChunk)
		inFlightChunk = 2
		inFlightAsBefore(t, st, names[:3])
		inFlightAsBefore(t, st, append([]string{"nope"}, names...))
		got, err := st.InFlight(context.Background(), InFlightParams{})
		if err != nil || len(got.Runs) != 0 || len(got.Usage) == 0 {
			t.Errorf("InFlight of no pipeline = %d runs, %d usage rows, %v; want no run, the usage", len(got.Runs), len(got.Usage), err)
		}
	})
}

// A fenced InTx whose first call is a pipeline (InFlight) fails with
// ErrFenced after a takeover and leaves nothing; the holder's own goes
// through and commits.
func TestInFlightFirstInFencedTx(t *testing.T) {
	ifBackends(t, func(t *testing.T, st Store) {
		ctx := context.Background()
		names := ifFixture(t, st, 1)
		l, held, err := st.AcquireLease(ctx, AcquireLeaseParams{Name: "s", Holder: "a", Host: "h", TTL: time.Minute, Now: ckNow})
		if err != nil || !held {
			t.Fatalf("acquire: %v %v", held, err)
		}
		runs, err := st.ListRuns(ctx, ListRunsParams{Pipelines: names, States: []RunState{RunQueued}})
		if err != nil || len(runs) != 1 {
			t.Fatalf("%d queued runs, %v", len(runs), err)
		}
		admit := func(f Store) error {
			return f.InTx(ctx, func(tx Store) error {
				if _, err := tx.InFlight(ctx, InFlightParams{Pipelines: names}); err != nil {
					return err
				}
				return tx.AdmitRun(ctx, AdmitRunParams{RunID: runs[0].ID, Now: ckNow})
			})
		}
		if err := admit(st.Fenced("s", "a", l.Generation+1)); !errors.Is(err, ErrFenced) {
			t.Fatalf("a stale generation's InTx: %v, want ErrFenced", err)
		}
		if r, _ := st.ListRuns(ctx, ListRunsParams{Pipelines: names, States: []RunState{RunQueued}}); len(r) != 1 {
			t.Fatalf("a fenced InTx admitted its run")
		}
		if err := admit(st.Fenced("s", "a", l.Generation)); err != nil {
			t.Fatalf("the holder's InTx: %v", err)
		}
		if r, _ := st.ListRuns(ctx, ListRunsParams{Pipelines: names, States: []RunState{RunQueued}}); len(r) != 0 {
			t.Fatalf("the holder's InTx did not admit its run")
		}
	})
}

// A statement that fails inside a pipeline of an InTx (the server skips
// the rest) fails the transaction: nothing of it stands, and the
// connection goes back to the pool usable.
func TestPostgresPipelineErrorRollsBack(t *testing.T) {
	ctx := context.Background()
	st, _ := ifOpenPostgres(t)
	names := ifFixture(t, st, 1)
	before, _ := st.Epoch(ctx)
	err := st.InTx(ctx, func(tx Store) error {
		if err := tx.SetPaused(ctx, SetPausedParams{Name: names[0], Paused: true, Now: ckNow}); err != nil {
			return err
		}
		s := tx.(*sqlStore)
		return s.rq().pipeline(ctx, []pipeStmt{
			{query: "SELECT 1"},
			{query: "SELECT 1/0"},
			{query: "UPDATE epoch SET n = n + 100"},
		})
	})
	if err == nil {
		t.Fatal("a pipeline with a division by zero succeeded")
	}
	after, _ := st.Epoch(ctx)
	p, _ := st.GetPipeline(ctx, names[0])
	if after != before || p.Paused {
		t.Errorf("a failed transaction left its writes: epoch %d -> %d, paused %v", before, after, p.Paused)
	}
	for range 20 { // more than the pool holds: a connection left in a transaction would show
		if err := st.InTx(ctx, func(tx Store) error {
			_, err := tx.InFlight(ctx, InFlightParams{Pipelines: names})
			return err
		}); err != nil {
			t.Fatalf("InTx after the failed one: %v", err)
		}
	}
}

// A connection that dies inside an InTx (its backend terminated) fails the
// transaction, nothing of it stands, and the next InTx gets a healthy
// connection.
func TestPostgresConnectionKilledInTx(t *testing.T) {
	ctx := context.Background()
	st, dsn := ifOpenPostgres(t)
	names := ifFixture(t, st, 1)
	admin, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	err = st.InTx(ctx, func(tx Store) error {
		if err := tx.SetPaused(ctx, SetPausedParams{Name: names[0], Paused: true, Now: ckNow}); err != nil {
			return err
		}
		var pid int
		if err := tx.(*sqlStore).rq().row(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
			return err
		}
		if _, err := admin.Exec(ctx, "SELECT pg_terminate_backend($1)", pid); err != nil {
			t.Fatal(err)
		}
		_, err := tx.InFlight(ctx, InFlightParams{Pipelines: names})
		return err
	})
	if err == nil {
		t.Fatal("an InTx whose connection died succeeded")
	}
	if p, _ := st.GetPipeline(ctx, names[0]); p.Paused {
		t.Error("the transaction of a dead connection left its write")
	}
	for range 20 {
		if err := st.InTx(ctx, func(tx Store) error {
			return tx.SetPaused(ctx, SetPausedParams{Name: names[0], Paused: false, Now: ckNow})
		}); err != nil {
			t.Fatalf("InTx after the dead connection: %v", err)
		}
	}
}

// An InTx whose context ends between two of its statements says so
// (context.Canceled, context.DeadlineExceeded), never that the state is
// unavailable: the engine tells an interrupt from an outage by it.
func TestInTxContextEndsBetweenStatements(t *testing.T) {
	ifBackends(t, func(t *testing.T, st Store) {
		names := ifFixture(t, st, 1)
		for _, then := range []string{"write", "read", "pipeline", "row"} {
			ctx, cancel := context.WithCancel(context.Background())
			err := st.InTx(ctx, func(tx Store) error {
				if _, err := tx.Epoch(ctx); err != nil {
					return err
				}
				cancel()
				switch then {
				case "write":
					return tx.SetPaused(ctx, SetPausedParams{Name: names[0], Paused: true, Now: ckNow})
				case "read":
					_, err := tx.ListRuns(ctx, ListRunsParams{Pipelines: names})
					return err
				case "pipeline":
					_, err := tx.InFlight(ctx, InFlightParams{Pipelines: names})
					return err
				default:
					_, err := tx.Epoch(ctx)
					return err
				}
			})
			if !errors.Is(err, context.Canceled) || IsUnavailable(err) {
				t.Errorf("cancelled before a %s: %v (unavailable %v), want context.Canceled", then, err, IsUnavailable(err))
			}
			if p, _ := st.GetPipeline(context.Background(), names[0]); p.Paused {
				t.Errorf("cancelled before a %s: the write stands", then)
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		err := st.InTx(ctx, func(tx Store) error {
			if _, err := tx.Epoch(ctx); err != nil {
				return err
			}
			<-ctx.Done()
			return tx.SetPaused(ctx, SetPausedParams{Name: names[0], Paused: true, Now: ckNow})
		})
		if !errors.Is(err, context.DeadlineExceeded) || IsUnavailable(err) {
			t.Errorf("deadline between statements: %v (unavailable %v), want context.DeadlineExceeded", err, IsUnavailable(err))
		}
	})
}

// A fenced-out InTx whose first call is a pipeline runs none of the
// pipeline's statements: while it is still open, another session's write of
// the same row does not wait for it.
func TestPostgresFencedPipelineRunsNothing(t *testing.T) {
	ctx := context.Background()
	st, dsn := ifOpenPostgres(t)
	l, held, err := st.AcquireLease(ctx, AcquireLeaseParams{Name: "s", Holder: "a", Host: "h", TTL: time.Minute, Now: ckNow})
	if err != nil || !held {
		t.Fatalf("acquire: %v %v", held, err)
	}
	other, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close(ctx)
	if _, err := other.Exec(ctx, "SET lock_timeout = '2s'"); err != nil {
		t.Fatal(err)
	}
	err = st.Fenced("s", "a", l.Generation+1).InTx(ctx, func(tx Store) error {
		perr := tx.(*sqlStore).rq().pipeline(ctx, []pipeStmt{{query: "UPDATE epoch SET n = n + 100"}})
		if !errors.Is(perr, ErrFenced) {
			t.Errorf("the pipeline of a fenced-out InTx: %v, want ErrFenced", perr)
		}
		if _, err := other.Exec(ctx, "UPDATE epoch SET n = n"); err != nil {
			t.Errorf("another session's write waited for the fenced-out transaction: %v", err)
		}
		return perr
	})
	if !errors.Is(err, ErrFenced) {
		t.Errorf("InTx: %v, want ErrFenced", err)
	}
}
