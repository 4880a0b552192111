// Package metricstest reads what a /metrics endpoint serves in tests: the
// text exposition format parsed by prometheus/common/expfmt, as
// Prometheus parses a scrape, then series found by name and labels.
package metricstest

import (
	"io"
	"math"
	"net/http"
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Families are the metric families of one scrape, by name.
type Families map[string]*dto.MetricFamily

// Scrape gets url (header: name, value pairs), fails the test unless it
// answers 200 in the text format, and parses the body.
func Scrape(t testing.TB, url string, header ...string) Families {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("scrape %s: %v", url, err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(res.Body)
		t.Fatalf("scrape %s: %s\n%s", url, res.Status, b)
	}
	if ct := res.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain; version=0.0.4") {
		t.Fatalf("scrape %s: Content-Type %q, want the text format (text/plain; version=0.0.4)", url, ct)
	}
	return Parse(t, res.Body)
}

// Gather gathers g, as a scrape of it would read.
func Gather(t testing.TB, g prometheus.Gatherer) Families {
	t.Helper()
	fams, err := g.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	out := Families{}
	for _, f := range fams {
		out[f.GetName()] = f
	}
	return out
}

// Parse parses the text exposition format.
func Parse(t testing.TB, r io.Reader) Families {
	t.Helper()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(r)
	if err != nil {
		t.Fatalf("parse the exposition format: %v", err)
	}
	return fams
}

// Value is the value of the series name whose labels are exactly the
// given name, value pairs; false when there is none.
func (f Families) Value(name string, labels ...string) (float64, bool) {
	fam := f[name]
	if fam == nil {
		return 0, false
	}
	want := map[string]string{}
	for i := 0; i+1 < len(labels); i += 2 {
		want[labels[i]] = labels[i+1]
	}
	for _, m := range fam.GetMetric() {
		if !sameLabels(m.GetLabel(), want) {
			continue
		}
		switch {
		case m.Gauge != nil:
			return m.GetGauge().GetValue(), true
		case m.Counter != nil:
			return m.GetCounter().GetValue(), true
		case m.Untyped != nil:
			return m.GetUntyped().GetValue(), true
		case m.Histogram != nil:
			return float64(m.GetHistogram().GetSampleCount()), true
		case m.Summary != nil:
			return float64(m.GetSummary().GetSampleCount()), true
		}
	}
	return 0, false
}

// Sum adds the values of every series of name whose labels include the
// given pairs.
func (f Families) Sum(name string, labels ...string) float64 {
	want := map[string]string{}
	for i := 0; i+1 < len(labels); i += 2 {
		want[labels[i]] = labels[i+1]
	}
	sum := 0.0
	for _, m := range f[name].GetMetric() {
		got := labelMap(m.GetLabel())
		ok := true
		for k, v := range want {
			if got[k] != v {
				ok = false
			}
		}
		if ok {
			sum += m.GetGauge().GetValue() + m.GetCounter().GetValue() + m.GetUntyped().GetValue()
		}
	}
	return sum
}

// Labels lists the label sets of the series of name.
func (f Families) Labels(name string) []map[string]string {
	var out []map[string]string
	for _, m := range f[name].GetMetric() {
		out = append(out, labelMap(m.GetLabel()))
	}
	return out
}

// Series counts the series of the families whose name starts with
// prefix ("" for all), as Prometheus stores them: one per counter, gauge
// or untyped metric; a histogram's buckets (+Inf included), _sum and
// _count; a summary's quantiles, _sum and _count.
func (f Families) Series(prefix string) int {
	n := 0
	for name, fam := range f {
		if !strings.HasPrefix(name, prefix) {
			continue
		}
		for _, m := range fam.GetMetric() {
			switch {
			case m.Histogram != nil:
				n += len(m.GetHistogram().GetBucket()) + 2
				if b := m.GetHistogram().GetBucket(); len(b) == 0 || !math.IsInf(b[len(b)-1].GetUpperBound(), 1) {
					n++ // the +Inf bucket, implied
				}
			case m.Summary != nil:
				n += len(m.GetSummary().GetQuantile()) + 2
			default:
				n++
			}
		}
	}
	return n
}

// Names lists the family names that start with prefix, sorted.
func (f Families) Names(prefix string) []string {
	var out []string
	for name := range f {
		if strings.HasPrefix(name, prefix) {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

func labelMap(ls []*dto.LabelPair) map[string]string {
	m := make(map[string]string, len(ls))
	for _, l := range ls {
		m[l.GetName()] = l.GetValue()
	}
	return m
}

func sameLabels(ls []*dto.LabelPair, want map[string]string) bool {
	if len(ls) != len(want) {
		return false
	}
	for _, l := range ls {
		if v, ok := want[l.GetName()]; !ok || v != l.GetValue() {
			return false
		}
	}
	return true
}
