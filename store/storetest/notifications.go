package storetest

import (
	"errors"
	"testing"
	"time"

	"github.com/rewind-dev/rewind/store"
)

// testNotifications: an event is queued once per key; a claim holds against
// another deliverer until it expires; a deliverer that lost its claim
// records nothing; delivered and given-up notifications are never claimed
// again, and one to retry is claimed again once due.
func testNotifications(t *testing.T, st store.Store) {
	mk := func(key, event string) store.Notification {
		return store.Notification{Key: key, Event: event, Notify: "oncall", Channel: "webhook", Pipeline: "p", Payload: []byte(`{"key":"` + key + `"}`)}
	}
	n, err := st.EnqueueNotifications(ctx, []store.Notification{mk("run_failed:p:1", "run_failed"), mk("deadline_missed:p:1", "deadline_missed")})
	if err != nil || n != 2 {
		t.Fatalf("EnqueueNotifications = %d, %v; want 2 new", n, err)
	}
	// The same event written again (a retry of the transaction, another
	// rewind after a takeover) is not queued twice.
	if n, err := st.EnqueueNotifications(ctx, []store.Notification{mk("run_failed:p:1", "run_failed")}); err != nil || n != 0 {
		t.Fatalf("EnqueueNotifications of a queued key = %d, %v; want 0 new", n, err)
	}
	if _, err := st.EnqueueNotifications(ctx, []store.Notification{{Key: "k", Event: "run_failed"}}); err == nil {
		t.Error("EnqueueNotifications without a notify block = nil error")
	}
	a, err := st.ClaimNotifications(ctx, store.ClaimNotificationsParams{Owner: "A", For: time.Hour})
	if err != nil || len(a) != 2 {
		t.Fatalf("ClaimNotifications(A) = %d, %v; want 2", len(a), err)
	}
	if a[0].Key != "run_failed:p:1" || a[0].Event != "run_failed" || a[0].Notify != "oncall" || a[0].Channel != "webhook" || a[0].Pipeline != "p" ||
		string(a[0].Payload) != `{"key":"run_failed:p:1"}` || a[0].CreatedAt.IsZero() || a[0].ClaimedBy != "A" {
		t.Errorf("claimed %+v", a[0])
	}
	if b, err := st.ClaimNotifications(ctx, store.ClaimNotificationsParams{Owner: "B", For: time.Hour}); err != nil || len(b) != 0 {
		t.Fatalf("ClaimNotifications(B) while A holds them = %d, %v; want 0", len(b), err)
	}
	if err := st.FinishNotification(ctx, store.FinishNotificationParams{ID: a[0].ID, Owner: "B", Delivered: true}); !errors.Is(err, store.ErrConflict) {
		t.Errorf("FinishNotification by a deliverer without the claim = %v, want ErrConflict", err)
	}
	if err := st.FinishNotification(ctx, store.FinishNotificationParams{ID: a[0].ID, Owner: "A", Delivered: true}); err != nil {
		t.Fatal(err)
	}
	if err := st.FinishNotification(ctx, store.FinishNotificationParams{ID: a[1].ID, Owner: "A", Error: "webhook answered 503", RetryIn: 0}); err != nil {
		t.Fatal(err)
	}
	// The one to retry is due again; the delivered one is not.
	b, err := st.ClaimNotifications(ctx, store.ClaimNotificationsParams{Owner: "B", For: time.Hour})
	if err != nil || len(b) != 1 || b[0].ID != a[1].ID || b[0].Tries != 1 || b[0].LastError != "webhook answered 503" {
		t.Fatalf("ClaimNotifications(B) after a retry = %+v, %v; want the deadline one, tried once", b, err)
	}
	if err := st.FinishNotification(ctx, store.FinishNotificationParams{ID: b[0].ID, Owner: "B", Error: "webhook answered 503", RetryIn: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if c, err := st.ClaimNotifications(ctx, store.ClaimNotificationsParams{Owner: "C", For: time.Hour}); err != nil || len(c) != 0 {
		t.Fatalf("ClaimNotifications before the retry is due = %d, %v; want 0", len(c), err)
	}
	pending, err := st.ListNotifications(ctx, store.ListNotificationsParams{Pending: true})
	if err != nil || len(pending) != 1 || pending[0].Tries != 2 || pending[0].NextAt.Before(pending[0].CreatedAt.Add(30*time.Minute)) {
		t.Fatalf("pending = %+v, %v", pending, err)
	}
	all, err := st.ListNotifications(ctx, store.ListNotificationsParams{Pipeline: "p", Event: "run_failed"})
	if err != nil || len(all) != 1 || all[0].DeliveredAt.IsZero() || all[0].Tries != 1 {
		t.Fatalf("delivered = %+v, %v", all, err)
	}
	// An expired claim is taken by the next deliverer; the first one's
	// late answer is refused.
	if _, err := st.EnqueueNotifications(ctx, []store.Notification{mk("run_failed:p:2", "run_failed")}); err != nil {
		t.Fatal(err)
	}
	d, err := st.ClaimNotifications(ctx, store.ClaimNotificationsParams{Owner: "D", For: time.Millisecond})
	if err != nil || len(d) != 1 {
		t.Fatalf("ClaimNotifications(D) = %d, %v", len(d), err)
	}
	time.Sleep(20 * time.Millisecond)
	e, err := st.ClaimNotifications(ctx, store.ClaimNotificationsParams{Owner: "E", For: time.Hour})
	if err != nil || len(e) != 1 || e[0].ID != d[0].ID {
		t.Fatalf("ClaimNotifications(E) after D's claim expired = %+v, %v", e, err)
	}
	if err := st.FinishNotification(ctx, store.FinishNotificationParams{ID: d[0].ID, Owner: "D", Delivered: true}); !errors.Is(err, store.ErrConflict) {
		t.Errorf("FinishNotification by D after its claim expired = %v, want ErrConflict", err)
	}
	if err := st.FinishNotification(ctx, store.FinishNotificationParams{ID: e[0].ID, Owner: "E", GiveUp: true, Error: "notify block gone"}); err != nil {
		t.Fatal(err)
	}
	if got, err := st.ListNotifications(ctx, store.ListNotificationsParams{Pending: true}); err != nil || len(got) != 1 {
		t.Fatalf("pending after a give-up = %+v, %v; want only the deadline one", got, err)
	}
	// The outbox as the metrics count it.
	stats, err := st.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n := stats.Notifications; n.Pending != 1 || n.Failing != 1 || n.Delivered != 1 || n.GaveUp != 1 || n.OldestPending.IsZero() {
		t.Errorf("Stats().Notifications = %+v, want 1 pending (failing), 1 delivered, 1 given up", n)
	}
}

// testDeadlineChecks: the instant up to which missed deadlines were looked
// for is absent at first, then moves forward only.
func testDeadlineChecks(t *testing.T, st store.Store) {
	if _, ok, err := st.DeadlineChecked(ctx, "p"); err != nil || ok {
		t.Fatalf("DeadlineChecked of a new pipeline = %v, %v; want none", ok, err)
	}
	if err := st.SetDeadlineChecked(ctx, "p", now); err != nil {
		t.Fatal(err)
	}
	if err := st.SetDeadlineChecked(ctx, "p", now.Add(-time.Hour)); err != nil {
		t.Fatal(err)
	}
	got, ok, err := st.DeadlineChecked(ctx, "p")
	if err != nil || !ok || !got.Equal(now) {
		t.Fatalf("DeadlineChecked = %s, %v, %v; want %s (never moved back)", got, ok, err, now)
	}
	if err := st.SetDeadlineChecked(ctx, "p", now.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if got, _, _ := st.DeadlineChecked(ctx, "p"); !got.Equal(now.Add(time.Hour)) {
		t.Fatalf("DeadlineChecked = %s, want %s", got, now.Add(time.Hour))
	}
	if _, ok, _ := st.DeadlineChecked(ctx, "q"); ok {
		t.Fatal("another pipeline's check was set")
	}
}
