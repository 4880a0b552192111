package web_test

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rewind-dev/rewind/backfill"
	"github.com/rewind-dev/rewind/dsl"
	"github.com/rewind-dev/rewind/scheduler"
	"github.com/rewind-dev/rewind/store"
	"github.com/rewind-dev/rewind/web"
)

// env is one workspace and its SQLite state in a temporary directory,
// as the scheduler's tests make them.
type env struct {
	t     *testing.T
	dir   string
	st    store.Store
	ws    *dsl.Workspace
	home  string
	state string
}

func newEnv(t *testing.T, hcl string, environ ...string) *env {
	t.Helper()
	return newEnvOn(t, "", hcl, environ...)
}

// newEnvOn is newEnv on the state dsn ("" for the workspace's SQLite file).
func newEnvOn(t *testing.T, dsn, hcl string, environ ...string) *env {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "main.hcl"), []byte(hcl), 0o644); err != nil {
		t.Fatal(err)
	}
	ws, diags := dsl.Load(dir, dsl.LoadOptions{Env: environ})
	if diags.HasErrors() {
		t.Fatalf("load: %s", diags.Error())
	}
	state := dsn
	if state == "" {
		state = "sqlite:" + filepath.Join(dir, ".rewind", "state.db")
	}
	st, err := store.Open(context.Background(), state)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return &env{t: t, dir: dir, st: st, ws: ws, home: filepath.Join(dir, ".rewind"), state: state}
}

func (e *env) run(o scheduler.Options) *scheduler.Summary {
	e.t.Helper()
	o.Store, o.Workspace, o.Home = e.st, e.ws, e.home
	sum, err := scheduler.Run(context.Background(), o)
	if err != nil {
		e.t.Fatalf("run: %v", err)
	}
	return sum
}

func (e *env) plan(pp backfill.PlanParams) *backfill.Plan {
	e.t.Helper()
	pp.Workspace = e.ws
	plan, err := backfill.MakePlan(context.Background(), e.st, pp)
	if err != nil {
		e.t.Fatalf("plan: %v", err)
	}
	return plan
}

func (e *env) apply(o backfill.ApplyOptions) (*backfill.BackfillResult, error) {
	e.t.Helper()
	o.Store, o.Workspace, o.Home = e.st, e.ws, e.home
	return backfill.ApplyBackfill(context.Background(), o)
}

func (e *env) write(name, text string) {
	e.t.Helper()
	if err := os.WriteFile(filepath.Join(e.dir, name), []byte(text), 0o644); err != nil {
		e.t.Fatal(err)
	}
}

// server is the view over the env's state, on an httptest server.
func (e *env) server(token string) *httptest.Server {
	e.t.Helper()
	s, err := web.New(web.Options{State: e.st, Workspace: e.ws, Home: e.home, Token: token})
	if err != nil {
		e.t.Fatal(err)
	}
	srv := httptest.NewServer(s)
	e.t.Cleanup(func() {
		srv.Close()
		s.Close()
	})
	return srv
}

func utc(s string) time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t
}

// get fetches path; header pairs are added to the request.
func get(t *testing.T, srv *httptest.Server, path string, header ...string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, srv.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		if header[i] == "Host" {
			req.Host = header[i+1]
			continue
		}
		req.Header.Set(header[i], header[i+1])
	}
	res, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return res, string(b)
}

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
	buildDir  string
)

// rewindBinary builds cmd/rewind once for the package's tests.
func rewindBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		buildDir, buildErr = os.MkdirTemp("", "rewind-web-test-")
		if buildErr != nil {
			return
		}
		binPath = filepath.Join(buildDir, "rewind")
		out, err := exec.Command("go", "build", "-o", binPath, "github.com/rewind-dev/rewind/cmd/rewind").CombinedOutput()
		if err != nil {
			buildErr = &buildError{err: err, out: string(out)}
		}
	})
	if buildErr != nil {
		t.Fatalf("build rewind: %v", buildErr)
	}
	return binPath
}

type buildError struct {
	err error
	out string
}

func (e *buildError) Error() string { return e.err.Error() + "\n" + e.out }

func TestMain(m *testing.M) {
	code := m.Run()
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

// cli runs the rewind binary in dir on the state (as $REWIND_STATE) and
// returns its stdout, stderr and exit code.
func cli(t *testing.T, dir, state string, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(rewindBinary(t), args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "REWIND_STATE="+state, "REWIND_UI_TOKEN=")
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return stdout.String(), stderr.String(), code
}

var listening = regexp.MustCompile(`on (http://127\.0\.0\.1:\d+/)`)

// startUI starts `rewind ui` on a free loopback port over the env's
// workspace and state and returns its base URL; the test's cleanup stops
// it with SIGTERM and checks that it stopped cleanly.
func (e *env) startUI(args ...string) string {
	e.t.Helper()
	u, _ := e.startUIWith("", args...)
	return u
}

// startUIWith is startUI with the token REWIND_UI_TOKEN holds; it also
// returns the process.
func (e *env) startUIWith(token string, args ...string) (string, *exec.Cmd) {
	e.t.Helper()
	all := append([]string{"ui", "--listen", "127.0.0.1:0", "--state", e.state}, args...)
	all = append(all, e.dir)
	cmd := exec.Command(rewindBinary(e.t), all...)
	cmd.Dir = e.dir
	cmd.Env = append(os.Environ(), "REWIND_STATE=", "REWIND_UI_TOKEN="+token)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		e.t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		e.t.Fatal(err)
	}
	lines := make(chan string, 1)
	var rest strings.Builder
	var mu sync.Mutex
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(stderr)
		sent := false
		for sc.Scan() {
			if m := listening.FindStringSubmatch(sc.Text()); m != nil && !sent {
				lines <- m[1]
				sent = true
				continue
			}
			mu.Lock()
			rest.WriteString(sc.Text() + "\n")
			mu.Unlock()
		}
	}()
	e.t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		werr := make(chan error, 1)
		go func() { <-done; werr <- cmd.Wait() }()
		select {
		case err := <-werr:
			if err != nil {
				mu.Lock()
				e.t.Errorf("rewind ui did not stop cleanly on SIGTERM: %v\n%s", err, rest.String())
				mu.Unlock()
			}
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			e.t.Errorf("rewind ui still running 10 s after SIGTERM")
		}
	})
	select {
	case u := <-lines:
		return u, cmd
	case <-done:
		mu.Lock()
		defer mu.Unlock()
		e.t.Fatalf("rewind ui exited before listening:\n%s", rest.String())
	case <-time.After(60 * time.Second):
		e.t.Fatal("rewind ui did not say where it listens within 60 s")
	}
	return "", nil
}
