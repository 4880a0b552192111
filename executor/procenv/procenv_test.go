package procenv

import (
	"slices"
	"testing"
)

func TestBuild(t *testing.T) {
	from := []string{
		"PATH=/usr/bin", "HOME=/home/r", "LC_ALL=C", "LCX=no", "TZ=UTC",
		"REWIND_STATE=postgres://rewind:s3cret@db/rewind", "PGPASSWORD=s3cret",
		"REWIND_UI_TOKEN=tok", "REWIND_HOST=h1", "REWIND_VAR_token=v",
		"AWS_SECRET_ACCESS_KEY=aws", "AWS_REGION=eu", "SPARK_HOME=/opt/spark",
		"SPARK_HOME_X=no", "=odd", "noequals",
	}
	got := Build(from, []string{"AWS_*", "SPARK_HOME"},
		[]string{"REWIND_DS=2025-07-01", "HOME=/run"},
		[]string{"REWIND_SECRET_token=v", "X=1", "X=2"})
	want := []string{
		"AWS_REGION=eu", "AWS_SECRET_ACCESS_KEY=aws", "HOME=/run", "LC_ALL=C",
		"PATH=/usr/bin", "REWIND_DS=2025-07-01", "REWIND_SECRET_token=v",
		"SPARK_HOME=/opt/spark", "TZ=UTC", "X=2",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("Build:\n got %q\nwant %q", got, want)
	}
	// Without the workspace's patterns, only the default set passes.
	got = Build(from, nil)
	want = []string{"HOME=/home/r", "LC_ALL=C", "PATH=/usr/bin", "TZ=UTC"}
	if !slices.Equal(got, want) {
		t.Fatalf("Build without pass:\n got %q\nwant %q", got, want)
	}
}

func TestMatch(t *testing.T) {
	for _, c := range []struct {
		pattern, name string
		want          bool
	}{
		{"PATH", "PATH", true},
		{"PATH", "PATHX", false},
		{"LC_*", "LC_ALL", true},
		{"LC_*", "LC_", true},
		{"LC_*", "LANG", false},
		{"AWS_*", "XAWS_A", false},
	} {
		if got := Match(c.pattern, c.name); got != c.want {
			t.Errorf("Match(%q, %q) = %v, want %v", c.pattern, c.name, got, c.want)
		}
	}
}
