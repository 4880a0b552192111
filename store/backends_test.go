package store_test

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"sync"
	"testing"

	"github.com/rewind-dev/rewind/store"
	"github.com/rewind-dev/rewind/store/pgtest"
	"github.com/rewind-dev/rewind/store/storetest"
)

// openState opens the state dsn names, or fails the test.
func openState(t testing.TB, dsn string) store.Store {
	t.Helper()
	st, err := store.Open(context.Background(), dsn)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return st
}

// rawState opens a state with database/sql's driver, past the store.
func rawState(t *testing.T, driver, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open(driver, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// openAtOnce has n rewinds open the state dsn names at the same moment, and
// close it: every one must succeed.
func openAtOnce(t *testing.T, dsn string, n int) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make([]error, n)
	for j := range errs {
		wg.Go(func() {
			st, err := store.Open(context.Background(), dsn)
			if err == nil {
				err = st.Close()
			}
			errs[j] = err
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatalf("concurrent open: %v", err)
		}
	}
}

// twoProcessStates are the states two rewind processes share in the tests
// below: a SQLite file opened twice, and a PostgreSQL database with a pool
// of connections per store.
var twoProcessStates = []struct {
	name string
	// newDSN makes a new state and returns its DSN.
	newDSN func(t *testing.T) string
	// claimEach is how many task instances a process claims at a time in
	// ClaimReadyRace.
	claimEach int
}{
	{"SQLite", func(t *testing.T) string { return "sqlite:" + filepath.Join(t.TempDir(), "state.db") }, 1},
	{"Postgres", func(t *testing.T) string { return pgtest.DSN(t) }, 2},
}

// twoProcesses runs fn, for each kind of state, with two stores on one new
// state: two rewind processes.
func twoProcesses(t *testing.T, fn func(t *testing.T, a, b store.Store, claimEach int)) {
	for _, st := range twoProcessStates {
		t.Run(st.name, func(t *testing.T) {
			dsn := st.newDSN(t)
			a, b := openState(t, dsn), openState(t, dsn)
			t.Cleanup(func() {
				if err := errors.Join(a.Close(), b.Close()); err != nil {
					t.Error(err)
				}
			})
			fn(t, a, b, st.claimEach)
		})
	}
}

func TestTwoProcessesClaim(t *testing.T) {
	twoProcesses(t, func(t *testing.T, a, b store.Store, _ int) {
		storetest.ClaimRace(t, []store.Store{a, b}, 4)
	})
}

// Two rewinds claim 200 queued task instances of one pool from one state:
// neither exceeds the pool's slots nor its backfill slots, and no task
// instance runs twice.
func TestTwoProcessesClaimReady(t *testing.T) {
	twoProcesses(t, func(t *testing.T, a, b store.Store, claimEach int) {
		storetest.ClaimReadyRace(t, []store.Store{a, b}, claimEach)
	})
}

// Two rewinds take the lease from each other while writing through fenced
// stores: no write of a holder lands after it lost the lease.
func TestTwoProcessesFence(t *testing.T) {
	twoProcesses(t, func(t *testing.T, a, b store.Store, _ int) {
		storetest.FenceRace(t, a, b)
	})
}

// Two rewinds request and complete the same commits.
func TestTwoProcessesCommit(t *testing.T) {
	twoProcesses(t, func(t *testing.T, a, b store.Store, _ int) {
		storetest.CommitRace(t, []store.Store{a, b}, 2)
	})
}
