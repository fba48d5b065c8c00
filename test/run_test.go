package e2e_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tether-run/tether/internal/testutil"

	"golang.org/x/sys/unix"
)

func TestRunExitCodesPassThrough(t *testing.T) {
	t.Parallel()
	for _, code := range []int{0, 1, 2, 3, 42, 125, 126, 127, 128, 129, 143, 200, 254, 255} {
		t.Run(strconv.Itoa(code), func(t *testing.T) {
			t.Parallel()
			got, p := runTether(t, append([]string{"--"}, helperCommand("exit", strconv.Itoa(code))...)...)
			if got != code {
				t.Fatalf("exit code %d, want %d; stderr:\n%s", got, code, p.stderr.String())
			}
		})
	}
}

func TestRunChildKilledBySignal(t *testing.T) {
	t.Parallel()
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGUSR1, syscall.SIGKILL, syscall.SIGINT, syscall.SIGHUP} {
		t.Run(unix.SignalName(sig), func(t *testing.T) {
			t.Parallel()
			// sh, not the Go helper: a Go program cannot die of SIGUSR1 by default.
			got, p := runTether(t, "--", "/bin/sh", "-c", "kill -"+strings.TrimPrefix(unix.SignalName(sig), "SIG")+" $$")
			if want := 128 + int(sig); got != want {
				t.Fatalf("exit code %d, want %d; stderr:\n%s", got, want, p.stderr.String())
			}
		})
	}
}

