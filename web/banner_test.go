package web_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/rewind-dev/rewind/lease"
	"github.com/rewind-dev/rewind/store"
	"github.com/rewind-dev/rewind/web"
)

// Every page says when no scheduler holds the leader lease, and when the
// one that holds it has missed its renewals; /api/scheduler says the same
// in warning. The sign-in page says nothing of the state.
func TestSchedulerBanner(t *testing.T) {
	e := dailyEnv(t)
	srv := e.server("")
	state := func() web.SchedulerJSON {
		t.Helper()
		_, body := get(t, srv, "/api/scheduler")
		var s web.SchedulerJSON
		if err := json.Unmarshal([]byte(body), &s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	const none = "No rewind scheduler holds the leader lease"
	if w := state().Warning; !strings.HasPrefix(w, none) {
		t.Errorf("warning %q; want %q", w, none)
	}
	for _, path := range []string{"/", "/pipelines/daily"} {
		if _, page := get(t, srv, path); !strings.Contains(page, `<div class="banner" id="banner" role="alert">`+none) {
			t.Errorf("%s has no banner", path)
		}
	}
	ctx := context.Background()
	if _, ok, err := e.st.AcquireLease(ctx, store.AcquireLeaseParams{Name: lease.Leader, Holder: "node-a:42", Host: "node-a", PID: 42, TTL: 4 * time.Second, Now: time.Now()}); err != nil || !ok {
		t.Fatalf("acquire: %v %v", ok, err)
	}
	s := state()
	if s.Warning != "" || s.Leader == nil || s.Leader.RenewedAt == "" || s.Leader.AcquiredAt == "" {
		t.Errorf("a scheduler that just took the lease: %+v %+v", s.Leader, s.Warning)
	}
	if _, page := get(t, srv, "/"); !strings.Contains(page, `<div class="banner" id="banner" role="alert" hidden></div>`) {
		t.Error("the banner is not hidden while a scheduler leads")
	}
	// Renewed every TTL/8 = 500ms: after a second without renewal it has
	// missed two, and the lease (4 s) is still its.
	time.Sleep(1200 * time.Millisecond)
	s = state()
	if s.Leader == nil || !strings.Contains(s.Warning, "The active scheduler (node-a pid 42) has not renewed its lease for 1") ||
		!strings.Contains(s.Warning, "it renews it every 500ms") {
		t.Errorf("a scheduler that stopped renewing: %+v %q", s.Leader, s.Warning)
	}
	if err := e.st.RenewLease(ctx, store.RenewLeaseParams{Name: lease.Leader, Holder: "node-a:42", TTL: 4 * time.Second, Now: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if w := state().Warning; w != "" {
		t.Errorf("renewed again: %q", w)
	}

	// Behind a token, the sign-in page shows nothing of the state.
	tsrv := e.server("0123456789abcdef")
	for _, path := range []string{"/login", "/pipelines/daily"} {
		if _, page := get(t, tsrv, path); strings.Contains(page, `id="banner"`) {
			t.Errorf("%s without the token has the banner", path)
		}
	}
}
