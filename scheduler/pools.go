package scheduler

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"time"

	"github.com/rewind-dev/rewind/dsl"
	"github.com/rewind-dev/rewind/executor"
	"github.com/rewind-dev/rewind/executor/procenv"
)

// poolLife is the life of a pool with setup and teardown commands during an
// execution: the seeds' transient backfill cluster, created when the first
// attempt needs the pool and torn down once it has been idle for its
// idle_timeout.
type poolLife struct {
	setUp     bool
	idleSince time.Time // zero while attempts run in the pool
}

func (e *engine) poolBusy(name string) {
	if pl := e.pools[name]; pl != nil {
		pl.idleSince = time.Time{}
	}
}

func (e *engine) poolIdle(name string) {
	if pl := e.pools[name]; pl != nil && pl.setUp {
		pl.idleSince = time.Now()
	}
}

// ensureSetup runs a pool's setup command before its first attempt.
func (e *engine) ensureSetup(ctx context.Context, name string) error {
	def := e.o.Workspace.Pools[name]
	if def == nil {
		return nil
	}
	if pl := e.pools[name]; pl != nil && pl.setUp {
		return nil
	}
	cmd, err := def.SetupCommand()
	if err != nil || cmd == nil {
		return err
	}
	e.log.Info("setting up pool", "pool", name)
	if err := e.runPoolCommand(ctx, def, "setup", cmd); err != nil {
		return err
	}
	e.pools[name] = &poolLife{setUp: true}
	if e.local[name] == 0 {
		e.pools[name].idleSince = time.Now()
	}
	return nil
}

// teardowns runs the teardown of every set-up pool that has been idle for
// its idle_timeout (of every idle one, with force). It returns when the next
// one is due (zero if none).
func (e *engine) teardowns(ctx context.Context, force bool) (time.Time, error) {
	var next time.Time
	now := time.Now()
	for name, pl := range e.pools {
		if !pl.setUp || e.local[name] > 0 || pl.idleSince.IsZero() {
			continue
		}
		def := e.o.Workspace.Pools[name]
		due := pl.idleSince.Add(def.IdleTimeout)
		if !force && now.Before(due) {
			if next.IsZero() || due.Before(next) {
				next = due
			}
			continue
		}
		pl.setUp = false
		cmd, err := def.TeardownCommand()
		if err != nil {
			return next, err
		}
		if cmd == nil {
			continue
		}
		e.log.Info("tearing down idle pool", "pool", name)
		if err := e.runPoolCommand(ctx, def, "teardown", cmd); err != nil {
			return next, err
		}
	}
	return next, nil
}

// runPoolCommand runs a pool's setup or teardown, its output in
// logs/pools/<pool>.<what>.log.
func (e *engine) runPoolCommand(ctx context.Context, def *dsl.Pool, what string, c *dsl.Command) error {
	logPath := filepath.Join(e.o.Home, "logs", "pools", def.Name+"."+what+".log")
	v := def.Vars()
	env := procenv.Of(c.Pass, []string{"REWIND_POOL=" + v.Name, "REWIND_POOL_MEMORY=" + sizeOrEmpty(v.Memory), "REWIND_POOL_CPUS=" + sizeOrEmpty(int64(v.CPUs))}, procenv.Pairs(c.Env))
	o, err := executor.Run(ctx, executor.Command{Argv: c.Argv, Dir: c.Dir, Env: env, LogPath: logPath, Grace: e.o.Grace})
	if err != nil {
		return fmt.Errorf("pool %s %s: %w", def.Name, what, err)
	}
	if !o.Success() {
		return fmt.Errorf("pool %s %s %s (see %s)", def.Name, what, o.Describe(), logPath)
	}
	return nil
}

func sizeOrEmpty(n int64) string {
	if n <= 0 {
		return ""
	}
	return strconv.FormatInt(n, 10)
}
