package web_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rewind-dev/rewind/web"
)

// exampleProbesHCL is added to the example workspace: a daily pipeline
// and a minutely one whose skew probes append a line to probes.log each
// time they run.
const exampleProbesHCL = `
pool "large" { slots = 2 }
pipeline "probed" {
  schedule   = "@daily"
  start_date = "2025-07-01"
  skew {
    probe      = ["sh", "-c", "echo $0 >> probes.log; if [ $0 = 2025-07-04 ]; then echo 900; else echo 100; fi", run.ds]
    hot_factor = 3
    pool       = "large"
  }
  task "t" { command = "echo $REWIND_DS in $REWIND_POOL" }
}
pipeline "minutely" {
  schedule   = "* * * * *"
  start_date = "2025-08-01"  # after the runs' clock: no run, no probe
  catchup    = false
  skew {
    probe = ["sh", "-c", "echo $0 >> probes.log; echo 1", run.ds]
    pool  = "large"
  }
  task "t" { command = "true" }
}
`

// copyTree copies the regular files of src into dst.
func copyTree(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// childrenOf lists the processes whose parent is pid.
func childrenOf(pid int) []string {
	var out []string
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces and parentheses.
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) > 1 && f[1] == strconv.Itoa(pid) {
			out = append(out, e.Name()+" "+s[:i+1])
		}
	}
	return out
}