func TestRunCannotStart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	notExec := filepath.Join(dir, "script.sh")
	if err := os.WriteFile(notExec, []byte("#!/bin/sh\nexit 0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	noExecFormat := filepath.Join(dir, "garbage")
	if err := os.WriteFile(noExecFormat, []byte("\x00\x01\x02 not a program"), 0o755); err != nil {
		t.Fatal(err)
	}
	badInterpreter := filepath.Join(dir, "bad-interpreter")
	if err := os.WriteFile(badInterpreter, []byte("#!/no/such/interpreter\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name   string
		args   []string
		code   int
		stderr string
	}{
		{"not found in PATH", []string{"--", "tether-no-such-command"}, 127, "command not found"},
		{"no such file", []string{"--", filepath.Join(dir, "missing")}, 127, "command not found"},
		{"missing interpreter", []string{"--", badInterpreter}, 127, "command not found"},
		{"not executable", []string{"--", notExec}, 126, "cannot execute"},
		{"a directory", []string{"--", dir}, 126, "cannot execute"},
		{"exec format error", []string{"--", noExecFormat}, 126, "cannot execute"},
		{"no command", []string{"--"}, 125, "no command to run"},
		{"no command, no --", nil, 125, "no command to run"},
		{"bad flag", []string{"--no-such-flag", "--", "true"}, 125, "no-such-flag"},
		{"bad flag value", []string{"--grace", "soon", "--", "true"}, 125, "grace"},
		{"invalid setting", []string{"--log-format", "xml", "--", "true"}, 125, "--log-format"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			got, p := runTether(t, c.args...)
			if got != c.code {
				t.Fatalf("exit code %d, want %d; stderr:\n%s", got, c.code, p.stderr.String())
			}
			if !strings.Contains(p.stderr.String(), c.stderr) {
				t.Fatalf("stderr does not say %q:\n%s", c.stderr, p.stderr.String())
			}
		})
	}
}

func TestRunBadEnvironmentSetting(t *testing.T) {
	t.Parallel()
	p := startTether(t, []string{"--", "true"}, "TETHER_GRACE=soon")
	if got := p.wait(t); got != 125 {
		t.Fatalf("exit code %d, want 125", got)
	}
	if !strings.Contains(p.stderr.String(), "TETHER_GRACE") {
		t.Fatalf("stderr does not name TETHER_GRACE:\n%s", p.stderr.String())
	}
}

// forwardedForTest are the signals sent one by one in TestRunForwardsSignals.
// INT comes last: it is forwarded once and ends the helpers (a TERM after it
// would be the second stop signal, which kills at once).
var forwardedForTest = []syscall.Signal{
	syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGWINCH,
	syscall.SIGCONT, syscall.SIGALRM, syscall.SIGTSTP, syscall.SIGVTALRM, syscall.SIGPWR, syscall.SIGIO,
	syscall.Signal(35), syscall.Signal(50), syscall.Signal(64), syscall.SIGINT,
}

func TestRunForwardsTermToGroup(t *testing.T) {
	t.Parallel()
	p := startTether(t, append([]string{"--grace", "1h", "--"}, helperCommand("record")...), "HELPER_GRANDCHILD=1")
	waitEvent(t, p.events, "child ready")
	p.signal(t, syscall.SIGTERM)
	if got := p.wait(t); got != 0 {
		t.Fatalf("exit code %d, want 0 (the child exits 0 on SIGTERM); stderr:\n%s", got, p.stderr.String())
	}
	for _, want := range []string{"child SIGTERM", "grandchild SIGTERM"} {
		if !hasLine(readLines(p.events), want) {
			t.Errorf("no %q in %q", want, readLines(p.events))
		}
	}
}

func TestRunForwardsSignalsToGroup(t *testing.T) {
	t.Parallel()
	p := startTether(t, append([]string{"--grace", "1h", "--"}, helperCommand("record")...), "HELPER_GRANDCHILD=1")
	waitEvent(t, p.events, "child ready")
	for _, sig := range forwardedForTest {
		p.signal(t, sig)
		waitEvent(t, p.events, "child "+sigName(sig))
		waitEvent(t, p.events, "grandchild "+sigName(sig))
	}
	if got := p.wait(t); got != 0 {
		t.Fatalf("exit code %d, want 0 (the child exits 0 on SIGINT); stderr:\n%s", got, p.stderr.String())
	}
	sigintOnceEach(t, readLines(p.events), "child", "grandchild")
}

// sigintOnceEach: each of roles recorded SIGINT exactly once in lines.
func sigintOnceEach(t *testing.T, lines []string, roles ...string) {
	t.Helper()
	for _, role := range roles {
		n := 0
		for _, l := range lines {
			if l == role+" SIGINT" {
				n++
			}
		}
		if n != 1 {
			t.Errorf("%s got SIGINT %d times, want exactly once: %q", role, n, lines)
		}
	}
}

func TestRunSignalChildOnly(t *testing.T) {
	t.Parallel()
	p := startTether(t, append([]string{"--signal-child-only", "--grace", "1h", "--"}, helperCommand("record")...), "HELPER_GRANDCHILD=1")
	waitEvent(t, p.events, "child ready")
	p.signal(t, syscall.SIGUSR1)
	waitEvent(t, p.events, "child SIGUSR1")
	// SIGTERM reaches the child alone; once it has exited, tether stops the
	// rest of its group, so the grandchild's first signal must be that TERM.
	p.signal(t, syscall.SIGTERM)
	if got := p.wait(t); got != 0 {
		t.Fatalf("exit code %d, want 0; stderr:\n%s", got, p.stderr.String())
	}
	var gc []string
	for _, l := range readLines(p.events) {
		if strings.HasPrefix(l, "grandchild SIG") {
			gc = append(gc, l)
		}
	}
	if len(gc) != 1 || gc[0] != "grandchild SIGTERM" {
		t.Fatalf("grandchild got %q, want only the SIGTERM sent after the child exited", gc)
	}
}

func TestRunIgnoredTermKilledAfterGrace(t *testing.T) {
	t.Parallel()
	p := startTether(t, append([]string{"--grace", "500ms", "--"}, helperCommand("record")...), "HELPER_IGNORE_TERM=1", "HELPER_GRANDCHILD=1")
	waitEvent(t, p.events, "child ready")
	gc := eventPID(t, p.events, "grandchild")
	p.signal(t, syscall.SIGTERM)
	if got := p.wait(t); got != 128+int(syscall.SIGKILL) {
		t.Fatalf("exit code %d, want %d; stderr:\n%s", got, 128+int(syscall.SIGKILL), p.stderr.String())
	}
	if !hasLine(readLines(p.events), "child SIGTERM") {
		t.Fatalf("the child never saw SIGTERM: %q", readLines(p.events))
	}
	if st := procState(gc); st != 0 {
		t.Fatalf("grandchild %d still exists (state %c) after tether exited", gc, st)
	}
}

func TestRunSecondTermKillsAtOnce(t *testing.T) {
	t.Parallel()
	// The grace is an hour: only the second SIGTERM can end this within the wait bound.
	p := startTether(t, append([]string{"--grace", "1h", "--"}, helperCommand("record")...), "HELPER_IGNORE_TERM=1")
	waitEvent(t, p.events, "child ready")
	p.signal(t, syscall.SIGTERM)
	waitEvent(t, p.events, "child SIGTERM")
	p.signal(t, syscall.SIGINT)
	if got := p.wait(t); got != 128+int(syscall.SIGKILL) {
		t.Fatalf("exit code %d, want %d; stderr:\n%s", got, 128+int(syscall.SIGKILL), p.stderr.String())
	}
}

func TestRunStopsLeftoverGroupAfterChildExits(t *testing.T) {
	t.Parallel()
	// The child exits 7 once its grandchild (which ignores SIGTERM) is ready.
	p := startTether(t, append([]string{"--grace", "500ms", "--"}, helperCommand("record")...),
		"HELPER_GRANDCHILD=1", "HELPER_IGNORE_TERM=1", "HELPER_EXIT_AFTER_READY=7")
	if got := p.wait(t); got != 7 {
		t.Fatalf("exit code %d, want the child's 7; stderr:\n%s", got, p.stderr.String())
	}
	if !hasLine(readLines(p.events), "grandchild SIGTERM") {
		t.Fatalf("the leftover grandchild was not sent SIGTERM: %q", readLines(p.events))
	}
	gc := eventPID(t, p.events, "grandchild")
	if st := procState(gc); st != 0 {
		t.Fatalf("grandchild %d still exists (state %c) after tether exited", gc, st)
	}
}

func TestRunLeftoverGroupThatObeysTerm(t *testing.T) {
	t.Parallel()
	// The grace is an hour: tether must return as soon as the group is gone.
	p := startTether(t, append([]string{"--grace", "1h", "--"}, helperCommand("record")...),
		"HELPER_GRANDCHILD=1", "HELPER_EXIT_AFTER_READY=3")
	if got := p.wait(t); got != 3 {
		t.Fatalf("exit code %d, want 3; stderr:\n%s", got, p.stderr.String())
	}
	if !hasLine(readLines(p.events), "grandchild SIGTERM") {
		t.Fatalf("the leftover grandchild was not sent SIGTERM: %q", readLines(p.events))
	}
}

func TestRunStdioArgsAndEnvPassThrough(t *testing.T) {
	t.Parallel()
	input := "line one\nline two with ünïcödé\n\x00binary\n"
	args := []string{"a b", "", "--flag", "$HOME", "'quoted'"}
	cmd := exec.Command(bin.tether, append([]string{"run", "--"}, helperCommand(append([]string{"cat"}, args...)...)...)...)
	cmd.Env = append(os.Environ(), helperEnv+"=1", "HELPER_ECHO_ENV=x=y z")
	cmd.Env = append(cmd.Env, isolatedEnv(t)...)
	cmd.Stdin = strings.NewReader(input)
	var stdout testutil.Buffer // byte for byte: not read as lines
	cmd.Stdout = &stdout
	p := testutil.Start(t, cmd)
	stderr := p.Stderr
	if code := p.Wait(); code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, stderr.String())
	}
	want := input + fmt.Sprintf("args=%q\n", args) + fmt.Sprintf("env=%q\n", "x=y z")
	if stdout.String() != want {
		t.Fatalf("stdout:\n%q\nwant:\n%q", stdout.String(), want)
	}
	if stderr.String() != "to stderr\n" {
		t.Fatalf("stderr %q, want only the child's %q (tether logs nothing at error level on a clean run)", stderr.String(), "to stderr\n")
	}
}

