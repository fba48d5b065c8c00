package supervisor

import (
	"bytes"
	"os"
	"strconv"
	"strings"
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

// shareTerminalGroup: in a terminal, the child stays in tether's process
// group (see terminal); its members are found in /proc.
const shareTerminalGroup = true

func sysProcAttr(t *terminal) *syscall.SysProcAttr {
	if t.sharesGroup() {
		return &syscall.SysProcAttr{Pdeathsig: ParentDeathSignal}
	}
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: ParentDeathSignal}
}

// groupMembers returns the processes of process group pgrp that descend
// from ancestor, ancestor itself excluded, zombies included: the child's
// group when it shares tether's. A process that ends while /proc is read is
// left out, one that starts may be.
func groupMembers(pgrp, ancestor int) []int {
	d, err := os.Open("/proc")
	if err != nil {
		return nil
	}
	names, _ := d.Readdirnames(-1)
	d.Close()
	parent := make(map[int]int, len(names))
	var inGroup []int
	for _, name := range names {
		pid, err := strconv.Atoi(name)
		if err != nil {
			continue
		}
		ppid, pg, ok := procParentGroup(pid)
		if !ok {
			continue
		}
		parent[pid] = ppid
		if pg == pgrp && pid != ancestor {
			inGroup = append(inGroup, pid)
		}
	}
	var out []int
	for _, pid := range inGroup {
		// Up the parents to ancestor; 1 and 0 end the chain, and the
		// depth bound guards against a chain read mid-change.
		for p, depth := parent[pid], 0; p != 0 && depth < 4096; p, depth = parent[p], depth+1 {
			if p == ancestor {
				out = append(out, pid)
				break
			}
			if p == 1 {
				break
			}
		}
	}
	return out
}

// procStat returns the fields of /proc/PID/stat after the command name
// (which may hold spaces and parentheses): state, ppid, pgrp, ...
func procStat(pid int) ([]string, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return nil, false
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 > len(b) {
		return nil, false
	}
	f := strings.Fields(string(b[i+2:]))
	return f, len(f) >= 3
}

func procParentGroup(pid int) (ppid, pgrp int, ok bool) {
	f, ok := procStat(pid)
	if !ok {
		return 0, 0, false
	}
	ppid, err1 := strconv.Atoi(f[1])
	pgrp, err2 := strconv.Atoi(f[2])
	return ppid, pgrp, err1 == nil && err2 == nil
}

// procStopped reports whether pid is stopped by job control.
func procStopped(pid int) bool {
	f, ok := procStat(pid)
	return ok && f[0] == "T"
}
