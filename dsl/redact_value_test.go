package dsl

import (
	"encoding/json"
	"html/template"
	"strings"
	"testing"
)

// A secret whose text has what JSON and HTML escape (", &, <, >, ', \):
// redacting the encoded output would miss it; Redacted, applied before
// encoding, does not, whatever the shape of the value.
func TestRedactedBeforeEncoding(t *testing.T) {
	const secret = `p"a&s<s>'w\rd`
	ws := mustLoad(t, sensitiveVars, LoadOptions{Vars: map[string]string{"token": secret}})
	type attempt struct {
		Log     string            `json:"log"`
		Tags    map[string]string `json:"tags"`
		Reason  *string           `json:"reason"`
		Any     any               `json:"any"`
		Raw     json.RawMessage   `json:"raw"`
		private string
	}
	reason := "probe failed: " + secret
	in := []attempt{{
		Log:     "stderr: " + secret + "\n",
		Tags:    map[string]string{"k-" + secret: "v-" + secret},
		Reason:  &reason,
		Any:     []any{secret, map[string]any{"x": secret}},
		Raw:     json.RawMessage(`{"n":1}`),
		private: secret,
	}}
	out := ws.Redacted(in).([]attempt)
	b, err := json.Marshal(out)
	if err != nil {
		t.Fatal(err)
	}
	var h strings.Builder
	if err := template.Must(template.New("p").Parse(`{{range .}}<p title="{{.Log}}">{{.Reason}} {{.Any}}</p>{{end}}`)).Execute(&h, out); err != nil {
		t.Fatal(err)
	}
	for _, encoded := range []string{string(b), h.String()} {
		if strings.Contains(encoded, "w\\\\rd") || strings.Contains(encoded, "a&amp;s") || strings.Contains(encoded, `a\u0026s`) || strings.Contains(encoded, "&lt;s&gt;") || strings.Contains(encoded, `s\u003cs`) {
			t.Errorf("the secret, escaped, is in %s", encoded)
		}
		if !strings.Contains(encoded, SensitiveText) && !strings.Contains(encoded, template.HTMLEscapeString(SensitiveText)) {
			t.Errorf("nothing redacted in %s", encoded)
		}
	}
	// The input is left as it was; the copy keeps what is not text.
	if in[0].Log != "stderr: "+secret+"\n" || *in[0].Reason != reason {
		t.Error("Redacted changed its input")
	}
	if string(out[0].Raw) != `{"n":1}` || out[0].private != secret {
		t.Errorf("the copy lost what is not text: %+v", out[0])
	}
	// The naive way, for contrast: redacting the encoded bytes leaves the
	// escaped secret in.
	naive, _ := json.Marshal(in)
	if !strings.Contains(ws.Redact(string(naive)), `\u0026s\u003cs\u003e`) {
		t.Error("the contrast no longer holds: Redact on JSON caught the escaped secret")
	}
}
