package dsl

import (
	"bytes"
	"io"
)

// StreamRedactor writes to an io.Writer what it is given with every
// sensitive value of a workspace replaced by SensitiveText, as Redact does
// for a string, however the text is cut into writes: a value split across
// two writes is still replaced. It holds back the last bytes it was given
// (fewer than the longest value) until it knows they start no value, or
// until Flush.
type StreamRedactor struct {
	dst     io.Writer
	texts   [][]byte
	longest int
	pending []byte
}

// NewStreamRedactor returns a StreamRedactor of the workspace's sensitive
// values (none: it writes through) that writes to dst.
func (w *Workspace) NewStreamRedactor(dst io.Writer) *StreamRedactor {
	r := &StreamRedactor{dst: dst}
	if w.HasSecrets() {
		for _, t := range w.secrets.texts {
			r.texts = append(r.texts, []byte(t))
			r.longest = max(r.longest, len(t))
		}
	}
	return r
}

// Write redacts and writes what of p (after what it held back) can be
// decided; it reports len(p) written unless dst fails.
func (r *StreamRedactor) Write(p []byte) (int, error) {
	if len(r.texts) == 0 {
		return r.dst.Write(p)
	}
	r.pending = append(r.pending, p...)
	if err := r.drain(false); err != nil {
		return 0, err
	}
	return len(p), nil
}

// Flush writes what was held back.
func (r *StreamRedactor) Flush() error {
	return r.drain(true)
}

// drain writes pending up to where a value could still start that is not
// wholly in it (all of it when final). At each position, the longest value
// that starts there is replaced.
func (r *StreamRedactor) drain(final bool) error {
	limit := len(r.pending) // positions < limit are decided
	if !final {
		limit = len(r.pending) - (r.longest - 1)
	}
	var out bytes.Buffer
	i := 0
	for i < limit {
		next, best := -1, 0
		for _, t := range r.texts {
			j := bytes.Index(r.pending[i:], t)
			if j < 0 {
				continue
			}
			j += i
			if next < 0 || j < next || j == next && len(t) > best {
				next, best = j, len(t)
			}
		}
		if next < 0 || next >= limit {
			break
		}
		out.Write(r.pending[i:next])
		out.WriteString(SensitiveText)
		i = next + best
	}
	end := max(i, limit)
	out.Write(r.pending[i:end])
	r.pending = append(r.pending[:0], r.pending[end:]...)
	if out.Len() == 0 {
		return nil
	}
	_, err := r.dst.Write(out.Bytes())
	return err
}
