package dsl

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"

	// Timezones must resolve the same way on every machine, with or without
	// a system zoneinfo database.
	_ "time/tzdata"
)

// LoadOptions are the values that come from outside the HCL files.
type LoadOptions struct {
	// Vars are --var name=value assignments, converted to each variable's type.
	Vars map[string]string
	// Env is the process environment (os.Environ()); REWIND_VAR_name sets
	// variable name when Vars does not.
	Env []string
}

// Load reads the workspace at path: every *.hcl file of the directory (not
// recursively), or just that file when path names a .hcl file. With error
// diagnostics the returned Workspace may be partial, but it is never nil and
// its Files are set, so that the caller can print the diagnostics with their
// source snippets.
func Load(path string, opts LoadOptions) (*Workspace, hcl.Diagnostics) {
	ws := &Workspace{
		Dir:      path,
		Files:    map[string]*hcl.File{},
		Pools:    map[string]*Pool{},
		Limits:   map[string]*Limit{},
		Catalogs: map[string]*Catalog{},
	}
	l := &loader{opts: opts, ws: ws}
	files := l.findFiles(path)
	if !l.diags.HasErrors() && len(files) == 0 {
		l.diags = append(l.diags, &hcl.Diagnostic{
			Severity: hcl.DiagError,
			Summary:  "No pipeline files",
			Detail:   fmt.Sprintf("The directory %s holds no *.hcl files.", path),
		})
	}
	bodies := l.parseFiles(files)
	if l.diags.HasErrors() {
		ws.Pools[DefaultPoolName] = newPool(DefaultPoolName)
		ws.Catalogs[DefaultCatalogName] = implicitCatalog(ws.Dir)
		return ws, sortDiagnostics(l.diags)
	}
	l.decode(bodies)
	ws.secrets.redactDiagnostics(l.diags)
	return ws, sortDiagnostics(dedupe(l.diags))
}

// sortDiagnostics orders diagnostics as a reader meets them: those without
// a position first, then by file and position.
func sortDiagnostics(diags hcl.Diagnostics) hcl.Diagnostics {
	sort.SliceStable(diags, func(i, j int) bool {
		a, b := diags[i].Subject, diags[j].Subject
		switch {
		case a == nil || b == nil:
			return a == nil && b != nil
		case a.Filename != b.Filename:
			return a.Filename < b.Filename
		default:
			return a.Start.Byte < b.Start.Byte
		}
	})
	return diags
}

// WriteDiagnostics prints diags as text with source snippets. Each summary
// is prefixed by the subject's position (file.hcl:LINE,COL-COL) so that the
// location is visible without colour. width 0 disables word wrapping.
func WriteDiagnostics(w io.Writer, files map[string]*hcl.File, diags hcl.Diagnostics, color bool, width uint) {
	shownN := 0
	for i, d := range diags {
		if d == nil {
			continue
		}
		if shownN == MaxDiagnostics {
			fmt.Fprintf(w, "\n... and %d more diagnostics, not shown (the first %d are above)\n", len(diags)-i, MaxDiagnostics)
			return
		}
		shownN++
		shown := *d
		if d.Subject != nil {
			shown.Summary = d.Subject.String() + ": " + d.Summary
		}
		// A failed write to the terminal leaves nothing better to report it to.
		_ = hcl.NewDiagnosticTextWriter(w, snippetFiles(files, d), width, color).WriteDiagnostic(&shown)
	}
}

type loader struct {
	opts  LoadOptions
	ws    *Workspace
	diags hcl.Diagnostics

	vars   map[string]*variable
	locals map[string]*local
	ctx    *hcl.EvalContext // functions, var.*, local.*

	outputs []*outputDecl // every output with a valid table, for checkOutputTables
}

func (l *loader) errorf(subject hcl.Range, summary, detail string, args ...any) {
	l.diags = append(l.diags, &hcl.Diagnostic{
		Severity: hcl.DiagError,
		Summary:  summary,
		Detail:   fmt.Sprintf(detail, args...),
		Subject:  subject.Ptr(),
	})
}

// cannotRead reports a workspace that cannot be read (no file to point at).
func (l *loader) cannotRead(err error) {
	l.diags = append(l.diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: "Cannot read workspace", Detail: err.Error()})
}

func (l *loader) findFiles(path string) []string {
	info, err := os.Stat(path)
	if err != nil {
		l.cannotRead(err)
		return nil
	}
	if !info.IsDir() {
		l.ws.Dir = filepath.Dir(path)
		return []string{path}
	}
	entries, err := os.ReadDir(path)
	if err != nil {
		l.cannotRead(err)
		return nil
	}
	var files []string
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".hcl") || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		files = append(files, filepath.Join(path, e.Name()))
	}
	sort.Strings(files)
	return files
}

