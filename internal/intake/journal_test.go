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
// concrete *spool.Journal (a field, a parameter or a type assertion would
// give it Transition, Note and ReplaceObserved back). Tests may: they open
// real journals.
func TestIntakesSeeOnlyTheNarrowJournal(t *testing.T) {
	fset := token.NewFileSet()
	checked := 0
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
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
		checked++
		ast.Inspect(f, func(n ast.Node) bool {
			sel, ok := n.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			if x, ok := sel.X.(*ast.Ident); ok && x.Name == "spool" && sel.Sel.Name == "Journal" {
				if path == "intake.go" { // the one assertion that *spool.Journal implements Journal
					return true
				}
				t.Errorf("%s: names spool.Journal; an intake reaches the journal through intake.Journal", fset.Position(sel.Pos()))
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 10 {
		t.Fatalf("checked only %d files; is the test walking the intakes' folder?", checked)
	}
}
