package lake

import (
	"bufio"
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
)

// batchRows is the number of rows per Arrow record built from an input.
const batchRows = 64 * 1024

// Input formats, chosen by file extension.
const (
	formatCSV     = "csv"
	formatJSONL   = "jsonl"
	formatParquet = "parquet"
)

func formatOf(path string) (string, error) {
	switch strings.ToLower(filepath.Ext(path)) {
	case ".csv":
		return formatCSV, nil
	case ".jsonl", ".json", ".ndjson":
		return formatJSONL, nil
	case ".parquet", ".pq":
		return formatParquet, nil
	}
	return "", fmt.Errorf("%w: %s: unknown format (want .csv, .jsonl, .json or .parquet)", ErrBadInput, path)
}

// converter turns the files of one output into Arrow records of the
// table's Arrow schema, checking the partition column of every row.
type converter struct {
	o       Output
	schema  *arrow.Schema
	types   []string // declared type per column
	partIdx int
	check   partCheck
	mem     memory.Allocator
}

// What a partCheck checks.
const (
	checkNone     = iota // nothing: an append of several partitions
	checkDate            // every row holds the date ds
	checkInterval        // every row holds the start of the interval
	checkBatch           // every row holds one of a batch's dates or interval starts
)

// partCheck is what the partition column of every row must hold.
type partCheck struct {
	kind       int
	ds         string // checkDate
	days       int32  // ds as days since the epoch
	iv         Interval
	start, end int64 // checkInterval: iv as Unix microseconds
	// checkBatch: the values a row may hold (days since the epoch for a
	// date column, Unix microseconds for a timestamp one), and the
	// batch's data interval as iv.
	values map[int64]bool
	dates  bool
}

func dateCheck(ds string) (partCheck, error) {
	d, err := parseDate(ds)
	if err != nil {
		return partCheck{}, fmt.Errorf("lake: ds %q: %w", ds, err)
	}
	return partCheck{kind: checkDate, ds: ds, days: d}, nil
}

func intervalCheck(iv Interval) (partCheck, error) {
	if iv.Start.IsZero() || !iv.End.After(iv.Start) {
		return partCheck{}, fmt.Errorf("lake: data interval [%s, %s) is empty", TimestampValue(iv.Start), TimestampValue(iv.End))
	}
	return partCheck{kind: checkInterval, iv: iv, start: iv.Start.UnixMicro(), end: iv.End.UnixMicro()}, nil
}

// row is a source of values for the declared columns of one input row.
type rowSource interface {
	// value returns column i's value: nil, string, bool, int64, float64,
	// json.Number or time.Time (a date is time.Time at midnight UTC).
	value(i int) (any, error)
}

func newConverter(o Output, schema *arrow.Schema, check partCheck) *converter {
	c := &converter{o: o, schema: schema, check: check, mem: memory.DefaultAllocator, partIdx: -1}
	for i, col := range o.Columns {
		c.types = append(c.types, col.Type)
		if col.Name == o.Partition {
			c.partIdx = i
		}
	}
	return c
}

// checkPartition checks the partition value v of one row.
func (c *converter) checkPartition(v any) error {
	switch c.check.kind {
	case checkDate:
		d, err := toDate(v)
		if err != nil {
			return fmt.Errorf("column %s: %v", c.o.Partition, err)
		}
		if d != c.check.days {
			return fmt.Errorf("row of %s %s in the partition of %s", c.o.Partition,
				time.Unix(int64(d)*86400, 0).UTC().Format(time.DateOnly), c.check.ds)
		}
	case checkBatch:
		return c.checkBatch(v)
	case checkInterval:
		us, err := toTimestampMicros(v)
		if err != nil {
			return fmt.Errorf("column %s: %v", c.o.Partition, err)
		}
		if us == c.check.start {
			return nil
		}
		at := TimestampValue(time.UnixMicro(us))
		span := fmt.Sprintf("[%s, %s)", TimestampValue(c.check.iv.Start), TimestampValue(c.check.iv.End))
		if us < c.check.start || us >= c.check.end {
			return fmt.Errorf("row of %s %s outside the data interval %s", c.o.Partition, at, span)
		}
		return fmt.Errorf("row of %s %s inside the data interval %s but not at its start: the partition column holds the interval's start (run.data_interval_start), %s; put the time of an event in a column of its own",
			c.o.Partition, at, span, TimestampValue(c.check.iv.Start))
	}
	return nil
}

