package consumer

import (
	"go/ast"
	"go/doc"
	"go/parser"
	"go/token"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestPackageDocNamesEveryExport: the package doc says what an embedder
// uses of each exported name, so a name exported only for another package
// of the module's convenience shows up here, where it must be justified
// or moved out (as stream setup, the bundle format and waking were).
// A constant of an exported type counts as named with its type.
func TestPackageDocNamesEveryExport(t *testing.T) {
	names, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	var files []*ast.File
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	d, err := doc.NewFromFiles(fset, files, "github.com/throttler/throttler/consumer")
	if err != nil {
		t.Fatal(err)
	}
	named := func(name string) bool {
		return regexp.MustCompile(`\b` + regexp.QuoteMeta(name) + `\b`).MatchString(d.Doc)
	}
	var exported []string
	for _, v := range append(d.Consts, d.Vars...) {
		exported = append(exported, v.Names...)
	}
	for _, f := range d.Funcs {
		exported = append(exported, f.Name)
	}
	for _, ty := range d.Types {
		exported = append(exported, ty.Name)
		for _, f := range ty.Funcs {
			exported = append(exported, f.Name)
		}
		// The constants of an exported type (RedisErrorPolicy's) are its
		// values: named with it.
	}
	if len(exported) < 10 {
		t.Fatalf("found only %d exported names: %v", len(exported), exported)
	}
	for _, name := range exported {
		if ast.IsExported(name) && !named(name) {
			t.Errorf("%s is exported but the package doc does not say what an embedder uses it for", name)
		}
	}
}
