package main

import (
	"context"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tether-run/tether/internal/testutil"
)

// tetherBin runs tether: a link named tether to this test binary, which
// runs runMain when started under that name (see TestMain). The tests of this
// package check flags, output and exit codes, so they need no separately
// built binary; what needs the real one (signals, terminals, crashes) is
// in test/.
var tetherBin string

// waitLimit bounds every wait for an event in these tests.
const waitLimit = testutil.WaitBound

// isolatedEnv is testutil.IsolatedEnv.
func isolatedEnv(t *testing.T) []string { return testutil.IsolatedEnv(t) }

func TestMain(m *testing.M) {
	if filepath.Base(os.Args[0]) == "tether" {
		os.Exit(runMain(context.Background(), os.Args[1:]))
	}
	// tether is this test binary; with -race each run would sleep a second
	// before exiting.
	os.Setenv("GORACE", strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0"))
	dir, err := os.MkdirTemp("", "tether-cmd-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	self, err := os.Executable()
	if err == nil {
		tetherBin = filepath.Join(dir, "tether")
		err = os.Symlink(self, tetherBin)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "link tether to the test binary:", err)
		os.RemoveAll(dir)
		os.Exit(2)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// TestPackageMainExportsNothing: package main is flags, output and exit
// codes; nothing imports it, so nothing of it is exported (what a command
// does lives in a package tests can drive).
func TestPackageMainExportsNothing(t *testing.T) {
	fset := token.NewFileSet()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if d.Recv == nil && d.Name.IsExported() {
					t.Errorf("%s: func %s is exported", fset.Position(d.Pos()), d.Name)
				}
			case *ast.GenDecl:
				for _, s := range d.Specs {
					switch s := s.(type) {
					case *ast.TypeSpec:
						if s.Name.IsExported() {
							t.Errorf("%s: type %s is exported", fset.Position(s.Pos()), s.Name)
						}
					case *ast.ValueSpec:
						for _, n := range s.Names {
							if n.IsExported() {
								t.Errorf("%s: %s is exported", fset.Position(n.Pos()), n)
							}
						}
					}
				}
			}
		}
	}
}
