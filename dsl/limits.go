package dsl

import (
	"fmt"
	"io"
	"os"

	"github.com/hashicorp/hcl/v2"
)

// Limits on what rewind reads as HCL: a workspace file is a regular file of
// at most MaxFileSize bytes whose brackets nest at most MaxNesting deep
// (the parser recurses once per level), and at most MaxDiagnostics
// diagnostics are printed.
const (
	MaxFileSize    = 16 << 20
	MaxNesting     = 256
	MaxDiagnostics = 50
)

// readSource reads one workspace file within the limits. A symbolic link is
// followed, but what it names must be a regular file: a device (/dev/zero)
// or a FIFO is refused before it is opened.
func readSource(name string) ([]byte, *hcl.Diagnostic) {
	fail := func(detail string) *hcl.Diagnostic {
		return &hcl.Diagnostic{Severity: hcl.DiagError, Summary: "Cannot read file", Detail: name + ": " + detail,
			Subject: &hcl.Range{Filename: name, Start: hcl.InitialPos, End: hcl.InitialPos}}
	}
	fi, err := os.Stat(name)
	if err != nil {
		return nil, fail(err.Error())
	}
	if !fi.Mode().IsRegular() {
		return nil, fail(fmt.Sprintf("not a regular file (%s): only regular files are read", fi.Mode().Type()))
	}
	if fi.Size() > MaxFileSize {
		return nil, fail(fmt.Sprintf("%d bytes, over the limit of %d (16 MiB)", fi.Size(), MaxFileSize))
	}
	f, err := os.Open(name)
	if err != nil {
		return nil, fail(err.Error())
	}
	defer f.Close()
	src, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return nil, fail(err.Error())
	}
	if len(src) > MaxFileSize {
		return nil, fail(fmt.Sprintf("over the limit of %d bytes (16 MiB)", MaxFileSize))
	}
	if pos, ok := tooDeep(src); !ok {
		return nil, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: "Nesting too deep",
			Detail:  fmt.Sprintf("Brackets nest more than %d levels deep here; rewind does not parse this file.", MaxNesting),
			Subject: &hcl.Range{Filename: name, Start: pos, End: pos}}
	}
	return src, nil
}

// tooDeep scans src for brackets ( [ { nested deeper than MaxNesting outside
// strings and comments, and returns where the limit is passed (ok false).
func tooDeep(src []byte) (hcl.Pos, bool) {
	depth := 0
	line, col := 1, 1
	inString, escaped, lineComment, blockComment := false, false, false, false
	for i := 0; i < len(src); i++ {
		c := src[i]
		pos := hcl.Pos{Line: line, Column: col, Byte: i}
		if c == '\n' {
			line, col = line+1, 1
			lineComment = false
		} else {
			col++
		}
		switch {
		case lineComment:
		case blockComment:
			if c == '*' && i+1 < len(src) && src[i+1] == '/' {
				blockComment = false
				i++
			}
		case inString:
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"' || c == '\n':
				inString = false
			}
		case c == '"':
			inString = true
		case c == '#':
			lineComment = true
		case c == '/' && i+1 < len(src) && src[i+1] == '/':
			lineComment = true
		case c == '/' && i+1 < len(src) && src[i+1] == '*':
			blockComment = true
			i++
		case c == '(' || c == '[' || c == '{':
			if depth++; depth > MaxNesting {
				return pos, false
			}
		case c == ')' || c == ']' || c == '}':
			depth = max(0, depth-1)
		}
	}
	return hcl.Pos{}, true
}
