package main

import (
	"fmt"
	"io"
	"os"
	"os/user"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/rewind-dev/rewind/daemon"
	"github.com/rewind-dev/rewind/store"
)

func init() { register(newCronCmd) }

func newCronCmd(g *globals) *cobra.Command {
	var (
		ws                  workspaceFlags
		nowS, hostTZ        string
		systemd             bool
		systemdDir, unitArg string
	)
	c := &cobra.Command{
		Use:   "cron [PATH]",
		Short: "Print the crontab lines (or systemd timer) that run the pipelines on schedule",
		Long: `Cron prints crontab lines that call 'rewind run' when intervals of the
pipelines in PATH become due: one entry per distinct schedule and timezone,
translated into the timezone the cron daemon schedules in. Debian's and
Ubuntu's cron ignore CRON_TZ and schedule every entry in the daemon's zone
(this machine's: /etc/timezone, else /etc/localtime; --host-timezone names
another, e.g. when the crontab is for another machine). Where daylight saving
time changes the difference of the two zones, an entry fires at both hours:
rewind runs only what is due, so the firing that comes first does nothing.
The lines start with CRON_TZ set to that same zone, so that cronie (which
reads CRON_TZ) schedules them alike whatever its own zone, and a CRON_TZ
above them in the crontab does not apply to them. Pipelines whose end_date
has passed (no interval left to become due) get no line. Paths are absolute,
and --wait makes a line that overlaps a long catchup wait for it instead of
failing. Run 'rewind cron' again after a schedule changes, or the machine's
timezone does.

Install them with

  (crontab -l 2>/dev/null; rewind cron PATH) | crontab -

--systemd prints a systemd service and timer instead (--systemd-dir DIR
writes them to DIR): the timer's OnCalendar settings are in UTC, which
systemd reads from their suffix, so they do not depend on the machine's
timezone.`,
		Example: `  (crontab -l 2>/dev/null; rewind cron examples/daily_revenue) | crontab -
  rewind cron --host-timezone Asia/Tokyo examples/daily_revenue
  rewind cron --systemd-dir /etc/systemd/system examples/daily_revenue`,
		Args: cobra.MaximumNArgs(1),
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
			systemd = systemd || systemdDir != ""
			if systemd && hostTZ != "" {
				return exitWith(exitUsage, "--host-timezone is for crontab lines: a --systemd timer is written in UTC")
			}
			host, err := cronHostZone(hostTZ)
			if err != nil {
				return err
			}
			if systemd {
				host = cronZone{loc: time.UTC, name: "UTC"}
			}
			w, err := ws.load(g, path)
			if err != nil {
				return err
			}
			inv, err := cronInvocationOf(g, path)
			if err != nil {
				return err
			}
			lines, ended := daemon.CronLinesAt(w, now, host.loc)
			if !systemd {
				printCrontab(g.stdout, inv, host, lines, ended)
				return nil
			}
			unit := unitArg
			if unit == "" {
				unit = "rewind-" + unitName(filepath.Base(inv.dir))
			}
			service, timer := systemdUnits(inv, lines, ended)
			if systemdDir == "" {
				fmt.Fprintf(g.stdout, "# ---- %s.service\n%s# ---- %s.timer\n%s", unit, service, unit, timer)
				return nil
			}
			for _, f := range []struct{ name, body string }{{unit + ".service", service}, {unit + ".timer", timer}} {
				p := filepath.Join(systemdDir, f.name)
				if err := os.WriteFile(p, []byte(f.body), 0o644); err != nil {
					return exitWith(exitUsage, "%v", err)
				}
				fmt.Fprintf(g.stdout, "wrote %s\n", p)
			}
			fmt.Fprintf(g.stdout, "enable it with: systemctl daemon-reload && systemctl enable --now %s.timer\n", unit)
			return nil
		},
	}
	ws.add(c)
	c.Flags().StringVar(&nowS, "now", "", "the clock that decides which pipelines have ended (RFC 3339)")
	c.Flags().StringVar(&hostTZ, "host-timezone", "", "the timezone the cron daemon schedules in (default: this machine's, from /etc/timezone or /etc/localtime)")
	c.Flags().BoolVar(&systemd, "systemd", false, "print a systemd service and timer instead of crontab lines")
	c.Flags().StringVar(&systemdDir, "systemd-dir", "", "write the systemd service and timer to this directory (implies --systemd)")
	c.Flags().StringVar(&unitArg, "unit", "", "the name of the systemd units (default rewind-<workspace directory name>)")
	return c
}

