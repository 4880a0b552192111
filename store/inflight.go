package store

import (
	"context"
	"fmt"
)

// InFlight is what Store.InFlight read: Usage's rows, and the running runs
// (in ListRuns's order per chunk of pipelines) with their task instances.
type InFlight struct {
	Usage []UsageRow
	Runs  []Run
}

// inFlightChunk bounds the pipelines named in one statement of InFlight
// (SQLite's limit on a statement's parameters).
var inFlightChunk = 500

// InFlight reads Usage and the running runs of p.Pipelines with their task
// instances, as ListRuns with States running and WithTasks would: one
// pipeline of statements, sent in one round trip inside a PostgreSQL InTx
// (with the transaction's BEGIN and lease check when it is the first).
func (s *sqlStore) InFlight(ctx context.Context, p InFlightParams) (InFlight, error) {
	var out InFlight
	stmts := []pipeStmt{usageStmt(s.d, &out.Usage)}
	for start := 0; start < len(p.Pipelines); start += inFlightChunk {
		lp := ListRunsParams{Pipelines: p.Pipelines[start:min(start+inFlightChunk, len(p.Pipelines))], States: []RunState{RunRunning}}
		var a args
		where := s.d.runFilter(lp, &a)
		var runs []Run
		stmts = append(stmts, pipeStmt{
			query: "SELECT " + runColumns + " FROM runs r" + where + s.d.runOrder(lp), args: a,
			scan: func(rows rowScanner) error {
				for rows.Next() {
					r, err := scanRun(rows)
					if err != nil {
						return err
					}
					r.Tasks = []TaskInstance{}
					runs = append(runs, r)
				}
				return nil
			},
		}, pipeStmt{
			query: "SELECT " + taskColumns + " FROM task_instances ti JOIN runs r ON r.id = ti.run_id" + where +
				" ORDER BY ti.run_id, ti.task" + s.d.collate,
			args: a,
			// The runs' rows were read before these: a task instance of a
			// run that started running between the two statements (each
			// has its own snapshot at READ COMMITTED) is left out.
			scan: func(rows rowScanner) error {
				byID := make(map[int64]int, len(runs))
				for i := range runs {
					byID[runs[i].ID] = i
				}
				for rows.Next() {
					t, err := scanTask(rows)
					if err != nil {
						return err
					}
					if i, ok := byID[t.RunID]; ok {
						runs[i].Tasks = append(runs[i].Tasks, t)
					}
				}
				out.Runs = append(out.Runs, runs...)
				return nil
			},
		})
	}
	if err := s.read(ctx, func(c conn) error { return c.pipeline(ctx, stmts) }); err != nil {
		return InFlight{}, fmt.Errorf("store: in flight: %w", err)
	}
	return out, nil
}