// checkBatch checks a row of a batch: its partition value is one of the
// batch's dates, or of its intervals' starts.
func (c *converter) checkBatch(v any) error {
	span := fmt.Sprintf("[%s, %s)", TimestampValue(c.check.iv.Start), TimestampValue(c.check.iv.End))
	if c.check.dates {
		d, err := toDate(v)
		if err != nil {
			return fmt.Errorf("column %s: %v", c.o.Partition, err)
		}
		if !c.check.values[int64(d)] {
			return fmt.Errorf("row of %s %s outside the dates of the batch %s", c.o.Partition,
				time.Unix(int64(d)*86400, 0).UTC().Format(time.DateOnly), span)
		}
		return nil
	}
	us, err := toTimestampMicros(v)
	if err != nil {
		return fmt.Errorf("column %s: %v", c.o.Partition, err)
	}
	if c.check.values[us] {
		return nil
	}
	at := TimestampValue(time.UnixMicro(us))
	if us < c.check.start || us >= c.check.end {
		return fmt.Errorf("row of %s %s outside the batch's data interval %s", c.o.Partition, at, span)
	}
	return fmt.Errorf("row of %s %s inside the batch %s but not at the start of one of its intervals: the partition column holds each row's interval start; put the time of an event in a column of its own",
		c.o.Partition, at, span)
}

// batch accumulates rows into one Arrow record.
type batch struct {
	c   *converter
	b   *array.RecordBuilder
	n   int
	out []arrow.RecordBatch
}

func (c *converter) newBatch() *batch {
	return &batch{c: c, b: array.NewRecordBuilder(c.mem, c.schema)}
}

func (bt *batch) add(src rowSource, where func() string) error {
	for i := range bt.c.types {
		v, err := src.value(i)
		if err != nil {
			return fmt.Errorf("%w: %s: column %s: %v", ErrBadInput, where(), bt.c.o.Columns[i].Name, err)
		}
		if i == bt.c.partIdx {
			if v == nil {
				return fmt.Errorf("%w: %s: partition column %s is empty", ErrBadInput, where(), bt.c.o.Partition)
			}
			if err := bt.c.checkPartition(v); err != nil {
				return fmt.Errorf("%w: %s: %v", ErrBadInput, where(), err)
			}
		}
		if err := appendValue(bt.b.Field(i), bt.c.types[i], v); err != nil {
			return fmt.Errorf("%w: %s: column %s: %v", ErrBadInput, where(), bt.c.o.Columns[i].Name, err)
		}
	}
	bt.n++
	if bt.n >= batchRows {
		bt.flush()
	}
	return nil
}

func (bt *batch) flush() {
	if bt.n == 0 {
		return
	}
	bt.out = append(bt.out, bt.b.NewRecordBatch())
	bt.n = 0
}

func (bt *batch) release() {
	bt.b.Release()
	for _, r := range bt.out {
		r.Release()
	}
	bt.out = nil
}

// readFiles converts every file into Arrow records. On error, nothing is
// returned (and nothing has been written to the table).
func (c *converter) readFiles(ctx context.Context, files []string) ([]arrow.RecordBatch, error) {
	bt := c.newBatch()
	for _, path := range files {
		if err := ctx.Err(); err != nil {
			bt.release()
			return nil, err
		}
		format, err := formatOf(path)
		if err == nil {
			switch format {
			case formatCSV:
				err = c.readCSV(path, bt)
			case formatJSONL:
				err = c.readJSONL(path, bt)
			case formatParquet:
				err = c.readParquet(ctx, path, bt)
			}
		}
		if err != nil {
			bt.release()
			return nil, err
		}
	}
	bt.flush()
	bt.b.Release()
	return bt.out, nil
}

type csvRow struct {
	rec   []string
	index []int // column -> record position
}

func (r csvRow) value(i int) (any, error) {
	return r.rec[r.index[i]], nil
}

func (c *converter) readCSV(path string, bt *batch) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrBadInput, err)
	}
	defer f.Close()
	r := csv.NewReader(bufio.NewReaderSize(f, 1<<20))
	r.ReuseRecord = true
	header, err := r.Read()
	if err == io.EOF {
		return fmt.Errorf("%w: %s: empty file, want a header line", ErrBadInput, path)
	}
	if err != nil {
		return fmt.Errorf("%w: %s: %v", ErrBadInput, path, err)
	}
	pos := map[string]int{}
	for i, h := range header {
		h = strings.TrimSpace(strings.TrimPrefix(h, "\ufeff"))
		pos[h] = i
	}
	index, err := c.mapHeader(path, pos)
	if err != nil {
		return err
	}
	line := 1
	where := func() string { return fmt.Sprintf("%s:%d", path, line) }
	for {
		rec, err := r.Read()
		line++
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%w: %s: %v", ErrBadInput, path, err)
		}
		if err := bt.add(csvRow{rec: rec, index: index}, where); err != nil {
			return err
		}
	}
}

