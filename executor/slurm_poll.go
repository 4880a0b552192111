package executor

import (
	"context"
	"strings"
	"sync"
	"time"
)

// The Slurm jobs a rewind follows are polled together: one `squeue` per
// poll for all of them (a pool of 20 slots is one call a second, not 20),
// and `scontrol show job` for a job only when its state changes (it starts
// running, it ends, squeue no longer lists it), for what squeue does not
// give: the exit status, the signal, the reason. Slurm's documentation
// asks exactly this of tools that poll it.

// squeueChunk is how many job ids one squeue call names.
const squeueChunk = 500

// slurmPoller shares squeue calls between the jobs of this process.
type slurmPoller struct {
	mu      sync.Mutex
	waiting map[string]int    // job id -> its waiters
	states  map[string]string // job id -> its state at the last poll; absent: not listed
	polled  map[string]bool   // the ids the last poll asked for
	at      time.Time         // when the last poll ended
	ok      bool              // whether it succeeded
	flight  chan struct{}     // closed when the poll in flight ends; nil: none
}

var jobPoller = &slurmPoller{waiting: map[string]int{}}

// add registers a waiter of job id; remove unregisters it.
func (p *slurmPoller) add(id string) {
	p.mu.Lock()
	p.waiting[id]++
	p.mu.Unlock()
}

func (p *slurmPoller) remove(id string) {
	p.mu.Lock()
	if p.waiting[id]--; p.waiting[id] <= 0 {
		delete(p.waiting, id)
	}
	p.mu.Unlock()
}

// state is job id's state as squeue said it within maxAge (polling again
// when the last poll is older, or did not ask for id). listed is false when
// squeue did not list it (Slurm no longer has it, or never had); ok is
// false when squeue could not be asked.
func (p *slurmPoller) state(ctx context.Context, id string, maxAge time.Duration) (state string, listed, ok bool) {
	p.mu.Lock()
	for {
		if p.polled[id] && time.Since(p.at) <= maxAge {
			state, listed = p.states[id]
			ok = p.ok
			p.mu.Unlock()
			return state, listed, ok
		}
		if p.flight == nil {
			break
		}
		// A poll is under way: wait for it, then look again (it may not
		// have asked for id, if id came after it started).
		flight := p.flight
		p.mu.Unlock()
		select {
		case <-flight:
		case <-ctx.Done():
			return "", false, false
		}
		p.mu.Lock()
	}
	ids := make([]string, 0, len(p.waiting)+1)
	for w := range p.waiting {
		ids = append(ids, w)
	}
	if p.waiting[id] == 0 {
		ids = append(ids, id)
	}
	p.flight = make(chan struct{})
	p.mu.Unlock()

	states, good := squeueStates(context.WithoutCancel(ctx), ids)

	p.mu.Lock()
	p.states, p.ok, p.at = states, good, time.Now()
	p.polled = make(map[string]bool, len(ids))
	for _, w := range ids {
		p.polled[w] = true
	}
	close(p.flight)
	p.flight = nil
	state, listed = states[id]
	p.mu.Unlock()
	return state, listed, good
}

// squeueStates asks squeue for the states of ids (finished jobs included,
// as long as slurmctld keeps them: MinJobAge). ok is false when squeue
// failed.
func squeueStates(ctx context.Context, ids []string) (map[string]string, bool) {
	states := map[string]string{}
	for start := 0; start < len(ids); start += squeueChunk {
		chunk := ids[start:min(start+squeueChunk, len(ids))]
		out, err := Run(ctx, Command{Argv: []string{"squeue", "--jobs=" + strings.Join(chunk, ","), "--states=all", "--noheader", "--format=%i|%T"}, Timeout: slurmTimeout})
		if err != nil {
			return states, false
		}
		if !out.Success() {
			// One id that Slurm does not know fails the call (several such
			// ids are left out instead): that id is simply not listed.
			if len(chunk) == 1 && strings.Contains(firstLine(out.Stderr), "Invalid job id") {
				continue
			}
			return states, false
		}
		for _, line := range strings.Split(string(out.Stdout), "\n") {
			id, state, found := strings.Cut(strings.TrimSpace(line), "|")
			if found && id != "" {
				states[id] = state
			}
		}
	}
	return states, true
}
