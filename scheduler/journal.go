package scheduler

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// The outcome journal keeps the exit codes this process learned where they
// survive a state that cannot be written: a file of fixed size beside the
// state, created when an execution starts and afterwards only overwritten in
// place, so that writing it needs no new room on a disk that has filled up
// (where both the state's commit and the wrapper's status line in the log
// fail). Recovery reads it when an attempt's log has no status. It is a ring
// of journalSlots records: the attempts in flight at any moment are far
// fewer.

const (
	journalSlot  = 64 // bytes per record: "<nonce> <exit code>", padded, '\n'
	journalSlots = 1024
	journalName  = "outcomes.journal"
)

type journal struct {
	f    *os.File
	next int
}

// openJournal opens (creating it at its full size) the journal in home. It
// returns nil when the file cannot be made: the journal is a second chance,
// not a requirement.
func openJournal(home string) *journal {
	path := filepath.Join(home, journalName)
	if err := os.MkdirAll(home, 0o755); err != nil {
		return nil
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil
	}
	size := int64(journalSlot * journalSlots)
	if fi, err := f.Stat(); err != nil || fi.Size() < size {
		if _, err := f.WriteAt(make([]byte, size), 0); err != nil {
			f.Close()
			return nil
		}
	}
	return &journal{f: f}
}

// put records an attempt's exit code (best effort).
func (j *journal) put(nonce string, code int) {
	if j == nil || nonce == "" {
		return
	}
	rec := []byte(fmt.Sprintf("%-*s\n", journalSlot-1, nonce+" "+strconv.Itoa(code)))
	_, _ = j.f.WriteAt(rec[:journalSlot], int64(j.next*journalSlot))
	j.next = (j.next + 1) % journalSlots
}

// read returns the exit codes recorded, by nonce.
func (j *journal) read() map[string]int {
	out := map[string]int{}
	if j == nil {
		return out
	}
	buf := make([]byte, journalSlot*journalSlots)
	n, _ := j.f.ReadAt(buf, 0)
	for rec := range bytes.SplitSeq(buf[:n], []byte("\n")) {
		nonce, code, ok := strings.Cut(strings.TrimSpace(string(bytes.Trim(rec, "\x00"))), " ")
		if !ok || nonce == "" {
			continue
		}
		if c, err := strconv.Atoi(code); err == nil {
			out[nonce] = c
		}
	}
	return out
}

func (j *journal) close() {
	if j != nil {
		_ = j.f.Close()
	}
}
