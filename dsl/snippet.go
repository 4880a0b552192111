package dsl

import (
	"unicode/utf8"

	"github.com/hashicorp/hcl/v2"
)

// snippetFiles returns the files to quote d from: its own file, cut after
// the last line the snippet shows, with control characters and invalid
// UTF-8 in the shown lines replaced by '?'. hcl's writer scans a file from
// its start for every diagnostic: cut, a file's thousands of diagnostics
// cost what they show, not the file's size each. Replaced, the bytes of a
// hostile file never reach a terminal as escape sequences. Replacements
// are one byte for one, so every position in d stays valid.
func snippetFiles(files map[string]*hcl.File, d *hcl.Diagnostic) map[string]*hcl.File {
	if d.Subject == nil {
		return files
	}
	f := files[d.Subject.Filename]
	if f == nil || f.Bytes == nil {
		return files
	}
	src := f.Bytes
	from, to := d.Subject.Start.Byte, d.Subject.End.Byte
	if c := d.Context; c != nil && c.Filename == d.Subject.Filename {
		from, to = min(from, c.Start.Byte), max(to, c.End.Byte)
	}
	from, to = max(0, min(from, len(src))), max(0, min(to, len(src)))
	for from > 0 && src[from-1] != '\n' {
		from--
	}
	for to < len(src) && src[to] != '\n' {
		to++
	}
	cut := make([]byte, to)
	copy(cut, src[:from])
	copy(cut[from:], src[from:to])
	sanitize(cut[from:])
	shown := *f
	shown.Bytes = cut
	return map[string]*hcl.File{d.Subject.Filename: &shown}
}

// sanitize replaces, in place, control characters other than tab and
// newline, and bytes that are not valid UTF-8, by '?'.
func sanitize(b []byte) {
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		switch {
		case r == utf8.RuneError && n <= 1:
			b[i] = '?'
			n = 1
		case r < 0x20 && r != '\t' && r != '\n', r == 0x7f, r >= 0x80 && r < 0xa0:
			for k := 0; k < n; k++ {
				b[i+k] = '?'
			}
		}
		i += n
	}
}
