package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/rewind-dev/rewind/daemon"
	"github.com/rewind-dev/rewind/store"
)

func init() { register(newCronCmd) }

func newCronCmd(g *globals) *cobra.Command {
	var (
		ws   workspaceFlags
		nowS string
	)
	c := &cobra.Command{
		Use:   "cron [PATH]",
		Short: "Print the crontab lines that run the pipelines on schedule",
		Long: `Cron prints crontab lines that call 'rewind run' when intervals of the
pipelines in PATH become due: one line per distinct schedule and timezone,
each preceded by its own CRON_TZ line (CRON_TZ=UTC included), since cron
applies a CRON_TZ line to every entry below it. Pipelines whose end_date has
passed (no interval left to become due) get no line. Paths are absolute,
and --wait makes a line that overlaps a long catchup wait for it instead of
failing.

Install them at the end of your crontab, after your other entries:

  (crontab -l 2>/dev/null; rewind cron PATH) | crontab -

The last CRON_TZ printed stays in force for any entry added below it: give
such an entry a CRON_TZ line of its own (or keep rewind's lines in a
crontab of their own, e.g. of a dedicated user).`,
		Example: "  (crontab -l 2>/dev/null; rewind cron examples/daily_revenue) | crontab -",
		Args:    cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			path, err := g.workspace(pathArg(args))
			if err != nil {
				return err
			}
			now := time.Now()
			if nowS != "" {
				if now, err = parseNow(nowS); err != nil {
					return err
				}
			}
			w, err := ws.load(g, path)
			if err != nil {
				return err
			}
			inv, err := cronInvocationOf(g, path)
			if err != nil {
				return err
			}
			lines, ended := daemon.CronLinesAt(w, now)
			printCrontab(g.stdout, inv, lines, ended)
			return nil
		},
	}
	ws.add(c)
	c.Flags().StringVar(&nowS, "now", "", "the clock that decides which pipelines have ended (RFC 3339)")
	return c
}

// cronInvocation is how a crontab line calls rewind: from the workspace's
// directory, with absolute paths.
type cronInvocation struct {
	dir    string // the workspace's directory
	target string // the PATH run is given
	bin    string // this rewind
	state  string // " --state DSN" when the state was named, else ""
	log    string // where the line appends its output
}

// cronInvocationOf resolves the paths of the crontab lines of the
// workspace at path.
func cronInvocationOf(g *globals, path string) (cronInvocation, error) {
	var inv cronInvocation
	dsn, explicit, err := g.stateDSN()
	if err != nil {
		return inv, err
	}
	if inv.dir, err = filepath.Abs(g.wsDir()); err != nil {
		return inv, exitWith(exitUsage, "%v", err)
	}
	if inv.target, err = filepath.Abs(path); err != nil {
		return inv, exitWith(exitUsage, "%v", err)
	}
	if inv.bin, err = os.Executable(); err != nil {
		inv.bin = "rewind"
	}
	if explicit {
		if p, ok := store.SQLitePath(dsn); ok {
			if a, err := filepath.Abs(p); err == nil {
				dsn = "sqlite:" + a
			}
		}
		inv.state = " --state " + dsn
	}
	home, err := filepath.Abs(homeDir(g))
	if err != nil {
		return inv, exitWith(exitUsage, "%v", err)
	}
	inv.log = filepath.Join(home, "cron.log")
	return inv, nil
}

// printCrontab prints the crontab: how to install it, the pipelines that
// ended, then each line under its own CRON_TZ.
func printCrontab(w io.Writer, inv cronInvocation, lines []daemon.CronLine, ended []string) {
	fmt.Fprintf(w, "# rewind: the nightly runs of %s. Each entry has its own CRON_TZ line, which\n", inv.dir)
	fmt.Fprintln(w, "# also applies to every entry below it: keep these lines last in your crontab,")
	fmt.Fprintf(w, "#   (crontab -l 2>/dev/null; rewind cron %s) | crontab -\n", inv.dir)
	fmt.Fprintln(w, "# and give any entry you add after them a CRON_TZ line of its own.")
	if len(ended) > 0 {
		fmt.Fprintf(w, "# ended (end_date passed, nothing left to run): %s\n", strings.Join(ended, ", "))
	}
	for _, l := range lines {
		cmdline := fmt.Sprintf("%s run --quiet --wait%s", inv.bin, inv.state)
		for _, p := range l.Pipelines {
			cmdline += " --pipeline " + p
		}
		cmdline += " " + inv.target
		fmt.Fprintf(w, "CRON_TZ=%s\n", l.Timezone)
		fmt.Fprintf(w, "%s cd %s && %s >> %s 2>&1\n", l.Schedule, inv.dir, cmdline, inv.log)
	}
}
