package main

import (
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/rewind-dev/rewind/agent"
	"github.com/rewind-dev/rewind/lease"
	"github.com/rewind-dev/rewind/store"
)

func init() { register(newAgentCmd) }

// newAgentCmd is the host agent, which rewind starts by itself (Hidden):
// see package agent.
func newAgentCmd(g *globals) *cobra.Command {
	var (
		ttl  time.Duration
		lock string
	)
	c := &cobra.Command{
		Use:    "agent",
		Short:  "The host agent (started by rewind where the state is shared)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if lock != "" {
				if _, err := agent.Lock(lock); err != nil {
					if agent.ErrLocked(err) {
						return nil // another agent of this machine runs
					}
					return err
				}
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			st, err := openStore(ctx, g)
			if err != nil {
				return err
			}
			defer st.Close()
			return agent.Run(ctx, agent.Options{Store: st, Self: lease.Self(), TTL: ttl, Log: schedulerLog(&liveRedact{w: g.stderr}, false, logText)})
		},
	}
	c.Flags().DurationVar(&ttl, "ttl", lease.DefaultTTL, "how long the agent's heartbeat lasts")
	c.Flags().StringVar(&lock, "lock", "", "the lock that keeps one agent per machine and state")
	return c
}

// agentStarter is the EnsureAgent of an execution: the host agent where the
// state is shared by several machines (not a SQLite file), none otherwise.
func agentStarter(g *globals, ttl time.Duration) func() error {
	dsn, _, err := g.stateDSN()
	if err != nil || !store.IsPostgres(dsn) {
		return nil
	}
	exe, err := os.Executable()
	if err != nil {
		return func() error { return err }
	}
	return func() error {
		return agent.Ensure(dsn, []string{exe, "agent"}, ttl, filepath.Join(homeDir(g), "agent.log"))
	}
}
