package store_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/rewind-dev/rewind/store"
	"github.com/rewind-dev/rewind/store/pgtest"
	"github.com/rewind-dev/rewind/store/storetest"
)

func TestPostgresConformance(t *testing.T) {
	pgtest.Server(t)
	storetest.Run(t, func(t *testing.T) store.Store {
		return openState(t, pgtest.DSN(t))
	})
}

// Two processes claiming ready work in two pools at once, a few at a time,
// never exceed a pool and never get the same task instance.
func TestPostgresTwoProcessesClaimReadyTwoPools(t *testing.T) {
	ctx := context.Background()
	dsn := pgtest.DSN(t)
	a, b := openState(t, dsn), openState(t, dsn)
	defer a.Close()
	defer b.Close()
	now := time.Date(2026, 1, 15, 12, 0, 0, 0, time.UTC)
	if _, err := a.UpsertPipeline(ctx, store.UpsertPipelineParams{Name: "race", Hash: "h", Now: now}); err != nil {
		t.Fatal(err)
	}
	var specs []store.RunSpec
	for d := range 40 {
		day := time.Date(2025, 7, 1, 0, 0, 0, 0, time.UTC).AddDate(0, 0, d)
		specs = append(specs, store.RunSpec{LogicalDate: day, DS: day.Format("2006-01-02"),
			DataIntervalStart: day, DataIntervalEnd: day.AddDate(0, 0, 1)})
	}
	if _, err := a.MaterializeRuns(ctx, store.MaterializeRunsParams{Pipeline: "race", Kind: store.KindScheduled,
		Runs: specs, Tasks: []store.TaskSpec{{Name: "extract", Pool: "small"}, {Name: "load", Pool: "big"}}, Now: now}); err != nil {
		t.Fatal(err)
	}
	runs, err := a.ListRuns(ctx, store.ListRunsParams{WithTasks: true})
	if err != nil {
		t.Fatal(err)
	}
	var items []store.EnqueueItem
	for _, r := range runs {
		for _, ti := range r.Tasks {
			items = append(items, store.EnqueueItem{TaskInstanceID: ti.ID, LogPath: "/logs/{try}"})
		}
	}
	if n, err := a.EnqueueTasks(ctx, store.EnqueueTasksParams{Items: items, Now: now}); err != nil || n != len(items) {
		t.Fatalf("EnqueueTasks = %d, %v; want %d", n, err, len(items))
	}
	pools := []store.PoolCapacity{{Name: "small", Slots: 3}, {Name: "big", Slots: 7}}
	var (
		mu      sync.Mutex
		claimed = map[int64]int{}
		wg      sync.WaitGroup
		errs    []error
	)
	for w := range 8 {
		st := []store.Store{a, b}[w%2]
		wg.Go(func() {
			for range 20 {
				got, err := st.ClaimReady(ctx, store.ClaimReadyParams{Pools: pools, Owner: fmt.Sprintf("w%d", w),
					Host: "h", Limit: 2, Now: now})
				mu.Lock()
				if err != nil {
					errs = append(errs, err)
				}
				for _, c := range got {
					claimed[c.TaskInstanceID]++
				}
				mu.Unlock()
				usage, err := st.Usage(ctx)
				if err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
					continue
				}
				running := map[string]int{}
				for _, u := range usage {
					running[u.Pool] += u.Running
				}
				for _, pc := range pools {
					if running[pc.Name] > pc.Slots {
						mu.Lock()
						errs = append(errs, fmt.Errorf("pool %s has %d running attempts, %d slots", pc.Name, running[pc.Name], pc.Slots))
						mu.Unlock()
					}
				}
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		t.Error(err)
	}
	for id, n := range claimed {
		if n != 1 {
			t.Errorf("task instance %d claimed %d times", id, n)
		}
	}
	if len(claimed) != 3+7 {
		t.Errorf("claimed %d task instances, want %d (every slot filled once)", len(claimed), 3+7)
	}
}

// Several rewinds opening a new database at once all succeed: migrations
// serialize on the advisory lock.
func TestPostgresConcurrentOpenOfNewState(t *testing.T) {
	for range 3 {
		openAtOnce(t, pgtest.DSN(t), 4)
	}
}

// rawPostgres opens the database directly, as an operator with psql would.
func rawPostgres(t *testing.T, dsn string) *sql.DB {
	t.Helper()
	return rawState(t, "pgx", dsn)
}

func TestPostgresMigrations(t *testing.T) {
	ctx := context.Background()
	dsn := pgtest.DSN(t)
	st := openState(t, dsn)
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	if _, err := st.UpsertPipeline(ctx, store.UpsertPipelineParams{Name: "p", Hash: "h", Now: now}); err != nil {
		t.Fatal(err)
	}
	st.Close()
	for i := range 2 {
		st := openState(t, dsn)
		if p, err := st.GetPipeline(ctx, "p"); err != nil || p.Hash != "h" {
			t.Errorf("reopen %d: GetPipeline = %+v, %v", i, p, err)
		}
		st.Close()
	}
	db := rawPostgres(t, dsn)
	var n int
	var first string
	if err := db.QueryRow("SELECT COUNT(*), MIN(name) FROM schema_migrations").Scan(&n, &first); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir("migrations")
	if err != nil {
		t.Fatal(err)
	}
	if n != len(entries) || first != "0001_init" {
		t.Errorf("schema_migrations: %d rows from %s, %d migrations embedded", n, first, len(entries))
	}
	// The schema is PostgreSQL's own: identity ids, BIGINT times.
	var idDefault, typ string
	if err := db.QueryRow(`SELECT is_identity, data_type FROM information_schema.columns
		WHERE table_name = 'runs' AND column_name = 'id'`).Scan(&idDefault, &typ); err != nil {
		t.Fatal(err)
	}
	if idDefault != "YES" || typ != "bigint" {
		t.Errorf("runs.id: identity %s, type %s; want an identity bigint", idDefault, typ)
	}
	if _, err := db.Exec("INSERT INTO schema_migrations (version, name, applied_at) VALUES (9999, '9999_future', 0)"); err != nil {
		t.Fatal(err)
	}
	_, err = store.Open(ctx, dsn)
	if err == nil || !strings.Contains(err.Error(), "newer") {
		t.Errorf("Open of a newer schema = %v, want an upgrade error", err)
	}
	if store.IsUnavailable(err) {
		t.Errorf("a newer schema is rewind's own error, not an unavailable state: %v", err)
	}
}

func TestPostgresConstraints(t *testing.T) {
	dsn := pgtest.DSN(t)
	openState(t, dsn).Close()
	db := rawPostgres(t, dsn)
	for _, q := range []string{
		"INSERT INTO runs (pipeline, logical_date, logical_unix, ds, data_interval_start, data_interval_end, kind, state) VALUES ('p', 'x', 1, 'd', 'x', 'x', 'nightly', 'queued')",
		"INSERT INTO runs (pipeline, logical_date, logical_unix, ds, data_interval_start, data_interval_end, kind, state) VALUES ('p', 'x', 1, 'd', 'x', 'x', 'manual', 'done')",
		"INSERT INTO task_instances (run_id, task, state) VALUES (12345, 't', 'scheduled')",
	} {
		if _, err := db.Exec(q); err == nil {
			t.Errorf("accepted: %s", q)
		}
	}
}

// A server that cannot be reached is an unavailable state, and the error
// does not show the password.
func TestPostgresUnreachable(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens there now
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, dsn := range []string{
		"postgres://rewind:s3cret-pw@" + addr + "/rewind?sslmode=disable&connect_timeout=5",
		"postgresql://rewind:s3cret-pw@" + addr + "/rewind?sslmode=disable&connect_timeout=5",
	} {
		st, err := store.Open(ctx, dsn)
		if err == nil {
			st.Close()
			t.Fatalf("Open(%s) succeeded", addr)
		}
		if !store.IsUnavailable(err) || !errors.Is(err, store.ErrPostgresUnavailable) {
			t.Errorf("Open of an unreachable server: IsUnavailable = %v, errors.Is(ErrPostgresUnavailable) = %v: %v",
				store.IsUnavailable(err), errors.Is(err, store.ErrPostgresUnavailable), err)
		}
		if strings.Contains(err.Error(), "s3cret-pw") {
			t.Errorf("error shows the password: %v", err)
		}
	}
}

// A database that goes away under an open store makes its operations fail
// as unavailable, not as a conflict or a missing row.
func TestPostgresServerErrorsAreUnavailable(t *testing.T) {
	ctx := context.Background()
	dsn := pgtest.DSN(t)
	st := openState(t, dsn)
	defer st.Close()
	db := rawPostgres(t, dsn)
	if _, err := db.Exec("DROP TABLE pipelines CASCADE"); err != nil {
		t.Fatal(err)
	}
	_, err := st.GetPipeline(ctx, "p")
	if err == nil || !store.IsUnavailable(err) {
		t.Errorf("GetPipeline on a dropped table = %v; want an unavailable state", err)
	}
	if errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrConflict) {
		t.Errorf("GetPipeline on a dropped table = %v; want neither ErrNotFound nor ErrConflict", err)
	}
}

// A unique violation surfacing from a backfill id is ErrConflict and not
// unavailable.
func TestPostgresDuplicateIsConflict(t *testing.T) {
	ctx := context.Background()
	st := openState(t, pgtest.DSN(t))
	defer st.Close()
	b := store.Backfill{ID: "bf1", Pipeline: "p", From: time.Unix(0, 0).UTC(), To: time.Unix(86400, 0).UTC(),
		Reprocess: "none", CreatedAt: time.Unix(1, 0)}
	if err := st.CreateBackfill(ctx, b); err != nil {
		t.Fatal(err)
	}
	err := st.CreateBackfill(ctx, b)
	if !errors.Is(err, store.ErrConflict) || store.IsUnavailable(err) {
		t.Errorf("second CreateBackfill = %v; want ErrConflict, not unavailable", err)
	}
}

// A fenced batch that itself hands the lease on cannot write as the old
// holder afterwards: the fence is checked again once the lease moved.
func TestPostgresFencedBatchMovesItsLease(t *testing.T) {
	ctx := context.Background()
	st := openState(t, pgtest.DSN(t))
	defer st.Close()
	now := time.Date(2026, 1, 15, 12, 0, 0, 0, time.UTC)
	l, held, err := st.AcquireLease(ctx, store.AcquireLeaseParams{Name: "scheduler", Holder: "a", TTL: time.Minute, Now: now})
	if err != nil || !held {
		t.Fatalf("AcquireLease = %v, %v", held, err)
	}
	if _, err := st.UpsertPipeline(ctx, store.UpsertPipelineParams{Name: "p", Hash: "h", Now: now}); err != nil {
		t.Fatal(err)
	}
	fenced := st.Fenced("scheduler", "a", l.Generation)
	err = fenced.InTx(ctx, func(tx store.Store) error {
		if err := tx.SetPaused(ctx, store.SetPausedParams{Name: "p", Paused: true, Now: now}); err != nil {
			return err
		}
		if _, held, err := tx.AcquireLease(ctx, store.AcquireLeaseParams{Name: "scheduler", Holder: "b", Stale: "a",
			TTL: time.Minute, Now: now}); err != nil || !held {
			return fmt.Errorf("hand over: %v, %v", held, err)
		}
		err := tx.SetPaused(ctx, store.SetPausedParams{Name: "p", Paused: false, Now: now})
		if !errors.Is(err, store.ErrFenced) {
			return fmt.Errorf("write after the hand-over = %v, want ErrFenced", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if p, err := st.GetPipeline(ctx, "p"); err != nil || !p.Paused {
		t.Errorf("pipeline = %+v, %v; want paused (the write before the hand-over stands)", p, err)
	}
}
