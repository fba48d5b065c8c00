package e2e_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/tether-run/tether/internal/testutil"
)

// statusCommand writes the /proc/<pid>/status of the process it becomes (sh
// execs cat) to the file given after it.
var statusCommand = []string{"/bin/sh", "-c", `exec cat /proc/self/status > "$0"`}

// sigMasks reads the SigIgn and SigBlk lines of a /proc status file.
func sigMasks(t *testing.T, path string) (ign, blk string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, _ := strings.Cut(line, ":")
		switch k {
		case "SigIgn":
			ign = strings.TrimSpace(v)
		case "SigBlk":
			blk = strings.TrimSpace(v)
		}
	}
	if ign == "" || blk == "" {
		t.Fatalf("no SigIgn/SigBlk in %s:\n%s", path, b)
	}
	return ign, blk
}

// TestRunChildStartsWithDefaultSignals, as tini's tests check it: the child
// starts with exactly the ignored and blocked signals tether itself was
// started with — nothing tether ignores or blocks for its own sake (SIGPIPE,
// SIGTTOU) leaks into it. The reference is the same command started directly
// by the test, the way the test starts tether.
func TestRunChildStartsWithDefaultSignals(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	direct := filepath.Join(dir, "direct")
	if out, err := exec.Command(statusCommand[0], append(statusCommand[1:], direct)...).CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	wantIgn, wantBlk := sigMasks(t, direct)

	check := func(t *testing.T, path string) {
		t.Helper()
		ign, blk := sigMasks(t, path)
		if ign != wantIgn {
			t.Errorf("child's SigIgn %s, want %s (as started without tether)", ign, wantIgn)
		}
		if blk != wantBlk {
			t.Errorf("child's SigBlk %s, want %s (as started without tether)", blk, wantBlk)
		}
	}

	t.Run("pipes", func(t *testing.T) {
		t.Parallel()
		path := filepath.Join(t.TempDir(), "status")
		if got, p := runTether(t, append(append([]string{"--"}, statusCommand...), path)...); got != 0 {
			t.Fatalf("exit code %d; stderr:\n%s", got, p.stderr.String())
		}
		check(t, path)
	})
	t.Run("terminal", func(t *testing.T) {
		t.Parallel()
		_, tty := testutil.OpenPTY(t)
		path := filepath.Join(t.TempDir(), "status")
		cmd, _, done := startTetherOnTTY(t, tty, append(append([]string{"--"}, statusCommand...), path))
		if got := waitDone(t, cmd, done); got != 0 {
			t.Fatalf("exit code %d", got)
		}
		check(t, path)
	})
}

// TestRunKeepsItsOwnSignals: SIGPIPE, SIGXFSZ, SIGXCPU, SIGTTIN and SIGTTOU
// are tether's (its own I/O and limits raise them): sent to tether, they
// neither reach the child nor stop tether. SIGPWR (30) is the barrier: the
// Go runtime hands pending signals out lowest number first, so any of those
// (13 to 25) that were to be forwarded would reach the child before it.
func TestRunKeepsItsOwnSignals(t *testing.T) {
	t.Parallel()
	p := startTether(t, append([]string{"--grace", "1h", "--"}, helperCommand("record")...))
	waitEvent(t, p.events, "child ready")
	own := []syscall.Signal{syscall.SIGPIPE, syscall.SIGXFSZ, syscall.SIGXCPU, syscall.SIGTTIN, syscall.SIGTTOU}
	for _, sig := range own {
		p.signal(t, sig)
	}
	p.signal(t, syscall.SIGPWR)
	waitEvent(t, p.events, "child SIGPWR")
	if st := procState(p.cmd.Process.Pid); st == 'T' || st == 0 {
		t.Fatalf("tether's state is %q after its own signals, want it running", st)
	}
	for _, sig := range own {
		if hasLine(readLines(p.events), "child "+sigName(sig)) {
			t.Errorf("%s reached the child", sigName(sig))
		}
	}
	p.signal(t, syscall.SIGINT)
	if got := p.wait(t); got != 0 {
		t.Fatalf("exit code %d, want 0 (the child exits 0 on SIGINT); stderr:\n%s", got, p.stderr.String())
	}
}
