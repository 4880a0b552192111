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
// fewer. Each record carries a sequence number, and an execution goes on
// after the newest record rather than at slot 0: the records of an
// execution that stopped on an error survive the next ones (a long-lived
// `rewind scheduler` runs one after another) until the ring comes round.

const (
	journalSlot  = 64 // bytes per record: "<nonce> <exit code>", padded, '\n'
	journalSlots = 1024
	journalName  = "outcomes.journal"
)

type journal struct {
	f    *os.File
	next int    // the slot of the next record
	seq  uint64 // the sequence number of the next record
}

// openJournal opens (creating it at its full size) the journal in home. It
// returns nil when the file cannot be made: the journal is a second chance,
// not a requirement.
func openJournal(home string) *journal {
	path := filepath.Join(home, journalName)
	if err := os.MkdirAll(home, 0o700); err != nil {
		return nil
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
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
	j := &journal{f: f}
	for slot, r := range j.records() {
		if r.seq >= j.seq {
			j.seq, j.next = r.seq+1, (slot+1)%journalSlots
		}
	}
	return j
}

// put records an attempt's exit code (best effort).
func (j *journal) put(nonce string, code int) {
	if j == nil || nonce == "" {
		return
	}
	rec := []byte(fmt.Sprintf("%-*s\n", journalSlot-1, strconv.FormatUint(j.seq, 10)+" "+nonce+" "+strconv.Itoa(code)))
	_, _ = j.f.WriteAt(rec[:journalSlot], int64(j.next*journalSlot))
	j.next = (j.next + 1) % journalSlots
	j.seq++
}

// read returns the exit codes recorded, by nonce.
func (j *journal) read() map[string]int {
	out := map[string]int{}
	if j == nil {
		return out
	}
	for _, r := range j.records() {
		out[r.nonce] = r.code
	}
	return out
}

type journalRecord struct {
	seq   uint64
	nonce string
	code  int
}

// records reads every slot ("<seq> <nonce> <code>", or "<nonce> <code>" as
// rewinds before sequence numbers wrote them, read as sequence 0).
func (j *journal) records() map[int]journalRecord {
	out := map[int]journalRecord{}
	buf := make([]byte, journalSlot*journalSlots)
	n, _ := j.f.ReadAt(buf, 0)
	for slot := 0; (slot+1)*journalSlot <= n; slot++ {
		f := strings.Fields(string(bytes.Trim(buf[slot*journalSlot:(slot+1)*journalSlot], "\x00\n ")))
		var r journalRecord
		if len(f) == 2 {
			f = append([]string{"0"}, f...)
		}
		if len(f) != 3 {
			continue
		}
		seq, err1 := strconv.ParseUint(f[0], 10, 64)
		code, err2 := strconv.Atoi(f[2])
		if err1 != nil || err2 != nil || f[1] == "" {
			continue
		}
		r.seq, r.nonce, r.code = seq, f[1], code
		out[slot] = r
	}
	return out
}

func (j *journal) close() {
	if j != nil {
		_ = j.f.Close()
	}
}
