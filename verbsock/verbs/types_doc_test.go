package verbs_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"reflect"
	"regexp"
	"testing"

	"github.com/vrnic/vrnicd/verbsock/verbs"
)

// TestAliasDocsNameEveryField: go doc on an alias prints only its own
// comment, not the aliased struct's fields, so the SDK's comment on every
// struct alias must name each exported field for a user to see it
// (types.go). A field added to the engine's type fails this until the SDK
// documents it.
func TestAliasDocsNameEveryField(t *testing.T) {
	structs := map[string]reflect.Type{
		"QPAttr":   reflect.TypeFor[verbs.QPAttr](),
		"QPCap":    reflect.TypeFor[verbs.QPCap](),
		"AHAttr":   reflect.TypeFor[verbs.AHAttr](),
		"WC":       reflect.TypeFor[verbs.WC](),
		"SGE":      reflect.TypeFor[verbs.SGE](),
		"PortAttr": reflect.TypeFor[verbs.PortAttr](),
		"Limits":   reflect.TypeFor[verbs.Limits](),
	}
	f, err := parser.ParseFile(token.NewFileSet(), "types.go", nil, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	docs := map[string]string{}
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.TYPE {
			continue
		}
		for _, sp := range g.Specs {
			ts := sp.(*ast.TypeSpec)
			if !ts.Assign.IsValid() {
				continue
			}
			doc := ts.Doc
			if doc == nil {
				doc = g.Doc
			}
			if doc == nil || doc.Text() == "" {
				t.Errorf("alias %s has no doc comment", ts.Name.Name)
				continue
			}
			docs[ts.Name.Name] = doc.Text()
		}
	}
	for name, typ := range structs {
		doc, ok := docs[name]
		if !ok {
			t.Errorf("%s: no alias with a doc comment in types.go", name)
			continue
		}
		for i := range typ.NumField() {
			fl := typ.Field(i)
			if !fl.IsExported() {
				continue
			}
			if !regexp.MustCompile(`\b` + fl.Name + `\b`).MatchString(doc) {
				t.Errorf("%s's doc does not name its field %s", name, fl.Name)
			}
		}
	}
}
