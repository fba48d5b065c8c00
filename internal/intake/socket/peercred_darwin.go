package socket

import "golang.org/x/sys/unix"

// peerCred is the uid and pid of the process at the other end of a Unix
// socket (LOCAL_PEERCRED, LOCAL_PEERPID): macOS, for local development.
func peerCred(fd int) (uid, pid int, err error) {
	c, err := unix.GetsockoptXucred(fd, unix.SOL_LOCAL, unix.LOCAL_PEERCRED)
	if err != nil {
		return 0, 0, err
	}
	pid, _ = unix.GetsockoptInt(fd, unix.SOL_LOCAL, unix.LOCAL_PEERPID)
	return int(c.Uid), pid, nil
}
