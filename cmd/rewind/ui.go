package main

import (
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/rewind-dev/rewind/lease"
	"github.com/rewind-dev/rewind/web"
)

func init() { register(newUICmd) }

func newUICmd(g *globals) *cobra.Command {
	var (
		ws      workspaceFlags
		listen  string
		token   string
		proxies []string
	)
	c := &cobra.Command{
		Use:   "ui [--listen 127.0.0.1:8080] [PATH]",
		Short: "Serve a web view of the state: pipelines, grids, runs, backfills, and the operator's actions",
		Long: `ui serves a web view of the workspace's state: the pipelines; the grid of a
pipeline (runs as columns, newest on the right, tasks as rows, hot dates
marked with their pool), live while a catchup runs; each cell's attempts
and log tail; a run's Gantt chart; a backfill's phases, dates, plan,
validation and report. Every page has its JSON under /api/ (/api/runs is
'rewind runs --json', /api/dates 'rewind dates --recorded --json',
/api/backfills/ID/status 'rewind backfill status ID --json').

It listens on loopback by default; any other address needs a token
(--token, or better REWIND_UI_TOKEN, since ps shows argv), which every
request then carries as 'Authorization: Bearer TOKEN' (a browser signs in
once with a form). Ctrl-C or SIGTERM stops it.

With a token, a signed-in operator acts from the pages, through the same
code as the CLI: clear (only failed, with downstream), mark success or
failed, retry now, pause and unpause a pipeline; a backfill form that shows
the plan as 'backfill plan' does, then applies it; and a backfill's pause,
unpause, cancel, resume and rollback. Resumes, applies and rollbacks run in
this process (one at a time; Ctrl-C interrupts them: resume later). Every
write needs the token even on loopback, comes from a page of this server
(its Origin) with the session's CSRF token, and is recorded in the state's
audit trail ('rewind audit'). Without a token the view only reads.

/metrics serves the state's Prometheus metrics in the text format, under
the same rule: with a token, the scraper sends it as a bearer token.

Behind a reverse proxy that terminates TLS, name the proxy's address with
--trusted-proxy (repeatable; an address or a CIDR): its X-Forwarded-Proto:
https then marks the sign-in cookie Secure, as a direct TLS request would.
The header from any other address is ignored. Default: no proxy trusted.`,
		Example: `  rewind ui examples/daily_revenue
  REWIND_UI_TOKEN=$(openssl rand -hex 16) rewind ui --listen 0.0.0.0:8080 .
  REWIND_UI_TOKEN=... rewind ui --listen 10.0.0.5:8080 --trusted-proxy 10.0.0.2 .`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if token == "" {
				token = os.Getenv(web.EnvToken)
			}
			if err := web.CheckListen(cmd.Context(), listen, token); err != nil {
				return exitWith(exitUsage, "%v", err)
			}
			trusted, err := web.ParseTrustedProxies(proxies)
			if err != nil {
				return exitWith(exitUsage, "%v", err)
			}
			path, err := g.workspace(pathArg(args))
			if err != nil {
				return err
			}
			w, err := ws.load(g, path)
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			st, err := openExisting(ctx, g)
			if err != nil {
				return err
			}
			defer st.Close()
			srv, err := web.New(web.Options{State: st, Write: st, Workspace: w, Home: homeDir(g), Token: token, TrustedProxies: trusted,
				EnsureAgent: agentStarter(g, lease.DefaultTTL), Log: slog.New(slog.NewTextHandler(g.stderr, nil))})
			if err != nil {
				return exitWith(exitFailed, "%v", err)
			}
			defer srv.Close()
			ln, err := net.Listen("tcp", listen)
			if err != nil {
				return exitWith(exitUsage, "--listen %s: %v", listen, err)
			}
			mode := "read-only: start it with --token or " + web.EnvToken + " to act from it"
			if token != "" {
				mode = "token required; actions recorded in rewind audit"
			}
			fmt.Fprintf(g.stderr, "rewind ui: serving %s on http://%s/ (%s; Ctrl-C stops)\n", g.wsDir(), ln.Addr(), mode)
			if err := web.Serve(ctx, ln, srv); err != nil {
				return exitWith(exitFailed, "%v", err)
			}
			return nil
		},
	}
	ws.add(c)
	c.Flags().StringVar(&listen, "listen", "127.0.0.1:8080", "address to listen on (HOST:PORT); other than loopback only with a token")
	c.Flags().StringVar(&token, "token", "", "bearer token every request must carry (default $"+web.EnvToken+")")
	c.Flags().StringArrayVar(&proxies, "trusted-proxy", nil, "address or CIDR of a reverse proxy whose X-Forwarded-Proto is believed (repeatable; default none)")
	return c
}