// cronZone is the timezone a cron daemon schedules in, and where its name
// was read.
type cronZone struct {
	loc    *time.Location
	name   string // an IANA name, or "" when unknown
	source string // "--host-timezone", "/etc/timezone", "/etc/localtime" or ""
}

// cronHostZone is the zone named by --host-timezone, else this machine's
// as Debian's cron reads it: /etc/timezone, else the zone /etc/localtime
// links to, else the local time of this process. The TZ of the shell that
// runs rewind cron is not the daemon's and is not read.
func cronHostZone(flag string) (cronZone, error) {
	if flag != "" {
		loc, err := time.LoadLocation(flag)
		if err != nil || flag == "Local" {
			return cronZone{}, exitWith(exitUsage, "--host-timezone %q: not an IANA timezone (e.g. Europe/Rome, UTC)", flag)
		}
		return cronZone{loc: loc, name: flag, source: "--host-timezone"}, nil
	}
	if b, err := os.ReadFile("/etc/timezone"); err == nil {
		if name := strings.TrimSpace(string(b)); name != "" {
			if loc, err := time.LoadLocation(name); err == nil {
				return cronZone{loc: loc, name: name, source: "/etc/timezone"}, nil
			}
		}
	}
	if target, err := os.Readlink("/etc/localtime"); err == nil {
		if _, name, ok := strings.Cut(target, "zoneinfo/"); ok {
			if loc, err := time.LoadLocation(name); err == nil {
				return cronZone{loc: loc, name: name, source: "/etc/localtime"}, nil
			}
		}
	}
	return cronZone{loc: time.Local}, nil
}

// cronInvocation is how a crontab line calls rewind: from the workspace's
// directory, with absolute paths.
type cronInvocation struct {
	dir    string // the workspace's directory
	target string // the PATH run is given
	bin    string // this rewind
	state  string // " --state DSN" when the state was named, else ""
	home   string // the state's directory (.rewind), where the log goes
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
	if inv.home, err = filepath.Abs(homeDir(g)); err != nil {
		return inv, exitWith(exitUsage, "%v", err)
	}
	inv.log = filepath.Join(inv.home, "cron.log")
	return inv, nil
}

// printCrontab prints the crontab: what it is for and how to install it,
// the pipelines that ended, then one entry per host entry of each line,
// all under one CRON_TZ line naming the zone they were translated into.
func printCrontab(w io.Writer, inv cronInvocation, host cronZone, lines []daemon.CronLine, ended []string) {
	zone := host.name
	if zone == "" {
		zone = "this machine's local time"
	}
	fmt.Fprintf(w, "# rewind: the runs of %s, for a cron daemon that schedules in %s", inv.dir, zone)
	switch host.source {
	case "--host-timezone":
		fmt.Fprintln(w, " (--host-timezone).")
	case "":
		fmt.Fprintln(w, ".")
	default:
		fmt.Fprintf(w, "\n# (this machine's timezone, from %s; --host-timezone names another).\n", host.source)
	}
	fmt.Fprintf(w, "# Each schedule is translated from its pipeline's timezone into %s: Debian's\n", zone)
	fmt.Fprintln(w, "# and Ubuntu's cron ignore CRON_TZ. Where daylight saving time moves the")
	fmt.Fprintln(w, "# difference, an entry fires at both hours; rewind runs only what is due.")
	fmt.Fprintln(w, "# Run rewind cron again when a schedule or this machine's timezone changes.")
	install := "rewind cron " + inv.dir
	if host.source == "--host-timezone" {
		install = "rewind cron --host-timezone " + host.name + " " + inv.dir
	}
	fmt.Fprintf(w, "#   (crontab -l 2>/dev/null; %s) | crontab -\n", install)
	if tz := os.Getenv("TZ"); tz != "" && host.source != "--host-timezone" && strings.TrimPrefix(tz, ":") != host.name {
		fmt.Fprintf(w, "# (TZ=%s in this shell is not the cron daemon's timezone and is not used.)\n", tz)
	}
	if len(ended) > 0 {
		fmt.Fprintf(w, "# ended (end_date passed, nothing left to run): %s\n", strings.Join(ended, ", "))
	}
	if host.name != "" && len(lines) > 0 {
		fmt.Fprintf(w, "# CRON_TZ: cronie reads it (and schedules these lines in %s whatever its\n", host.name)
		fmt.Fprintln(w, "# own zone); Debian's cron only passes it on to the command.")
		fmt.Fprintf(w, "CRON_TZ=%s\n", host.name)
	}
	for _, l := range lines {
		cmdline := fmt.Sprintf("%s run --quiet --wait%s", inv.bin, inv.state)
		for _, p := range l.Pipelines {
			cmdline += " --pipeline " + p
		}
		cmdline += " " + inv.target
		fmt.Fprintf(w, "# %s: %s in %s\n", strings.Join(l.Pipelines, ", "), l.Schedule, l.Timezone)
		for _, e := range l.Host {
			fmt.Fprintf(w, "%s cd %s && mkdir -p %s && %s >> %s 2>&1\n", e.CronFields(), inv.dir, inv.home, cmdline, inv.log)
		}
	}
}

