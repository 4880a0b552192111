package lake

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/catalog"
	"github.com/apache/iceberg-go/table"
)

// Output is an output block of a pipeline: the table a run's files go to.
type Output struct {
	Table   string   // "namespace.table"
	Columns []Column // the table's columns, in order
	// Partition is the partition column; the table has an identity
	// partition on it. A "date" column holds each row's ds: one partition
	// per date. A "timestamp" column holds the start of the row's data
	// interval: one partition per interval, for schedules that tick more
	// than once a day (see ReplaceInterval).
	Partition string
}

// Column is one declared column. Type is one of "date", "string", "double",
// "long", "int", "boolean", "timestamp" (a timestamp without time zone, in
// microseconds; inputs with a zone are converted to UTC).
type Column struct {
	Name, Type string
}

// partitionFieldID is the id of the table's only partition field.
const partitionFieldID = 1000

// Table properties set on the tables rewind creates: old metadata files
// are deleted after a commit, keeping the last few for inspection.
var tableProps = iceberg.Properties{
	"write.metadata.delete-after-commit.enabled": "true",
	"write.metadata.previous-versions-max":       "20",
}

func icebergType(typ string) (iceberg.Type, error) {
	switch typ {
	case "date":
		return iceberg.PrimitiveTypes.Date, nil
	case "string":
		return iceberg.PrimitiveTypes.String, nil
	case "double":
		return iceberg.PrimitiveTypes.Float64, nil
	case "long":
		return iceberg.PrimitiveTypes.Int64, nil
	case "int":
		return iceberg.PrimitiveTypes.Int32, nil
	case "boolean":
		return iceberg.PrimitiveTypes.Bool, nil
	case "timestamp":
		return iceberg.PrimitiveTypes.Timestamp, nil
	}
	return nil, fmt.Errorf("lake: unknown column type %q (want date, string, double, long, int, boolean or timestamp)", typ)
}

// validate checks the declaration and returns its Iceberg schema (field ids
// 1..n in declaration order) and partition spec.
func (o Output) schema() (*iceberg.Schema, *iceberg.PartitionSpec, error) {
	if _, err := ident(o.Table); err != nil {
		return nil, nil, err
	}
	if len(o.Columns) == 0 {
		return nil, nil, fmt.Errorf("lake: output %s declares no columns", o.Table)
	}
	fields := make([]iceberg.NestedField, 0, len(o.Columns))
	partID := 0
	seen := map[string]bool{}
	for i, c := range o.Columns {
		if c.Name == "" {
			return nil, nil, fmt.Errorf("lake: output %s: column %d has no name", o.Table, i+1)
		}
		if seen[c.Name] {
			return nil, nil, fmt.Errorf("lake: output %s: column %q declared twice", o.Table, c.Name)
		}
		seen[c.Name] = true
		t, err := icebergType(c.Type)
		if err != nil {
			return nil, nil, fmt.Errorf("%w (output %s, column %s)", err, o.Table, c.Name)
		}
		f := iceberg.NestedField{ID: i + 1, Name: c.Name, Type: t}
		if c.Name == o.Partition {
			if c.Type != "date" && c.Type != "timestamp" {
				return nil, nil, fmt.Errorf("lake: output %s: partition column %s is %s, want date or timestamp", o.Table, c.Name, c.Type)
			}
			f.Required = true
			partID = f.ID
		}
		fields = append(fields, f)
	}
	if partID == 0 {
		return nil, nil, fmt.Errorf("lake: output %s: partition column %q is not a declared column", o.Table, o.Partition)
	}
	spec := iceberg.NewPartitionSpec(iceberg.PartitionField{
		SourceIDs: []int{partID},
		FieldID:   partitionFieldID,
		Name:      o.Partition,
		Transform: iceberg.IdentityTransform{},
	})
	return iceberg.NewSchema(0, fields...), &spec, nil
}

// EnsureTable creates the output's namespace and table if they are missing,
// with an identity partition on the partition column. An existing table
// must have exactly the declared columns and types and the same partition;
// otherwise the error wraps ErrSchemaConflict.
func (l *Lake) EnsureTable(ctx context.Context, o Output) error {
	sc, spec, err := o.schema()
	if err != nil {
		return err
	}
	id, _ := ident(o.Table)
	ns := catalog.NamespaceFromIdent(id)
	ok, err := l.cat.CheckNamespaceExists(ctx, ns)
	if err != nil {
		return fmt.Errorf("lake: namespace %s: %w", strings.Join(ns, "."), err)
	}
	if !ok {
		err := l.cat.CreateNamespace(ctx, ns, nil)
		if err != nil && !errors.Is(err, catalog.ErrNamespaceAlreadyExists) {
			return fmt.Errorf("lake: create namespace %s: %w", strings.Join(ns, "."), err)
		}
	}
	tbl, err := l.cat.LoadTable(ctx, id)
	if errors.Is(err, catalog.ErrNoSuchTable) {
		tbl, err = l.cat.CreateTable(ctx, id, sc,
			catalog.WithPartitionSpec(spec), catalog.WithProperties(tableProps))
		if errors.Is(err, catalog.ErrTableAlreadyExists) {
			tbl, err = l.cat.LoadTable(ctx, id)
		}
	}
	if err != nil {
		return fmt.Errorf("lake: ensure table %s: %w", o.Table, err)
	}
	return o.check(tbl)
}

// check compares an existing table with the declaration.
func (o Output) check(tbl *table.Table) error {
	sc := tbl.Schema()
	var problems []string
	declared := map[string]bool{}
	for _, c := range o.Columns {
		declared[c.Name] = true
		f, ok := sc.FindFieldByName(c.Name)
		if !ok {
			problems = append(problems, fmt.Sprintf("column %s is missing from the table", c.Name))
			continue
		}
		want, _ := icebergType(c.Type)
		if !f.Type.Equals(want) {
			problems = append(problems, fmt.Sprintf("column %s is %s in the table, declared %s", c.Name, f.Type, c.Type))
		}
	}
	for _, f := range sc.Fields() {
		if !declared[f.Name] {
			problems = append(problems, fmt.Sprintf("table column %s is not declared", f.Name))
		}
	}
	spec := tbl.Spec()
	pf, _ := sc.FindFieldByName(o.Partition)
	if spec.NumFields() != 1 || spec.Field(0).SourceID() != pf.ID ||
		spec.Field(0).Transform.String() != (iceberg.IdentityTransform{}).String() {
		problems = append(problems, fmt.Sprintf("table partition is %s, declared identity(%s)", spec.String(), o.Partition))
	}
	if len(problems) > 0 {
		slices.Sort(problems)
		return fmt.Errorf("%w: %s: %s", ErrSchemaConflict, o.Table, strings.Join(problems, "; "))
	}
	return nil
}
