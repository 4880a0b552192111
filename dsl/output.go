package dsl

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/robfig/cron/v3"
	"github.com/zclconf/go-cty/cty"
	"github.com/zclconf/go-cty/cty/convert"
)

// Output defaults.
const (
	DefaultPartition = "ds"
	DefaultRetention = 14 * 24 * time.Hour
)

// ColumnTypes are the types an output column may have.
var ColumnTypes = []string{"date", "string", "double", "long", "int", "boolean", "timestamp"}

// partitionTypes are the column types a partition column may have: a date
// (one partition per ds) or a timestamp (one partition per data interval,
// holding its start).
var partitionTypes = map[string]bool{"date": true, "timestamp": true}

const partitionTypesText = "the partition column must be of type \"date\", one partition per logical date, or \"timestamp\", one partition per data interval (each row holding its run's run.data_interval_start)."

// numericColumnTypes are the column types max_change applies to.
var numericColumnTypes = map[string]bool{"double": true, "long": true, "int": true}

// tablePart is one part of a table identifier "namespace.table".
var tablePart = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

var outputSchema = &hcl.BodySchema{
	Attributes: []hcl.AttributeSchema{
		{Name: "catalog"},
		{Name: "table"},
		{Name: "from"},
		{Name: "columns"},
		{Name: "partition"},
		{Name: "retention"},
	},
	Blocks: []hcl.BlockHeaderSchema{
		{Type: "validate"},
	},
}

var outputValidateSchema = &hcl.BodySchema{
	Attributes: []hcl.AttributeSchema{
		{Name: "max_change"},
		{Name: "rules"},
	},
}

const outputStaticReason = "An output's catalog, table, columns, partition, retention and validate rules are the same for every run: only its from may refer to run.*, and nothing in it to pool.*."

// outputDecl is what the workspace-wide checks need of a decoded output.
type outputDecl struct {
	o          *Output
	pipe       string
	tableRange hcl.Range // the table expression; the block header when unset
}

