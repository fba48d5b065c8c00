package spool

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestOpenAdviceFitsTheCase: a journal that could not be created is not
// described as a file "left as it is" to be moved aside.
func TestOpenAdviceFitsTheCase(t *testing.T) {
	dir := t.TempDir()
	// A dangling link: there is no journal, and bbolt cannot create one.
	path := filepath.Join(dir, "journal.db")
	if err := os.Symlink(filepath.Join(dir, "missing", "journal.db"), path); err != nil {
		t.Fatal(err)
	}
	_, err := Open(path, Options{})
	if err == nil || !strings.Contains(err.Error(), "cannot create") || strings.Contains(err.Error(), "move it aside") || strings.Contains(err.Error(), "left as it is") {
		t.Fatalf("Open of a journal that cannot be created: %v", err)
	}
}
