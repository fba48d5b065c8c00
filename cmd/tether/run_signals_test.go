package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
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
		_, tty := openPTY(t)
		path := filepath.Join(t.TempDir(), "status")
		cmd, _, done := startTetherOnTTY(t, tty, append(append([]string{"--"}, statusCommand...), path))
		if got := waitDone(t, cmd, done); got != 0 {
			t.Fatalf("exit code %d", got)
		}
		check(t, path)
	})
}
