package main

import (
	"fmt"
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
			dsn, explicit, err := g.stateDSN()
			if err != nil {
				return err
			}
			abs, err := filepath.Abs(g.wsDir())
			if err != nil {
				return exitWith(exitUsage, "%v", err)
			}
			target, err := filepath.Abs(path)
			if err != nil {
				return exitWith(exitUsage, "%v", err)
			}
			bin, err := os.Executable()
			if err != nil {
				bin = "rewind"
			}
			state := ""
			if explicit {
				if p, ok := store.SQLitePath(dsn); ok {
					if a, err := filepath.Abs(p); err == nil {
						dsn = "sqlite:" + a
					}
				}
				state = " --state " + dsn
			}
			home, err := filepath.Abs(homeDir(g))
			if err != nil {
				return exitWith(exitUsage, "%v", err)
			}
			lines, ended := daemon.CronLinesAt(w, now)
			fmt.Fprintf(g.stdout, "# rewind: the nightly runs of %s. Each entry has its own CRON_TZ line, which\n", abs)
			fmt.Fprintln(g.stdout, "# also applies to every entry below it: keep these lines last in your crontab,")
			fmt.Fprintf(g.stdout, "#   (crontab -l 2>/dev/null; rewind cron %s) | crontab -\n", abs)
			fmt.Fprintln(g.stdout, "# and give any entry you add after them a CRON_TZ line of its own.")
			if len(ended) > 0 {
				fmt.Fprintf(g.stdout, "# ended (end_date passed, nothing left to run): %s\n", strings.Join(ended, ", "))
			}
			for _, l := range lines {
				cmdline := fmt.Sprintf("%s run --quiet --wait%s", bin, state)
				for _, p := range l.Pipelines {
					cmdline += " --pipeline " + p
				}
				cmdline += " " + target
				fmt.Fprintf(g.stdout, "CRON_TZ=%s\n", l.Timezone)
				fmt.Fprintf(g.stdout, "%s cd %s && %s >> %s 2>&1\n", l.Schedule, abs, cmdline, filepath.Join(home, "cron.log"))
			}
			return nil
		},
	}
	ws.add(c)
	c.Flags().StringVar(&nowS, "now", "", "the clock that decides which pipelines have ended (RFC 3339)")
	return c
}
