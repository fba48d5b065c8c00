//go:build !linux

package supervisor

import "syscall"

// maxSignal is the highest signal number on the BSDs and macOS.
const maxSignal = 31

func reservedSignal(syscall.Signal) bool { return false }

// becomeSubreaper is Linux-only; on macOS (a developer's machine) orphans go
// to launchd, which reaps them.
func becomeSubreaper() error { return nil }

// shareTerminalGroup: in a terminal the child gets a group of its own, made
// the foreground (groupMembers needs /proc).
const shareTerminalGroup = false

func groupMembers(pgrp, ancestor int) []int { return nil }

func procStopped(pid int) bool { return false }

// sysProcAttr: macOS has no parent-death signal; a SIGKILLed tether leaves
// its child running there (development only).
func sysProcAttr(t *terminal) *syscall.SysProcAttr {
	a := &syscall.SysProcAttr{Setpgid: true}
	if t != nil {
		a.Foreground, a.Ctty = true, t.fd
	}
	return a
}
