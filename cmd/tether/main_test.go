package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tether-run/tether/internal/testutil"
)

// tetherBin runs tether: a link named tether to this test binary, which
// runs Main when started under that name (see TestMain). The tests of this
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
		os.Exit(Main(context.Background(), os.Args[1:]))
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
