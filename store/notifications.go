package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"time"
)

// Notifications: the outbox of events (a failed run, a missed deadline) for
// the workspace's notify blocks, queued in the transaction that causes them
// and delivered later by whichever rewind runs next.

// EnqueueNotifications queues ns, skipping any whose Key is already queued
// (delivered or not): an event is queued once, whatever retries, restarts
// or takeovers write it again. It returns how many were new. A zero
// CreatedAt is the state's clock; NextAt defaults to CreatedAt.
func (s *sqlStore) EnqueueNotifications(ctx context.Context, ns []Notification) (int, error) {
	if len(ns) == 0 {
		return 0, nil
	}
	for _, n := range ns {
		if n.Key == "" || n.Event == "" || n.Notify == "" || n.Channel == "" {
			return 0, fmt.Errorf("store: enqueue notification: key %q, event %q, notify %q, channel %q: all four are required", n.Key, n.Event, n.Notify, n.Channel)
		}
	}
	added := 0
	err := s.write(ctx, func(c conn) error {
		now, err := c.clock(ctx)
		if err != nil {
			return err
		}
		added = 0
		for _, n := range ns {
			created := n.CreatedAt
			if created.IsZero() {
				created = now
			}
			next := n.NextAt
			if next.IsZero() {
				next = created
			}
			res, err := c.exec(ctx, `
				INSERT INTO notifications (idem_key, event, notify, channel, pipeline, payload, created_at, next_at)
				VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
				ON CONFLICT (idem_key) DO NOTHING`,
				n.Key, n.Event, n.Notify, n.Channel, n.Pipeline, string(n.Payload), nanos(created), nanos(next))
			if err != nil {
				return fmt.Errorf("store: enqueue notification %s: %w", n.Key, err)
			}
			if k, _ := res.RowsAffected(); k > 0 {
				added++
			}
		}
		return nil
	})
	return added, err
}

