package supervisor

import (
	"os"
	"os/signal"
	"syscall"

	"golang.org/x/sys/unix"
)

// forwardedSignals is every signal tether catches and passes on: all but
// those that cannot be caught (KILL, STOP), SIGCHLD (tether's own business:
// it drives the reaper), SIGURG (the Go runtime preempts goroutines with it)
// and, on Linux, 32 to 34 (reserved by the Go runtime for the C libraries).
func forwardedSignals() []os.Signal {
	var sigs []os.Signal
	for n := 1; n <= maxSignal; n++ {
		sig := syscall.Signal(n)
		switch {
		case sig == syscall.SIGKILL, sig == syscall.SIGSTOP, sig == syscall.SIGCHLD, sig == syscall.SIGURG:
			continue
		case reservedSignal(sig):
			continue
		}
		sigs = append(sigs, sig)
	}
	return sigs
}

func signalName(sig syscall.Signal) string { return unix.SignalName(sig) }

// Signals are the forwarded signals, caught from the time Catch was called.
type Signals struct {
	c     chan os.Signal
	ready chan struct{}
}

// Catch starts catching every forwarded signal and returns at once. The Go
// runtime registers each signal with one round trip to its signal thread
// (about 2 ms for the 60-odd signals tether forwards on a loaded 2-core
// machine), so a caller that has other start-up work (opening the journal)
// calls Catch first and lets the two overlap; Run waits until every signal
// is caught before it starts the child. A signal that arrives meanwhile is
// queued for the child instead of killing tether.
func Catch() *Signals {
	s := &Signals{c: make(chan os.Signal, 64), ready: make(chan struct{})}
	go func() {
		signal.Notify(s.c, forwardedSignals()...)
		close(s.ready)
	}()
	return s
}

func (s *Signals) wait() { <-s.ready }
