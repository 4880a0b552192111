package main

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/spf13/cobra"
)

func init() { register(newVersionCmd) }

// versionJSON is what `rewind version --json` prints: the module version
// and the VCS revision the binary was built from (Go stamps both; a binary
// built outside a checkout has no revision: "").
type versionJSON struct {
	Version string `json:"version"` // "(devel)" for a build of a checkout
	Module  string `json:"module"`
	// Revision is the commit, RevisionTime its time (RFC 3339) and
	// Modified whether the checkout had uncommitted changes.
	Revision     string `json:"revision"`
	RevisionTime string `json:"revision_time"`
	Modified     bool   `json:"modified"`
	GoVersion    string `json:"go_version"`
	OS           string `json:"os"`
	Arch         string `json:"arch"`
}

// buildVersion reads the build information of this binary.
func buildVersion() versionJSON {
	v := versionJSON{GoVersion: runtime.Version(), OS: runtime.GOOS, Arch: runtime.GOARCH}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return v
	}
	v.Module, v.Version = bi.Main.Path, bi.Main.Version
	if v.Module == "" {
		v.Module = strings.TrimSuffix(strings.TrimSuffix(bi.Path, ".test"), "/cmd/rewind")
	}
	if v.Version == "" {
		v.Version = "(devel)"
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			v.Revision = s.Value
		case "vcs.time":
			v.RevisionTime = s.Value
		case "vcs.modified":
			v.Modified = s.Value == "true"
		}
	}
	return v
}

// versionLine is what `rewind version` and `rewind --version` print.
func versionLine() string {
	v := buildVersion()
	if v.Module == "" {
		return "rewind (no build information) " + v.GoVersion
	}
	line := fmt.Sprintf("rewind %s (module %s", v.Version, v.Module)
	if v.Revision != "" {
		line += ", revision " + v.Revision
		if v.RevisionTime != "" {
			line += " of " + v.RevisionTime
		}
		if v.Modified {
			line += ", modified"
		}
	} else {
		line += ", no VCS revision"
	}
	return line + ", " + v.GoVersion + " " + v.OS + "/" + v.Arch + ")"
}

func newVersionCmd(g *globals) *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "version",
		Short: "Print the module version and the VCS revision of this binary",
		Long: `Version prints the module version and the VCS revision of this binary.
--json prints them as one JSON object: version, module, revision,
revision_time (RFC 3339), modified (uncommitted changes in the checkout it
was built from), go_version, os and arch; revision and revision_time are
"" for a binary built outside a checkout.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if asJSON {
				return printJSON(g, buildVersion())
			}
			fmt.Fprintln(g.stdout, versionLine())
			return nil
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return c
}
