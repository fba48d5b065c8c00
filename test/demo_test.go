package e2e_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tether-run/tether/internal/testutil"
)

// pipeDelay bounds how long Wait waits for a process's output once it has
// exited (a process it started may hold the pipe).
const pipeDelay = 5 * time.Second

// TestDemo runs `tether demo` as CI does, stdout a pipe (no TTY): it exits
// 0 and its final table lists every sandbox of both runs as gone in the
// journal, destroyed in Daytona, and ok — with and without faults.
func TestDemo(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"plain", nil},
		{"faults", []string{"--faults", "latency=30ms,429=0.1,5xx=0.05,seed=7"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), exitBound*2)
			defer cancel()
			cmd := exec.CommandContext(ctx, bin.tether, append([]string{"demo"}, tc.args...)...)
			cmd.WaitDelay = pipeDelay // a runner left holding the output cannot hang Run
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			out := stdout.String()
			if err != nil {
				t.Fatalf("tether demo: %v\nstdout:\n%s\nstderr:\n%s", err, out, stderr.String())
			}
			if strings.Contains(out, "\033[") {
				t.Errorf("demo wrote terminal escapes to a pipe:\n%s", out)
			}
			rows := demoTable(out)
			if len(rows) != 8 { // 4 sandboxes in each of the two runs
				t.Fatalf("demo table has %d rows, want 8:\n%s", len(rows), out)
			}
			for _, r := range rows {
				f := strings.Fields(r)
				if !strings.HasPrefix(f[0], "tether-") || !strings.Contains(r, " gone ") || f[len(f)-2] != "destroyed" || f[len(f)-1] != "ok" {
					t.Errorf("demo row is not gone/destroyed/ok: %q", r)
				}
			}
			if !strings.Contains(out, "every sandbox ended confirmed gone") {
				t.Errorf("demo does not conclude that every sandbox is gone:\n%s", out)
			}
			// The story, not the logs: no raw info line without --verbose;
			// each word explained where it first comes up; 143 explained;
			// what to try next at the end.
			if strings.Contains(out, "level=INFO") {
				t.Errorf("raw log lines without --verbose:\n%s", out)
			}
			for _, want := range []string{"The journal is ", "An intent is ", "A drain is ", "A replay is ", "143 = 128+15", "SIGTERM received", "drain: 4 intents", "Try next:"} {
				if !strings.Contains(out, want) {
					t.Errorf("demo does not say %q:\n%s", want, out)
				}
			}
			// The replay's end: done, or (the runner having seen nothing
			// live and exited first) handed to the drain.
			if !strings.Contains(out, "replay: done") && !strings.Contains(out, "the drain takes over the rest") {
				t.Errorf("demo does not say how the replay ended:\n%s", out)
			}
			if i, j := strings.Index(out, "An intent is "), strings.Index(out, "[2/5]"); i < 0 || i > j {
				t.Errorf("intents are explained after step 1:\n%s", out)
			}
		})
	}
}

// demoTable returns the rows of the demo's final table, header excluded.
func demoTable(out string) []string {
	var rows []string
	in := false
	for _, line := range strings.Split(out, "\n") {
		switch {
		case strings.HasPrefix(line, "SANDBOX "):
			in, rows = true, nil
		case in && strings.TrimSpace(line) == "":
			in = false
		case in:
			rows = append(rows, line)
		}
	}
	return rows
}

// TestDemoInterruptLeavesNothing: Ctrl-C in the middle of the demo ends it
// with every process it started gone and its temp directory removed.
func TestDemoInterruptLeavesNothing(t *testing.T) {
	t.Parallel()
	// Every wait below is bounded: the context kills the demo, and Wait
	// closes the output pipe pipeDelay after the demo exits even if a
	// process it started still holds it.
	ctx, cancel := context.WithTimeout(context.Background(), exitBound)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin.tether, "demo", "--sandboxes", "50")
	cmd.WaitDelay = pipeDelay
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waited := make(chan error, 1)
	t.Cleanup(func() {
		cancel()
		select {
		case <-waited:
		case <-time.After(exitBound):
			t.Errorf("the demo was not reaped within %s of its kill", exitBound)
		}
	})
	// Interrupt once the first run's runner is creating sandboxes, so a
	// tether and its runner are alive.
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			case <-ctx.Done():
			}
		}
	}()
	var dir string
	for running := false; !running; {
		select {
		case line, ok := <-lines:
			if !ok {
				t.Fatal("the demo ended before its runner was creating sandboxes")
			}
			if _, after, ok := strings.Cut(line, "a journal in "); ok {
				dir = strings.TrimSpace(after)
			}
			running = strings.HasPrefix(line, "  runner: ")
		case <-ctx.Done():
			t.Fatalf("the demo's runner was not creating sandboxes within %s", exitBound)
		}
	}
	if dir == "" {
		t.Fatal("the demo did not say where its journal is")
	}
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	go func() {
		for range lines {
		}
	}()
	go func() { waited <- cmd.Wait() }()
	var werr error
	select {
	case werr = <-waited:
		waited <- werr // for the cleanup
	case <-ctx.Done():
		t.Fatalf("the interrupted demo did not exit within %s", exitBound)
	}
	if werr == nil {
		t.Error("an interrupted demo exited 0")
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("temp directory %s left behind (stat: %v)", dir, err)
	}
	// The demo waited for its tether; the runner dies with it (parent-death
	// signal), which takes a moment to be reaped by whoever adopted it.
	testutil.Eventually(t, "no process of the demo left", func() (bool, string) {
		procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
		for _, p := range procs {
			b, err := os.ReadFile(p)
			if err == nil && bytes.Contains(b, []byte(dir)) {
				return false, fmt.Sprintf("%s: %q", p, bytes.ReplaceAll(b, []byte{0}, []byte{' '}))
			}
		}
		return true, ""
	})
}
