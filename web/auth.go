package web

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"unicode"
)

// EnvToken is the environment variable that gives the token when --token
// is not set.
const EnvToken = "REWIND_UI_TOKEN"

// ErrTokenRequired is returned by CheckListen for an address other than
// loopback without a token.
var ErrTokenRequired = errors.New("a token is required to listen on an address other than loopback")

// CheckListen applies the safety rule to a --listen address: loopback
// (127.0.0.0/8, ::1, localhost) is served as is; any other address (an
// empty host, 0.0.0.0, a LAN address, a name that resolves elsewhere)
// only with a token.
func CheckListen(ctx context.Context, addr, token string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("--listen %q: want HOST:PORT (127.0.0.1:8080): %v", addr, err)
	}
	loop, err := isLoopback(ctx, host)
	if err != nil {
		return fmt.Errorf("--listen %q: %v", addr, err)
	}
	if !loop && token == "" {
		return fmt.Errorf("--listen %s: %w: pass --token or set %s, or listen on 127.0.0.1", addr, ErrTokenRequired, EnvToken)
	}
	return nil
}

// isLoopback reports whether every address host stands for is a loopback
// one. An empty host is every interface: not loopback.
func isLoopback(ctx context.Context, host string) (bool, error) {
	switch {
	case host == "":
		return false, nil
	case strings.EqualFold(host, "localhost"):
		return true, nil
	}
	if ip := net.ParseIP(host); ip != nil {
		return ip.IsLoopback(), nil
	}
	addrs, err := net.DefaultResolver.LookupIPAddr(ctx, host)
	if err != nil {
		return false, err
	}
	for _, a := range addrs {
		if !a.IP.IsLoopback() {
			return false, nil
		}
	}
	return len(addrs) > 0, nil
}

