//go:build !linux

package supervisor

import "syscall"

// maxSignal is the highest signal number on the BSDs and macOS.
const maxSignal = 31

func reservedSignal(syscall.Signal) bool { return false }

// becomeSubreaper is Linux-only; on macOS (a developer's machine) orphans go
// to launchd, which reaps them.
func becomeSubreaper() error { return nil }

// sysProcAttr: macOS has no parent-death signal; a SIGKILLed tether leaves
// its child running there (development only).
func sysProcAttr(t *terminal) *syscall.SysProcAttr {
	a := &syscall.SysProcAttr{Setpgid: true}
	if t != nil {
		a.Foreground, a.Ctty = true, t.fd
	}
	return a
}
