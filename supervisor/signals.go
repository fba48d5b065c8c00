package supervisor

import (
	"os"
	"os/signal"
	"syscall"

	"golang.org/x/sys/unix"
)

// forwardedSignals is every signal tether catches and passes on: all but
// those that cannot be caught (KILL, STOP), SIGCHLD (tether's own business:
// it drives the reaper), SIGURG (the Go runtime preempts goroutines with it),
// on Linux 32 to 34 (reserved by the Go runtime for the C libraries), and
// tether's own signals (ownSignal).
//
// Of those forwarded, none is raised by what tether does itself: SIGIO needs
// O_ASYNC on a descriptor (tether sets it on none), SIGALRM and SIGVTALRM a
// timer of tether's (it arms none; the runtime's SIGPROF never reaches
// os/signal), and a SIGSEGV, SIGBUS (a truncated journal under bbolt's
// mmap), SIGFPE, SIGILL, SIGTRAP or SIGSYS that tether's own code causes is
// a crash the Go runtime handles, not a notification. What reaches the
// channel was sent by someone (kill, docker kill, a terminal), and is for
// the child.
func forwardedSignals() []os.Signal {
	var sigs []os.Signal
	for n := 1; n <= maxSignal; n++ {
		sig := syscall.Signal(n)
		switch {
		case sig == syscall.SIGKILL, sig == syscall.SIGSTOP, sig == syscall.SIGCHLD, sig == syscall.SIGURG:
			continue
		case reservedSignal(sig), ownSignal(sig):
			continue
		}
		sigs = append(sigs, sig)
	}
	return sigs
}

// ownSignals are raised by tether's own I/O and resource use, and are about
// tether alone: SIGPIPE when a write of tether's meets a closed reader (a
// client that hung up on the socket, a `tether intent` that gave up, a log
// collector that went away from its stderr), SIGXFSZ and SIGXCPU when
// tether passes its own file-size or CPU limit, SIGTTIN and SIGTTOU when
// tether touches a terminal it is not in the foreground of (the child is in
// a process group of its own; the terminal stops it by itself). Forwarded,
// a SIGPIPE killed a runner in the middle of its run and the drain then
// deleted its sandboxes.
//
// They are caught and dropped, not ignored: a write then fails with EPIPE
// (or EFBIG) and tether goes on, and the child still starts with the
// default disposition, because a caught signal is reset to it by exec and
// an ignored one is not (an ignored SIGPIPE would change how a shell child
// behaves). Nor are they left to the Go runtime's default, which kills
// tether with SIGPIPE when a write to its stdout or stderr meets a closed
// reader.
var ownSignals = []os.Signal{syscall.SIGPIPE, syscall.SIGXFSZ, syscall.SIGXCPU, syscall.SIGTTIN, syscall.SIGTTOU}

func ownSignal(sig syscall.Signal) bool {
	for _, s := range ownSignals {
		if s == sig {
			return true
		}
	}
	return false
}

// ownDropped receives the own signals for the life of the process and is
// never read: the os/signal package never blocks on a full channel, and a
// signal being caught at all is what keeps it from stopping tether. Nothing
// is logged for them: a log line written to a broken stderr raises the next
// SIGPIPE.
var ownDropped = make(chan os.Signal, 1)

// catchOwn catches the own signals; it is never undone, because tether
// writes its report and its last logs after Run has returned.
func catchOwn() { signal.Notify(ownDropped, ownSignals...) }

func signalName(sig syscall.Signal) string { return unix.SignalName(sig) }

// Signals are the forwarded signals, caught from the time Catch was called.
type Signals struct {
	c     chan os.Signal
	ready chan struct{}
}

// Catch starts catching every forwarded signal (and tether's own, which are
// dropped) and returns at once. The Go runtime registers each signal with
// one round trip to its signal thread (about 2 ms for the 60-odd signals
// tether catches on a loaded 2-core machine), so a caller that has other
// start-up work (opening the journal) calls Catch first and lets the two
// overlap; Run waits until every signal is caught before it starts the
// child. A signal that arrives meanwhile is queued for the child instead of
// killing tether.
func Catch() *Signals {
	s := &Signals{c: make(chan os.Signal, 64), ready: make(chan struct{})}
	go func() {
		catchOwn()
		signal.Notify(s.c, forwardedSignals()...)
		close(s.ready)
	}()
	return s
}

func (s *Signals) wait() { <-s.ready }