// loopbackHost reports whether a request's Host header names this
// machine's loopback: a view without a token answers only those, so that
// a page elsewhere cannot read it through a name that resolves to
// 127.0.0.1 (DNS rebinding).
func loopbackHost(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if strings.EqualFold(host, "localhost") || strings.HasSuffix(strings.ToLower(host), ".localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

const sessionCookie = "rewind_ui_session"

// A sign-in's cookie is LABEL.NONCE.MAC: the label the person gave (base64,
// for the audit trail), a random nonce of the sign-in, and an HMAC of both
// keyed by the token, so that the cookie is not the token and cannot be
// made without it. The CSRF token of the session is another HMAC of the
// nonce: a page of this server carries it, a page elsewhere cannot read
// it, and every write of a cookie session must send it back.

// mac is the hex HMAC of parts, keyed by the token.
func (s *Server) mac(parts ...string) string {
	m := hmac.New(sha256.New, []byte(s.o.Token))
	m.Write([]byte(strings.Join(parts, "\x00")))
	return hex.EncodeToString(m.Sum(nil))
}

// newSession is the cookie value of a new sign-in under label.
func (s *Server) newSession(label string) string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	l := base64.RawURLEncoding.EncodeToString([]byte(label))
	nonce := hex.EncodeToString(b[:])
	return l + "." + nonce + "." + s.mac("rewind ui session", l, nonce)
}

// principal is who a request comes from, once the token rule let it in.
type principal struct {
	// who is a sign-in's label, or "token" (a bearer client, a sign-in
	// without a label); "" without a token (loopback, no writes).
	who string
	// csrf is the CSRF token of a cookie session ("" for a bearer client,
	// whose Authorization header is the proof: a browser never sends it
	// by itself).
	csrf   string
	bearer bool
}

type principalKey struct{}

func principalOf(r *http.Request) principal {
	p, _ := r.Context().Value(principalKey{}).(principal)
	return p
}

// checkSession reads a session cookie: its principal, or false.
func (s *Server) checkSession(value string) (principal, bool) {
	parts := strings.Split(value, ".")
	if len(parts) != 3 || subtle.ConstantTimeCompare([]byte(parts[2]), []byte(s.mac("rewind ui session", parts[0], parts[1]))) != 1 {
		return principal{}, false
	}
	label, err := base64.RawURLEncoding.DecodeString(parts[0])
	if err != nil {
		return principal{}, false
	}
	who := string(label)
	if who == "" {
		who = "token"
	}
	return principal{who: who, csrf: s.mac("rewind ui csrf", parts[1])}, true
}

// cleanLabel is the label a person gave at sign-in, as the audit trail
// keeps it: printable, at most 64 characters.
func cleanLabel(s string) string {
	s = strings.Map(func(r rune) rune {
		if unicode.IsPrint(r) {
			return r
		}
		return -1
	}, strings.TrimSpace(s))
	if r := []rune(s); len(r) > 64 {
		s = string(r[:64])
	}
	return s
}

// allowed applies the token rule; it answers the request itself when it
// returns false. A request it lets in carries its principal. A write (any
// method but GET and HEAD) without the token is refused with 403, as a
// forbidden write, not asked to sign in.
func (s *Server) allowed(w http.ResponseWriter, r *http.Request) (*http.Request, bool) {
	if s.o.Token == "" {
		if !loopbackHost(r.Host) {
			s.fail(w, r, errorf(http.StatusForbidden, "host %q: this view answers loopback names only (start it with a token to serve other names)", r.Host))
			return r, false
		}
		return r, true
	}
	if strings.HasPrefix(r.URL.Path, "/static/") || r.URL.Path == "/login" {
		return r, true
	}
	if auth := r.Header.Get("Authorization"); auth != "" {
		scheme, tok, _ := strings.Cut(auth, " ")
		if strings.EqualFold(scheme, "Bearer") && subtle.ConstantTimeCompare([]byte(strings.TrimSpace(tok)), []byte(s.o.Token)) == 1 {
			return r.WithContext(context.WithValue(r.Context(), principalKey{}, principal{who: "token", bearer: true})), true
		}
	} else if c, err := r.Cookie(sessionCookie); err == nil {
		if p, ok := s.checkSession(c.Value); ok {
			return r.WithContext(context.WithValue(r.Context(), principalKey{}, p)), true
		}
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		s.fail(w, r, errorf(http.StatusForbidden, "%s needs the token: send Authorization: Bearer TOKEN, or sign in at /login", r.Method))
		return r, false
	}
	w.Header().Set("WWW-Authenticate", `Bearer realm="rewind"`)
	if isAPI(r) {
		s.fail(w, r, errorf(http.StatusUnauthorized, "a bearer token is required (Authorization: Bearer TOKEN)"))
		return r, false
	}
	s.page(w, r, http.StatusUnauthorized, "login.html", "Sign in", map[string]any{"Next": r.URL.RequestURI()})
	return r, false
}

// ownOrigin is this server's origin as the browser sees it: the scheme
// it came over (HTTPS directly or through a trusted proxy) and the Host
// it asked for.
func (s *Server) ownOrigin(r *http.Request) string {
	scheme := "http"
	if s.overHTTPS(r) {
		scheme = "https"
	}
	return scheme + "://" + strings.ToLower(r.Host)
}

// sameOrigin checks where a write comes from: its Origin, or its Referer
// when it has no Origin, must be this server's own origin. A request with
// neither is a program's, not a page's: let in for a bearer client only.
func (s *Server) sameOrigin(r *http.Request, p principal) error {
	from := r.Header.Get("Origin")
	if from == "" {
		if ref := r.Header.Get("Referer"); ref != "" {
			u, err := url.Parse(ref)
			if err != nil || u.Scheme == "" || u.Host == "" {
				return errorf(http.StatusForbidden, "cross-origin write refused: Referer %q is not of this server (%s)", ref, s.ownOrigin(r))
			}
			from = u.Scheme + "://" + u.Host
		}
	}
	switch {
	case from == "" && p.bearer:
		return nil
	case from == "":
		return errorf(http.StatusForbidden, "write refused: the request says neither Origin nor Referer, so it cannot be told from a forged one")
	case !strings.EqualFold(from, s.ownOrigin(r)):
		return errorf(http.StatusForbidden, "cross-origin write refused: Origin %q is not this server (%s)", from, s.ownOrigin(r))
	}
	return nil
}

func (s *Server) loginPage(w http.ResponseWriter, r *http.Request) {
	s.page(w, r, http.StatusOK, "login.html", "Sign in", map[string]any{"Next": localPath(r.URL.Query().Get("next"))})
}

// login takes the token from a form and sets the session cookie: a
// browser cannot send a bearer header when it follows a link.
func (s *Server) login(w http.ResponseWriter, r *http.Request) {
	if s.o.Token == "" {
		http.Redirect(w, r, "/", http.StatusSeeOther)
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, 4096)
	if err := r.ParseForm(); err != nil {
		s.fail(w, r, errorf(http.StatusBadRequest, "bad form: %v", err))
		return
	}
	next := localPath(r.PostForm.Get("next"))
	if err := s.sameOrigin(r, principal{bearer: true}); err != nil {
		s.fail(w, r, err)
		return
	}
	if subtle.ConstantTimeCompare([]byte(r.PostForm.Get("token")), []byte(s.o.Token)) != 1 {
		s.page(w, r, http.StatusUnauthorized, "login.html", "Sign in", map[string]any{"Next": next, "Wrong": true})
		return
	}
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: s.newSession(cleanLabel(r.PostForm.Get("name"))), Path: "/", HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: s.overHTTPS(r)})
	http.Redirect(w, r, next, http.StatusSeeOther)
}

