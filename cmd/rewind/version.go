package main

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/spf13/cobra"
)

func init() { register(newVersionCmd) }

// versionLine is what `rewind version` and `rewind --version` print: the
// module version and the VCS revision the binary was built from (Go
// stamps both; a binary built outside a checkout has no revision).
func versionLine() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "rewind (no build information) " + runtime.Version()
	}
	mod, version := bi.Main.Path, bi.Main.Version
	if mod == "" {
		mod = strings.TrimSuffix(strings.TrimSuffix(bi.Path, ".test"), "/cmd/rewind")
	}
	if version == "" {
		version = "(devel)"
	}
	var rev, when, modified string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.time":
			when = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				modified = ", modified"
			}
		}
	}
	line := fmt.Sprintf("rewind %s (module %s", version, mod)
	if rev != "" {
		line += ", revision " + rev
		if when != "" {
			line += " of " + when
		}
		line += modified
	} else {
		line += ", no VCS revision"
	}
	return line + ", " + runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH + ")"
}

func newVersionCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the module version and the VCS revision of this binary",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			fmt.Fprintln(g.stdout, versionLine())
			return nil
		},
	}
}
