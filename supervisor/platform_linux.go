package supervisor

import (
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// ParentDeathSignal is what the kernel sends the child when tether dies
// without getting to stop it (SIGKILL, OOM). SIGKILL, not SIGTERM: a runner
// whose supervisor is gone can no longer declare sandboxes, so every sandbox
// it would go on creating is one nobody tracks; it must stop now, not when
// it chooses to. What it already declared is in the journal, and the next
// boot's replay deletes it. Only the direct child gets it; its descendants
// are in its process group and go with the container or the session.
const ParentDeathSignal = syscall.SIGKILL

// maxSignal is the highest signal number: SIGRTMAX.
const maxSignal = 64

// reservedSignal: the Go runtime keeps 32 to 34 for the C libraries (glibc's
// thread cancellation and setxid, musl's synccall); os/signal cannot catch
// them, so they are neither caught nor forwarded.
func reservedSignal(sig syscall.Signal) bool { return sig >= 32 && sig <= 34 }

// becomeSubreaper makes orphaned descendants tether's children, so they are
// reaped here and not left as zombies under an init that does not reap.
// PID 1 gets them anyway.
func becomeSubreaper() error {
	if os.Getpid() == 1 {
		return nil
	}
	return unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
}

func sysProcAttr(t *terminal) *syscall.SysProcAttr {
	a := &syscall.SysProcAttr{Setpgid: true, Pdeathsig: ParentDeathSignal}
	if t != nil {
		a.Foreground, a.Ctty = true, t.fd
	}
	return a
}
