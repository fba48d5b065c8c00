package e2e_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/tether-run/tether/internal/testutil"

	"golang.org/x/sys/unix"
)

// startTetherOnTTY runs tether as a shell would run a foreground job (see
// jobShell) in a session whose controlling terminal is tty. cmd is the
// shell; tether's pid is the events file's "tether pid N".
func startTetherOnTTY(t *testing.T, tty *os.File, args []string, env ...string) (*exec.Cmd, string, chan struct{}) {
	t.Helper()
	events := filepath.Join(t.TempDir(), "events")
	cmd := exec.Command(os.Args[0], append([]string{"jobshell", bin.tether, "run"}, args...)...)
	cmd.Env = append(os.Environ(), helperEnv+"=1", "HELPER_EVENTS="+events)
	cmd.Env = append(cmd.Env, isolatedEnv(t)...)
	cmd.Env = append(cmd.Env, env...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = tty, tty, tty
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		select {
		case <-done:
		case <-time.After(testutil.ExitBound):
			t.Errorf("the job shell did not die of SIGKILL within %s", testutil.ExitBound)
		}
		killEventPIDs(events)
	})
	return cmd, events, done
}

func waitDone(t *testing.T, cmd *exec.Cmd, done chan struct{}) int {
	t.Helper()
	select {
	case <-done:
	case <-time.After(testutil.ExitBound):
		t.Fatalf("tether still running after %s", testutil.ExitBound)
	}
	return cmd.ProcessState.ExitCode()
}

// TestRunTTYCtrlCReachesChildOnce: in a terminal the kernel sends Ctrl-C's
// SIGINT to the foreground group, which the child is in (so it can also
// read the terminal), and tether must not forward a second one.
func TestRunTTYCtrlCReachesChildOnce(t *testing.T) {
	t.Parallel()
	master, tty := testutil.OpenPTY(t)
	cmd, events, done := startTetherOnTTY(t, tty, append([]string{"--grace", "1h", "--"}, helperCommand("record")...), "HELPER_GRANDCHILD=1")
	waitEvent(t, events, "child ready")
	if _, err := master.Write([]byte{0x03}); err != nil { // Ctrl-C
		t.Fatal(err)
	}
	if got := waitDone(t, cmd, done); got != 0 {
		t.Fatalf("exit code %d, want 0 (the child exits 0 on its SIGINT)", got)
	}
	sigintOnceEach(t, readLines(events), "child", "grandchild")
}

// TestRunTTYChildReadsTerminal: the child is in the terminal's foreground,
// so reading it does not stop the child with SIGTTIN.
func TestRunTTYChildReadsTerminal(t *testing.T) {
	t.Parallel()
	master, tty := testutil.OpenPTY(t)
	cmd, events, done := startTetherOnTTY(t, tty, append([]string{"--"}, helperCommand("readline")...))
	waitEvent(t, events, "child ready")
	if _, err := master.Write([]byte("hello from the terminal\n")); err != nil {
		t.Fatal(err)
	}
	if got := waitDone(t, cmd, done); got != 0 {
		t.Fatalf("exit code %d, want 0; events %q", got, readLines(events))
	}
	if !hasLine(readLines(events), "child read hello from the terminal") {
		t.Fatalf("the child did not read the terminal: %q", readLines(events))
	}
}

