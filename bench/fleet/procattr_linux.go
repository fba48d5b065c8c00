package main

import "syscall"

// childAttr is the process attributes of a child the benchmark starts:
// killed with the benchmark (a fleet of tethers must not outlive an
// interrupted run), in a process group of its own when group is set.
func childAttr(group bool) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: group, Pdeathsig: syscall.SIGKILL}
}
