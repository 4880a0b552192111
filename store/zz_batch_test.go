package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/rewind-dev/rewind/store"
	"github.com/rewind-dev/rewind/store/pgtest"
)

func BenchmarkZZBatch(b *testing.B) {
	ctx := context.Background()
	st, err := store.Open(ctx, pgtest.DSN(b))
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	now := time.Now()
	l, _, _ := st.AcquireLease(ctx, store.AcquireLeaseParams{Name: "s", Holder: "a", TTL: time.Hour, Now: now})
	st.UpsertPipeline(ctx, store.UpsertPipelineParams{Name: "p", Hash: "h", Now: now})
	f := st.Fenced("s", "a", l.Generation)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		f.InTx(ctx, func(tx store.Store) error {
			for j := 0; j < 6; j++ {
				tx.SetTaskStates(ctx, store.SetTaskStatesParams{IDs: []int64{1, 2}, From: []store.TaskState{store.TaskScheduled}, To: store.TaskQueued, Now: now})
			}
			return nil
		})
	}
}