// decodeOutputs reads the output blocks of pipeline p. ctx and sc are the
// pipeline's (each.* of a for_each instance); from may refer to run.* as
// well.
func (l *loader) decodeOutputs(p *Pipeline, blocks []*hcl.Block, ctx *hcl.EvalContext, sc scope) {
	byName := map[string]*Output{}
	static := scope{each: sc.each, static: outputStaticReason}
	fromScope := scope{each: sc.each, run: true, output: true}
	for _, b := range blocks {
		name := b.Labels[0]
		if !l.checkName("output", name, b) {
			continue
		}
		if prev := byName[name]; prev != nil {
			l.errorf(b.DefRange, "Duplicate output", "The pipeline %q already has an output named %q at %s. Output names must be unique within a pipeline.", p.Label, name, prev.DeclRange)
			continue
		}
		o := &Output{
			Name:      name,
			Catalog:   DefaultCatalogName,
			Partition: DefaultPartition,
			Retention: DefaultRetention,
			MaxChange: map[string]float64{},
			DeclRange: b.DefRange,
			ctx:       ctx,
			dir:       p.Dir,
			loc:       p.Timezone,
			pipe:      p.Name,
		}
		byName[name] = o
		p.Outputs = append(p.Outputs, o)

		content, diags := b.Body.Content(outputSchema)
		l.diags = append(l.diags, diags...)
		attrs := content.Attributes

		if attr := attrs["catalog"]; attr != nil {
			if s, ok := l.stringAttr(attr, ctx, static, true); ok {
				if l.ws.Catalogs[s] == nil {
					l.errorf(attr.Expr.Range(), "Unknown catalog", "No catalog named %q is declared. %s", s, l.knownCatalogs())
				} else {
					o.Catalog = s
				}
			}
		}

		decl := &outputDecl{o: o, pipe: p.Name, tableRange: b.DefRange}
		if attr := attrs["table"]; attr == nil {
			l.errorf(b.DefRange, "Missing required argument", "The output %q has no table: set the Iceberg table it writes, as \"namespace.table\" (such as \"analytics.fct_daily_revenue\").", name)
		} else if s, ok := l.stringAttr(attr, ctx, static, true); ok {
			decl.tableRange = attr.Expr.Range()
			if msg := checkTable(s); msg != "" {
				l.errorf(attr.Expr.Range(), "Invalid table", "%s", msg)
			} else {
				o.Table = s
				l.outputs = append(l.outputs, decl)
			}
		}

		if attr := attrs["from"]; attr == nil {
			l.errorf(b.DefRange, "Missing required argument", "The output %q has no from: set the files a run writes for it (CSV with a header, JSON lines or Parquet), a glob relative to the directory of this file that may use run.*, such as \"${run.dir}/revenue.csv\".", name)
		} else if l.checkOutputFrom(attr, ctx, fromScope) {
			o.from = attr.Expr
			o.fromText = pathText(l.ws.Files, attr.Expr)
		}

		columnRanges := map[string]hcl.Range{}
		columnsOK := false
		if attr := attrs["columns"]; attr == nil {
			l.errorf(b.DefRange, "Missing required argument", "The output %q has no columns: set a map of column name to type (%s), such as { ds = \"date\", amount = \"double\" }.", name, strings.Join(ColumnTypes, ", "))
		} else {
			o.Columns, columnRanges, columnsOK = l.decodeColumns(attr, ctx, static)
		}
		types := map[string]string{}
		for _, c := range o.Columns {
			types[c.Name] = c.Type
		}

		if attr := attrs["partition"]; attr != nil {
			if s, ok := l.stringAttr(attr, ctx, static, true); ok {
				o.Partition = s
				if columnsOK {
					switch t, found := types[s]; {
					case !found:
						l.errorf(attr.Expr.Range(), "Invalid partition", "The partition column %q is not one of the output's columns (%s): name the date column of columns that holds each row's logical date, or the timestamp column that holds its data interval's start.", s, columnNames(o.Columns))
					case !partitionTypes[t]:
						l.errorf(attr.Expr.Range(), "Invalid partition", "The partition column %q has type %q at %s: %s", s, t, columnRanges[s], partitionTypesText)
					default:
						l.checkPartitionSchedule(p, o, t, attr.Expr.Range(), true)
					}
				}
			}
		} else if columnsOK {
			cr := attrs["columns"].Expr.Range()
			switch t, found := types[DefaultPartition]; {
			case !found:
				l.errorf(cr, "Missing partition column", "The output %q sets no partition, so its partition column is %q, which columns does not declare: add %s = \"date\" to columns, or set partition to its date column.", name, DefaultPartition, DefaultPartition)
			case !partitionTypes[t]:
				l.errorf(columnRanges[DefaultPartition], "Invalid partition", "The output %q sets no partition, so its partition column is %q, which has type %q: %s", name, DefaultPartition, t, partitionTypesText)
			default:
				l.checkPartitionSchedule(p, o, t, b.DefRange, false)
			}
		}

		if attr := attrs["retention"]; attr != nil {
			if d, ok := l.durationAttr(attr, ctx, static); ok {
				if d <= 0 {
					l.errorf(attr.Expr.Range(), "Invalid retention", "retention must be more than 0: it is how long an output's replaced versions are kept (default 14d).")
				} else {
					o.Retention = d
				}
			}
		}

		var validate *hcl.Block
		for _, blk := range content.Blocks {
			if validate != nil {
				l.errorf(blk.DefRange, "Duplicate validate block", "The output %q already has a validate block at %s; an output has at most one.", name, validate.DefRange)
				continue
			}
			validate = blk
			l.decodeOutputValidate(o, blk, ctx, static, types, columnsOK)
		}
	}
}

