package socket

import "golang.org/x/sys/unix"

// peerCred is the uid and pid of the process at the other end of a Unix
// socket, as the kernel recorded them when it connected (SO_PEERCRED).
func peerCred(fd int) (uid, pid int, err error) {
	c, err := unix.GetsockoptUcred(fd, unix.SOL_SOCKET, unix.SO_PEERCRED)
	if err != nil {
		return 0, 0, err
	}
	return int(c.Uid), int(c.Pid), nil
}
