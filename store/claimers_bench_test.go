package store_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/rewind-dev/rewind/store"
	"github.com/rewind-dev/rewind/store/pgtest"
)

// BenchmarkClaimers measures the pull model: 1, 4 and 16 claimers, each
// with its own Store (as separate processes have), take queued task
// instances with ClaimReady (8 at a time, a pool of 64 slots), start and
// finish them (StartAttempts, FinishAttempts); the figure is attempts per second through the state, with
// no process launched. Run on SQLite, and on PostgreSQL when
// REWIND_TEST_POSTGRES names a server.
//
//	go test -run '^$' -bench Claimers -benchtime 2000x ./store/
func BenchmarkClaimers(b *testing.B) {
	backends := map[string]func(b *testing.B) string{
		"sqlite":   func(b *testing.B) string { return "sqlite:" + filepath.Join(b.TempDir(), "state.db") },
		"postgres": func(b *testing.B) string { return pgtest.DSN(b) },
	}
	for _, name := range []string{"sqlite", "postgres"} {
		for _, claimers := range []int{1, 4, 16} {
			b.Run(fmt.Sprintf("%s/claimers=%d", name, claimers), func(b *testing.B) {
				benchClaimers(b, backends[name](b), claimers)
			})
		}
	}
}

func benchClaimers(b *testing.B, dsn string, claimers int) {
	ctx := context.Background()
	setup, err := store.Open(ctx, dsn)
	if err != nil {
		b.Fatal(err)
	}
	defer setup.Close()
	n := b.N
	specs := make([]store.RunSpec, n)
	start := time.Date(2016, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := range specs {
		d := start.Add(time.Duration(i) * time.Hour)
		specs[i] = store.RunSpec{LogicalDate: d, DS: d.Format("2006-01-02"), DataIntervalStart: d, DataIntervalEnd: d.Add(time.Hour)}
	}
	now := time.Now()
	if _, err := setup.UpsertPipeline(ctx, store.UpsertPipelineParams{Name: "p", Now: now}); err != nil {
		b.Fatal(err)
	}
	if _, err := setup.MaterializeRuns(ctx, store.MaterializeRunsParams{Pipeline: "p", Kind: store.KindScheduled, Runs: specs, Tasks: []store.TaskSpec{{Name: "t", Pool: "default"}}, Now: now}); err != nil {
		b.Fatal(err)
	}
	runs, err := setup.ListRuns(ctx, store.ListRunsParams{Pipelines: []string{"p"}, WithTasks: true})
	if err != nil {
		b.Fatal(err)
	}
	items := make([]store.EnqueueItem, len(runs))
	for i, r := range runs {
		if err := setup.AdmitRun(ctx, store.AdmitRunParams{RunID: r.ID, Now: now}); err != nil {
			b.Fatal(err)
		}
		items[i] = store.EnqueueItem{TaskInstanceID: r.Tasks[0].ID, Pool: "default", LogPath: "/dev/null"}
	}
	if moved, err := setup.EnqueueTasks(ctx, store.EnqueueTasksParams{Items: items, Now: now}); err != nil || moved != n {
		b.Fatalf("enqueue: %d, %v", moved, err)
	}
	stores := make([]store.Store, claimers)
	for i := range stores {
		if stores[i], err = store.Open(ctx, dsn); err != nil {
			b.Fatal(err)
		}
		defer stores[i].Close()
	}
	b.ResetTimer()
	var wg sync.WaitGroup
	var mu sync.Mutex
	done := 0
	for i, st := range stores {
		wg.Add(1)
		go func() {
			defer wg.Done()
			owner := fmt.Sprintf("bench-%d", i)
			for {
				got, err := st.ClaimReady(ctx, store.ClaimReadyParams{
					Pools: []store.PoolCapacity{{Name: "default", Slots: 64, BackfillSlots: 64}},
					Owner: owner, Host: "bench", Limit: 8, Now: time.Now(),
				})
				if err != nil {
					b.Error(err)
					return
				}
				if len(got) == 0 {
					mu.Lock()
					finished := done >= n || b.Failed()
					mu.Unlock()
					if finished {
						return
					}
					time.Sleep(time.Millisecond)
					continue
				}
				code := 0
				starts := make([]store.StartAttemptParams, len(got))
				ends := make([]store.FinishAttemptParams, len(got))
				for k, a := range got {
					starts[k] = store.StartAttemptParams{AttemptID: a.ID, PID: 1, Now: time.Now()}
					ends[k] = store.FinishAttemptParams{AttemptID: a.ID, State: store.AttemptSuccess, ExitCode: &code, TaskState: store.TaskSuccess, Now: time.Now()}
				}
				// As the scheduler records them: the claimed attempts' pids in
				// one call, their outcomes in another, one transaction.
				err = st.InTx(ctx, func(tx store.Store) error {
					for _, batch := range []func() ([]error, error){
						func() ([]error, error) { return tx.StartAttempts(ctx, starts) },
						func() ([]error, error) { return tx.FinishAttempts(ctx, ends) },
					} {
						errs, err := batch()
						if err == nil {
							err = errors.Join(errs...)
						}
						if err != nil {
							return err
						}
					}
					return nil
				})
				if err != nil {
					b.Error(err)
					return
				}
				mu.Lock()
				done += len(got)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	if done != n {
		b.Fatalf("%d attempts finished, want %d", done, n)
	}
	b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "attempts/s")
}