// checkPartitionSchedule refuses a date partition column (typ) on a
// schedule that starts more than one data interval on some day: each run
// would replace the partition of the day's earlier runs. r is the partition
// attribute, or the block header when the partition is the default.
func (l *loader) checkPartitionSchedule(p *Pipeline, o *Output, typ string, r hcl.Range, written bool) {
	if typ != "date" || p.Schedule == "" {
		return
	}
	n := ticksPerDay(p.Schedule)
	if n <= 1 {
		return
	}
	which := fmt.Sprintf("The partition column %q is a date", o.Partition)
	if !written {
		which = fmt.Sprintf("The output %q sets no partition, so its partition column is %q, a date", o.Name, o.Partition)
	}
	l.errorf(r, "Date partition on a sub-daily schedule",
		"%s: one partition per day. The schedule %s of pipeline %q starts up to %d data intervals a day, and each run would replace the partition of the day's earlier runs: the day would keep only its last run. "+
			"Partition by data interval instead: a timestamp column whose rows hold their run's run.data_interval_start, named in partition, such as %s.",
		which, quote(p.Schedule), p.Name, n, intervalExample(o, n))
}

// intervalExample is the output's columns and partition with its date
// partition column made a timestamp column: what to write instead, for a
// schedule of n ticks a day.
func intervalExample(o *Output, n int) string {
	name := "interval_start"
	if c := o.Column("hour"); n == 24 && (c == nil || c.Name == o.Partition) {
		name = "hour"
	}
	cols := []string{name + ` = "timestamp"`}
	for _, c := range o.Columns {
		if c.Name != o.Partition && c.Name != name {
			cols = append(cols, fmt.Sprintf("%s = %q", c.Name, c.Type))
		}
	}
	return fmt.Sprintf("columns = { %s } with partition = %q", strings.Join(cols, ", "), name)
}

// ticksPerDay is the largest number of times the cron schedule s fires in
// one day (its minutes times its hours), 0 when s does not parse.
func ticksPerDay(s string) int {
	sched, err := cronParser.Parse(strings.TrimSpace(s))
	if err != nil {
		return 0
	}
	spec, ok := sched.(*cron.SpecSchedule)
	if !ok {
		return 0
	}
	const star = 1 << 63
	minutes := bits.OnesCount64(spec.Minute &^ star & (1<<60 - 1))
	hours := bits.OnesCount64(spec.Hour &^ star & (1<<24 - 1))
	return minutes * hours
}

// checkTable returns why s is not a table identifier "namespace.table", or "".
func checkTable(s string) string {
	ns, table, ok := strings.Cut(s, ".")
	switch {
	case !ok || strings.Contains(table, "."):
		return fmt.Sprintf("table must be \"namespace.table\", with exactly one dot (such as \"analytics.fct_daily_revenue\"), not %q.", s)
	case !tablePart.MatchString(ns) || !tablePart.MatchString(table):
		return fmt.Sprintf("The namespace and the table name of %q must be identifiers: letters, digits and underscores, starting with a letter or underscore.", s)
	}
	return ""
}

// checkOutputFrom checks an output's from at load time.
func (l *loader) checkOutputFrom(attr *hcl.Attribute, ctx *hcl.EvalContext, sc scope) bool {
	return l.checkGlob(attr, ctx, sc, "from", "matches the files a run writes for the output")
}

// mapItem is one key of a map attribute, with where it is written.
type mapItem struct {
	key      string
	keyRange hcl.Range
	valRange hcl.Range
}

// mapItems returns the keys of m, the value of attr, in the order they are
// written when attr is an object constructor ({ a = 1, b = 2 }), else
// sorted; the ranges are the attribute's expression when the keys are not
// written out. A key written twice is reported as a duplicate (summary
// "Duplicate "+what) and listed once.
func (l *loader) mapItems(attr *hcl.Attribute, ctx *hcl.EvalContext, m map[string]cty.Value, what string) []mapItem {
	var items []mapItem
	seen := map[string]hcl.Range{}
	if obj, ok := attr.Expr.(*hclsyntax.ObjectConsExpr); ok {
		for _, it := range obj.Items {
			kv, diags := it.KeyExpr.Value(ctx)
			if diags.HasErrors() {
				continue
			}
			sv, err := convert.Convert(unmark(kv), cty.String)
			if err != nil || sv.IsNull() || !sv.IsKnown() {
				continue
			}
			k := sv.AsString()
			if _, in := m[k]; !in {
				continue
			}
			if prev, dup := seen[k]; dup {
				l.errorf(it.KeyExpr.Range(), "Duplicate "+what, "%q is already a key of %s at %s.", k, attr.Name, prev)
				continue
			}
			seen[k] = it.KeyExpr.Range()
			items = append(items, mapItem{key: k, keyRange: it.KeyExpr.Range(), valRange: it.ValueExpr.Range()})
		}
	}
	var rest []string
	for k := range m {
		if _, ok := seen[k]; !ok {
			rest = append(rest, k)
		}
	}
	sort.Strings(rest)
	for _, k := range rest {
		items = append(items, mapItem{key: k, keyRange: attr.Expr.Range(), valRange: attr.Expr.Range()})
	}
	return items
}

