package testutil

import (
	"bufio"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Proc is one process a test runs (tether, a runner): its stdout as lines,
// its whole stderr, its exit. Every wait on it is bounded; at the test's end
// a process still running is killed (with its process group when it has one
// of its own) and its stderr is logged if the test failed.
type Proc struct {
	t      testing.TB
	Cmd    *exec.Cmd
	Stderr *Buffer

	mu    sync.Mutex
	lines []string      // stdout so far, by line
	eof   bool          // stdout is closed
	more  chan struct{} // closed (and replaced) when a line arrives or stdout closes
	next  int           // lines NextLine has returned

	done chan struct{}
	err  error // of Wait, once done is closed
}

// pipeDelay bounds how long Wait waits, after the process exited, for a
// process it started that still holds its stderr.
const pipeDelay = 5 * time.Second

// Start starts cmd as it is configured (Env, Stdin, SysProcAttr...) with its
// stdout read as lines and its stderr (unless the caller set one) kept.
func Start(t testing.TB, cmd *exec.Cmd) *Proc {
	t.Helper()
	p := &Proc{t: t, Cmd: cmd, Stderr: &Buffer{}, more: make(chan struct{}), done: make(chan struct{})}
	if cmd.Stderr == nil {
		cmd.Stderr = p.Stderr
	}
	if cmd.WaitDelay == 0 {
		cmd.WaitDelay = pipeDelay
	}
	// stdout through a pipe of our own, not Cmd's: its exit is known when
	// it exits, even if a process it started still holds stdout.
	stdout, stdoutW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	if cmd.Stdout == nil {
		cmd.Stdout = stdoutW
	}
	err = cmd.Start()
	stdoutW.Close() // the process holds its own copy
	if err != nil {
		stdout.Close()
		t.Fatalf("start %s: %v", cmd.Path, err)
	}
	go p.read(stdout)
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		if !p.Exited() {
			p.kill()
			select {
			case <-p.done:
			case <-time.After(ExitBound):
				t.Errorf("%s (pid %d) did not die of SIGKILL within %s", cmd.Path, cmd.Process.Pid, ExitBound)
			}
		}
		if t.Failed() {
			t.Logf("%s %s stderr:\n%s", cmd.Path, strings.Join(cmd.Args[1:], " "), p.Stderr.String())
		}
	})
	return p
}

func (p *Proc) read(stdout *os.File) {
	defer stdout.Close()
	sc := bufio.NewScanner(stdout)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		p.mu.Lock()
		p.lines = append(p.lines, sc.Text())
		close(p.more)
		p.more = make(chan struct{})
		p.mu.Unlock()
	}
	p.mu.Lock()
	p.eof = true
	close(p.more)
	p.mu.Unlock()
}

// kill SIGKILLs the process, and its group when it leads one.
func (p *Proc) kill() {
	if a := p.Cmd.SysProcAttr; a != nil && (a.Setpgid || a.Setsid) {
		_ = syscall.Kill(-p.Cmd.Process.Pid, syscall.SIGKILL)
	}
	_ = p.Cmd.Process.Kill()
}

// NextLine returns the next line of stdout; ok is false once stdout is
// closed and every line was returned. It fails the test if no line comes
// within WaitBound.
func (p *Proc) NextLine() (line string, ok bool) {
	p.t.Helper()
	timer := time.NewTimer(WaitBound)
	defer timer.Stop()
	for {
		p.mu.Lock()
		if p.next < len(p.lines) {
			line = p.lines[p.next]
			p.next++
			p.mu.Unlock()
			return line, true
		}
		if p.eof {
			p.mu.Unlock()
			return "", false
		}
		more := p.more
		p.mu.Unlock()
		select {
		case <-more:
		case <-timer.C:
			p.t.Fatalf("no line from %s within %s; stderr:\n%s", p.Cmd.Path, WaitBound, p.Stderr)
		}
	}
}

