package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/rewind-dev/rewind/scheduler"
)

func init() { register(newCronCmd) }

func newCronCmd(g *globals) *cobra.Command {
	var ws workspaceFlags
	c := &cobra.Command{
		Use:   "cron [PATH]",
		Short: "Print the crontab lines that run the pipelines on schedule",
		Long: `Cron prints crontab lines that call 'rewind run' when intervals of the
pipelines in PATH become due: one line per distinct schedule and timezone,
with CRON_TZ for a timezone other than UTC. Paths are absolute, and --wait
makes a line that overlaps a long catchup wait for it instead of failing.
Install them with 'rewind cron PATH | crontab -' (or append to your crontab).`,
		Example: "  rewind cron examples/daily_revenue >> my.crontab",
		Args:    cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			path := pathArg(args)
			w, err := ws.load(g, path)
			if err != nil {
				return err
			}
			abs, err := filepath.Abs(path)
			if err != nil {
				return exitWith(exitUsage, "%v", err)
			}
			bin, err := os.Executable()
			if err != nil {
				bin = "rewind"
			}
			cwd, _ := os.Getwd()
			state := g.state
			if state == "" {
				state = os.Getenv("REWIND_STATE")
			}
			if state == "" {
				state = "sqlite:" + filepath.Join(cwd, ".rewind", "state.db")
			}
			for _, l := range scheduler.CronLines(w) {
				cmdline := fmt.Sprintf("%s run --quiet --wait --state %s", bin, state)
				for _, p := range l.Pipelines {
					cmdline += " --pipeline " + p
				}
				cmdline += " " + abs
				if l.Timezone != "UTC" {
					fmt.Fprintf(g.stdout, "CRON_TZ=%s\n", l.Timezone)
				}
				fmt.Fprintf(g.stdout, "%s cd %s && %s >> %s 2>&1\n", l.Schedule, cwd, cmdline, filepath.Join(cwd, ".rewind", "cron.log"))
			}
			return nil
		},
	}
	ws.add(c)
	return c
}
