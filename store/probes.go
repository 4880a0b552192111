package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"
)

// ProbeResult is a skew probe's measurement of one date, as the run that
// routed the date recorded it: what the web view shows instead of running
// the probe itself.
type ProbeResult struct {
	Pipeline string
	// Task is "" for the pipeline's skew block, else the task whose own
	// skew block has the probe.
	Task        string
	LogicalDate time.Time // carries the pipeline's offset
	// Value is the number the probe printed; Median that of the date's
	// reference dates. Both 0 when the probe failed.
	Value, Median float64
	// Error says why the probe failed ("" when it measured).
	Error string
	// Pool and Reason are the route the skew block gave the date then.
	Pool, Reason string
	MeasuredAt   time.Time
}

// Probe results: what a skew probe printed for a date, as the run that
// routed the date recorded it.

// RecordProbes saves results in one transaction, each replacing the row of
// its pipeline, task and logical date.
func (s *sqlStore) RecordProbes(ctx context.Context, results []ProbeResult) error {
	if len(results) == 0 {
		return nil
	}
	for _, r := range results {
		switch {
		case r.Pipeline == "":
			return errors.New("store: record probes: empty pipeline")
		case r.LogicalDate.IsZero():
			return fmt.Errorf("store: record probes of %s: zero logical date", r.Pipeline)
		case r.MeasuredAt.IsZero():
			return fmt.Errorf("store: record probes of %s: zero measured_at", r.Pipeline)
		case math.IsNaN(r.Value) || math.IsInf(r.Value, 0) || math.IsNaN(r.Median) || math.IsInf(r.Median, 0):
			return fmt.Errorf("store: record probes of %s %s: value %v, median %v: want finite numbers", r.Pipeline, formatDate(r.LogicalDate), r.Value, r.Median)
		}
	}
	return s.write(ctx, func(c conn) error {
		for _, r := range results {
			if _, err := c.exec(ctx, `
				INSERT INTO probe_results (pipeline, task, logical_date, logical_unix, value, median, error, pool, reason, measured_at)
				VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
				ON CONFLICT (pipeline, task, logical_unix) DO UPDATE SET
					logical_date = excluded.logical_date, value = excluded.value, median = excluded.median,
					error = excluded.error, pool = excluded.pool, reason = excluded.reason, measured_at = excluded.measured_at`,
				r.Pipeline, r.Task, formatDate(r.LogicalDate), nanos(r.LogicalDate), r.Value, r.Median, r.Error, r.Pool, r.Reason, nanos(r.MeasuredAt)); err != nil {
				return fmt.Errorf("store: record probe of %s %s: %w", r.Pipeline, formatDate(r.LogicalDate), err)
			}
		}
		return nil
	})
}

// ListProbes reads the recorded measurements of one pipeline's task within
// a window of logical dates, oldest first.
func (s *sqlStore) ListProbes(ctx context.Context, p ListProbesParams) ([]ProbeResult, error) {
	var a args
	q := `SELECT pipeline, task, logical_date, value, median, error, pool, reason, measured_at FROM probe_results
		WHERE pipeline = ` + a.add(p.Pipeline) + ` AND task = ` + a.add(p.Task)
	if !p.From.IsZero() {
		q += " AND logical_unix >= " + a.add(nanos(p.From))
	}
	if !p.To.IsZero() {
		q += " AND logical_unix <= " + a.add(nanos(p.To))
	}
	q += " ORDER BY logical_unix"
	if p.Limit > 0 {
		q += " LIMIT " + strconv.Itoa(p.Limit)
	}
	rows, err := s.rq().query(ctx, q, a...)
	out, err := scanAll(rows, err, func(rows *sql.Rows) (ProbeResult, error) {
		var (
			r        ProbeResult
			logical  string
			measured sql.NullInt64
		)
		if err := rows.Scan(&r.Pipeline, &r.Task, &logical, &r.Value, &r.Median, &r.Error, &r.Pool, &r.Reason, &measured); err != nil {
			return ProbeResult{}, err
		}
		var err error
		if r.LogicalDate, err = parseDate(logical); err != nil {
			return ProbeResult{}, err
		}
		r.MeasuredAt = fromNanos(measured)
		return r, nil
	})
	if err != nil {
		return nil, fmt.Errorf("store: list probes of %s: %w", p.Pipeline, err)
	}
	return out, nil
}
