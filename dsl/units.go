package dsl

import (
	"fmt"
	"math"
	"math/big"
	"regexp"
	"strconv"
	"strings"
	"time"
)

var sizeUnits = map[string]int64{
	"":    1,
	"b":   1,
	"k":   1000,
	"kb":  1000,
	"m":   1000 * 1000,
	"mb":  1000 * 1000,
	"g":   1000 * 1000 * 1000,
	"gb":  1000 * 1000 * 1000,
	"t":   1000 * 1000 * 1000 * 1000,
	"tb":  1000 * 1000 * 1000 * 1000,
	"ki":  1 << 10,
	"kib": 1 << 10,
	"mi":  1 << 20,
	"mib": 1 << 20,
	"gi":  1 << 30,
	"gib": 1 << 30,
	"ti":  1 << 40,
	"tib": 1 << 40,
}

var sizeRE = regexp.MustCompile(`^([0-9]+(?:\.[0-9]+)?)\s*([A-Za-z]*)$`)

// ParseSize parses a memory size: plain bytes ("1048576"), decimal units
// ("100KB", "1.5GB": powers of 1000) or binary units ("512MiB", "8GiB", or
// Kubernetes' "8Gi": powers of 1024). Units are case-insensitive; a
// fractional result is rounded down to whole bytes.
func ParseSize(s string) (int64, error) {
	m := sizeRE.FindStringSubmatch(strings.TrimSpace(s))
	if m == nil {
		return 0, fmt.Errorf("invalid size %q: use a number of bytes or a number with a unit, like 512MiB, 8GiB or 1.5GB", s)
	}
	unit, ok := sizeUnits[strings.ToLower(m[2])]
	if !ok {
		return 0, fmt.Errorf("invalid size %q: unknown unit %q (use B, KB, MB, GB, TB, KiB, MiB, GiB or TiB)", s, m[2])
	}
	r, ok := new(big.Rat).SetString(m[1])
	if !ok {
		return 0, fmt.Errorf("invalid size %q", s)
	}
	r.Mul(r, new(big.Rat).SetInt64(unit))
	n := new(big.Int).Quo(r.Num(), r.Denom())
	if !n.IsInt64() {
		return 0, fmt.Errorf("invalid size %q: too large", s)
	}
	return n.Int64(), nil
}

// FormatSize writes n bytes with the largest binary unit that divides it.
func FormatSize(n int64) string {
	for _, u := range []struct {
		name string
		size int64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n != 0 && n%u.size == 0 {
			return strconv.FormatInt(n/u.size, 10) + u.name
		}
	}
	return strconv.FormatInt(n, 10) + "B"
}

var daysRE = regexp.MustCompile(`^([0-9]+)d(.*)$`)

// ParseDuration parses a non-negative duration in Go's syntax ("30s", "5m",
// "1h30m"), also accepting a leading number of days ("14d", "1d12h").
func ParseDuration(s string) (time.Duration, error) {
	in := strings.TrimSpace(s)
	var days time.Duration
	if m := daysRE.FindStringSubmatch(in); m != nil {
		n, err := strconv.ParseInt(m[1], 10, 64)
		if err != nil || n > math.MaxInt64/int64(24*time.Hour) {
			return 0, fmt.Errorf("invalid duration %q: too large", s)
		}
		days = time.Duration(n) * 24 * time.Hour
		in = m[2]
		if in == "" {
			return days, nil
		}
	}
	d, err := time.ParseDuration(in)
	if err != nil {
		return 0, fmt.Errorf("invalid duration %q: use a number with a unit, like 30s, 5m, 1h30m or 2d", s)
	}
	if d < 0 {
		return 0, fmt.Errorf("invalid duration %q: must not be negative", s)
	}
	if days > 0 && d > math.MaxInt64-days {
		return 0, fmt.Errorf("invalid duration %q: too large", s)
	}
	return days + d, nil
}

// dateOnly is the layout of a date without a time.
const dateOnly = "2006-01-02"

// parseDate parses YYYY-MM-DD as midnight in loc, or an RFC 3339 time,
// which it returns in loc.
func parseDate(s string, loc *time.Location) (time.Time, error) {
	if t, err := time.ParseInLocation(dateOnly, s, loc); err == nil {
		return t, nil
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("%q is not a date: use YYYY-MM-DD or RFC 3339 (2025-07-01T00:00:00Z)", s)
	}
	return t.In(loc), nil
}
