package e2e_test

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tether-run/tether/internal/testutil"

	"golang.org/x/sys/unix"
)

// helperEnv makes the test binary, re-executed, act as a child for tether
// (see runHelper) instead of running tests: the children of the `tether run`
// tests of signals, exit codes, orphans and terminals.
const helperEnv = "TETHER_TEST_HELPER"

// helperCommand is the argv that runs this test binary as a helper child.
func helperCommand(args ...string) []string {
	return append([]string{os.Args[0]}, args...)
}

// catchable is every signal a helper records: all but those that cannot be
// caught, SIGCHLD, and those the Go runtime keeps (SIGURG, 32 to 34).
func catchable() []os.Signal {
	var sigs []os.Signal
	for n := 1; n <= 64; n++ {
		switch syscall.Signal(n) {
		case syscall.SIGKILL, syscall.SIGSTOP, syscall.SIGCHLD, syscall.SIGURG, 32, 33, 34:
			continue
		}
		sigs = append(sigs, syscall.Signal(n))
	}
	return sigs
}

// runHelper is the child (or grandchild) program the tests give tether.
// Environment: HELPER_EVENTS, the file it appends "ROLE EVENT" lines to;
// HELPER_ROLE (default child).
func runHelper(args []string) int {
	if len(args) == 0 {
		fmt.Fprintln(os.Stderr, "helper: no command")
		return 2
	}
	role := os.Getenv("HELPER_ROLE")
	if role == "" {
		role = "child"
	}
	switch args[0] {
	case "exit": // exit N
		n, _ := strconv.Atoi(args[1])
		return n
	case "cat": // stdin to stdout, a marker to stderr, then args and one env var
		io.Copy(os.Stdout, os.Stdin)
		fmt.Fprint(os.Stderr, "to stderr\n")
		fmt.Printf("args=%q\n", args[1:])
		fmt.Printf("env=%q\n", os.Getenv("HELPER_ECHO_ENV"))
		return 0
	case "record":
		return recordSignals(role)
	case "jobshell": // jobshell CMD ARGS: run CMD as a shell runs a foreground job
		return jobShell(args[1:])
	case "readline": // read one line from stdin (a terminal in the TTY tests)
		event(role, fmt.Sprintf("pid %d", os.Getpid()))
		event(role, "ready")
		line, err := bufio.NewReader(os.Stdin).ReadString('\n')
		if err != nil {
			event(role, "read error "+err.Error())
			return 1
		}
		event(role, "read "+strings.TrimSpace(line))
		return 0
	case "orphans": // orphans N: leave N orphaned grandchildren, then record
		n := args[1]
		spawner := exec.Command(os.Args[0], "spawner", n)
		spawner.Env = append(os.Environ(), "HELPER_ROLE=spawner")
		if err := spawner.Run(); err != nil {
			fmt.Fprintln(os.Stderr, "helper: spawner:", err)
			return 2
		}
		event(role, "spawned")
		return recordSignals(role)
	case "spawner": // spawner N: start N orphans and exit without waiting
		n, _ := strconv.Atoi(args[1])
		for i := 0; i < n; i++ {
			c := exec.Command(os.Args[0], "orphan")
			c.Env = append(os.Environ(), "HELPER_ROLE=orphan")
			if err := c.Start(); err != nil {
				fmt.Fprintln(os.Stderr, "helper: orphan:", err)
				return 2
			}
		}
		return 0
	case "orphan": // waits, orphaned, until the test creates HELPER_EVENTS.release
		event(role, fmt.Sprintf("pid %d", os.Getpid()))
		event(role, "waiting")
		for {
			if _, err := os.Stat(os.Getenv("HELPER_EVENTS") + ".release"); err == nil {
				return 0
			}
			time.Sleep(5 * time.Millisecond) // poll; the test's own wait bounds it
		}
	}
	fmt.Fprintln(os.Stderr, "helper: unknown command", args[0])
	return 2
}

// jobShell runs argv the way an interactive shell runs a foreground job:
// in a process group of its own made the terminal's (stdin's) foreground,
// inside the shell's session, so that group is not orphaned and job control
// (Ctrl-Z) works as it does for a user. It records "tether pid N" and exits
// with the job's code (128+N for signal N).
func jobShell(argv []string) int {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Foreground: true, Ctty: 0}
	if err := cmd.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "helper: jobshell:", err)
		return 2
	}
	event("tether", fmt.Sprintf("pid %d", cmd.Process.Pid))
	cmd.Wait()
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return cmd.ProcessState.ExitCode()
}

