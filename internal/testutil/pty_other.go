//go:build !linux

package testutil

import (
	"os"
	"testing"
)

// OpenPTY skips the test: the pseudo-terminal tests use Linux's /dev/ptmx.
func OpenPTY(t testing.TB) (master, tty *os.File) {
	t.Helper()
	t.Skip("pseudo-terminal tests run on Linux")
	return nil, nil
}
