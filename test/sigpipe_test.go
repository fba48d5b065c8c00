package e2e_test

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tether-run/tether/internal/testutil"
	"github.com/tether-run/tether/provider/daytona/daytonatest"
)

// A signal raised by tether's own I/O is tether's, never the child's: a
// client that hangs up on the socket, a `tether intent` that gives up, a
// reader of tether's stderr that goes away each make one of tether's writes
// fail with EPIPE and raise SIGPIPE. Forwarded, it killed the runner, and
// the drain then deleted the sandboxes of a run that was still going.
//
// The child is a shell (default SIGPIPE: it dies of one, as `sleep` does in
// the issue) that first runs the sample runner (two sandboxes, held), then
// waits, printing "alrm" on each SIGALRM. (Its sleeps are short so that none
// outlives a tether the test had to kill, holding the stdout pipe open. Its
// stderr goes to /dev/null: the shell reports a sleep killed by SIGALRM
// there, and dies of its own SIGPIPE when the test has closed that pipe.) SIGALRM is the barrier: it is sent
// after the SIGPIPE was raised, and tether's signal queue hands out pending
// signals lowest number first, so a SIGPIPE (13) that tether forwarded would
// reach the child before the SIGALRM (14) and kill it before its trap runs.
const waitingShell = `"$0" "$@" || exit 1
exec 2>/dev/null
trap 'echo alrm' ALRM
echo waiting
while :; do sleep 0.1; done`

func TestSIGPIPEIsNotForwarded(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		options []daytonatest.Option
		// hangUp makes one of tether's writes fail with EPIPE; it returns
		// once that write has been made.
		hangUp func(t *testing.T, w *world, p *proc, stderr *os.File, out runnerOut)
	}{
		{name: "half-sent request", hangUp: func(t *testing.T, w *world, p *proc, stderr *os.File, _ runnerOut) {
			c, err := net.Dial("unix", w.socket)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := c.Write([]byte("POST /v1/intents HTTP/1.1\r\nHost: t\r\nContent-Length: 100\r\n\r\n{")); err != nil {
				t.Fatal(err)
			}
			c.Close()
			waitServerConnsClosed(t, w.socket) // its answer is written (to nobody)
		}},
		{
			name: "intent delete gives up",
			// The confirmed delete takes 3 s; the CLI gives up after 1 s,
			// and tether answers the closed connection 2 s later.
			options: []daytonatest.Option{daytonatest.WithDestroyDelay(3 * time.Second)},
			hangUp: func(t *testing.T, w *world, p *proc, _ *os.File, out runnerOut) {
				victim := out.of("created")[0]
				cli := exec.Command(bin.tether, "intent", "delete", "--timeout", "1s", victim.intent)
				cli.Env = append(w.env, "TETHER_SOCKET="+w.socket)
				if msg, err := cli.CombinedOutput(); err == nil {
					t.Fatalf("tether intent delete --timeout 1s succeeded against a 3 s delete: %s", msg)
				}
				waitServerConnsClosed(t, w.socket)
				if sb, _ := w.sim.Sandbox(victim.sandbox); !sb.DeleteRequested {
					t.Fatalf("the sandbox tether was asked to delete is %s, its delete never requested", sb.State)
				}
			},
		},
		{name: "stderr reader gone", hangUp: func(t *testing.T, w *world, p *proc, stderr *os.File, _ runnerOut) {
			stderr.Close()
			// tether logs each signal it forwards (debug), into the broken
			// pipe; that write raises the SIGPIPE. The SIGALRM that makes
			// it reaches the child first, and is what the child says.
			p.signal(syscall.SIGALRM)
			p.wantLine("alrm")
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			w := newWorld(t, tc.options...)
			args := append(w.tetherArgs("run"), "--log-level", "debug", "--drain-timeout", drainTimeout,
				"--", "/bin/sh", "-c", waitingShell, bin.runner, "--label", "e2e", "--sandboxes", "2", "--exit", "0")
			p, stderr := w.startPiped(args...)
			out := p.ready()
			created := out.of("created")
			if len(created) != 2 {
				t.Fatalf("runner created %d sandboxes, want 2: %+v", len(created), out.lines)
			}
			p.wantLine("waiting")

			tc.hangUp(t, w, p, stderr, out)
			p.signal(syscall.SIGALRM)
			p.wantLine("alrm")

			// The child lives, and so does every sandbox of its run that
			// nobody asked to delete.
			for _, c := range created {
				sb, ok := w.sim.Sandbox(c.sandbox)
				if !ok {
					t.Fatalf("sandbox %s unknown to the simulator", c.sandbox)
				}
				if tc.name == "intent delete gives up" && c.sandbox == created[0].sandbox {
					continue // the one the runner asked tether to delete
				}
				if sb.State != "started" || sb.DeleteRequested {
					t.Errorf("sandbox %s of the live run: state %s, delete requested %v; want started", c.sandbox, sb.State, sb.DeleteRequested)
				}
			}

			// And the drain still does its job once the run really ends.
			if code := p.stop(syscall.SIGTERM); code != 128+int(syscall.SIGTERM) {
				t.Fatalf("tether exited %d after SIGTERM, want the child's 143", code)
			}
			w.assertDestroyed(ids(created, sandboxOf)...)
		})
	}
}

// startPiped is start with tether's stderr on a pipe the test can close,
// as a log collector that goes away would.
func (w *world) startPiped(args ...string) (*proc, *os.File) {
	t := w.t
	t.Helper()
	cmd := exec.Command(bin.tether, args...)
	cmd.Env = w.env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	r, wr, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = wr
	t.Cleanup(func() { r.Close() }) // after tether is dead: see testutil.Start
	tp := testutil.Start(t, cmd)
	wr.Close()
	p := &proc{Proc: tp, t: t, cmd: cmd, stderr: tp.Stderr}
	go func() {
		// Copied until the test closes r (then Read fails and this ends).
		buf := make([]byte, 4096)
		for {
			n, err := r.Read(buf)
			p.stderr.Write(buf[:n])
			if err != nil {
				return
			}
		}
	}()
	return p, r
}

// wantLine waits for the child's next stdout line to be want.
func (p *proc) wantLine(want string) {
	p.t.Helper()
	if line := p.line(); line != want {
		p.t.Fatalf("the child said %q, want %q", line, want)
	}
}

// waitServerConnsClosed waits until tether has closed every connection it
// accepted on socket: only the listener is left in /proc/net/unix under
// that path. A connection is closed after its answer was written.
func waitServerConnsClosed(t *testing.T, socket string) {
	t.Helper()
	testutil.Eventually(t, "tether to close its connections on "+socket, func() (bool, string) {
		b, err := os.ReadFile("/proc/net/unix")
		if err != nil {
			t.Skipf("no /proc/net/unix: %v", err)
		}
		n := 0
		for _, line := range strings.Split(string(b), "\n") {
			if f := strings.Fields(line); len(f) >= 8 && f[len(f)-1] == socket {
				n++
			}
		}
		// None at all: tether is gone, which the caller's next step reports.
		return n <= 1, fmt.Sprintf("%d sockets under the path", n)
	})
}
