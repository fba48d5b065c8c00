package docs

import (
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// The configuration messages: docs/operations.md has one table, message →
// cause → fix, of every message tether prints about its configuration, and
// TestConfigurationMessages keeps it whole by reading the source.
//
// A configuration message is one only an operator's change of setup can
// fix. The test finds them by the error types and sentinels that mark a
// configuration error in tether's source, not by a list kept by hand:
//
//   - an apicall.Error whose Kind is provider.ErrMisconfigured or
//     provider.ErrUnauthorized (a provider's answer or no answer that only a
//     change of credentials, URL or certificates fixes);
//   - fmt.Errorf wrapping one of configSentinels;
//   - a provider's setup problem (Setup.Problems = append(Problems, …));
//   - an access.RefusedError (a file or directory tether will not use), by
//     its Why, and the Error methods of RefusedError and PermissionError;
//   - the settings' own checks in internal/config (bad(…) and the
//     environment's errors), which must name the setting they are about
//     (one row of the table covers them: the setting the message names).
//
// Each message's longest literal piece (split at its verbs and at what the
// source leaves to run time) must be in the table's first column; each
// row's longest piece must still be in the source, so the table cannot keep
// a message tether no longer prints.

// configSentinels are the errors a configuration error wraps (by their
// name, qualified by the package that defines them).
var configSentinels = map[string]bool{
	"provider.ErrMisconfigured": true, "provider.ErrUnauthorized": true,
	"daytona.ErrBadAPIURL": true, "intake.ErrUnknownProvider": true,
	"journal.ErrLocked": true,
}

// adviceFuncs are the functions (package.func, or package.Type.method)
// that make configuration messages others pass on unchanged: every error
// and string they return is one, found wherever it is built in them. A
// function listed here that the source no longer has fails the test.
var adviceFuncs = map[string]bool{
	"daytona.Config.checkCredentials": true, // no credentials
	"access.CheckDir":                 true, // a directory tether refuses
	"apicall.tlsProblem":              true, // certificates
	"apicall.NoAnswer":                true, // DNS, nothing listening
	"apicall.Untrusted":               true, // no CA certificates
	"journal.openError":               true, // a journal that cannot be opened
	"journal.notRegular":              true,
	"journal.actAsOwner":              true, // another uid's journal
	"sidecar.withPathSetting":         true, // the setting that chose a path
	"reaper.horizonSetting":           true, // the never-created horizon
}

// configKinds are the apicall.Error kinds of a configuration error.
var configKinds = map[string]bool{"provider.ErrMisconfigured": true, "provider.ErrUnauthorized": true}

// configTableHeading is the section of docs/operations.md with the table.
const configTableHeading = "## Configuration messages"

var listMessages = flag.Bool("messages", false, "list the configuration messages the source holds")

// hole stands for what a message leaves to run time (a verb, a variable).
const hole = "\x00"

var verbRE = regexp.MustCompile(`%[-+# 0-9.*\[\]]*[a-zA-Z%]`)

// srcPackage is one package's non-test files and its string constants.
type srcPackage struct {
	name   string // the package's name
	files  []*ast.File
	consts map[string]ast.Expr // package-level string const and var initializers
}

// srcFset holds the positions of every file loadSource parsed.
var srcFset = token.NewFileSet()

// loadSource parses the non-test Go files tether ships: every package of
// the module but tests, tools, examples and the simulators.
func loadSource(t *testing.T) []*srcPackage {
	t.Helper()
	byDir := map[string]*srcPackage{}
	err := filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			base := d.Name()
			rel := filepath.ToSlash(strings.TrimPrefix(path, "../"))
			if strings.HasPrefix(base, ".") && path != ".." || base == "testdata" || rel == "test" || rel == "bench" ||
				rel == "examples" || rel == "docs" || rel == "internal/testutil" || strings.HasSuffix(base, "test") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(srcFset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		dir := filepath.Dir(path)
		p := byDir[dir]
		if p == nil {
			p = &srcPackage{name: f.Name.Name, consts: map[string]ast.Expr{}}
			byDir[dir] = p
		}
		p.files = append(p.files, f)
		for _, decl := range f.Decls {
			gd, ok := decl.(*ast.GenDecl)
			if !ok || (gd.Tok != token.CONST && gd.Tok != token.VAR) {
				continue
			}
			for _, spec := range gd.Specs {
				vs := spec.(*ast.ValueSpec)
				for i, n := range vs.Names {
					if i < len(vs.Values) {
						p.consts[n.Name] = vs.Values[i]
					}
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	out := make([]*srcPackage, 0, len(byDir))
	for _, p := range byDir {
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out
}

// render is the text of a string expression: literals (a format's verbs
// filled with the arguments' text where the source gives it), the
// package's constants and sentinel errors resolved, anything else a hole.
func (p *srcPackage) render(e ast.Expr, format bool, depth int) string {
	if depth > 16 {
		return hole
	}
	switch e := e.(type) {
	case *ast.BasicLit:
		if e.Kind != token.STRING {
			return hole
		}
		s, err := strconv.Unquote(e.Value)
		if err != nil {
			return hole
		}
		if format {
			s = verbRE.ReplaceAllString(s, hole)
		}
		return s
	case *ast.BinaryExpr:
		if e.Op != token.ADD {
			return hole
		}
		return p.render(e.X, format, depth) + p.render(e.Y, format, depth)
	case *ast.ParenExpr:
		return p.render(e.X, format, depth)
	case *ast.Ident:
		if v, ok := p.consts[e.Name]; ok {
			return p.render(v, false, depth+1)
		}
	case *ast.CallExpr:
		if len(e.Args) == 0 {
			return hole
		}
		switch {
		case isCall(e, "errors", "New"):
			return p.render(e.Args[0], false, depth+1)
		case isCall(e, "fmt", "Errorf"), isCall(e, "fmt", "Sprintf"):
			return p.formatted(e, depth+1)
		}
	}
	return hole
}

// formatted renders a call of fmt.Errorf or fmt.Sprintf: its format, each
// verb filled with its argument's text where the source gives it.
func (p *srcPackage) formatted(c *ast.CallExpr, depth int) string {
	lit, ok := c.Args[0].(*ast.BasicLit)
	if !ok {
		return p.render(c.Args[0], true, depth)
	}
	f, err := strconv.Unquote(lit.Value)
	if err != nil {
		return hole
	}
	args := c.Args[1:]
	i := 0
	return verbRE.ReplaceAllStringFunc(f, func(v string) string {
		if v == "%%" {
			return "%"
		}
		if i >= len(args) {
			return hole
		}
		a := args[i]
		i++
		if strings.HasSuffix(v, "w") || strings.HasSuffix(v, "v") || strings.HasSuffix(v, "s") {
			return p.render(a, false, depth)
		}
		return hole
	})
}

// longest is the longest piece of a rendered message, trimmed of spaces
// and punctuation at its ends.
func longest(rendered string) string {
	best := ""
	for _, piece := range strings.Split(rendered, hole) {
		piece = strings.Trim(piece, " :;,.()\"'")
		if len(piece) > len(best) {
			best = piece
		}
	}
	return best
}

// qualified is the name of a sentinel as configSentinels spells it: the
// selector as written, or an identifier qualified by its own package.
func qualified(e ast.Expr, pkg string) string {
	switch e := e.(type) {
	case *ast.SelectorExpr:
		if x, ok := e.X.(*ast.Ident); ok {
			return x.Name + "." + e.Sel.Name
		}
	case *ast.Ident:
		return pkg + "." + e.Name
	case *ast.UnaryExpr:
		return qualified(e.X, pkg)
	}
	return ""
}

func typeName(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.SelectorExpr:
		return e.Sel.Name
	case *ast.Ident:
		return e.Name
	}
	return ""
}

func isCall(c *ast.CallExpr, pkg, name string) bool {
	sel, ok := c.Fun.(*ast.SelectorExpr)
	if !ok || sel.Sel.Name != name {
		return false
	}
	x, ok := sel.X.(*ast.Ident)
	return ok && x.Name == pkg
}

// foundMessage is one configuration message in the source.
type foundMessage struct {
	where    string
	rendered string
	setting  bool // a setting's own check (internal/config)
}

// messageOf renders the message an error-making expression carries:
// fmt.Errorf's and errors.New's text; anything else as it is.
func (p *srcPackage) messageOf(e ast.Expr) string {
	return p.render(e, false, 0)
}

// configMessages finds every configuration message of the source.
func configMessages(t *testing.T, pkgs []*srcPackage) []foundMessage {
	t.Helper()
	var out []foundMessage
	seenAdvice := map[string]bool{}
	defer func() {
		for f := range adviceFuncs {
			if !seenAdvice[f] {
				t.Errorf("adviceFuncs names %s, which the source no longer has", f)
			}
		}
	}()
	for _, p := range pkgs {
		for _, f := range p.files {
			add := func(n ast.Node, rendered string, setting bool) {
				if strings.Trim(rendered, hole+" :;,.()") == "" {
					return // passes on a message made elsewhere, where it is found
				}
				pos := srcFset.Position(n.Pos())
				out = append(out, foundMessage{where: fmt.Sprintf("%s:%d", strings.TrimPrefix(pos.Filename, "../"), pos.Line), rendered: rendered, setting: setting})
			}
			ast.Inspect(f, func(n ast.Node) bool {
				switch n := n.(type) {
				case *ast.CompositeLit:
					switch typeName(n.Type) {
					case "Error":
						var msg ast.Expr
						config := false
						for _, el := range n.Elts {
							kv, ok := el.(*ast.KeyValueExpr)
							if !ok {
								continue
							}
							switch typeName(kv.Key) {
							case "Msg":
								msg = kv.Value
							case "Kind":
								config = configKinds[qualified(kv.Value, p.name)]
							}
						}
						if config && msg != nil {
							add(n, p.render(msg, false, 0), false)
						}
					case "RefusedError":
						for _, el := range n.Elts {
							if kv, ok := el.(*ast.KeyValueExpr); ok && typeName(kv.Key) == "Why" {
								add(n, p.render(kv.Value, false, 0), false)
							}
						}
					}
				case *ast.CallExpr:
					if isCall(n, "fmt", "Errorf") && len(n.Args) > 1 {
						for _, a := range n.Args[1:] {
							if configSentinels[qualified(a, p.name)] {
								add(n, p.formatted(n, 0), false)
								break
							}
						}
					}
					if (typeName(n.Fun) == "OwnedBy") && len(n.Args) == 3 {
						add(n, p.render(n.Args[2], false, 0), false)
					}
					if p.name == "config" && typeName(n.Fun) == "bad" && len(n.Args) > 0 {
						add(n, p.formatted(n, 0), true)
					}
				case *ast.AssignStmt:
					if len(n.Lhs) != 1 || len(n.Rhs) != 1 {
						return true
					}
					c, ok := n.Rhs[0].(*ast.CallExpr)
					if !ok || typeName(c.Fun) != "append" || len(c.Args) < 2 {
						return true
					}
					lhs := typeName(n.Lhs[0])
					switch {
					case lhs == "Problems":
						for _, a := range c.Args[1:] {
							add(n, p.messageOf(a), false)
						}
					case p.name == "config" && (lhs == "errs"):
						for _, a := range c.Args[1:] {
							add(n, p.messageOf(a), true)
						}
					}
				case *ast.FuncDecl:
					name := p.name + "." + n.Name.Name
					if n.Recv != nil && len(n.Recv.List) == 1 {
						rt := n.Recv.List[0].Type
						if star, ok := rt.(*ast.StarExpr); ok {
							rt = star.X
						}
						name = p.name + "." + typeName(rt) + "." + n.Name.Name
					}
					if adviceFuncs[name] {
						seenAdvice[name] = true
						ast.Inspect(n.Body, func(m ast.Node) bool {
							switch m := m.(type) {
							case *ast.CallExpr:
								if isCall(m, "errors", "New") || isCall(m, "fmt", "Errorf") || isCall(m, "fmt", "Sprintf") {
									add(m, p.render(m, false, 0), false)
									return false
								}
							case *ast.KeyValueExpr:
								if typeName(m.Key) == "Msg" {
									add(m, p.render(m.Value, false, 0), false)
									return false
								}
							case *ast.ReturnStmt:
								for _, r := range m.Results {
									if _, lit := r.(*ast.BasicLit); lit {
										add(r, p.render(r, false, 0), false)
									} else if _, bin := r.(*ast.BinaryExpr); bin {
										add(r, p.render(r, false, 0), false)
									}
								}
							}
							return true
						})
						return false
					}
					if n.Recv == nil || n.Name.Name != "Error" || len(n.Recv.List) != 1 {
						return true
					}
					recv := typeName(n.Recv.List[0].Type)
					if star, ok := n.Recv.List[0].Type.(*ast.StarExpr); ok {
						recv = typeName(star.X)
					}
					if recv != "RefusedError" && recv != "PermissionError" {
						return true
					}
					ast.Inspect(n.Body, func(m ast.Node) bool {
						if c, ok := m.(*ast.CallExpr); ok && isCall(c, "fmt", "Sprintf") && len(c.Args) > 0 {
							add(c, p.formatted(c, 0), false)
						}
						return true
					})
					return false
				}
				return true
			})
		}
	}
	return out
}

var codeSpanRE = regexp.MustCompile("`([^`]+)`")

// configTable returns the messages of the configuration messages table:
// each code span of a row's first column, as plain text ("…" a hole).
func configTable(t *testing.T) (rows []string, section string) {
	t.Helper()
	b, err := os.ReadFile("operations.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(b), "\n"+configTableHeading+"\n")
	if !ok {
		t.Fatalf("docs/operations.md has no %q section", configTableHeading)
	}
	if i := strings.Index(rest, "\n## "); i >= 0 {
		rest = rest[:i]
	}
	for _, l := range strings.Split(rest, "\n") {
		if !strings.HasPrefix(l, "| ") || strings.HasPrefix(l, "| message") || strings.HasPrefix(l, "| ---") {
			continue
		}
		cells := splitRow(l)
		if len(cells) != 3 {
			t.Errorf("docs/operations.md, %s: a row of %d cells, want 3 (message, cause, fix): %s", configTableHeading, len(cells), l)
			continue
		}
		spans := codeSpanRE.FindAllStringSubmatch(cells[0], -1)
		if len(spans) == 0 {
			t.Errorf("docs/operations.md, %s: a row whose message is not in backticks: %s", configTableHeading, l)
		}
		for _, sp := range spans {
			rows = append(rows, plain(sp[1]))
		}
	}
	return rows, rest
}

// splitRow splits a Markdown table row at its unescaped pipes.
func splitRow(l string) []string {
	l = strings.TrimSpace(l)
	l = strings.TrimPrefix(strings.TrimSuffix(l, "|"), "|")
	var cells []string
	var cur strings.Builder
	for i := 0; i < len(l); i++ {
		if l[i] == '\\' && i+1 < len(l) && l[i+1] == '|' {
			cur.WriteByte('|')
			i++
			continue
		}
		if l[i] == '|' {
			cells = append(cells, strings.TrimSpace(cur.String()))
			cur.Reset()
			continue
		}
		cur.WriteByte(l[i])
	}
	return append(cells, strings.TrimSpace(cur.String()))
}

// plain is a table cell as the message's text: no backticks, "…" a hole.
func plain(cell string) string {
	cell = strings.ReplaceAll(cell, "`", "")
	cell = strings.ReplaceAll(cell, "<br>", " ")
	return strings.ReplaceAll(cell, "…", hole)
}

func TestConfigurationMessages(t *testing.T) {
	pkgs := loadSource(t)
	found := configMessages(t, pkgs)
	if *listMessages {
		for _, m := range found {
			t.Logf("%s: %q (setting %v)", m.where, strings.ReplaceAll(m.rendered, hole, "…"), m.setting)
		}
	}
	if len(found) < 20 {
		t.Fatalf("found %d configuration messages in the source; the scan is broken", len(found))
	}
	rows, _ := configTable(t)
	if len(rows) == 0 {
		t.Fatalf("the %s table is empty", configTableHeading)
	}
	inTable := func(piece string) bool {
		for _, r := range rows {
			if strings.Contains(r, piece) {
				return true
			}
		}
		return false
	}
	for _, m := range found {
		piece := longest(m.rendered)
		shown := strings.ReplaceAll(m.rendered, hole, "…")
		switch {
		case m.setting:
			// A setting's own check names the setting (the table's one
			// row for them says: fix the setting it names).
			if !strings.HasPrefix(m.rendered, "--") && !strings.HasPrefix(m.rendered, "TETHER_") && !strings.HasPrefix(m.rendered, hole) && !strings.HasPrefix(m.rendered, "label") {
				t.Errorf("%s: a setting's check that does not start with the setting it is about: %q", m.where, shown)
			}
		case len(piece) < 12:
			t.Errorf("%s: the message %q has no piece of 12 characters or more to find it by: give it words", m.where, shown)
		case !inTable(piece):
			t.Errorf("%s: the configuration message %q is not in docs/operations.md's %q table (want a row whose message holds %q)", m.where, shown, configTableHeading, piece)
		}
	}
	// Every row is a message the source still holds: its longest piece is
	// in the text of some string the source renders.
	var corpus []string
	for _, m := range found {
		corpus = append(corpus, m.rendered)
	}
	for _, p := range pkgs {
		for _, f := range p.files {
			ast.Inspect(f, func(n ast.Node) bool {
				switch n := n.(type) {
				case *ast.CallExpr:
					if isCall(n, "fmt", "Errorf") || isCall(n, "fmt", "Sprintf") || isCall(n, "errors", "New") {
						corpus = append(corpus, p.render(n, false, 0))
					}
				case *ast.BinaryExpr:
					corpus = append(corpus, p.render(n, true, 0))
				case *ast.BasicLit:
					corpus = append(corpus, p.render(n, true, 0))
				}
				return true
			})
		}
	}
	for _, r := range rows {
		if strings.HasPrefix(r, "--FLAG") || strings.HasPrefix(r, "TETHER_"+hole) {
			continue // the settings' row speaks of them all
		}
		piece := longest(r)
		ok := false
		for _, c := range corpus {
			if strings.Contains(c, piece) {
				ok = true
				break
			}
		}
		if !ok {
			t.Errorf("docs/operations.md's %q table: no message in the source holds %q (row %q): a message tether no longer prints?", configTableHeading, piece, strings.ReplaceAll(r, hole, "…"))
		}
	}
}
