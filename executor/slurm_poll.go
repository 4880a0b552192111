package executor

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The Slurm jobs a rewind follows are polled together: one `squeue` per
// poll for all of them (a pool of 20 slots is one call a second, not 20;
// the elements of a job array are asked for by the array's id, so a wave
// of 1,000 is one short command line), which gives each job's state,
// exit status, start time and reason. `scontrol show job` reads a job only
// when squeue cannot say (squeue failed, or no longer lists the job).
// Slurm's documentation asks exactly this of tools that poll it.

// squeueChunk is how many job ids one squeue call names.
const squeueChunk = 500

// slurmPoller shares squeue calls between the jobs of this process.
type slurmPoller struct {
	mu      sync.Mutex
	waiting map[string]int      // job id -> its waiters
	states  map[string]slurmJob // job id -> what the last poll said of it; absent: not listed
	polled  map[string]bool     // the ids the last poll asked for
	at      time.Time           // when the last poll ended
	ok      bool                // whether it succeeded
	flight  chan struct{}       // closed when the poll in flight ends; nil: none
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
func (p *slurmPoller) state(ctx context.Context, id string, maxAge time.Duration) (state slurmJob, listed, ok bool) {
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
			return slurmJob{}, false, false
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

// squeueFormat: the fields squeue prints of each job (the reason last, as
// it may hold spaces). JobArrayID is "ARRAYID_i" for an element of an array
// (with --array, one line each), the job's id otherwise; JobID is the job's
// own id; exit_code is the wait status (code<<8 | signal).
const squeueFormat = "JobArrayID:0|,JobID:0|,State:0|,exit_code:0|,StartTime:0|,Reason:0"

// squeueStates asks squeue for the states of ids (finished jobs included,
// as long as slurmctld keeps them: MinJobAge). ok is false when squeue
// failed.
func squeueStates(ctx context.Context, ids []string) (map[string]slurmJob, bool) {
	states := map[string]slurmJob{}
	// An element ARRAYID_i is asked for by its array: squeue --array lists
	// every element of it, one line each.
	var asked []string
	seen := map[string]bool{}
	for _, id := range ids {
		base, _, _ := splitElement(id)
		if !seen[base] {
			seen[base] = true
			asked = append(asked, base)
		}
	}
	for start := 0; start < len(asked); start += squeueChunk {
		chunk := asked[start:min(start+squeueChunk, len(asked))]
		out, err := Run(ctx, Command{Argv: []string{"squeue", "--jobs=" + strings.Join(chunk, ","), "--array", "--states=all", "--noheader", "--Format=" + squeueFormat}, Timeout: slurmTimeout})
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
			if id, j, ok := parseSqueueLine(line); ok {
				states[id] = j
			}
		}
	}
	return states, true
}

// parseSqueueLine reads a line of squeueFormat.
func parseSqueueLine(line string) (string, slurmJob, bool) {
	f := strings.SplitN(strings.TrimSpace(line), "|", 6)
	if len(f) < 6 || f[0] == "" || f[2] == "" {
		return "", slurmJob{}, false
	}
	j := slurmJob{ID: f[1], State: f[2], Reason: f[5]}
	if rc, sig, ok := strings.Cut(f[3], ":"); ok {
		j.ExitCode, _ = strconv.Atoi(rc)
		j.Signal, _ = strconv.Atoi(sig)
	} else if w, err := strconv.Atoi(f[3]); err == nil {
		j.ExitCode, j.Signal = (w>>8)&0xff, w&0x7f
	}
	if t, err := time.ParseInLocation("2006-01-02T15:04:05", f[4], time.Local); err == nil {
		j.StartTime = t
	}
	return f[0], j, true
}