// ReadUntil reads lines of stdout until done returns true for one (true)
// or stdout ends (false), failing the test if neither happens within
// WaitBound; what names the line awaited in that failure.
func (p *Proc) ReadUntil(what string, done func(line string) bool) bool {
	p.t.Helper()
	deadline := time.Now().Add(WaitBound)
	for time.Now().Before(deadline) {
		line, ok := p.NextLine()
		if !ok {
			return false
		}
		if done(line) {
			return true
		}
	}
	p.t.Fatalf("no %s from %s within %s; stdout so far:\n%s\nstderr:\n%s", what, p.Cmd.Path, WaitBound, p.Stdout(), p.Stderr)
	return false
}

// Stdout is all of stdout so far.
func (p *Proc) Stdout() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.lines) == 0 {
		return ""
	}
	return strings.Join(p.lines, "\n") + "\n"
}

// Done is closed when the process has exited.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Exited says whether the process has exited.
func (p *Proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Err is Cmd.Wait's error, once Done is closed.
func (p *Proc) Err() error { return p.err }

// Wait waits for the process to exit and returns its exit code, 128+N when
// signal N killed it. It fails the test if the process still runs after
// ExitBound.
func (p *Proc) Wait() int {
	p.t.Helper()
	select {
	case <-p.done:
	case <-time.After(ExitBound):
		p.t.Fatalf("%s still running after %s; stderr:\n%s", p.Cmd.Path, ExitBound, p.Stderr)
	}
	// The process state, not Wait's error: a process it started may still
	// hold its stderr (exec.ErrWaitDelay) after it exited.
	st := p.Cmd.ProcessState
	if st == nil {
		p.t.Fatalf("%s: %v", p.Cmd.Path, p.err)
	}
	if errors.Is(p.err, exec.ErrWaitDelay) {
		p.t.Logf("%s exited; a process it started still held its stderr", p.Cmd.Path)
	}
	p.readAll()
	return ExitCode(st)
}

// readAll waits, at most pipeDelay, for stdout to be read to its end (a
// process it started may hold it open).
func (p *Proc) readAll() {
	timer := time.NewTimer(pipeDelay)
	defer timer.Stop()
	for {
		p.mu.Lock()
		eof, more := p.eof, p.more
		p.mu.Unlock()
		if eof {
			return
		}
		select {
		case <-more:
		case <-timer.C:
			return
		}
	}
}

// Signal sends sig to the process alone.
func (p *Proc) Signal(sig syscall.Signal) {
	p.t.Helper()
	if err := p.Cmd.Process.Signal(sig); err != nil {
		p.t.Fatalf("signal %s: %v", p.Cmd.Path, err)
	}
}

// Stop sends sig and returns the exit code, as Wait does.
func (p *Proc) Stop(sig syscall.Signal) int {
	p.t.Helper()
	p.Signal(sig)
	return p.Wait()
}

// ExitCode is a finished process's exit code, 128+N when signal N killed it
// (as a shell says it).
func ExitCode(st *os.ProcessState) int {
	if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return st.ExitCode()
}

// Run runs cmd to its end under ExitBound and returns its exit code, its
// stdout and its stderr.
func Run(t testing.TB, cmd *exec.Cmd) (code int, stdout, stderr string) {
	t.Helper()
	p := Start(t, cmd)
	code = p.Wait()
	return code, p.Stdout(), p.Stderr.String()
}

// IsolatedEnv gives one tether its own journal, socket and spool (tests run
// in parallel, and a journal is held by one tether at a time) and keeps its
// logs to errors, so stderr holds what a test looks for.
func IsolatedEnv(t testing.TB) []string {
	dir := t.TempDir()
	return []string{
		"TETHER_JOURNAL=" + filepath.Join(dir, "journal.db"),
		"TETHER_SOCKET=" + filepath.Join(dir, "tether.sock"),
		"TETHER_SPOOL=" + filepath.Join(dir, "spool"),
		"TETHER_LOG_LEVEL=error",
		// This machine's Docker engine is not the test's: tests of the
		// Docker provider turn it on with an engine of their own.
		"TETHER_DOCKER=false",
	}
}