func (l *loader) parseFiles(files []string) []hcl.Body {
	var bodies []hcl.Body
	for _, name := range files {
		src, diag := readSource(name)
		if diag != nil {
			l.diags = append(l.diags, diag)
			continue
		}
		f, diags := hclsyntax.ParseConfig(src, name, hcl.InitialPos)
		l.diags = append(l.diags, diags...)
		if f == nil {
			f = &hcl.File{Body: hcl.EmptyBody(), Bytes: src}
		}
		l.ws.Files[name] = f
		bodies = append(bodies, f.Body)
	}
	return bodies
}

var rootSchema = &hcl.BodySchema{
	Blocks: []hcl.BlockHeaderSchema{
		{Type: "pool", LabelNames: []string{"name"}},
		{Type: "limit", LabelNames: []string{"name"}},
		{Type: "pipeline", LabelNames: []string{"name"}},
		{Type: "variable", LabelNames: []string{"name"}},
		{Type: "locals"},
		{Type: "notify", LabelNames: []string{"name"}},
		{Type: "catalog", LabelNames: []string{"name"}},
		{Type: "environment"},
	},
}

func (l *loader) decode(bodies []hcl.Body) {
	var pools, limits, pipelines, variables, locals, notifies, catalogs, environments []*hcl.Block
	for _, body := range bodies {
		content, diags := body.Content(rootSchema)
		l.diags = append(l.diags, diags...)
		for _, b := range content.Blocks {
			switch b.Type {
			case "pool":
				pools = append(pools, b)
			case "limit":
				limits = append(limits, b)
			case "pipeline":
				pipelines = append(pipelines, b)
			case "variable":
				variables = append(variables, b)
			case "locals":
				locals = append(locals, b)
			case "notify":
				notifies = append(notifies, b)
			case "catalog":
				catalogs = append(catalogs, b)
			case "environment":
				environments = append(environments, b)
			}
		}
	}

	l.decodeVariables(variables)
	l.decodeLocals(locals)
	l.ws.secrets = l.collectSecrets()
	l.ctx = &hcl.EvalContext{
		Functions: functions(),
		Variables: map[string]cty.Value{
			"var":   l.varValues(),
			"local": l.localValues(),
		},
	}
	l.decodeEnvironment(environments)
	l.decodePools(pools)
	l.decodeLimits(limits)
	l.decodeCatalogs(catalogs)
	l.decodePipelines(pipelines)
	l.checkOutputTables()
	l.decodeNotifies(notifies)
	l.resolveNotify()
}

// dedupe drops repeated diagnostics: an expression evaluated once per
// for_each instance reports the same problem once.
func dedupe(diags hcl.Diagnostics) hcl.Diagnostics {
	seen := map[string]bool{}
	var out hcl.Diagnostics
	for _, d := range diags {
		key := fmt.Sprintf("%d\x00%s\x00%s", d.Severity, d.Summary, d.Detail)
		if d.Subject != nil {
			key += "\x00" + d.Subject.String()
		}
		if seen[key] {
			continue
		}
		seen[key] = true
		out = append(out, d)
	}
	return out
}

// validName reports whether name can name a pool, pipeline, task or variable.
func validName(name string) bool {
	if name == "" || !hclsyntax.ValidIdentifier(name) {
		return false
	}
	for _, r := range name {
		if !(r == '_' || r == '-' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z') {
			return false
		}
	}
	return true
}

// MaxNameLength bounds pipeline, task and pool names (for_each instances
// included): they name directories and files of the state's logs and run
// directories, and a file name holds at most 255 bytes.
const MaxNameLength = 128

func (l *loader) checkName(kind, name string, b *hcl.Block) bool {
	r := b.DefRange
	if len(b.LabelRanges) > 0 {
		r = b.LabelRanges[0]
	}
	if len(name) > MaxNameLength {
		l.errorf(r, "Name too long", "The %s name is %d characters long; at most %d are allowed (names become directory and file names of logs and run directories).", kind, len(name), MaxNameLength)
		return false
	}
	if validName(name) {
		return true
	}
	l.errorf(r, "Invalid "+kind+" name", "%q is not a valid %s name: use letters, digits, underscores and dashes, starting with a letter or underscore.", name, kind)
	return false
}

func sortedNames[T any](m map[string]T) []string {
	names := make([]string, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}