// TestRunTTYCtrlZStopsTheJob: Ctrl-Z stops the child, and tether stops too
// (so a shell sees the job stopped); the terminal stays with the job's
// group, the child's and tether's. SIGCONT (the shell's fg) wakes both.
func TestRunTTYCtrlZStopsTheJob(t *testing.T) {
	t.Parallel()
	master, tty := testutil.OpenPTY(t)
	cmd, events, done := startTetherOnTTY(t, tty, append([]string{"--"}, helperCommand("readline")...))
	waitEvent(t, events, "child ready")
	child := eventPID(t, events, "child")
	if _, err := master.Write([]byte{0x1a}); err != nil { // Ctrl-Z
		t.Fatal(err)
	}
	tether := eventPID(t, events, "tether")
	testutil.WaitFor(t, "the child and tether to be stopped", func() bool {
		return procState(child) == 'T' && procState(tether) == 'T'
	})
	fg, err := unix.IoctlGetInt(int(master.Fd()), unix.TIOCGPGRP)
	if err != nil {
		t.Fatal(err)
	}
	if fg != tether {
		t.Fatalf("terminal's foreground group %d, want tether's %d after Ctrl-Z", fg, tether)
	}
	// SIGCONT to tether alone (not the group, as a shell's fg would): tether
	// wakes the child it finds stopped.
	if err := syscall.Kill(tether, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "the child to run again", func() bool { return procState(child) != 'T' })
	if _, err := master.Write([]byte("resumed\n")); err != nil {
		t.Fatal(err)
	}
	if got := waitDone(t, cmd, done); got != 0 {
		t.Fatalf("exit code %d, want 0; events %q", got, readLines(events))
	}
	if !hasLine(readLines(events), "child read resumed") {
		t.Fatalf("the child did not read the terminal after fg: %q", readLines(events))
	}
}

// countLines counts the lines equal to want.
func countLines(lines []string, want string) int {
	n := 0
	for _, l := range lines {
		if l == want {
			n++
		}
	}
	return n
}

// TestRunTTYCtrlCStartsTheGrace: a runner that traps SIGINT gets Ctrl-C's
// SIGINT exactly once, and tether, which sees the same Ctrl-C, starts the
// grace: the runner is killed when it passes, as after a SIGTERM.
func TestRunTTYCtrlCStartsTheGrace(t *testing.T) {
	t.Parallel()
	master, tty := testutil.OpenPTY(t)
	cmd, events, done := startTetherOnTTY(t, tty, append([]string{"--grace", "300ms", "--"}, helperCommand("record")...),
		"HELPER_IGNORE_TERM=1", "HELPER_GRANDCHILD=1")
	waitEvent(t, events, "child ready")
	if _, err := master.Write([]byte{0x03}); err != nil { // Ctrl-C
		t.Fatal(err)
	}
	if got := waitDone(t, cmd, done); got != 128+int(syscall.SIGKILL) {
		t.Fatalf("exit code %d, want 137 (killed after the grace)", got)
	}
	lines := readLines(events)
	for _, role := range []string{"child", "grandchild"} {
		if n := countLines(lines, role+" SIGINT"); n != 1 {
			t.Errorf("%s got SIGINT %d times, want exactly once: %q", role, n, lines)
		}
	}
}

// TestRunTTYSecondCtrlCKills: the second Ctrl-C kills at once (the grace is
// an hour here), as a second SIGTERM does; the first reached the runner
// exactly once.
func TestRunTTYSecondCtrlCKills(t *testing.T) {
	t.Parallel()
	master, tty := testutil.OpenPTY(t)
	cmd, events, done := startTetherOnTTY(t, tty, append([]string{"--grace", "1h", "--"}, helperCommand("record")...),
		"HELPER_IGNORE_TERM=1", "HELPER_GRANDCHILD=1")
	waitEvent(t, events, "child ready")
	if _, err := master.Write([]byte{0x03}); err != nil { // Ctrl-C
		t.Fatal(err)
	}
	waitEvent(t, events, "child SIGINT")
	waitEvent(t, events, "grandchild SIGINT")
	// The barrier: SIGUSR1 (10), sent to tether alone, is forwarded after
	// any SIGINT (2) tether would have forwarded (the Go runtime hands out
	// pending signals lowest number first).
	if err := syscall.Kill(eventPID(t, events, "tether"), syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	waitEvent(t, events, "child SIGUSR1")
	waitEvent(t, events, "grandchild SIGUSR1")
	lines := readLines(events)
	for _, role := range []string{"child", "grandchild"} {
		if n := countLines(lines, role+" SIGINT"); n != 1 {
			t.Errorf("%s got SIGINT %d times after one Ctrl-C, want exactly once: %q", role, n, lines)
		}
	}
	if _, err := master.Write([]byte{0x03}); err != nil { // the second Ctrl-C
		t.Fatal(err)
	}
	if got := waitDone(t, cmd, done); got != 128+int(syscall.SIGKILL) {
		t.Fatalf("exit code %d, want 137 (killed at once by the second Ctrl-C)", got)
	}
}
