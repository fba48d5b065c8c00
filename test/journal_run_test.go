package e2e_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tether-run/tether/intentapi"
	"github.com/tether-run/tether/intentapi/client"
	"github.com/tether-run/tether/internal/testutil"
	"github.com/tether-run/tether/spool"
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

// TestCrashRealBinary: a storm of creates against the real `tether run`,
// SIGKILL of tether mid-storm, then the journal reopened: every intent whose
// 201 reached a client is there, and a new tether run starts on it.
func TestCrashRealBinary(t *testing.T) {
	t.Parallel()
	dir := shortDir(t, "tcrash")
	journal, sock := filepath.Join(dir, "journal.db"), filepath.Join(dir, "t.sock")
	pidFile := filepath.Join(dir, "child.pid")
	t.Cleanup(func() {
		if b, err := os.ReadFile(pidFile); err == nil {
			if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
				syscall.Kill(pid, syscall.SIGKILL) // the orphaned child
			}
		}
	})
	cmd := exec.Command(bin.tether, "run", "--journal", journal, "--socket", sock, "--spool", filepath.Join(dir, "spool"),
		"--", "sh", "-c", "echo $$ > "+pidFile+"; exec sleep 600")
	cmd.Env = append(os.Environ(), "DAYTONA_API_KEY=", "DAYTONA_API_URL=")
	p := testutil.Start(t, cmd)
	waitHealthy(t, sock, p)
	cl := client.New(sock)

	var mu sync.Mutex
	acked := map[string]string{}
	var wg sync.WaitGroup
	for g := 0; g < 32; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				key := fmt.Sprintf("g%d-%d", g, i)
				ctx, cancel := context.WithTimeout(context.Background(), testutil.WaitBound)
				in, err := cl.CreateIntent(ctx, intentapi.CreateRequest{Key: key})
				cancel()
				if err != nil {
					return // tether was killed
				}
				mu.Lock()
				acked[key] = in.ID
				mu.Unlock()
			}
		}()
	}
	testutil.WaitFor(t, "400 acknowledged creates", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(acked) >= 400
	})
	if code := p.Stop(syscall.SIGKILL); code != 128+int(syscall.SIGKILL) {
		t.Fatalf("tether exited %d, want 137 (SIGKILL)", code)
	}
	stormDone := make(chan struct{})
	go func() { wg.Wait(); close(stormDone) }()
	testutil.Receive(t, "the clients to see tether gone", stormDone)

	j, err := spool.Open(journal, spool.Options{})
	if err != nil {
		t.Fatalf("reopen after SIGKILL: %v", err)
	}
	if _, err := j.All(); err != nil {
		t.Fatalf("a record is unreadable: %v", err)
	}
	for key, id := range acked {
		if in, err := j.Get(id); err != nil || in.Key != key {
			t.Fatalf("acknowledged intent %s (%s) lost: %v", id, key, err)
		}
	}
	j.Close()
	t.Logf("%d acknowledged intents all present after SIGKILL", len(acked))

	// A new tether starts on the same journal and serves them.
	again := exec.Command(bin.tether, "run", "--journal", journal, "--socket", sock, "--spool", filepath.Join(dir, "spool"),
		"--drain-timeout", "1s", "--", bin.tether, "intent", "ls")
	again.Env = cmd.Env
	_, out, stderr := testutil.Run(t, again)
	if got := strings.Count(out, "\n"); got < len(acked) {
		t.Fatalf("restarted tether lists %d intents, %d acknowledged; stderr:\n%s", got, len(acked), stderr)
	}
}

// TestJournalHeldByAnotherTether: a second tether run on a journal a live
// tether holds exits 125 at once, naming the journal.
func TestJournalHeldByAnotherTether(t *testing.T) {
	t.Parallel()
	dir := shortDir(t, "tlock")
	journal := filepath.Join(dir, "journal.db")
	holder := testutil.Start(t, exec.Command(bin.tether, "run", "--journal", journal, "--socket", filepath.Join(dir, "a.sock"),
		"--spool", filepath.Join(dir, "a"), "--", "sleep", "600"))
	waitHealthy(t, filepath.Join(dir, "a.sock"), holder)
	start := time.Now()
	code, _, stderr := testutil.Run(t, exec.Command(bin.tether, "run", "--journal", journal, "--socket", filepath.Join(dir, "b.sock"),
		"--spool", filepath.Join(dir, "b"), "--", "true"))
	if code != supervisor.ExitCodeOwnError || !strings.Contains(stderr, journal) {
		t.Fatalf("second tether: exit %d, stderr %q; want exit %d naming %s", code, stderr, supervisor.ExitCodeOwnError, journal)
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
