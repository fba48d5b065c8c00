package e2e_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/tether-run/tether/intent"
	"github.com/tether-run/tether/internal/testutil"

	"github.com/tether-run/tether/intentapi"
	"github.com/tether-run/tether/internal/intake/socket"
)

// fds counts the open file descriptors of process pid.
func fds(t *testing.T, pid int) int {
	t.Helper()
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatalf("fds of %d: %v", pid, err)
	}
	return len(ents)
}

// TestSocketUnderAbuse: 500 connections held open against the real tether —
// half keep-alive and idle, half stalled in the middle of a request body —
// do not keep GET /v1/health or a create from being answered, tether's
// descriptors stay under its connection cap, and the intent acknowledged
// before the abuse is drained as usual.
//
// Also with a descriptor limit of 64 (as a container may set): the cap
// shrinks to half of it, and no client waits for a descriptor.
func TestSocketUnderAbuse(t *testing.T) {
	t.Parallel()
	t.Run("default limit", func(t *testing.T) { socketUnderAbuse(t, 0) })
	t.Run("64 descriptors", func(t *testing.T) {
		if _, err := exec.LookPath("prlimit"); err != nil {
			t.Skip("prlimit (util-linux) not installed")
		}
		socketUnderAbuse(t, 64)
	})
}

func socketUnderAbuse(t *testing.T, nofile int) {
	w := newWorld(t)
	if nofile > 0 {
		w.wrap = []string{"prlimit", fmt.Sprintf("--nofile=%d:%d", nofile, nofile), "--"}
	}
	p := w.start(append(w.tetherArgs("run"), "--drain-timeout", drainTimeout, "--", "sleep", "600")...)
	c := w.client()
	testutil.Eventually(t, "the socket answers", func() (bool, string) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		_, err := c.Health(ctx)
		return err == nil, fmt.Sprint(err)
	})
	pid := p.cmd.Process.Pid
	before := fds(t, pid)

	in, err := c.CreateIntent(t.Context(), intentapi.CreateRequest{Key: "before-abuse"})
	if err != nil {
		t.Fatal(err)
	}
	sb := w.plantOurs(in.Name, in.Labels)
	if _, err := c.Observe(t.Context(), in.ID, sb.ID); err != nil {
		t.Fatal(err)
	}

	const abusers = 500
	// Connecting must not wait for tether to find a descriptor (with
	// the cap above the descriptor limit it waited for minutes).
	var d net.Dialer
	dctx, dcancel := context.WithTimeout(t.Context(), waitBound)
	defer dcancel()
	for i := range abusers {
		conn, err := d.DialContext(dctx, "unix", w.socket)
		if err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		t.Cleanup(func() { conn.Close() })
		if i%2 == 0 {
			io.WriteString(conn, "GET /v1/health HTTP/1.1\r\nHost: tether\r\n\r\n")
			conn.SetReadDeadline(time.Now().Add(2 * time.Second))
			if resp, err := http.ReadResponse(bufio.NewReader(conn), nil); err == nil {
				resp.Body.Close()
			}
		} else {
			io.WriteString(conn, "POST /v1/intents HTTP/1.1\r\nHost: tether\r\nContent-Length: 4096\r\n\r\n{\"labels\":{")
		}
	}

	ctx, cancel := context.WithTimeout(t.Context(), waitBound)
	defer cancel()
	if _, err := c.Health(ctx); err != nil {
		t.Fatalf("GET /v1/health with %d connections held: %v", abusers, err)
	}
	after, err := c.CreateIntent(ctx, intentapi.CreateRequest{Key: "during-abuse"})
	if err != nil {
		t.Fatalf("create with %d connections held: %v", abusers, err)
	}
	limit := before + socket.DefaultMaxConns + 8
	if nofile > 0 {
		limit = nofile
	}
	if n := fds(t, pid); n > limit {
		t.Errorf("tether holds %d descriptors (%d before the abuse, at most %d expected)", n, before, limit)
	}
	t.Logf("descriptors: %d before, %d with %d connections held", before, fds(t, pid), abusers)

	sb2 := w.plantOurs(after.Name, after.Labels)
	if _, err := c.Observe(ctx, after.ID, sb2.ID); err != nil {
		t.Fatal(err)
	}
	if code := p.stop(syscall.SIGTERM); code != 128+int(syscall.SIGTERM) {
		t.Fatalf("tether exited %d, want 143; stderr:\n%s", code, p.stderr)
	}
	w.assertDestroyed(sb.ID, sb2.ID)
	w.assertJournal(intent.Gone, in.ID, after.ID)
}
