package testutil

import (
	"fmt"
	"io"
	"os"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// OpenPTY returns a new pseudo-terminal's master and its terminal side,
// both closed at the test's end; it skips the test where there are none.
// What the terminal echoes is read and dropped, so it never blocks a writer.
func OpenPTY(t testing.TB) (master, tty *os.File) {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals: %v", err)
	}
	if err := unix.IoctlSetPointerInt(int(m.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		m.Close()
		t.Fatal(err)
	}
	n, err := unix.IoctlGetInt(int(m.Fd()), unix.TIOCGPTN)
	if err != nil {
		m.Close()
		t.Fatal(err)
	}
	s, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		m.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close(); s.Close() })
	go io.Copy(io.Discard, m)
	return m, s
}
