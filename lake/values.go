package lake

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
)

// arrowValue reads one value of a Parquet column.
func arrowValue(a arrow.Array, i int) (any, error) {
	if a.IsNull(i) {
		return nil, nil
	}
	switch a := a.(type) {
	case *array.String:
		return a.Value(i), nil
	case *array.LargeString:
		return a.Value(i), nil
	case *array.Boolean:
		return a.Value(i), nil
	case *array.Int8:
		return int64(a.Value(i)), nil
	case *array.Int16:
		return int64(a.Value(i)), nil
	case *array.Int32:
		return int64(a.Value(i)), nil
	case *array.Int64:
		return a.Value(i), nil
	case *array.Uint8:
		return int64(a.Value(i)), nil
	case *array.Uint16:
		return int64(a.Value(i)), nil
	case *array.Uint32:
		return int64(a.Value(i)), nil
	case *array.Float32:
		return float64(a.Value(i)), nil
	case *array.Float64:
		return a.Value(i), nil
	case *array.Date32:
		return a.Value(i).ToTime(), nil
	case *array.Date64:
		return a.Value(i).ToTime(), nil
	case *array.Timestamp:
		unit := a.DataType().(*arrow.TimestampType).Unit
		return a.Value(i).ToTime(unit).UTC(), nil
	}
	return nil, fmt.Errorf("unsupported Parquet type %s", a.DataType())
}

// parseDate parses YYYY-MM-DD into days since the epoch.
func parseDate(s string) (int32, error) {
	t, err := time.Parse(time.DateOnly, strings.TrimSpace(s))
	if err != nil {
		return 0, fmt.Errorf("not a date (want YYYY-MM-DD): %q", s)
	}
	return int32(t.Unix() / 86400), nil
}

func toDate(v any) (int32, error) {
	switch v := v.(type) {
	case string:
		return parseDate(v)
	case time.Time:
		// A date, or a timestamp at midnight UTC.
		if v.UTC().Truncate(24*time.Hour) != v.UTC() {
			return 0, fmt.Errorf("timestamp %s is not a date", v)
		}
		return int32(v.UTC().Unix() / 86400), nil
	}
	return 0, fmt.Errorf("not a date: %v", v)
}

var timestampLayouts = []string{
	time.RFC3339Nano,
	"2006-01-02T15:04:05.999999999",
	"2006-01-02 15:04:05.999999999Z07:00",
	"2006-01-02 15:04:05.999999999",
	time.DateOnly,
}

func toTimestampMicros(v any) (int64, error) {
	switch v := v.(type) {
	case string:
		s := strings.TrimSpace(v)
		for _, layout := range timestampLayouts {
			if t, err := time.Parse(layout, s); err == nil {
				return t.UTC().UnixMicro(), nil
			}
		}
		return 0, fmt.Errorf("not a timestamp: %q", v)
	case time.Time:
		return v.UTC().UnixMicro(), nil
	}
	return 0, fmt.Errorf("not a timestamp: %v", v)
}

func toInt(v any, bits int) (int64, error) {
	var n int64
	switch v := v.(type) {
	case string:
		x, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("not an integer: %q", v)
		}
		n = x
	case json.Number:
		x, err := strconv.ParseInt(string(v), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("not an integer: %s", v)
		}
		n = x
	case int64:
		n = v
	case float64:
		if v != math.Trunc(v) || math.Abs(v) > 1<<53 {
			return 0, fmt.Errorf("not an integer: %v", v)
		}
		n = int64(v)
	default:
		return 0, fmt.Errorf("not an integer: %v", v)
	}
	if bits == 32 && (n < math.MinInt32 || n > math.MaxInt32) {
		return 0, fmt.Errorf("%d out of range for int", n)
	}
	return n, nil
}

func toFloat(v any) (float64, error) {
	switch v := v.(type) {
	case string:
		x, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if err != nil {
			return 0, fmt.Errorf("not a number: %q", v)
		}
		return x, nil
	case json.Number:
		x, err := strconv.ParseFloat(string(v), 64)
		if err != nil {
			return 0, fmt.Errorf("not a number: %s", v)
		}
		return x, nil
	case int64:
		return float64(v), nil
	case float64:
		return v, nil
	}
	return 0, fmt.Errorf("not a number: %v", v)
}

func toBool(v any) (bool, error) {
	switch v := v.(type) {
	case bool:
		return v, nil
	case string:
		switch strings.ToLower(strings.TrimSpace(v)) {
		case "true", "t", "1", "yes":
			return true, nil
		case "false", "f", "0", "no":
			return false, nil
		}
	case int64:
		if v == 0 || v == 1 {
			return v == 1, nil
		}
	case json.Number:
		if v == "0" || v == "1" {
			return v == "1", nil
		}
	}
	return false, fmt.Errorf("not a boolean: %v", v)
}

// appendValue converts v to the declared type and appends it. An empty
// string is a null for every type but string.
func appendValue(b array.Builder, typ string, v any) error {
	if s, ok := v.(string); ok && s == "" && typ != "string" {
		v = nil
	}
	if v == nil {
		b.AppendNull()
		return nil
	}
	switch typ {
	case "string":
		switch x := v.(type) {
		case string:
			b.(*array.StringBuilder).Append(x)
		case json.Number:
			b.(*array.StringBuilder).Append(string(x))
		case time.Time:
			b.(*array.StringBuilder).Append(x.Format(time.RFC3339Nano))
		default:
			b.(*array.StringBuilder).Append(fmt.Sprint(x))
		}
	case "date":
		d, err := toDate(v)
		if err != nil {
			return err
		}
		b.(*array.Date32Builder).Append(arrow.Date32(d))
	case "double":
		f, err := toFloat(v)
		if err != nil {
			return err
		}
		b.(*array.Float64Builder).Append(f)
	case "long":
		n, err := toInt(v, 64)
		if err != nil {
			return err
		}
		b.(*array.Int64Builder).Append(n)
	case "int":
		n, err := toInt(v, 32)
		if err != nil {
			return err
		}
		b.(*array.Int32Builder).Append(int32(n))
	case "boolean":
		x, err := toBool(v)
		if err != nil {
			return err
		}
		b.(*array.BooleanBuilder).Append(x)
	case "timestamp":
		us, err := toTimestampMicros(v)
		if err != nil {
			return err
		}
		b.(*array.TimestampBuilder).Append(arrow.Timestamp(us))
	default:
		return fmt.Errorf("unknown type %s", typ)
	}
	return nil
}