// recordSignals appends every signal it gets to the events file.
// HELPER_GRANDCHILD=1 first starts a grandchild recorder in the same process
// group and waits for it to be ready. HELPER_IGNORE_TERM=1 only records
// SIGTERM and SIGINT; otherwise either ends it with exit 0. HELPER_EXIT_AFTER_READY=N
// exits with N once ready.
func recordSignals(role string) int {
	ch := make(chan os.Signal, 128)
	signal.Notify(ch, catchable()...)
	if os.Getenv("HELPER_GRANDCHILD") == "1" {
		gc := exec.Command(os.Args[0], "record")
		gc.Env = append(os.Environ(), "HELPER_ROLE=grandchild", "HELPER_GRANDCHILD=", "HELPER_EXIT_AFTER_READY=")
		gc.Stdout, gc.Stderr = os.Stdout, os.Stderr
		if err := gc.Start(); err != nil {
			fmt.Fprintln(os.Stderr, "helper: grandchild:", err)
			return 2
		}
		path := os.Getenv("HELPER_EVENTS")
		for !hasLine(readLines(path), "grandchild ready") {
			time.Sleep(5 * time.Millisecond) // poll; the test's own wait bounds it
		}
	}
	event(role, fmt.Sprintf("pid %d", os.Getpid()))
	event(role, "ready")
	if v := os.Getenv("HELPER_EXIT_AFTER_READY"); v != "" {
		n, _ := strconv.Atoi(v)
		return n
	}
	for sig := range ch {
		event(role, sigName(sig.(syscall.Signal)))
		if (sig == syscall.SIGTERM || sig == syscall.SIGINT) && os.Getenv("HELPER_IGNORE_TERM") != "1" {
			return 0
		}
	}
	return 0
}

// sigName names signals the way the tests expect: SIGUSR1, SIG35.
func sigName(sig syscall.Signal) string {
	if n := unix.SignalName(sig); n != "" {
		return n
	}
	return fmt.Sprintf("SIG%d", int(sig))
}

func event(role, what string) {
	f, err := os.OpenFile(os.Getenv("HELPER_EVENTS"), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		fmt.Fprintln(os.Stderr, "helper: events:", err)
		return
	}
	// One short O_APPEND write per line: lines from several processes never interleave.
	f.WriteString(role + " " + what + "\n")
	f.Close()
}

func readLines(path string) []string {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	return lines
}

func hasLine(lines []string, want string) bool {
	for _, l := range lines {
		if l == want {
			return true
		}
	}
	return false
}

// waitEvent waits until the events file has the line want.
func waitEvent(t *testing.T, events, want string) {
	t.Helper()
	testutil.WaitFor(t, fmt.Sprintf("event %q (have %q)", want, readLines(events)), func() bool {
		return hasLine(readLines(events), want)
	})
}

// eventPID returns the pid a helper of that role reported.
func eventPID(t *testing.T, events, role string) int {
	t.Helper()
	for _, l := range readLines(events) {
		if rest, ok := strings.CutPrefix(l, role+" pid "); ok {
			pid, err := strconv.Atoi(rest)
			if err == nil {
				return pid
			}
		}
	}
	t.Fatalf("no pid for %s in %q", role, readLines(events))
	return 0
}

// tetherProc is one running `tether run` whose child is this test binary
// as a helper (see runHelper), recording to its events file.
type tetherProc struct {
	*testutil.Proc
	cmd    *exec.Cmd
	stderr *testutil.Buffer
	events string
}

// isolatedEnv is testutil.IsolatedEnv.
func isolatedEnv(t *testing.T) []string { return testutil.IsolatedEnv(t) }

// startTether runs `tether run ARGS` with the helper environment. The extra
// environment (KEY=VALUE) goes to tether and thus to the child.
func startTether(t *testing.T, args []string, env ...string) *tetherProc {
	t.Helper()
	events := filepath.Join(t.TempDir(), "events")
	cmd := exec.Command(bin.tether, append([]string{"run"}, args...)...)
	cmd.Env = append(os.Environ(), helperEnv+"=1", "HELPER_EVENTS="+events)
	cmd.Env = append(cmd.Env, isolatedEnv(t)...)
	cmd.Env = append(cmd.Env, env...)
	// After a failure, helpers may outlive tether: end them (registered
	// first, so it runs after the process helper has killed tether).
	t.Cleanup(func() { killEventPIDs(events) })
	p := testutil.Start(t, cmd)
	return &tetherProc{Proc: p, cmd: cmd, stderr: p.Stderr, events: events}
}

// killEventPIDs SIGKILLs every process that reported its pid in events.
func killEventPIDs(events string) {
	for _, l := range readLines(events) {
		if _, rest, ok := strings.Cut(l, " pid "); ok {
			if pid, err := strconv.Atoi(rest); err == nil {
				syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	}
}

// wait returns tether's exit code, failing the test if it has not exited
// within testutil.ExitBound.
func (p *tetherProc) wait(t *testing.T) int {
	t.Helper()
	return p.Wait()
}

func (p *tetherProc) signal(t *testing.T, sig syscall.Signal) {
	t.Helper()
	p.Signal(sig)
}

// runTether runs tether to completion and returns its exit code.
func runTether(t *testing.T, args ...string) (int, *tetherProc) {
	t.Helper()
	p := startTether(t, args)
	return p.wait(t), p
}

// procState is the state letter of /proc/PID/stat (R, S, Z...), or 0 when
// the process does not exist.
func procState(pid int) byte {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The command name is in parentheses and may hold spaces.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 || i+2 >= len(b) {
		return 0
	}
	return b[i+2]
}

// childrenOf lists the pids whose parent is ppid, with their states.
func childrenOf(ppid int) map[int]byte {
	out := map[int]byte{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) < 2 {
			continue
		}
		if pp, _ := strconv.Atoi(f[1]); pp == ppid {
			out[pid] = f[0][0]
		}
	}
	return out
}
