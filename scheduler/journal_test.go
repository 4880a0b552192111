package scheduler

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// Each execution goes on after the newest record: what an execution that
// stopped on an error wrote survives the next ones until the ring comes
// round, and the oldest records are the ones overwritten.
func TestJournalContinuesAcrossExecutions(t *testing.T) {
	home := t.TempDir()
	first := openJournal(home)
	first.put("aaaa", 3)
	first.put("bbbb", 0)
	first.close()
	for exec := 0; exec < 3; exec++ {
		j := openJournal(home)
		got := j.read()
		if got["aaaa"] != 3 || got["bbbb"] != 0 || len(got) != 2+exec {
			t.Fatalf("execution %d reads %v, want aaaa=3 bbbb=0 and %d more", exec, got, exec)
		}
		j.put(fmt.Sprintf("exec%d", exec), 1)
		j.close()
	}
	// A full ring later, the two oldest records are gone and every other is
	// there.
	j := openJournal(home)
	for i := 0; i < journalSlots-3; i++ {
		j.put(fmt.Sprintf("n%d", i), i%256)
	}
	j.close()
	got := openJournal(home).read()
	if _, ok := got["aaaa"]; ok {
		t.Error("the oldest record survived a full ring")
	}
	if _, ok := got["bbbb"]; ok {
		t.Error("the second oldest record survived a full ring")
	}
	if got["exec0"] != 1 || got[fmt.Sprintf("n%d", journalSlots-4)] != (journalSlots-4)%256 || len(got) != journalSlots {
		t.Errorf("after a full ring: %d records, exec0=%v", len(got), got["exec0"])
	}
}

// Records of rewinds before sequence numbers ("<nonce> <code>") are read.
func TestJournalReadsRecordsWithoutSequence(t *testing.T) {
	home := t.TempDir()
	j := openJournal(home)
	j.close()
	f, err := os.OpenFile(filepath.Join(home, journalName), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	rec := fmt.Sprintf("%-*s\n", journalSlot-1, "cafe 7")
	if _, err := f.WriteAt([]byte(rec), 5*journalSlot); err != nil {
		t.Fatal(err)
	}
	f.Close()
	j = openJournal(home)
	if got := j.read(); got["cafe"] != 7 {
		t.Fatalf("read %v", got)
	}
	j.put("beef", 2)
	j.close()
	if got := openJournal(home).read(); got["cafe"] != 7 || got["beef"] != 2 {
		t.Fatalf("after a put: %v", got)
	}
}
