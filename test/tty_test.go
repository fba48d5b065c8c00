//go:build linux

package e2e_test

import (
	"os"
	"os/exec"
	"syscall"
	"testing"

	"github.com/tether-run/tether/internal/testutil"
)

// TestCtrlCInATerminal: `tether run` typed in a terminal, with a runner that
// traps SIGINT (as one with a shutdown handler does). The first Ctrl-C
// reaches the runner exactly once and starts the grace (an hour here); the
// runner and its sandboxes live on meanwhile. The second Ctrl-C kills at
// once, as a second SIGTERM does, and the drain deletes the sandboxes.
//
// tether is the leader of the terminal's session here, as in
// `docker run -it`; run_tty_test.go also runs it as a shell's job.
func TestCtrlCInATerminal(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	master, tty := testutil.OpenPTY(t)
	script := `"$0" "$@" || exit 1
exec 2>/dev/null
trap 'echo int' INT
trap 'echo alrm' ALRM
echo waiting
while :; do sleep 0.1; done`
	args := append(w.tetherArgs("run"), "--grace", "1h", "--drain-timeout", drainTimeout,
		"--", "/bin/sh", "-c", script, bin.runner, "--label", "e2e", "--sandboxes", "2", "--exit", "0")
	p := w.startOnTTY(tty, args...)
	out := p.ready()
	created := out.of("created")
	if len(created) != 2 {
		t.Fatalf("runner created %d sandboxes, want 2: %+v", len(created), out.lines)
	}
	p.wantLine("waiting")

	if _, err := master.Write([]byte{0x03}); err != nil { // Ctrl-C
		t.Fatal(err)
	}
	p.wantLine("int")
	// SIGALRM (14) is forwarded after any SIGINT (2) tether would have
	// forwarded: the next line is "alrm", not a second "int".
	p.signal(syscall.SIGALRM)
	p.wantLine("alrm")
	for _, c := range created {
		if sb, _ := w.sim.Sandbox(c.sandbox); sb.State != "started" || sb.DeleteRequested {
			t.Errorf("sandbox %s of the runner in its grace: state %s, delete requested %v; want started", c.sandbox, sb.State, sb.DeleteRequested)
		}
	}

	if _, err := master.Write([]byte{0x03}); err != nil { // the second Ctrl-C
		t.Fatal(err)
	}
	if code := p.wait(); code != 128+int(syscall.SIGKILL) {
		t.Fatalf("tether exited %d after the second Ctrl-C, want 137 (killed at once; the grace is an hour)", code)
	}
	w.assertDestroyed(ids(created, sandboxOf)...)
}

// startOnTTY is start with tether's stdin on tty, as the leader of the
// session tty is the controlling terminal of; stdout is read as start does.
func (w *world) startOnTTY(tty *os.File, args ...string) *proc {
	t := w.t
	t.Helper()
	cmd := exec.Command(bin.tether, args...)
	cmd.Env = w.env
	cmd.Stdin = tty
	// Its session's group, tether and the runner, is killed at cleanup.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	tp := testutil.Start(t, cmd)
	return &proc{Proc: tp, t: t, cmd: cmd, stderr: tp.Stderr}
}