// decodeColumns reads an output's columns: a map of name to type, in the
// order written. ok is false when the columns are unknown or wrong; the
// valid columns are returned either way, with the range of each one's type.
func (l *loader) decodeColumns(attr *hcl.Attribute, ctx *hcl.EvalContext, sc scope) ([]OutputColumn, map[string]hcl.Range, bool) {
	ranges := map[string]hcl.Range{}
	v, ok := l.value(attr, ctx, sc, cty.Map(cty.String), true)
	if !ok {
		return nil, ranges, false
	}
	m := v.AsValueMap()
	if len(m) == 0 {
		l.errorf(attr.Expr.Range(), "Invalid columns", "columns must declare at least one column: a map of column name to type (%s), such as { ds = \"date\", amount = \"double\" }.", strings.Join(ColumnTypes, ", "))
		return nil, ranges, false
	}
	valid := map[string]bool{}
	for _, t := range ColumnTypes {
		valid[t] = true
	}
	var cols []OutputColumn
	ok = true
	for _, it := range l.mapItems(attr, ctx, m, "column") {
		ev := m[it.key]
		switch {
		case strings.TrimSpace(it.key) == "":
			l.errorf(it.keyRange, "Invalid column name", "A column name must not be empty.")
			ok = false
		case ev.IsNull():
			l.errorf(it.valRange, "Invalid column type", "The type of column %q is null: use one of %s.", it.key, strings.Join(ColumnTypes, ", "))
			ok = false
		case !valid[ev.AsString()]:
			l.errorf(it.valRange, "Invalid column type", "The column %q has type %q: the column types are %s.", it.key, ev.AsString(), strings.Join(ColumnTypes, ", "))
			ok = false
		default:
			cols = append(cols, OutputColumn{Name: it.key, Type: ev.AsString()})
			ranges[it.key] = it.valRange
		}
	}
	return cols, ranges, ok
}

// decodeOutputValidate reads an output's validate block. types are the
// output's valid columns; columnsOK says whether they are all of them.
func (l *loader) decodeOutputValidate(o *Output, b *hcl.Block, ctx *hcl.EvalContext, sc scope, types map[string]string, columnsOK bool) {
	content, diags := b.Body.Content(outputValidateSchema)
	l.diags = append(l.diags, diags...)
	if attr := content.Attributes["rules"]; attr != nil {
		l.decodeRules(o, attr, ctx, sc, &ruleScope{cols: o.Columns, types: types, columnsOK: columnsOK})
	}
	attr := content.Attributes["max_change"]
	if attr == nil {
		return
	}
	v, ok := l.value(attr, ctx, sc, cty.Map(cty.Number), true)
	if !ok {
		return
	}
	m := v.AsValueMap()
	for _, it := range l.mapItems(attr, ctx, m, "max_change column") {
		t, found := types[it.key]
		switch {
		case !found && !columnsOK:
			continue // the column may be one of those in error
		case !found:
			l.errorf(it.keyRange, "Unknown max_change column", "max_change names the column %q, which is not one of the output's columns (%s).", it.key, columnNames(o.Columns))
			continue
		case !numericColumnTypes[t]:
			l.errorf(it.keyRange, "Invalid max_change column", "max_change applies to the sum of a numeric column (double, long or int); the column %q has type %q.", it.key, t)
			continue
		}
		ev := m[it.key]
		if ev.IsNull() {
			l.errorf(it.valRange, "Invalid max_change", "The max_change of column %q is null: use a fraction such as 0.05 (5%%).", it.key)
			continue
		}
		f, _ := ev.AsBigFloat().Float64()
		if !(f > 0) || math.IsInf(f, 0) {
			l.errorf(it.valRange, "Invalid max_change", "The max_change of column %q must be a number more than 0, the largest accepted |new - old| / |old| of the column's sum per date (such as 0.05 for 5%%), not %s.", it.key, ev.AsBigFloat().Text('g', -1))
			continue
		}
		o.MaxChange[it.key] = f
	}
}

