package dsl

import (
	"fmt"
	"net/url"
	"path/filepath"
	"strings"

	"github.com/hashicorp/hcl/v2"
)

// DefaultCatalogName is the catalog that exists even where no file declares
// it, and the catalog of an output that names none.
const DefaultCatalogName = "local"

// The catalog types.
const (
	CatalogSQL  = "sql"  // iceberg-go's SQL catalog on a SQLite file, with a local warehouse
	CatalogREST = "rest" // an Iceberg REST catalog
)

// The defaults of a sql catalog, relative to the directory of the file that
// declares it (for the implicit "local" catalog: the workspace directory).
const (
	DefaultCatalogURI       = ".rewind/catalog.db"
	DefaultCatalogWarehouse = ".rewind/warehouse"
)

var catalogSchema = &hcl.BodySchema{
	Attributes: []hcl.AttributeSchema{
		{Name: "type"},
		{Name: "uri"},
		{Name: "warehouse"},
	},
}

// implicitCatalog is the "local" catalog of a workspace that does not
// declare it: sql, with the default paths under the workspace directory.
func implicitCatalog(wsDir string) *Catalog {
	dir := wsDir
	if abs, err := filepath.Abs(dir); err == nil {
		dir = abs
	}
	return &Catalog{
		Name:      DefaultCatalogName,
		Type:      CatalogSQL,
		URI:       resolveDir(dir, DefaultCatalogURI),
		Warehouse: resolveDir(dir, DefaultCatalogWarehouse),
	}
}

// decodeCatalogs reads the workspace's catalog blocks into ws.Catalogs and
// adds the implicit "local" catalog when no block declares it.
func (l *loader) decodeCatalogs(blocks []*hcl.Block) {
	sc := scope{static: "A catalog block belongs to the workspace, not to a run or a pool: its arguments may use var.* and local.*, not run.* or pool.*."}
	for _, b := range blocks {
		name := b.Labels[0]
		if !l.checkName("catalog", name, b) {
			continue
		}
		if prev := l.ws.Catalogs[name]; prev != nil {
			l.errorf(b.DefRange, "Duplicate catalog", "A catalog named %q was already declared at %s. Catalog names must be unique.", name, prev.DeclRange)
			continue
		}
		dir := fileDir(b.DefRange)
		c := &Catalog{Name: name, Type: CatalogSQL, DeclRange: b.DefRange}
		l.ws.Catalogs[name] = c

		content, diags := b.Body.Content(catalogSchema)
		l.diags = append(l.diags, diags...)
		attrs := content.Attributes
		typeOK := true
		if attr := attrs["type"]; attr != nil {
			if s, ok := l.stringAttr(attr, l.ctx, sc, true); ok {
				switch s {
				case CatalogSQL, CatalogREST:
					c.Type = s
				default:
					typeOK = false
					l.errorf(attr.Expr.Range(), "Invalid catalog type", "The catalog type must be \"sql\" (a SQLite file and a local warehouse directory, the default) or \"rest\" (an Iceberg REST catalog), not %q.", s)
				}
			} else {
				typeOK = false
			}
		}
		uri, uriSet := l.stringAttr(attrs["uri"], l.ctx, sc, true)
		warehouse, whSet := l.stringAttr(attrs["warehouse"], l.ctx, sc, true)
		if !typeOK {
			continue
		}
		switch c.Type {
		case CatalogSQL:
			if !uriSet {
				uri = DefaultCatalogURI
			}
			if !whSet {
				warehouse = DefaultCatalogWarehouse
			}
			if uriSet && strings.TrimSpace(uri) == "" {
				l.errorf(attrs["uri"].Expr.Range(), "Invalid uri", "The uri of a sql catalog is the path of its SQLite file, relative to the directory of this file; it must not be empty (default %q).", DefaultCatalogURI)
			} else {
				c.URI = resolveDir(dir, uri)
			}
			if whSet && strings.TrimSpace(warehouse) == "" {
				l.errorf(attrs["warehouse"].Expr.Range(), "Invalid warehouse", "The warehouse of a sql catalog is a directory, relative to the directory of this file; it must not be empty (default %q).", DefaultCatalogWarehouse)
			} else {
				c.Warehouse = resolveDir(dir, warehouse)
			}
		case CatalogREST:
			switch attr := attrs["uri"]; {
			case attr == nil:
				l.errorf(b.DefRange, "Missing required argument", "The rest catalog %q has no uri: set the http or https URL of the Iceberg REST catalog, such as \"https://catalog.example.com/api/catalog\".", name)
			case uriSet:
				if msg := checkHTTPURL("the uri of a rest catalog", uri); msg != "" {
					l.errorf(attr.Expr.Range(), "Invalid uri", "%s", msg)
				} else {
					c.URI = uri
				}
			}
			if whSet {
				c.Warehouse = warehouse
			}
		}
	}
	if l.ws.Catalogs[DefaultCatalogName] == nil {
		l.ws.Catalogs[DefaultCatalogName] = implicitCatalog(l.ws.Dir)
	}
}

// checkHTTPURL returns why s is not an absolute http or https URL, or "".
func checkHTTPURL(what, s string) string {
	want := what + " must be an absolute http or https URL, such as \"https://catalog.example.com/api/catalog\""
	u, err := url.Parse(s)
	switch {
	case err != nil:
		return fmt.Sprintf("%s: %q does not parse (%s).", capitalize(want), s, unwrapURLError(err))
	case !u.IsAbs() || (u.Scheme != "http" && u.Scheme != "https") || u.Opaque != "":
		return fmt.Sprintf("%s, not %q.", capitalize(want), s)
	case u.Host == "" || u.Hostname() == "":
		return fmt.Sprintf("%s: %q names no host.", capitalize(want), s)
	}
	return ""
}

// knownCatalogs is a sentence listing the catalogs, for diagnostics.
func (l *loader) knownCatalogs() string {
	return "The declared catalogs are: " + strings.Join(sortedNames(l.ws.Catalogs), ", ") + "."
}
