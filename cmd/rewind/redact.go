package main

import (
	"io"
	"os"

	"github.com/rewind-dev/rewind/dsl"
	"github.com/rewind-dev/rewind/web"
)

// redactWriter scrubs the plain text of the workspace's sensitive values
// from what a command prints (a second line of defence: the values are kept
// out of text by construction, see dsl/sensitive.go). Each Write is
// scrubbed on its own: rewind writes whole lines and whole JSON documents.
type redactWriter struct {
	w  io.Writer
	ws *dsl.Workspace
}

func (r *redactWriter) Write(p []byte) (int, error) {
	if _, err := io.WriteString(r.w, r.ws.Redact(string(p))); err != nil {
		return 0, err
	}
	return len(p), nil
}

// redactOutput makes g's stdout and stderr (and so the log lines written to
// g.stderr) scrub the sensitive values of ws, once it has any.
func redactOutput(g *globals, ws *dsl.Workspace) {
	if !ws.HasSecrets() {
		return
	}
	if _, done := g.stdout.(*redactWriter); !done {
		g.stdout = &redactWriter{w: g.stdout, ws: ws}
	}
	if _, done := g.stderr.(*redactWriter); !done {
		g.stderr = &redactWriter{w: g.stderr, ws: ws}
	}
}

// osFile is the file under w (through a redactWriter), for terminal checks.
func osFile(w io.Writer) (*os.File, bool) {
	if r, ok := w.(*redactWriter); ok {
		w = r.w
	}
	f, ok := w.(*os.File)
	return f, ok
}

// printJSON prints v as every --json does (web.EncodeJSON), with the
// workspace's sensitive values redacted in v before it is encoded: the
// redactWriter, which sees the encoded text, would miss a secret that JSON
// escapes (one with ", \, <, > or & in it).
func printJSON(g *globals, v any) error {
	if r, ok := g.stdout.(*redactWriter); ok {
		v = r.ws.Redacted(v)
	}
	return web.EncodeJSON(g.stdout, v)
}
