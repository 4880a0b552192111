package backfill

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/rewind-dev/rewind/dsl"
	"github.com/rewind-dev/rewind/store"
)

// A webhook's path and query carry its token: no error shows them.
func TestWebhookErrorsRedactTheURL(t *testing.T) {
	const token = "T0KEN-a1b2c3d4"
	b := store.Backfill{ID: "p_1", Pipeline: "p", From: time.Date(2025, 7, 1, 0, 0, 0, 0, time.UTC), To: time.Date(2025, 7, 2, 0, 0, 0, 0, time.UTC)}

	failing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "boom", http.StatusInternalServerError)
	}))
	defer failing.Close()

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := ln.Addr().String()
	ln.Close() // nothing listens there any more: the connection is refused

	cases := []struct {
		name, hook, host, want string
	}{
		{"500", failing.URL + "/services/" + token + "?key=" + token, strings.TrimPrefix(failing.URL, "http://"), "answered 500 Internal Server Error"},
		{"refused", "http://" + refused + "/hooks/" + token + "?sig=" + token, refused, "connection refused"},
		{"user info", "http://user:" + token + "@" + refused + "/x", refused, "connection refused"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := postReport(context.Background(), c.hook, b, "success", "# report")
			if err == nil {
				t.Fatal("no error")
			}
			msg := err.Error()
			if !strings.Contains(msg, "http://"+c.host+"/"+dsl.RedactedMarker) || !strings.Contains(msg, c.want) {
				t.Errorf("error %q: want the host %s, the redaction marker and %q", msg, c.host, c.want)
			}
			if strings.Contains(msg, token) || strings.Contains(msg, "/services/") || strings.Contains(msg, "/hooks/") {
				t.Errorf("error shows the webhook's path or token: %q", msg)
			}
			if c.name == "refused" {
				var ue *url.Error
				if !errors.As(err, &ue) || ue.Op != "Post" {
					t.Errorf("the *url.Error is lost: %#v", err)
				}
			}

			// The same through notifyAll, as a backfill's report phase
			// records it.
			ws := &dsl.Workspace{Notifies: []*dsl.Notify{{Name: "team", Webhook: c.hook}}}
			err = notifyAll(context.Background(), ws, b, false, "/tmp/report.md", "# report")
			if err == nil || strings.Contains(err.Error(), token) || !strings.Contains(err.Error(), "notify team: ") || !strings.Contains(err.Error(), c.host) {
				t.Errorf("notifyAll: %v", err)
			}
		})
	}
}
