package dsl

import (
	"strings"
	"testing"
)

// A sensitive value is replaced wherever the writes cut it.
func TestStreamRedactor(t *testing.T) {
	ws := mustLoad(t, `
variable "a" {
  sensitive = true
}
variable "b" {
  sensitive = true
}
`, LoadOptions{Vars: map[string]string{"a": "s3cret", "b": "s3cret-and-more"}})
	text := "x s3cret y s3cret-and-more z s3cre s3cret\ns3cre"
	want := ws.Redact(text)
	if strings.Contains(want, "s3cret") {
		t.Fatalf("Redact left a value: %q", want)
	}
	for size := 1; size <= len(text); size++ {
		var b strings.Builder
		r := ws.NewStreamRedactor(&b)
		for i := 0; i < len(text); i += size {
			if _, err := r.Write([]byte(text[i:min(i+size, len(text))])); err != nil {
				t.Fatal(err)
			}
		}
		if err := r.Flush(); err != nil {
			t.Fatal(err)
		}
		if b.String() != want {
			t.Fatalf("writes of %d bytes: got %q, want %q", size, b.String(), want)
		}
	}
	// Without sensitive values, it writes through.
	var b strings.Builder
	r := mustLoad(t, "", LoadOptions{}).NewStreamRedactor(&b)
	_, _ = r.Write([]byte(text))
	if b.String() != text {
		t.Fatalf("without secrets: got %q", b.String())
	}
}
