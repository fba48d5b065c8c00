package intake

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
)

// TestIntakesSeeOnlyTheNarrowJournal keeps the Journal interface the only
// way an intake reaches the journal: no intake's production code names the
// concrete *journal.Journal (a field, a parameter or a type assertion would
// give it Transition, Note and ReplaceObserved back). Tests may: they open
// real journals.
func TestIntakesSeeOnlyTheNarrowJournal(t *testing.T) {
	fset := token.NewFileSet()
	checked := 0
	// The intakes: this folder's, and each provider's API proxy.
	proxies, _ := filepath.Glob("../../provider/*/*proxy")
	if len(proxies) == 0 {
		t.Fatal("no provider proxy found under provider/")
	}
	for _, root := range append([]string{"."}, proxies...) {
		walk(t, fset, root, &checked)
	}
	if checked < 10 {
		t.Fatalf("checked only %d files; is the test walking the intakes' folders?", checked)
	}
}

// walk checks every non-test Go file under root.
func walk(t *testing.T, fset *token.FileSet, root string, checked *int) {
	t.Helper()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && d.Name() == "testdata" {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		*checked++
		ast.Inspect(f, func(n ast.Node) bool {
			sel, ok := n.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			if x, ok := sel.X.(*ast.Ident); ok && x.Name == "journal" && sel.Sel.Name == "Journal" {
				if path == "intake.go" { // the one assertion that *journal.Journal implements Journal
					return true
				}
				t.Errorf("%s: names journal.Journal; an intake reaches the journal through intake.Journal", fset.Position(sel.Pos()))
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
