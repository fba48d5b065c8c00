package intake

import (
	"fmt"
	"os"
	"slices"
	"syscall"
)

// Who may use tether is one rule, shared by both intakes so that they never
// disagree: root, tether's own user, and the uids the operator allows. The
// socket applies it to the peer of each connection (SO_PEERCRED) and to its
// directory; the spool directory to the owner of each file (fstat of the
// opened file, not its name) and to itself.

// tether's own uids, read once: each is a system call, and the check runs
// on every request and every spool file.
var selfEUID, selfUID = os.Geteuid(), os.Getuid()

// Allowed reports whether uid may declare intents: root, tether's own
// (effective or real) uid, or one of allow.
func Allowed(uid int, allow []int) bool {
	return uid == 0 || uid == selfEUID || uid == selfUID || slices.Contains(allow, uid)
}

// Who describes the users Allowed accepts, for error messages.
func Who(allow []int) string {
	s := fmt.Sprintf("root and tether's own uid %d", selfEUID)
	if len(allow) > 0 {
		s += fmt.Sprintf(" and the allowed uids %v", allow)
	}
	return s
}

// FileOwner is the uid owning the file fi describes (-1 if unknown).
func FileOwner(fi os.FileInfo) int {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return int(st.Uid)
	}
	return -1
}

// CheckDir checks that fi, the directory an intake uses, can be changed
// only by users Allowed accepts (with owners as the allowed uids besides
// root and tether): it is a directory, owned by one of them, and writable
// by no one else, unless its sticky bit keeps others from replacing or
// removing what tether and the allowed users put there (what they add
// themselves each intake refuses by its owner). The error says what is
// wrong, without the path; callers name the directory and the setting.
func CheckDir(fi os.FileInfo, owners []int) error {
	if !fi.IsDir() {
		return fmt.Errorf("not a directory (%s)", DescribeType(fi.Mode()))
	}
	if uid := FileOwner(fi); uid >= 0 && !Allowed(uid, owners) {
		return fmt.Errorf("owned by uid %d, who may not use tether (only %s may own it)", uid, Who(owners))
	}
	if fi.Mode().Perm()&0o022 != 0 && fi.Mode()&os.ModeSticky == 0 {
		return fmt.Errorf("mode %s lets others write to it and replace what is there; use a directory only tether's user can write (or one with the sticky bit, like /tmp)", fi.Mode().Perm())
	}
	return nil
}

// DescribeType names the type of a file in words ("a named pipe (FIFO)").
func DescribeType(m os.FileMode) string {
	switch {
	case m.IsRegular():
		return "a regular file"
	case m&os.ModeDir != 0:
		return "a directory"
	case m&os.ModeSymlink != 0:
		return "a symbolic link"
	case m&os.ModeNamedPipe != 0:
		return "a named pipe (FIFO)"
	case m&os.ModeSocket != 0:
		return "a socket"
	case m&os.ModeDevice != 0:
		return "a device"
	}
	return "an irregular file (" + m.Type().String() + ")"
}
