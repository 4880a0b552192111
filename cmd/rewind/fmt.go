package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/hashicorp/hcl/v2/hclwrite"
	"github.com/spf13/cobra"
)

func init() { register(newFmtCmd) }

func newFmtCmd(g *globals) *cobra.Command {
	var check bool
	cmd := &cobra.Command{
		Use:   "fmt [PATH]",
		Short: "Rewrite pipeline files in the canonical format",
		Long: `fmt rewrites every *.hcl file of PATH (default: the current directory), or
the single file PATH, in the canonical layout (indentation, aligned equals
signs, spacing), as 'terraform fmt' does, and prints the name of each file it
changed. With --check it changes nothing, prints the files that would change
and exits 1 if there are any. A file with syntax errors is left alone: its
diagnostics are printed and fmt exits 2.`,
		Example: `  rewind fmt
  rewind fmt --check examples/events`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			path, err := g.workspace(pathArg(args))
			if err != nil {
				return err
			}
			files, err := hclFiles(path)
			if err != nil {
				return exitWith(exitUsage, "%v", err)
			}
			parsed, diags, changed, err := formatFiles(files, check)
			if err != nil {
				return err
			}
			for _, name := range changed {
				fmt.Fprintln(g.stdout, name)
			}
			if diags.HasErrors() {
				writeDiagnostics(g, parsed, diags)
				return &exitError{code: exitUsage}
			}
			if check && len(changed) > 0 {
				return &exitError{code: exitFailed}
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&check, "check", false, "change nothing; exit 1 if any file is not formatted")
	return cmd
}

// formatFiles formats files in place (with check, changes nothing): the
// files that parsed, the syntax errors, and the files whose format
// changed (or would change).
func formatFiles(files []string, check bool) (parsed map[string]*hcl.File, diags hcl.Diagnostics, changed []string, err error) {
	parsed = map[string]*hcl.File{}
	for _, name := range files {
		src, err := os.ReadFile(name)
		if err != nil {
			return nil, nil, nil, exitWith(exitUsage, "%v", err)
		}
		f, fd := hclsyntax.ParseConfig(src, name, hcl.InitialPos)
		if f != nil {
			parsed[name] = f
		}
		if fd.HasErrors() {
			diags = append(diags, fd...)
			continue
		}
		out := hclwrite.Format(src)
		if bytes.Equal(out, src) {
			continue
		}
		changed = append(changed, name)
		if check {
			continue
		}
		info, err := os.Stat(name)
		if err != nil {
			return nil, nil, nil, exitWith(exitUsage, "%v", err)
		}
		if err := os.WriteFile(name, out, info.Mode().Perm()); err != nil {
			return nil, nil, nil, exitWith(exitUsage, "%v", err)
		}
	}
	return parsed, diags, changed, nil
}

// hclFiles lists the *.hcl files of dir, sorted, or path itself when it is a file.
func hclFiles(path string) ([]string, error) {
	info, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if !info.IsDir() {
		return []string{path}, nil
	}
	entries, err := os.ReadDir(path)
	if err != nil {
		return nil, err
	}
	var files []string
	for _, e := range entries {
		if !e.IsDir() && strings.HasSuffix(e.Name(), ".hcl") && !strings.HasPrefix(e.Name(), ".") {
			files = append(files, filepath.Join(path, e.Name()))
		}
	}
	sort.Strings(files)
	return files, nil
}
