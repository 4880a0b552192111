package lake

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/catalog"
	// The REST catalog imports the AWS SDK for its SigV4 request signing,
	// which the catalog's properties or the server's /v1/config can turn
	// on; iceberg-go has no build tag to leave it out, so it is linked
	// (about 5 MB of the binary). Its SQL catalog links bun with five
	// dialects and a MySQL driver for the same reason (about 2.4 MB):
	// kept, rather than a catalog of rewind's own.
	"github.com/apache/iceberg-go/catalog/rest"
	sqlcat "github.com/apache/iceberg-go/catalog/sql"
	"github.com/apache/iceberg-go/table"

	// The SQL catalog stores its tables in SQLite through this driver,
	// registered under the name "sqlite3".
	_ "github.com/mattn/go-sqlite3"
)

// Default values of the embedded catalog, relative to the project directory.
const (
	DefaultCatalogName = "local"
	DefaultCatalogURI  = ".rewind/catalog.db"
	DefaultWarehouse   = ".rewind/warehouse"
)

// MainBranch is the name of the branch scheduled and manual runs commit to.
const MainBranch = table.MainBranch

// Errors callers can test for with errors.Is.
var (
	// ErrConcurrentCommit reports that a ref moved between the moment an
	// operation read it and the moment it committed (for example a commit to
	// main after a backfill branch was created). Nothing was changed.
	ErrConcurrentCommit = errors.New("lake: concurrent commit")
	// ErrNoSuchRef reports a branch or tag that does not exist.
	ErrNoSuchRef = errors.New("lake: no such branch or tag")
	// ErrNoSuchTable reports a table that the catalog does not have (no
	// run committed to it yet).
	ErrNoSuchTable = catalog.ErrNoSuchTable
	// ErrEmptyTable reports a table whose main has no snapshot yet: a
	// branch cannot be made from it, but the first commit to a branch
	// creates that branch.
	ErrEmptyTable = errors.New("lake: table has no snapshot yet")
	// ErrRefExists reports a branch or tag that already exists.
	ErrRefExists = errors.New("lake: branch or tag already exists")
	// ErrSchemaConflict reports an existing table whose columns or partition
	// differ from the output's declaration.
	ErrSchemaConflict = errors.New("lake: table schema conflicts with the output")
	// ErrBadInput reports an input file that cannot be read as the output's
	// rows (unknown format, missing column, unparsable value, a row of
	// another date or another data interval).
	ErrBadInput = errors.New("lake: bad input")
)

// Config is a catalog block of a rewind project.
//
// Type "sql" keeps the catalog in the SQLite file URI (iceberg-go's SQL
// catalog schema) and the data and metadata files under the directory
// Warehouse; the embedded default is URI ".rewind/catalog.db" and Warehouse
// ".rewind/warehouse" (empty fields take these defaults; relative paths are
// taken from the current directory). Type "rest" talks to the REST catalog
// at URI, with Warehouse passed as its warehouse location if set.
type Config struct {
	Name      string // catalog name; empty means "local"
	Type      string // "sql" (the default when empty) or "rest"
	URI       string
	Warehouse string
}

// Lake is an open catalog. It is safe for concurrent use by several
// goroutines; several processes may open the same SQL catalog.
type Lake struct {
	cat catalog.Catalog
	db  *sql.DB // the SQLite handle of a "sql" catalog, nil otherwise
}

// Open opens (and for type "sql", creates if missing) the catalog cfg.
func Open(ctx context.Context, cfg Config) (*Lake, error) {
	name := cfg.Name
	if name == "" {
		name = DefaultCatalogName
	}
	switch cfg.Type {
	case "", "sql":
		return openSQL(name, cfg)
	case "rest":
		if cfg.URI == "" {
			return nil, errors.New("lake: rest catalog needs a uri")
		}
		var opts []rest.Option
		if cfg.Warehouse != "" {
			opts = append(opts, rest.WithWarehouseLocation(cfg.Warehouse))
		}
		cat, err := rest.NewCatalog(ctx, name, cfg.URI, opts...)
		if err != nil {
			return nil, fmt.Errorf("lake: open rest catalog %s: %w", cfg.URI, err)
		}
		return &Lake{cat: cat}, nil
	default:
		return nil, fmt.Errorf("lake: unknown catalog type %q (want sql or rest)", cfg.Type)
	}
}

func openSQL(name string, cfg Config) (*Lake, error) {
	uri := cfg.URI
	if uri == "" {
		uri = DefaultCatalogURI
	}
	uri = strings.TrimPrefix(uri, "file://")
	wh := cfg.Warehouse
	if wh == "" {
		wh = DefaultWarehouse
	}
	wh = strings.TrimPrefix(wh, "file://")
	uri, err := filepath.Abs(uri)
	if err != nil {
		return nil, err
	}
	wh, err = filepath.Abs(wh)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Dir(uri), 0o755); err != nil {
		return nil, fmt.Errorf("lake: %w", err)
	}
	if err := os.MkdirAll(wh, 0o755); err != nil {
		return nil, fmt.Errorf("lake: %w", err)
	}
	// WAL and a busy timeout let several rewind processes share the file;
	// immediate transactions take the write lock up front so a transaction
	// that reads then writes never fails on a lock upgrade.
	dsn := "file:" + (&url.URL{Path: uri}).EscapedPath() +
		"?_busy_timeout=30000&_journal_mode=WAL&_txlock=immediate&_synchronous=FULL"
	db, err := sql.Open("sqlite3", dsn)
	if err != nil {
		return nil, fmt.Errorf("lake: open catalog %s: %w", uri, err)
	}
	cat, err := sqlcat.NewCatalog(name, db, sqlcat.SQLite, iceberg.Properties{
		"warehouse": "file://" + filepath.ToSlash(wh),
	})
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("lake: open catalog %s: %w", uri, err)
	}
	return &Lake{cat: cat, db: db}, nil
}

// Close releases the catalog.
func (l *Lake) Close() error {
	var err error
	if c, ok := l.cat.(catalog.Closer); ok {
		err = c.Close()
	}
	if l.db != nil {
		err = errors.Join(err, l.db.Close())
	}
	return err
}

// ident splits "namespace.table" (the namespace may itself contain dots:
// the last component is the table).
func ident(name string) (table.Identifier, error) {
	parts := strings.Split(name, ".")
	if len(parts) < 2 {
		return nil, fmt.Errorf("lake: table %q: want namespace.table", name)
	}
	for _, p := range parts {
		if p == "" {
			return nil, fmt.Errorf("lake: table %q: empty name component", name)
		}
	}
	return parts, nil
}

func (l *Lake) load(ctx context.Context, name string) (*table.Table, error) {
	id, err := ident(name)
	if err != nil {
		return nil, err
	}
	tbl, err := l.cat.LoadTable(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("lake: load %s: %w", name, err)
	}
	return tbl, nil
}
