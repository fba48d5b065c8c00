package supervisor

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"runtime"
	"sync"
	"syscall"
	"time"
)

// stdioDrainWait bounds how long Run waits, after the process group is gone,
// for output still buffered in a pipe to reach a non-file Stdout/Stderr. A
// daemonised descendant that kept the pipe open must not block tether.
const stdioDrainWait = time.Second

// start resolves the command and forks it. It returns an error (and sets
// startStatus) when the child could not be started at all.
func (s *supervisor) start() error {
	name := s.cfg.Command[0]
	path, err := exec.LookPath(name)
	if err != nil && !errors.Is(err, exec.ErrDot) {
		// A PATH entry of "." is the user's explicit choice, as in a shell.
		return s.failStart(classifyStartError(name, err))
	}

	files, closeAfterFork, copies, err := s.stdio()
	if err != nil {
		return s.failStart(Status{Code: ExitCodeOwnError, Err: fmt.Errorf("connect the child's stdio: %w", err)}, true)
	}
	attr := &syscall.ProcAttr{
		Env:   childEnv(s.cfg.Env),
		Files: files,
		Sys:   sysProcAttr(s.term),
	}

	// The parent-death signal fires when the thread that forked the child
	// exits, not when tether does. Go ends a thread when a goroutine locked to
	// it returns, so the fork runs on a thread locked by this goroutine, which
	// keeps it until the main child has been reaped.
	type result struct {
		pid int
		err error
	}
	forked := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		s.mu.Lock()
		pid, err := syscall.ForkExec(path, s.cfg.Command, attr)
		if err == nil {
			s.pid = pid
		}
		s.mu.Unlock()
		forked <- result{pid, err}
		if err == nil {
			<-s.exited
		}
		runtime.UnlockOSThread()
	}()
	r := <-forked
	for _, f := range closeAfterFork {
		f.Close()
	}
	if r.err != nil {
		for _, c := range copies {
			c.abandon()
		}
		return s.failStart(classifyStartError(name, r.err))
	}
	s.copies = copies
	return nil
}

// failStart records that the child never ran; own marks tether's own failure.
func (s *supervisor) failStart(st Status, own bool) error {
	s.mu.Lock()
	s.startStatus = &st
	if own {
		s.ownErr = st.Err
	}
	s.mu.Unlock()
	return st.Err
}

// classifyStartError maps why exec failed to the exit code a shell would
// give: 127 when there is no such command, 126 when it cannot be executed,
// 125 (tether's own error) when the fork itself failed.
func classifyStartError(name string, err error) (Status, bool) {
	switch {
	case errors.Is(err, exec.ErrNotFound), errors.Is(err, fs.ErrNotExist):
		return Status{Code: ExitCodeNotFound, Err: fmt.Errorf("command not found: %w", err)}, false
	case errors.Is(err, fs.ErrPermission), errors.Is(err, syscall.EACCES), errors.Is(err, syscall.EPERM),
		errors.Is(err, syscall.ENOEXEC), errors.Is(err, syscall.EISDIR), errors.Is(err, syscall.ETXTBSY):
		return Status{Code: ExitCodeNotExecutable, Err: fmt.Errorf("cannot execute: %w", err)}, false
	}
	return Status{Code: ExitCodeOwnError, Err: fmt.Errorf("start %s: %w", name, err)}, true
}

// stdio returns the three descriptors the child gets. An *os.File is passed
// as is, so a terminal stays a terminal; anything else goes through a pipe.
func (s *supervisor) stdio() (fds []uintptr, closeAfterFork []*os.File, copies []*stdioCopy, err error) {
	fail := func(e error) ([]uintptr, []*os.File, []*stdioCopy, error) {
		for _, f := range closeAfterFork {
			f.Close()
		}
		for _, c := range copies {
			c.abandon()
		}
		return nil, nil, nil, e
	}
	if f, ok := s.cfg.Stdin.(*os.File); ok {
		fds = append(fds, f.Fd())
	} else {
		r, w, err := os.Pipe()
		if err != nil {
			return fail(err)
		}
		fds = append(fds, r.Fd())
		closeAfterFork = append(closeAfterFork, r)
		// Not waited for: a reader that never ends (a terminal, a network
		// stream) must not keep Run from returning.
		go func() {
			io.Copy(w, s.cfg.Stdin)
			w.Close()
		}()
	}
	for _, out := range []io.Writer{s.cfg.Stdout, s.cfg.Stderr} {
		if f, ok := out.(*os.File); ok {
			fds = append(fds, f.Fd())
			continue
		}
		r, w, err := os.Pipe()
		if err != nil {
			return fail(err)
		}
		fds = append(fds, w.Fd())
		closeAfterFork = append(closeAfterFork, w)
		c := &stdioCopy{r: r, done: make(chan struct{})}
		go func() {
			defer close(c.done)
			io.Copy(out, r)
		}()
		copies = append(copies, c)
	}
	return fds, closeAfterFork, copies, nil
}

// stdioCopy moves the child's output from a pipe to a non-file writer.
type stdioCopy struct {
	r         *os.File
	done      chan struct{}
	closeOnce sync.Once
}

// wait lets the copy finish (the group is gone, so the pipe normally reaches
// EOF at once) for at most until deadline, then closes the pipe.
func (c *stdioCopy) wait(deadline <-chan struct{}) {
	select {
	case <-c.done:
	case <-deadline:
	}
	c.abandon()
}

func (c *stdioCopy) abandon() {
	c.closeOnce.Do(func() { c.r.Close() })
	<-c.done
}