func TestRunLogsAreJSONOnStderr(t *testing.T) {
	t.Parallel()
	got, p := runTether(t, "--log-format", "json", "--", "tether-no-such-command")
	if got != 127 {
		t.Fatalf("exit code %d, want 127", got)
	}
	if p.Stdout() != "" {
		t.Fatalf("tether wrote to stdout: %q", p.Stdout())
	}
	if !strings.HasPrefix(p.stderr.String(), "{") || !strings.Contains(p.stderr.String(), `"level":"ERROR"`) {
		t.Fatalf("stderr is not JSON logs:\n%s", p.stderr.String())
	}
}

// TestRunReapsOrphansAsSubreaper: grandchildren orphaned by their parent are
// re-parented to tether and must be reaped, not left as zombies.
func TestRunReapsOrphansAsSubreaper(t *testing.T) {
	t.Parallel()
	const orphans = 5
	p := startTether(t, append([]string{"--"}, helperCommand("orphans", strconv.Itoa(orphans))...))
	waitEvent(t, p.events, "child ready")
	assertOrphansReaped(t, p.events, orphans, p.cmd.Process.Pid)
	p.signal(t, syscall.SIGTERM)
	if got := p.wait(t); got != 0 {
		t.Fatalf("exit code %d, want 0; stderr:\n%s", got, p.stderr.String())
	}
}

