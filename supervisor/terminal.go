package supervisor

import (
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"golang.org/x/sys/unix"
)

// terminal is tether's controlling terminal when tether was started in its
// foreground (`tether run -- npm run dev` typed in a shell). The child's
// process group is then put in the foreground instead, so it can read the
// terminal and the kernel's Ctrl-C reaches it exactly once; tether, now in
// the background, does not see it and forwards nothing.
//
// Job control follows dumb-init: when the child is stopped by Ctrl-Z (or by
// reading the terminal in the background), tether takes the terminal back
// and stops itself, so the shell sees the job stopped; on SIGCONT (fg), it
// gives the terminal back to the child and wakes it.
type terminal struct {
	fd   int
	pgrp int // tether's own process group
}

// foregroundTerminal returns the terminal on stdin if tether's process
// group is in its foreground, or nil.
func foregroundTerminal(stdin io.Reader) *terminal {
	f, ok := stdin.(*os.File)
	if !ok {
		return nil
	}
	fd := int(f.Fd())
	fg, err := unix.IoctlGetInt(fd, unix.TIOCGPGRP)
	if err != nil || fg != syscall.Getpgrp() {
		return nil // not a terminal, or tether runs in the background
	}
	return &terminal{fd: fd, pgrp: fg}
}

func (t *terminal) foreground() int {
	fg, err := unix.IoctlGetInt(t.fd, unix.TIOCGPGRP)
	if err != nil {
		return -1
	}
	return fg
}

// handle deals with the job-control signals tether gets while a terminal is
// in use and reports whether sig is consumed (not forwarded).
func (t *terminal) handle(s *supervisor, sig syscall.Signal) bool {
	if t == nil {
		return false
	}
	switch sig {
	case syscall.SIGCONT:
		// fg: the shell gave the terminal to tether; pass it on. bg: leave
		// the terminal alone; the child is only woken.
		if t.foreground() == t.pgrp {
			s.mu.Lock()
			if s.pid != 0 && !s.groupGone {
				if err := unix.IoctlSetPointerInt(t.fd, unix.TIOCSPGRP, s.pid); err != nil {
					s.log.Warn("cannot give the terminal to the child", "err", err)
				}
			}
			s.mu.Unlock()
		}
	}
	return false
}

// childStopped is called when the main child was stopped by job control.
func (t *terminal) childStopped(s *supervisor) {
	if t == nil {
		return
	}
	s.mu.Lock()
	pid := s.pid
	s.mu.Unlock()
	if t.foreground() == pid {
		t.takeBack(s.log, s.sigs)
	}
	s.log.Debug("child stopped by job control; stopping tether too")
	syscall.Kill(os.Getpid(), syscall.SIGSTOP)
}

// restore gives the terminal back to tether's own group once the child is
// gone, so the shell and tether's drain logs find it as they left it.
func (t *terminal) restore(log *slog.Logger, sigs chan os.Signal) {
	if t == nil || t.foreground() == t.pgrp {
		return
	}
	t.takeBack(log, sigs)
}

// takeBack makes tether's group the terminal's foreground. tether is in the
// background then, and the kernel stops a background process that sets the
// foreground group unless SIGTTOU is ignored, so it is, briefly. (It is not
// ignored before the fork: an ignored signal stays ignored in the child.)
func (t *terminal) takeBack(log *slog.Logger, sigs chan os.Signal) {
	signal.Ignore(syscall.SIGTTOU)
	err := unix.IoctlSetPointerInt(t.fd, unix.TIOCSPGRP, t.pgrp)
	signal.Notify(ownDropped, syscall.SIGTTOU)
	if err != nil {
		log.Warn("cannot take the terminal back", "err", err)
	}
}
