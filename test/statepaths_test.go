package e2e_test

import (
	"os"
	"strings"
	"syscall"
	"testing"
)

// File system magic numbers (statfs(2)).
const (
	tmpfsMagic   = 0x01021994
	overlayMagic = 0x794c7630
)

func fsType(t *testing.T, dir string) int64 {
	t.Helper()
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	return int64(st.Type)
}

// TestStartSaysWhere: one info line at start names the journal, socket and
// spool directory actually used and the proxy's URL without its secret; a
// journal on a disk gets no warning, one in memory (tmpfs) does.
func TestStartSaysWhere(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	if typ := fsType(t, w.dir); typ == tmpfsMagic || typ == overlayMagic {
		t.Skipf("the test's directory %s is itself on tmpfs or an overlay", w.dir)
	}
	p := w.runZeroCode(nil, "url", "exit")
	out := p.ready()
	if code := p.wait(); code != 0 {
		t.Fatalf("tether exited %d:\n%s", code, p.stderr)
	}
	secretURL := out.of("url")[0].name
	// http://127.0.0.1:PORT/<secret>/api
	rest := strings.TrimPrefix(secretURL, "http://")
	host, path, _ := strings.Cut(rest, "/")
	secret, _, _ := strings.Cut(path, "/")
	shown := "http://" + host + "/<secret>/api"
	stderr := p.stderr.String()
	lines := linesWith(stderr, "level=INFO", "where this run keeps its state")
	if len(lines) != 1 {
		t.Fatalf("%d lines saying where, want 1:\n%s", len(lines), stderr)
	}
	for _, want := range []string{"journal=" + w.journal, "socket=" + w.socket, "spool=" + w.spool, "daytona_proxy=" + shown} {
		if !strings.Contains(lines[0], want) {
			t.Errorf("%q lacks %s", lines[0], want)
		}
	}
	if strings.Contains(stderr, secret) {
		t.Errorf("the secret is in stderr")
	}
	if l := lineWith(stderr, "will not survive"); l != "" {
		t.Errorf("a journal on a disk was warned about: %s", l)
	}

	t.Run("in memory", func(t *testing.T) {
		if _, err := os.Stat("/dev/shm"); err != nil || fsType(t, "/dev/shm") != tmpfsMagic {
			t.Skip("no tmpfs at /dev/shm")
		}
		dir, err := os.MkdirTemp("/dev/shm", "tt")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(dir) })
		journalPath := dir + "/journal.db"
		code, stderr := w.runTether("run", "--journal", journalPath, "--socket", w.socket, "--spool", w.spool, "--", "true")
		if code != 0 {
			t.Fatalf("tether exited %d:\n%s", code, stderr)
		}
		if lineWith(stderr, "level=WARN", "will not survive", "tmpfs", "journal="+journalPath) == "" {
			t.Errorf("no warning that a journal in memory will not survive:\n%s", stderr)
		}
		if lineWith(stderr, "where this run keeps its state", "daytona_proxy=off") == "" {
			t.Errorf("with the proxy off (as the world sets it), the line says so:\n%s", stderr)
		}
	})
}
