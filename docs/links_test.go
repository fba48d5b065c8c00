package docs

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

var (
	linkRE       = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	inlineCodeRE = regexp.MustCompile("`[^`]*`")
)

// markdownLines returns the lines of a Markdown file outside fenced code
// blocks, by their 1-based numbers.
func markdownLines(t *testing.T, path string) map[int]string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := map[int]string{}
	fenced := false
	for i, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "```") {
			fenced = !fenced
			continue
		}
		if !fenced {
			out[i+1] = l
		}
	}
	return out
}

// anchors returns the anchors GitHub gives a Markdown file's headings:
// lower case, punctuation dropped, spaces as hyphens, "-N" after a
// repeated one.
func anchors(t *testing.T, path string) map[string]bool {
	t.Helper()
	seen := map[string]int{}
	out := map[string]bool{}
	for _, l := range markdownLines(t, path) {
		h := strings.TrimLeft(l, "#")
		if len(h) == len(l) || len(l)-len(h) > 6 || !strings.HasPrefix(h, " ") {
			continue
		}
		var b strings.Builder
		for _, r := range strings.ToLower(strings.TrimSpace(h)) {
			switch {
			case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
				b.WriteRune(r)
			case r == ' ':
				b.WriteRune('-')
			}
		}
		a := b.String()
		if n := seen[a]; n > 0 {
			out[a+"-"+string(rune('0'+n))] = true
		} else {
			out[a] = true
		}
		seen[a]++
	}
	return out
}

// TestDocLinks: every relative link of every Markdown file in the
// repository leads to a file that exists and, for a link to a heading, to
// a heading of that file, so that a doc that points elsewhere for a figure
// or a detail points somewhere.
func TestDocLinks(t *testing.T) {
	var docs []string
	err := filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "node_modules" || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(path, ".md") {
			docs = append(docs, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(docs) < 5 {
		t.Fatalf("found %d Markdown files: %v", len(docs), docs)
	}
	cache := map[string]map[string]bool{}
	for _, doc := range docs {
		for n, l := range markdownLines(t, doc) {
			for _, m := range linkRE.FindAllStringSubmatch(inlineCodeRE.ReplaceAllString(l, ""), -1) {
				target := m[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				file, anchor, _ := strings.Cut(target, "#")
				path := doc
				if file != "" {
					path = filepath.Join(filepath.Dir(doc), file)
					if _, err := os.Stat(path); err != nil {
						t.Errorf("%s:%d: link %s: no such file %s", doc, n, target, path)
						continue
					}
				}
				if anchor == "" || !strings.HasSuffix(path, ".md") {
					continue
				}
				if cache[path] == nil {
					cache[path] = anchors(t, path)
				}
				if !cache[path][anchor] {
					t.Errorf("%s:%d: link %s: %s has no heading #%s", doc, n, target, path, anchor)
				}
			}
		}
	}
}
