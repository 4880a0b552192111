package dsl

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// module is rewind's module path, as in go.mod.
const module = "github.com/rewind-dev/rewind"

// TestImportRule keeps dsl a package that decodes, validates and renders:
// it reaches no other package of rewind, directly or through another
// package of rewind (so neither executor, which starts processes, nor store,
// scheduler or lake, which hold state), and it does not import what starts
// processes or talks to the network. The imports are read from the source
// files (not _test.go), so the test needs neither the go command nor the
// network.
func TestImportRule(t *testing.T) {
	forbidden := map[string]bool{"os/exec": true, "net": true, "net/http": true, "database/sql": true, "syscall": true}
	direct := imports(t, ".")
	for _, p := range direct {
		if forbidden[p] {
			t.Errorf("dsl imports %s: running things and talking to the network belong to other packages", p)
		}
	}
	// The closure over rewind's packages, followed through the source tree.
	seen := map[string]bool{}
	queue := []string{module + "/dsl"}
	for len(queue) > 0 {
		pkg := queue[0]
		queue = queue[1:]
		dir := filepath.Join("..", filepath.FromSlash(strings.TrimPrefix(pkg, module+"/")))
		for _, p := range imports(t, dir) {
			if (p == module || strings.HasPrefix(p, module+"/")) && !seen[p] {
				seen[p] = true
				queue = append(queue, p)
			}
		}
	}
	var reached []string
	for p := range seen {
		if p != module+"/dsl" {
			reached = append(reached, p)
		}
	}
	sort.Strings(reached)
	if len(reached) > 0 {
		t.Errorf("dsl reaches %s: dsl decodes, validates and renders; it imports no package of rewind (what runs things or holds state imports dsl, never the other way)", strings.Join(reached, ", "))
	}
}

// imports lists the imports of the non-test Go files in dir.
func imports(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	set := map[string]bool{}
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), filepath.Join(dir, name), nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, spec := range f.Imports {
			p, err := strconv.Unquote(spec.Path.Value)
			if err != nil {
				t.Fatal(err)
			}
			set[p] = true
		}
	}
	var out []string
	for p := range set {
		out = append(out, p)
	}
	sort.Strings(out)
	return out
}
