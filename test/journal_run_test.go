package e2e_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tether-run/tether/intentapi/client"
	"github.com/tether-run/tether/internal/testutil"
	"github.com/tether-run/tether/supervisor"
)

// shortDir is a new directory with a short path (a Unix socket's path is
// limited to about 100 bytes), removed at the test's end.
func shortDir(t *testing.T, prefix string) string {
	t.Helper()
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// waitHealthy waits until a tether serves the socket at sock.
func waitHealthy(t *testing.T, sock string, p *testutil.Proc) {
	t.Helper()
	cl := client.New(sock)
	testutil.WaitFor(t, "tether to serve its socket", func() bool {
		if p.Exited() {
			t.Fatalf("tether exited before serving its socket; stderr:\n%s", p.Stderr)
		}
		_, err := cl.Health(t.Context())
		return err == nil
	})
}

// TestJournalHeldByAnotherTether: a second tether run on a journal a live
// tether holds exits 125 at once, naming the journal.
func TestJournalHeldByAnotherTether(t *testing.T) {
	t.Parallel()
	dir := shortDir(t, "tlock")
	journalPath := filepath.Join(dir, "journal.db")
	holder := testutil.Start(t, exec.Command(bin.tether, "run", "--journal", journalPath, "--socket", filepath.Join(dir, "a.sock"),
		"--spool", filepath.Join(dir, "a"), "--", "sleep", "600"))
	waitHealthy(t, filepath.Join(dir, "a.sock"), holder)
	start := time.Now()
	code, _, stderr := testutil.Run(t, exec.Command(bin.tether, "run", "--journal", journalPath, "--socket", filepath.Join(dir, "b.sock"),
		"--spool", filepath.Join(dir, "b"), "--", "true"))
	if code != supervisor.ExitCodeOwnError || !strings.Contains(stderr, journalPath) {
		t.Fatalf("second tether: exit %d, stderr %q; want exit %d naming %s", code, stderr, supervisor.ExitCodeOwnError, journalPath)
	}
	// "At once": the second does not wait for the lock (bbolt's open would
	// otherwise block until the holder exits, an hour here).
	if el := time.Since(start); el > testutil.WaitBound/2 {
		t.Fatalf("the second tether took %s to give up", el)
	}
	if code := holder.Stop(syscall.SIGTERM); code != 128+int(syscall.SIGTERM) && code != 0 {
		t.Errorf("the holder exited %d after SIGTERM", code)
	}
}
