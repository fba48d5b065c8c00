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
// foreground (`tether run -- npm run dev` typed in a shell).
//
// On Linux the child then stays in tether's own process group, which is the
// terminal's foreground: it can read the terminal, and Ctrl-C (Ctrl-\,
// Ctrl-Z, a resize) reaches the child and tether at once, exactly once each.
// tether does not forward what the terminal or the shell sent the whole
// group (fromTerminal), but acts on it as on any signal: the first Ctrl-C
// starts the grace, the second kills at once — the promise SIGTERM has.
// "The child's process group" is then tether's group less tether and less
// any process that does not descend from tether (the other members of a
// shell pipeline), found in /proc (groupMembers).
//
// Elsewhere (macOS, for development) the child gets a process group of its
// own that is made the terminal's foreground, so it can read the terminal;
// tether, in the background, does not see Ctrl-C there.
//
// Job control follows dumb-init: when the child is stopped by Ctrl-Z (or by
// reading the terminal in the background), tether stops itself (taking the
// terminal back first when it had handed it over), so the shell sees the job
// stopped; on SIGCONT (fg), the child is woken (and given the terminal
// again when it had it).
type terminal struct {
	fd     int
	pgrp   int  // tether's own process group
	shared bool // the child is in tether's process group (Linux)
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
	return &terminal{fd: fd, pgrp: fg, shared: shareTerminalGroup}
}

// sharesGroup reports whether the child is in tether's own process group.
func (t *terminal) sharesGroup() bool { return t != nil && t.shared }

// fromTerminal reports whether sig is one the terminal (Ctrl-C, Ctrl-\,
// Ctrl-Z, a resize, a hangup) or the shell (fg, bg, its exit) sends to the
// whole foreground group, the child included: forwarding it would deliver it
// twice. A `kill` aimed at tether alone with one of these does not reach
// the child; SIGTERM, what docker and kill send by default, is forwarded.
func (t *terminal) fromTerminal(sig syscall.Signal) bool {
	if !t.sharesGroup() {
		return false
	}
	switch sig {
	case syscall.SIGINT, syscall.SIGQUIT, syscall.SIGTSTP, syscall.SIGWINCH, syscall.SIGHUP:
		return true
	}
	return false
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
		if t.shared {
			// fg and bg wake the whole group; a SIGCONT sent to tether
			// alone must still wake a child that job control stopped.
			s.mu.Lock()
			pid, reaped := s.pid, s.reaped
			s.mu.Unlock()
			if pid != 0 && !reaped && procStopped(pid) {
				s.forward(syscall.SIGCONT)
			}
			return true
		}
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
	if !t.shared && t.foreground() == pid {
		t.takeBack(s.log)
	}
	s.log.Debug("child stopped by job control; stopping tether too")
	syscall.Kill(os.Getpid(), syscall.SIGSTOP)
}

// restore gives the terminal back to tether's own group once the child is
// gone, so the shell and tether's drain logs find it as they left it.
func (t *terminal) restore(log *slog.Logger) {
	if t == nil || t.shared || t.foreground() == t.pgrp {
		return
	}
	t.takeBack(log)
}

// takeBack makes tether's group the terminal's foreground. tether is in the
// background then, and the kernel stops a background process that sets the
// foreground group unless SIGTTOU is ignored, so it is, briefly. (It is not
// ignored before the fork: an ignored signal stays ignored in the child.)
func (t *terminal) takeBack(log *slog.Logger) {
	signal.Ignore(syscall.SIGTTOU)
	err := unix.IoctlSetPointerInt(t.fd, unix.TIOCSPGRP, t.pgrp)
	signal.Notify(ownDropped, syscall.SIGTTOU)
	if err != nil {
		log.Warn("cannot take the terminal back", "err", err)
	}
}