// TestRunReapsOrphansAsPID1 runs tether as PID 1 of a new PID namespace.
func TestRunReapsOrphansAsPID1(t *testing.T) {
	t.Parallel()
	unshare, err := exec.LookPath("unshare")
	if err != nil || os.Geteuid() != 0 {
		t.Skip("needs root and unshare(1) for a PID namespace")
	}
	const orphans = 5
	events := filepath.Join(t.TempDir(), "events")
	cmd := exec.Command(unshare, append([]string{"--pid", "--fork", "--mount-proc", bin.tether, "run", "--"}, helperCommand("orphans", strconv.Itoa(orphans))...)...)
	cmd.Env = append(os.Environ(), helperEnv+"=1", "HELPER_EVENTS="+events)
	cmd.Env = append(cmd.Env, isolatedEnv(t)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	cmd.WaitDelay = time.Second
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() { cmd.Process.Kill() })

	waitEvent(t, events, "child ready")
	// tether's pid outside the namespace: the one child of unshare.
	var tether int
	testutil.WaitFor(t, "tether under unshare", func() bool {
		for pid := range childrenOf(cmd.Process.Pid) {
			tether = pid
		}
		return tether != 0
	})
	assertOrphansReaped(t, events, orphans, tether)
	if err := syscall.Kill(tether, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "unshare to exit", func() bool {
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("tether as PID 1: %v; stderr:\n%s", err, stderr.String())
			}
			return true
		default:
			return false
		}
	})
}

// assertOrphansReaped checks that the orphans were re-parented to tether
// (its children are the main child and every orphan), releases them, and
// waits until tether's only child is the main child again: every orphan was
// reaped, none is left a zombie.
func assertOrphansReaped(t *testing.T, events string, orphans, tether int) {
	t.Helper()
	testutil.WaitFor(t, fmt.Sprintf("%d orphans to start", orphans), func() bool {
		n := 0
		for _, l := range readLines(events) {
			if l == "orphan waiting" {
				n++
			}
		}
		return n == orphans
	})
	testutil.WaitFor(t, "the orphans to be re-parented to tether", func() bool {
		return len(childrenOf(tether)) == orphans+1
	})
	if err := os.WriteFile(events+".release", nil, 0o644); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "tether to reap every orphan (no zombies among its children)", func() bool {
		kids := childrenOf(tether)
		if len(kids) != 1 {
			return false
		}
		for _, state := range kids {
			if state == 'Z' {
				return false
			}
		}
		return true
	})
}

// TestRunWait4RaceKeepsMainChildStatus: the main child exits while many of
// its orphans exit around it; reaping them must never lose its exit code.
func TestRunWait4RaceKeepsMainChildStatus(t *testing.T) {
	t.Parallel()
	for i := 0; i < 20; i++ {
		// Each background subshell outlives sh by a moment and is reaped by tether.
		script := "i=0; while [ $i -lt 50 ]; do (exit 9) & i=$((i+1)); done; exit 42"
		got, p := runTether(t, "--", "/bin/sh", "-c", script)
		if got != 42 {
			t.Fatalf("round %d: exit code %d, want 42; stderr:\n%s", i, got, p.stderr.String())
		}
	}
}

// TestRunParentDeathKillsChild: a SIGKILLed tether cannot stop its child, so
// the kernel must (the parent-death signal).
func TestRunParentDeathKillsChild(t *testing.T) {
	t.Parallel()
	p := startTether(t, append([]string{"--"}, helperCommand("record")...))
	waitEvent(t, p.events, "child ready")
	child := eventPID(t, p.events, "child")
	p.signal(t, syscall.SIGKILL)
	p.wait(t)
	testutil.WaitFor(t, "the child to die with tether", func() bool {
		st := procState(child)
		return st == 0 || st == 'Z'
	})
}
