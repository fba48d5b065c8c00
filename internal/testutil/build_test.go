package testutil

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestBuildLeavesNothing: the binaries a go test run builds live in the go
// command's work directory, which the go command removes when it ends, so
// no run leaves them in the temporary directory; a test process not started
// by go test removes its own in Cleanup.
func TestBuildLeavesNothing(t *testing.T) {
	path := Build(t, Module+"/test/docker/probe")
	work, ok := goWork()
	if !ok {
		if !builds.own || !strings.HasPrefix(path, builds.dir+string(filepath.Separator)) {
			t.Fatalf("not started by go test: %s is not in a directory of this process's own", path)
		}
		dir := builds.dir
		Cleanup()
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			t.Fatalf("Cleanup left %s: %v", dir, err)
		}
		return
	}
	if rel, err := filepath.Rel(work, path); err != nil || strings.HasPrefix(rel, "..") {
		t.Fatalf("%s is outside the go command's work directory %s, which go removes when it ends", path, work)
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatal(err)
	}
}