// overHTTPS reports whether the browser reached the view over HTTPS:
// directly (TLS), or through a reverse proxy that says so with
// X-Forwarded-Proto: https, believed only when the request comes from an
// address of Options.TrustedProxies (anyone else could send the header).
// Of a list of values, the last is the one the nearest proxy added.
func (s *Server) overHTTPS(r *http.Request) bool {
	if r.TLS != nil {
		return true
	}
	proto := r.Header.Values("X-Forwarded-Proto")
	if len(proto) == 0 || len(s.o.TrustedProxies) == 0 {
		return false
	}
	last := proto[len(proto)-1]
	if i := strings.LastIndexByte(last, ','); i >= 0 {
		last = last[i+1:]
	}
	if !strings.EqualFold(strings.TrimSpace(last), "https") {
		return false
	}
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		return false
	}
	addr := ap.Addr().Unmap()
	for _, p := range s.o.TrustedProxies {
		if p.Contains(addr) {
			return true
		}
	}
	return false
}

// ParseTrustedProxies reads the values of --trusted-proxy: each a CIDR
// (10.0.0.0/8, fd00::/8) or one address (127.0.0.1).
func ParseTrustedProxies(values []string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, v := range values {
		v = strings.TrimSpace(v)
		if p, err := netip.ParsePrefix(v); err == nil {
			out = append(out, p.Masked())
			continue
		}
		a, err := netip.ParseAddr(v)
		if err != nil {
			return nil, fmt.Errorf("--trusted-proxy %q: want an address or a CIDR (127.0.0.1, 10.0.0.0/8)", v)
		}
		a = a.Unmap()
		out = append(out, netip.PrefixFrom(a, a.BitLen()))
	}
	return out, nil
}

// localPath is next if it is a path of this server, else "/": a login
// never redirects elsewhere.
func localPath(next string) string {
	u, err := url.Parse(next)
	if err != nil || next == "" || !strings.HasPrefix(next, "/") || strings.HasPrefix(next, "//") || strings.HasPrefix(next, "/\\") ||
		u.Scheme != "" || u.Host != "" || next == "/login" {
		return "/"
	}
	return next
}
