package scheduler_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/rewind-dev/rewind/scheduler"
)

// reprocess_lookback = "2d": the nightly run of day N also runs N-1 and
// N-2 again, so that a row that arrived late in N-1's source reaches main
// with the run of day N; the days before them are not touched.
func TestReprocessLookback(t *testing.T) {
	e := newEnv(t, `
catalog "local" {
  uri       = ".rewind/catalog.db"
  warehouse = ".rewind/warehouse"
}
pipeline "events" {
  schedule           = "@daily"
  start_date         = "2025-07-01"
  reprocess_lookback = "2d"
  task "load" {
    command = "echo $REWIND_DS >> ledger.log; (echo ds,currency,amount_usd; cat src/$REWIND_DS.csv) > $REWIND_RUN_DIR/out.csv"
  }
  output "events" {
    table     = "analytics.fct_daily_revenue"
    from      = "${run.dir}/out.csv"
    columns   = { ds = "date", currency = "string", amount_usd = "double" }
    partition = "ds"
  }
}
`)
	src := filepath.Join(e.dir, "src")
	if err := os.MkdirAll(src, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, ds := range dates("2025-07-01", "2025-07-06") {
		if err := os.WriteFile(filepath.Join(src, ds+".csv"), []byte(ds+",EUR,10\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if sum := e.run(scheduler.Options{Now: utc("2025-07-06T00:00:00Z")}); sum.Failed() || len(sum.Finished) != 5 {
		t.Fatalf("catchup of 5 days: %+v", sum)
	}
	if got := counts(e.events("ledger.log")); len(got) != 5 || got["2025-07-03"] != 1 {
		t.Fatalf("the catchup ran %v; want each of the 5 days once (nothing of it re-run by itself)", got)
	}
	// A late row lands in 07-05's source; the nightly run of 07-06 comes.
	f, err := os.OpenFile(filepath.Join(src, "2025-07-05.csv"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString("2025-07-05,USD,5\n")
	f.Close()
	if sum := e.run(scheduler.Options{Now: utc("2025-07-07T00:00:00Z")}); sum.Failed() {
		t.Fatalf("nightly run: %+v", sum)
	}
	got := counts(e.events("ledger.log"))
	for ds, want := range map[string]int{"2025-07-01": 1, "2025-07-02": 1, "2025-07-03": 1, "2025-07-04": 2, "2025-07-05": 2, "2025-07-06": 1} {
		if got[ds] != want {
			t.Errorf("%s ran %d times; want %d", ds, got[ds], want)
		}
	}
	main := e.stats("main")
	if main["2025-07-05"].Rows != 2 || main["2025-07-05"].Sums["amount_usd"] != 15 {
		t.Errorf("main 2025-07-05 = %+v; want the late row in (2 rows, 15)", main["2025-07-05"])
	}
	if main["2025-07-06"].Rows != 1 {
		t.Errorf("main 2025-07-06 = %+v", main["2025-07-06"])
	}
}
