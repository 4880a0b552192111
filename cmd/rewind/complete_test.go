package main

import (
	"io"
	"regexp"
	"testing"

	"github.com/spf13/cobra"
)

// Every command whose arguments name a pipeline, a backfill or a table
// completes them, and so does every --pipeline, --task and --resume flag:
// a new command cannot be left out of the completions table unnoticed.
func TestNamesAreCompleted(t *testing.T) {
	root := newRoot(&globals{stdout: io.Discard, stderr: io.Discard})
	names := regexp.MustCompile(`^\S+ (\[?)(PIPELINE|ID|TABLE)\b`)
	checked := 0
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		for _, sub := range c.Commands() {
			walk(sub)
		}
		if names.MatchString(c.Use) {
			checked++
			if c.ValidArgsFunction == nil {
				t.Errorf("%s (%q) completes no argument", c.CommandPath(), c.Use)
			}
		}
		for _, flag := range []string{"pipeline", "task", "resume"} {
			if c.Flags().Lookup(flag) == nil {
				continue
			}
			checked++
			if _, ok := c.GetFlagCompletionFunc(flag); !ok {
				t.Errorf("%s --%s is not completed", c.CommandPath(), flag)
			}
		}
	}
	walk(root)
	if checked < 20 {
		t.Errorf("%d arguments and flags checked; want the whole tree (20 or more)", checked)
	}
}