func columnNames(cols []OutputColumn) string {
	names := make([]string, len(cols))
	for i, c := range cols {
		names[i] = c.Name
	}
	return strings.Join(names, ", ")
}

// checkOutputTables reports two outputs, in any pipelines, that write the
// same table of the same catalog: the later one in the files names the
// earlier.
func (l *loader) checkOutputTables() {
	decls := l.outputs
	sort.SliceStable(decls, func(i, j int) bool {
		a, b := decls[i].tableRange, decls[j].tableRange
		if a.Filename != b.Filename {
			return a.Filename < b.Filename
		}
		return a.Start.Byte < b.Start.Byte
	})
	first := map[[2]string]*outputDecl{}
	for _, d := range decls {
		key := [2]string{d.o.Catalog, d.o.Table}
		prev := first[key]
		if prev == nil {
			first[key] = d
			continue
		}
		l.errorf(d.tableRange, "Table written by two outputs", "The output %q of pipeline %q writes the table %q of catalog %q, which the output %q of pipeline %q already writes (%s). A table has one writer: each run replaces its own partition.", d.o.Name, d.pipe, d.o.Table, d.o.Catalog, prev.o.Name, prev.pipe, prev.tableRange)
	}
}

// Output returns the output called name, or nil.
func (p *Pipeline) Output(name string) *Output {
	for _, o := range p.Outputs {
		if o.Name == name {
			return o
		}
	}
	return nil
}

// FromText is the output's from as written in the file, without the quotes
// of a plain quoted template: ${run.dir}/revenue.csv.
func (o *Output) FromText() string {
	if o == nil {
		return ""
	}
	return o.fromText
}

// Column returns the column called name, or nil.
func (o *Output) Column(name string) *OutputColumn {
	if o == nil {
		return nil
	}
	for i := range o.Columns {
		if o.Columns[i].Name == name {
			return &o.Columns[i]
		}
	}
	return nil
}

// Pattern renders the output's from for one run: the glob as written with
// run.* replaced, before it is resolved against the pipeline's directory.
func (o *Output) Pattern(rv RunVars) (string, error) {
	if o == nil || o.from == nil {
		return "", errors.New("the output has no from")
	}
	v, diags := o.from.Value(runContext(o.ctx, runValue(rv, o.pipe, o.loc), nil))
	if diags.HasErrors() {
		return "", fmt.Errorf("output %s: from: %w", o.Name, diags)
	}
	sv, err := convert.Convert(unmark(v), cty.String)
	if err != nil || sv.IsNull() || !sv.IsKnown() {
		return "", fmt.Errorf("output %s: from must be a string", o.Name)
	}
	return sv.AsString(), nil
}

// Files renders the output's from for one run and expands it as a glob,
// relative to the directory of the pipeline's file (an absolute pattern as
// is): the matching files (not directories), sorted. No match is an error
// that names the pattern.
func (o *Output) Files(rv RunVars) ([]string, error) {
	pattern, err := o.Pattern(rv)
	if err != nil {
		return nil, err
	}
	matches, err := filepath.Glob(resolveDir(o.dir, pattern))
	if err != nil {
		return nil, fmt.Errorf("output %s: from %s is not a valid glob: %w", o.Name, pattern, err)
	}
	var files []string
	for _, m := range matches {
		info, err := os.Stat(m)
		if err != nil || info.IsDir() {
			continue
		}
		files = append(files, m)
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("no file matches %s", pattern)
	}
	sort.Strings(files)
	return files, nil
}
