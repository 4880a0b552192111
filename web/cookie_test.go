package web_test

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/rewind-dev/rewind/web"
)

// The session cookie is Secure when the browser came over HTTPS: directly
// (TLS), or through a trusted proxy that says so with X-Forwarded-Proto.
// The header from an address that is not a trusted proxy is ignored.
func TestSessionCookieSecure(t *testing.T) {
	e := newEnv(t, dailyHCL)
	const token = "tok"
	for _, c := range []struct {
		name    string
		tls     bool
		trusted []string
		proto   []string
		secure  bool
	}{
		{name: "plain HTTP"},
		{name: "TLS", tls: true, secure: true},
		{name: "no proxy trusted", proto: []string{"https"}},
		{name: "from a trusted proxy", trusted: []string{"127.0.0.0/8"}, proto: []string{"https"}, secure: true},
		{name: "from a trusted address", trusted: []string{"10.1.2.3", "127.0.0.1"}, proto: []string{"HTTPS"}, secure: true},
		{name: "the nearest proxy's value", trusted: []string{"127.0.0.1"}, proto: []string{"http, https"}, secure: true},
		{name: "the nearest proxy says http", trusted: []string{"127.0.0.1"}, proto: []string{"https, http"}},
		{name: "from an untrusted address", trusted: []string{"10.0.0.0/8", "::1"}, proto: []string{"https"}},
		{name: "a trusted proxy says http", trusted: []string{"127.0.0.1/32"}, proto: []string{"http"}},
		{name: "a trusted proxy says nothing", trusted: []string{"127.0.0.1/32"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			trusted, err := web.ParseTrustedProxies(c.trusted)
			if err != nil {
				t.Fatal(err)
			}
			s, err := web.New(web.Options{State: e.st, Workspace: e.ws, Home: e.home, Token: token, TrustedProxies: trusted})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			srv := httptest.NewUnstartedServer(s)
			if c.tls {
				srv.StartTLS()
			} else {
				srv.Start()
			}
			defer srv.Close()
			req, err := http.NewRequest("POST", srv.URL+"/login", strings.NewReader(url.Values{"token": {token}, "next": {"/"}}.Encode()))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			for _, v := range c.proto {
				req.Header.Add("X-Forwarded-Proto", v)
			}
			client := srv.Client()
			client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
			res, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			res.Body.Close()
			if res.StatusCode != 303 || len(res.Cookies()) != 1 {
				t.Fatalf("/login: %d, cookies %v", res.StatusCode, res.Cookies())
			}
			if ck := res.Cookies()[0]; ck.Secure != c.secure || !ck.HttpOnly || ck.SameSite != http.SameSiteStrictMode {
				t.Errorf("cookie %s: Secure %v, want %v (HttpOnly %v, SameSite %v)", ck.Raw, ck.Secure, c.secure, ck.HttpOnly, ck.SameSite)
			}
		})
	}
	for _, bad := range []string{"", "proxy.example", "10.0.0.0/33", "1.2.3"} {
		if _, err := web.ParseTrustedProxies([]string{bad}); err == nil {
			t.Errorf("ParseTrustedProxies(%q) = nil error", bad)
		}
	}
	// The flag refuses what it cannot read: exit 2.
	if _, errOut, code := cli(t, e.dir, e.state, "ui", "--trusted-proxy", "proxy.example", e.dir); code != 2 || !strings.Contains(errOut, "--trusted-proxy") {
		t.Errorf("ui --trusted-proxy proxy.example: exit %d, %s", code, errOut)
	}
}
