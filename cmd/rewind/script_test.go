package main

import (
	"os"
	"testing"

	"github.com/rogpeppe/go-internal/testscript"
)

func TestMain(m *testing.M) {
	// The end-to-end tests run this test binary as the rewind command.
	if os.Getenv("REWIND_TEST_AS_MAIN") == "1" {
		os.Exit(rewindMain(os.Args[1:], os.Stdout, os.Stderr))
	}
	testscript.Main(m, map[string]func(){
		"rewind": func() { os.Exit(rewindMain(os.Args[1:], os.Stdout, os.Stderr)) },
	})
}

// TestScripts runs the CLI end to end: each testdata/script/*.txtar file is a
// user session with its pipeline files inline.
func TestScripts(t *testing.T) {
	testscript.Run(t, testscript.Params{
		Dir:                 "../../testdata/script",
		RequireExplicitExec: true,
		Setup: func(env *testscript.Env) error {
			env.Setenv("REWIND_STATE", "")
			return nil
		},
	})
}