// The web view starts no process (issue 21, defect 3), tested from
// outside: the real `rewind ui` on the example workspace plus pipelines
// with probes, 50 requests to every endpoint, and no probe ran and the ui
// had no child at any time. Each endpoint's latency is logged (go test -v):
// the README's figures come from here; no threshold, machines are noisy.
func TestUIStartsNoProcess(t *testing.T) {
	dir := t.TempDir()
	copyTree(t, filepath.Join("..", "examples", "daily_revenue"), dir)
	if err := os.WriteFile(filepath.Join(dir, "probes.hcl"), []byte(exampleProbesHCL), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, ".rewind"), 0o700); err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, dir: dir, home: filepath.Join(dir, ".rewind"), state: "sqlite:" + filepath.Join(dir, ".rewind", "state.db")}
	if out, errOut, code := cli(t, dir, e.state, "run", "--catchup", "--now", "2025-07-10T00:00:00Z", "--pipeline", "daily_revenue", "--pipeline", "probed", "--quiet", dir); code != 0 {
		t.Fatalf("rewind run: exit %d\n%s%s", code, out, errOut)
	}
	if out, errOut, code := cli(t, dir, e.state, "backfill", "apply", "probed", "--start", "2025-07-02", "--end", "2025-07-03", "--reprocess", "completed", "--now", "2025-07-10T00:00:00Z", "--quiet", "--path", dir); code != 0 {
		t.Fatalf("rewind backfill apply: exit %d\n%s%s", code, out, errOut)
	}
	probes := probeCount(t, dir)
	if probes == 0 {
		t.Fatal("the runs measured no probe")
	}

	const token = "s3cret-token"
	base, cmd := e.startUIWith(token)
	pid := cmd.Process.Pid
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	do := func(method, path string, form url.Values) (int, string, time.Duration) {
		t.Helper()
		var body io.Reader
		if form != nil {
			body = strings.NewReader(form.Encode())
		}
		req, err := http.NewRequest(method, strings.TrimSuffix(base, "/")+path, body)
		if err != nil {
			t.Fatal(err)
		}
		if form != nil {
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		} else {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		began := time.Now()
		res, err := client.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		return res.StatusCode, string(b), time.Since(began)
	}
	getJSON := func(path string, v any) {
		t.Helper()
		code, body, _ := do("GET", path, nil)
		if code != 200 {
			t.Fatalf("GET %s: %d %s", path, code, body)
		}
		if err := json.Unmarshal([]byte(body), v); err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
	}
	// The ids the endpoints need.
	var runs []web.RunJSON
	getJSON("/api/runs?pipeline=probed", &runs)
	var grid web.GridJSON
	getJSON("/api/grid?pipeline=probed", &grid)
	if len(grid.Runs) == 0 || len(runs) == 0 {
		t.Fatal("no runs of probed")
	}
	runID := strconv.FormatInt(grid.Runs[len(grid.Runs)-1].ID, 10)
	var cell web.CellJSON
	getJSON("/api/cell?pipeline=probed&run="+runID+"&task=t", &cell)
	if len(cell.Attempts) == 0 {
		t.Fatal("the cell has no attempt")
	}
	var bfs []map[string]any
	getJSON("/api/backfills", &bfs)
	if len(bfs) == 0 {
		t.Fatal("no backfill")
	}
	bid := fmt.Sprint(bfs[0]["id"])

	// Every route of the view's mux (web/server.go), GET and the POST
	// that is not a write (the sign-in form), with the code each answers.
	type endpoint struct {
		method, path string
		form         url.Values
		code         int
	}
	endpoints := []endpoint{
		{"GET", "/", nil, 200},
		{"GET", "/pipelines/daily_revenue", nil, 200},
		{"GET", "/pipelines/probed/runs/" + runID, nil, 200},
		{"GET", "/backfills/" + url.PathEscape(bid), nil, 200},
		{"GET", "/login", nil, 200},
		{"POST", "/login", url.Values{"token": {token}, "next": {"/"}}, 303},
		{"GET", "/static/app.js", nil, 200},
		{"GET", "/static/style.css", nil, 200},
		{"GET", "/api/pipelines", nil, 200},
		{"GET", "/api/runs", nil, 200},
		{"GET", "/api/grid?pipeline=daily_revenue", nil, 200},
		{"GET", "/api/cell?pipeline=probed&run=" + runID + "&task=t", nil, 200},
		{"GET", "/api/dates?pipeline=probed", nil, 200},
		{"GET", "/api/dates?pipeline=daily_revenue", nil, 200},
		{"GET", "/api/dates?pipeline=minutely&start=2025-08-01T00:00:00Z&end=2025-08-01T16:39:00Z", nil, 200}, // 1,000 dates
		{"GET", "/api/dates?pipeline=minutely", nil, 400},                                                     // start_date .. the clock
		{"GET", "/api/dates?pipeline=minutely&start=2025-08-01&end=2025-08-01&now=2125-01-01", nil, 400},
		{"GET", "/api/backfills", nil, 200},
		{"GET", "/api/scheduler", nil, 200},
		{"GET", "/api/backfills/" + url.PathEscape(bid), nil, 200},
		{"GET", "/api/backfills/" + url.PathEscape(bid) + "/status", nil, 200},
		{"GET", cell.Attempts[0].Log, nil, 200},
		{"GET", "/metrics", nil, 200},
		{"GET", "/nowhere", nil, 404},
	}

	// Watch the ui's children while the requests run.
	var stop atomic.Bool
	var seen sync.Map
	watched := make(chan int)
	go func() {
		scans := 0
		for !stop.Load() {
			for _, c := range childrenOf(pid) {
				seen.Store(c, true)
			}
			scans++
			time.Sleep(time.Millisecond)
		}
		watched <- scans
	}()
	const n = 50
	var report strings.Builder
	for _, ep := range endpoints {
		var lat []time.Duration
		for range n {
			code, body, d := do(ep.method, ep.path, ep.form)
			if code != ep.code {
				t.Fatalf("%s %s: %d; want %d: %s", ep.method, ep.path, code, ep.code, body)
			}
			lat = append(lat, d)
		}
		slices.Sort(lat)
		fmt.Fprintf(&report, "%-4s %-90s median %7.2f ms  max %7.2f ms\n", ep.method, ep.path,
			float64(lat[n/2].Microseconds())/1000, float64(lat[n-1].Microseconds())/1000)
	}
	time.Sleep(200 * time.Millisecond) // a process started by the last request would show by now
	stop.Store(true)
	scans := <-watched
	t.Logf("%d requests to each of %d endpoints, %d scans of /proc:\n%s", n, len(endpoints), scans, report.String())
	seen.Range(func(k, _ any) bool {
		t.Errorf("rewind ui started a process: %s", k)
		return true
	})
	if c := childrenOf(pid); len(c) > 0 {
		t.Errorf("rewind ui has children after the requests: %v", c)
	}
	if got := probeCount(t, dir); got != probes {
		t.Errorf("the view ran %d probes", got-probes)
	}
}