// mapHeader maps declared columns to the positions of a file's columns:
// every declared column must be present and every file column declared.
func (c *converter) mapHeader(path string, pos map[string]int) ([]int, error) {
	index := make([]int, len(c.o.Columns))
	for i, col := range c.o.Columns {
		p, ok := pos[col.Name]
		if !ok {
			return nil, fmt.Errorf("%w: %s: no column %s", ErrBadInput, path, col.Name)
		}
		index[i] = p
	}
	if len(pos) != len(c.o.Columns) {
		declared := map[string]bool{}
		for _, col := range c.o.Columns {
			declared[col.Name] = true
		}
		for name := range pos {
			if !declared[name] {
				return nil, fmt.Errorf("%w: %s: column %s is not declared in the output", ErrBadInput, path, name)
			}
		}
	}
	return index, nil
}

type jsonRow struct {
	obj   map[string]any
	names []string
}

func (r jsonRow) value(i int) (any, error) {
	v := r.obj[r.names[i]]
	switch v.(type) {
	case nil, string, bool, json.Number:
		return v, nil
	}
	return nil, fmt.Errorf("unsupported JSON value %v", v)
}

func (c *converter) readJSONL(path string, bt *batch) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrBadInput, err)
	}
	defer f.Close()
	names := make([]string, len(c.o.Columns))
	declared := map[string]bool{}
	for i, col := range c.o.Columns {
		names[i] = col.Name
		declared[col.Name] = true
	}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	line := 0
	where := func() string { return fmt.Sprintf("%s:%d", path, line) }
	for sc.Scan() {
		line++
		b := bytes.TrimSpace(sc.Bytes())
		if len(b) == 0 {
			continue
		}
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.UseNumber()
		var obj map[string]any
		if err := dec.Decode(&obj); err != nil {
			return fmt.Errorf("%w: %s: %v", ErrBadInput, where(), err)
		}
		for k := range obj {
			if !declared[k] {
				return fmt.Errorf("%w: %s: field %s is not declared in the output", ErrBadInput, where(), k)
			}
		}
		if err := bt.add(jsonRow{obj: obj, names: names}, where); err != nil {
			return err
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("%w: %s: %v", ErrBadInput, path, err)
	}
	return nil
}

type arrowRow struct {
	cols []arrow.Array
	row  int
}

func (r *arrowRow) value(i int) (any, error) {
	return arrowValue(r.cols[i], r.row)
}

func (c *converter) readParquet(ctx context.Context, path string, bt *batch) error {
	pf, err := file.OpenParquetFile(path, false)
	if err != nil {
		return fmt.Errorf("%w: %s: %v", ErrBadInput, path, err)
	}
	defer pf.Close()
	fr, err := pqarrow.NewFileReader(pf, pqarrow.ArrowReadProperties{BatchSize: batchRows}, c.mem)
	if err != nil {
		return fmt.Errorf("%w: %s: %v", ErrBadInput, path, err)
	}
	rr, err := fr.GetRecordReader(ctx, nil, nil)
	if err != nil {
		return fmt.Errorf("%w: %s: %v", ErrBadInput, path, err)
	}
	defer rr.Release()
	pos := map[string]int{}
	for i, f := range rr.Schema().Fields() {
		pos[f.Name] = i
	}
	index, err := c.mapHeader(path, pos)
	if err != nil {
		return err
	}
	row := 0
	where := func() string { return fmt.Sprintf("%s: row %d", path, row+1) }
	for rr.Next() {
		rec := rr.RecordBatch()
		src := &arrowRow{cols: make([]arrow.Array, len(index))}
		for i, p := range index {
			src.cols[i] = rec.Column(p)
		}
		for j := 0; j < int(rec.NumRows()); j++ {
			src.row = j
			if err := bt.add(src, where); err != nil {
				return err
			}
			row++
		}
	}
	if err := rr.Err(); err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("%w: %s: %v", ErrBadInput, path, err)
	}
	return nil
}