// systemdUnits are a systemd service that runs the workspace's due runs
// and a timer that starts it at every tick of its pipelines, in UTC.
func systemdUnits(inv cronInvocation, lines []daemon.CronLine, ended []string) (service, timer string) {
	var s strings.Builder
	fmt.Fprintf(&s, "# rewind: the runs of %s, started by the timer of the same name.\n", inv.dir)
	fmt.Fprintln(&s, "[Unit]")
	fmt.Fprintf(&s, "Description=rewind run of %s\n", inv.dir)
	fmt.Fprintln(&s, "\n[Service]")
	fmt.Fprintln(&s, "Type=oneshot")
	if u, err := user.Current(); err == nil && u.Username != "" {
		fmt.Fprintf(&s, "User=%s\n", u.Username)
	}
	fmt.Fprintf(&s, "WorkingDirectory=%s\n", systemdQuote(inv.dir))
	exec := []string{inv.bin, "run", "--quiet", "--wait"}
	if inv.state != "" {
		exec = append(exec, "--state", strings.TrimPrefix(inv.state, " --state "))
	}
	exec = append(exec, inv.target)
	for i := range exec {
		exec[i] = systemdQuote(exec[i])
	}
	fmt.Fprintf(&s, "ExecStart=%s\n", strings.Join(exec, " "))
	fmt.Fprintln(&s, "# rewind stops its attempts itself within --grace (10 s) on SIGTERM.")
	fmt.Fprintln(&s, "KillMode=process")

	var t strings.Builder
	fmt.Fprintf(&t, "# rewind: when the runs of %s become due. OnCalendar is in UTC\n", inv.dir)
	fmt.Fprintln(&t, "# (its suffix): each pipeline's ticks in its own timezone, daylight saving")
	fmt.Fprintln(&t, "# time included, whatever this machine's timezone. Run rewind cron --systemd")
	fmt.Fprintln(&t, "# again when a schedule changes.")
	if len(ended) > 0 {
		fmt.Fprintf(&t, "# ended (end_date passed, nothing left to run): %s\n", strings.Join(ended, ", "))
	}
	fmt.Fprintln(&t, "[Unit]")
	fmt.Fprintf(&t, "Description=rewind runs of %s on schedule\n", inv.dir)
	fmt.Fprintln(&t, "\n[Timer]")
	for _, l := range lines {
		fmt.Fprintf(&t, "# %s: %s in %s\n", strings.Join(l.Pipelines, ", "), l.Schedule, l.Timezone)
		for _, e := range l.Host {
			for _, oc := range e.OnCalendar("UTC") {
				fmt.Fprintf(&t, "OnCalendar=%s\n", oc)
			}
		}
	}
	fmt.Fprintln(&t, "# A tick missed while the machine was off runs at boot (rewind catches up).")
	fmt.Fprintln(&t, "Persistent=true")
	fmt.Fprintln(&t, "AccuracySec=1s")
	fmt.Fprintln(&t, "\n[Install]")
	fmt.Fprintln(&t, "WantedBy=timers.target")
	return s.String(), t.String()
}

// systemdQuote quotes a word of ExecStart= that holds a space, a quote or
// a backslash.
func systemdQuote(s string) string {
	if !strings.ContainsAny(s, " \t\"'\\") {
		return s
	}
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(s) + `"`
}

var unitUnsafe = regexp.MustCompile(`[^A-Za-z0-9:_.-]+`)

// unitName is name made fit for a systemd unit name.
func unitName(name string) string {
	if n := strings.Trim(unitUnsafe.ReplaceAllString(name, "-"), "-"); n != "" {
		return n
	}
	return "workspace"
}