// ClaimNotifications claims, for p.For on the state's clock, at most
// p.Limit notifications that are due (neither delivered nor given up, their
// next try not in the future, not claimed by a deliverer whose claim still
// holds), oldest first. A deliverer that dies holding a claim leaves it to
// the next once the claim expires.
func (s *sqlStore) ClaimNotifications(ctx context.Context, p ClaimNotificationsParams) ([]Notification, error) {
	if p.Owner == "" || p.For <= 0 {
		return nil, errors.New("store: claim notifications: an owner and a claim duration are required")
	}
	limit := p.Limit
	if limit <= 0 {
		limit = 100
	}
	var out []Notification
	err := s.write(ctx, func(c conn) error {
		out = nil
		now, err := c.clock(ctx)
		if err != nil {
			return err
		}
		n := nanos(now)
		var a args
		q := notificationColumns + ` FROM notifications
			WHERE delivered_at IS NULL AND gave_up_at IS NULL AND next_at <= ` + a.add(n) + ` AND claimed_until <= ` + a.add(n)
		if p.Notify != "" {
			q += " AND notify = " + a.add(p.Notify)
		}
		for _, x := range p.Except {
			q += " AND notify <> " + a.add(x)
		}
		rows, err := c.query(ctx, q+" ORDER BY next_at, id LIMIT "+strconv.Itoa(limit), a...)
		due, err := scanAll(rows, err, scanNotification)
		if err != nil {
			return err
		}
		until := nanos(now.Add(p.For))
		for _, d := range due {
			res, err := c.exec(ctx, `UPDATE notifications SET claimed_by = $1, claimed_until = $2
				WHERE id = $3 AND delivered_at IS NULL AND gave_up_at IS NULL AND claimed_until <= $4`,
				p.Owner, until, d.ID, n)
			if err != nil {
				return err
			}
			if k, _ := res.RowsAffected(); k == 1 {
				d.ClaimedBy = p.Owner
				out = append(out, d)
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("store: claim notifications: %w", err)
	}
	return out, nil
}

// FinishNotification records what became of a claimed notification:
// delivered, given up, or to be tried again p.RetryIn after the state's
// clock. ErrConflict when p.Owner no longer holds the claim (it expired and
// another deliverer took it): the caller records nothing.
func (s *sqlStore) FinishNotification(ctx context.Context, p FinishNotificationParams) error {
	err := s.write(ctx, func(c conn) error {
		now, err := c.clock(ctx)
		if err != nil {
			return err
		}
		n := nanos(now)
		var res sql.Result
		switch {
		case p.Delivered:
			res, err = c.exec(ctx, `UPDATE notifications SET delivered_at = $1, tries = tries + 1, claimed_by = '', claimed_until = 0, last_error = ''
				WHERE id = $2 AND claimed_by = $3 AND delivered_at IS NULL`, n, p.ID, p.Owner)
		case p.GiveUp:
			res, err = c.exec(ctx, `UPDATE notifications SET gave_up_at = $1, tries = tries + 1, claimed_by = '', claimed_until = 0, last_error = $2
				WHERE id = $3 AND claimed_by = $4 AND delivered_at IS NULL`, n, p.Error, p.ID, p.Owner)
		default:
			res, err = c.exec(ctx, `UPDATE notifications SET next_at = $1, tries = tries + 1, claimed_by = '', claimed_until = 0, last_error = $2
				WHERE id = $3 AND claimed_by = $4 AND delivered_at IS NULL`, nanos(now.Add(p.RetryIn)), p.Error, p.ID, p.Owner)
		}
		if err != nil {
			return err
		}
		if k, _ := res.RowsAffected(); k != 1 {
			return ErrConflict
		}
		return nil
	})
	if err != nil && !errors.Is(err, ErrConflict) {
		return fmt.Errorf("store: finish notification %d: %w", p.ID, err)
	}
	return err
}

// ListNotifications lists notifications, oldest first: of one pipeline
// and/or event when given, only those not yet delivered nor given up with
// Pending.
func (s *sqlStore) ListNotifications(ctx context.Context, p ListNotificationsParams) ([]Notification, error) {
	var a args
	q := notificationColumns + ` FROM notifications WHERE 1 = 1`
	if p.Pipeline != "" {
		q += " AND pipeline = " + a.add(p.Pipeline)
	}
	if p.Event != "" {
		q += " AND event = " + a.add(p.Event)
	}
	if p.Pending {
		q += " AND delivered_at IS NULL AND gave_up_at IS NULL"
	}
	q += " ORDER BY created_at, id"
	rows, err := s.rq().query(ctx, q, a...)
	out, err := scanAll(rows, err, scanNotification)
	if err != nil {
		return nil, fmt.Errorf("store: list notifications: %w", err)
	}
	return out, nil
}

const notificationColumns = `SELECT id, idem_key, event, notify, channel, pipeline, payload, created_at, tries, next_at, claimed_by, delivered_at, gave_up_at, last_error`

func scanNotification(rows *sql.Rows) (Notification, error) {
	var (
		n                 Notification
		payload           string
		created, next     int64
		delivered, gaveUp sql.NullInt64
	)
	if err := rows.Scan(&n.ID, &n.Key, &n.Event, &n.Notify, &n.Channel, &n.Pipeline, &payload, &created, &n.Tries, &next, &n.ClaimedBy, &delivered, &gaveUp, &n.LastError); err != nil {
		return Notification{}, err
	}
	n.Payload = []byte(payload)
	n.CreatedAt = time.Unix(0, created).UTC()
	n.NextAt = time.Unix(0, next).UTC()
	n.DeliveredAt, n.GaveUpAt = fromNanos(delivered), fromNanos(gaveUp)
	return n, nil
}

// DeadlineChecked returns the instant up to which the pipeline's missed
// deadlines were looked for; ok is false when they never were.
func (s *sqlStore) DeadlineChecked(ctx context.Context, pipeline string) (time.Time, bool, error) {
	var n int64
	err := s.rq().row(ctx, `SELECT checked_until FROM deadline_checks WHERE pipeline = $1`, pipeline).Scan(&n)
	if errors.Is(err, sql.ErrNoRows) {
		return time.Time{}, false, nil
	}
	if err != nil {
		return time.Time{}, false, fmt.Errorf("store: deadline check of %s: %w", pipeline, err)
	}
	return time.Unix(0, n).UTC(), true, nil
}

// SetDeadlineChecked records that the pipeline's missed deadlines were
// looked for up to until; an earlier until than the recorded one is
// ignored (two rewinds that look at once never move it back).
func (s *sqlStore) SetDeadlineChecked(ctx context.Context, pipeline string, until time.Time) error {
	return s.write(ctx, func(c conn) error {
		if _, err := c.exec(ctx, `
			INSERT INTO deadline_checks (pipeline, checked_until) VALUES ($1, $2)
			ON CONFLICT (pipeline) DO UPDATE SET checked_until = excluded.checked_until
			WHERE deadline_checks.checked_until < excluded.checked_until`, pipeline, nanos(until)); err != nil {
			return fmt.Errorf("store: set deadline check of %s: %w", pipeline, err)
		}
		return nil
	})
}

// ForgetDeadlineChecks removes the looks of every pipeline not in keep:
// one whose deadline went away starts over with a first look when it
// comes back, instead of paging for everything since its last look.
func (s *sqlStore) ForgetDeadlineChecks(ctx context.Context, keep []string) error {
	return s.write(ctx, func(c conn) error {
		var a args
		q := `DELETE FROM deadline_checks WHERE 1 = 1`
		for _, k := range keep {
			q += " AND pipeline <> " + a.add(k)
		}
		if _, err := c.exec(ctx, q, a...); err != nil {
			return fmt.Errorf("store: forget deadline checks: %w", err)
		}
		return nil
	})
}
