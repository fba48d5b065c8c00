//go:build !linux

package main

import "syscall"

// childAttr is the process attributes of a child the benchmark starts; off
// Linux there is no parent-death signal, so an interrupted run may leave
// its children (the benchmark is run on Linux).
func childAttr(group bool) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: group}
}
