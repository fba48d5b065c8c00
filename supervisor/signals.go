package supervisor

import (
	"os"
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
