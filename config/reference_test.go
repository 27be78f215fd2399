package config_test

import (
	"bytes"
	"flag"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// update rewrites docs/configuration.md instead of comparing it.
var update = flag.Bool("update", false, "rewrite docs/configuration.md from config.go")

// The generated part of docs/configuration.md lies between these lines;
// the prose around them is written by hand.
const (
	beginGenerated = "<!-- BEGIN GENERATED: go test ./config -run TestReference -update -->"
	endGenerated   = "<!-- END GENERATED -->"
)

// referencePath is docs/configuration.md, from this package's folder.
const referencePath = "../docs/configuration.md"

// setting is one environment variable of Config.
type setting struct {
	field, env, doc string
}

// settings reads config.go: every field of Config with an env tag, in
// order, with its doc comment, and the names of the fields without one
// (filled by Load from the others).
func settings(t *testing.T) (vars []setting, derived map[string]bool) {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "config.go", nil, parser.ParseComments)
	if err != nil {
		t.Fatalf("parsing config.go: %v", err)
	}
	derived = map[string]bool{}
	ast.Inspect(f, func(n ast.Node) bool {
		ts, ok := n.(*ast.TypeSpec)
		if !ok || ts.Name.Name != "Config" {
			return true
		}
		for _, fl := range ts.Type.(*ast.StructType).Fields.List {
			tag := ""
			if fl.Tag != nil {
				tag, _ = strconv.Unquote(fl.Tag.Value)
			}
			env, ok := reflect.StructTag(tag).Lookup("env")
			for _, name := range fl.Names {
				if !ok {
					derived[name.Name] = true
					continue
				}
				vars = append(vars, setting{field: name.Name, env: env, doc: fl.Doc.Text()})
			}
		}
		return false
	})
	if len(vars) == 0 {
		t.Fatal("config.go: no field of Config has an env tag")
	}
	return vars, derived
}

// sentences splits a doc comment into its sentences.
var sentenceEnd = regexp.MustCompile(`\.\s+`)

// render is the generated reference: a table of every variable in the
// order of Config, its meaning (and default) being the field's doc comment
// with field
// names written as the variables they are read from, and without the
// sentences about fields Load derives.
func render(vars []setting, derived map[string]bool) string {
	envOf := map[string]string{}
	for _, v := range vars {
		envOf[v.field] = v.env
	}
	word := regexp.MustCompile(`\b[A-Z][A-Za-z]+\b`)
	var b strings.Builder
	b.WriteString("| variable | meaning |\n| --- | --- |\n")
	for _, v := range vars {
		text := strings.Join(strings.Fields(v.doc), " ")
		var kept []string
		for _, s := range sentenceEnd.Split(strings.TrimSuffix(text, "."), -1) {
			drop := false
			for _, w := range word.FindAllString(s, -1) {
				if derived[w] {
					drop = true
				}
			}
			if !drop {
				kept = append(kept, s)
			}
		}
		text = strings.Join(kept, ". ") + "."
		text = word.ReplaceAllStringFunc(text, func(w string) string {
			if env, ok := envOf[w]; ok {
				return "`" + env + "`"
			}
			return w
		})
		text = strings.ReplaceAll(text, "|", `\|`)
		b.WriteString("| `" + v.env + "` | " + text + " |\n")
	}
	return b.String()
}

// TestReference holds docs/configuration.md to config.go: its table of
// variables is generated from Config's env tags and doc comments, and
// must be what the generator makes of them now. With -update it is
// rewritten.
func TestReference(t *testing.T) {
	vars, derived := settings(t)
	for _, v := range vars {
		if !strings.Contains(v.doc, "Defaults to") {
			t.Errorf("%s (%s): its doc comment does not end by saying what it defaults to", v.field, v.env)
		}
	}
	doc, err := os.ReadFile(referencePath)
	if err != nil {
		t.Fatalf("reading %s: %v", referencePath, err)
	}
	before, rest, ok1 := bytes.Cut(doc, []byte(beginGenerated+"\n"))
	_, after, ok2 := bytes.Cut(rest, []byte(endGenerated))
	if !ok1 || !ok2 {
		t.Fatalf("%s lacks the lines %q and %q around its generated table", referencePath, beginGenerated, endGenerated)
	}
	want := string(before) + beginGenerated + "\n" + render(vars, derived) + endGenerated + string(after)
	if *update {
		if err := os.WriteFile(referencePath, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if string(doc) != want {
		t.Fatalf("%s differs from config.go; regenerate it with: go test ./config -run TestReference -update", referencePath)
	}
}
