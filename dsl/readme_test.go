package dsl

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The HCL reference in the README is a workspace that validates.
func TestReadmeReferenceValidates(t *testing.T) {
	b, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(b), "## HCL reference")
	if !ok {
		t.Fatal("README has no HCL reference")
	}
	_, rest, ok = strings.Cut(rest, "```hcl\n")
	block, _, ok2 := strings.Cut(rest, "```")
	if !ok || !ok2 {
		t.Fatal("the HCL reference has no hcl block")
	}
	dir := t.TempDir()
	// The reference's scripts live in scripts/, its extract task's workdir,
	// which validation checks exists.
	if err := os.Mkdir(filepath.Join(dir, "scripts"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "reference.hcl"), []byte(block), 0o644); err != nil {
		t.Fatal(err)
	}
	// Its sensitive variable has no default: it comes from the environment.
	ws, diags := Load(dir, LoadOptions{Env: []string{"REWIND_VAR_api_token=t0ken-of-the-reference"}})
	if len(diags) > 0 {
		t.Fatalf("README reference: %s", diags.Error())
	}
	p := ws.Pipeline("events")
	if p == nil || p.Task("load_orders") == nil || p.Task("summarize") == nil {
		t.Fatalf("README reference: pipeline events with load_orders and summarize expected")
	}
}
