// Package access is tether's one rule for who may use what it keeps on the
// host: the users who may declare intents (root, tether's own uid, the
// uids the operator allows), the directories its intakes use, and the
// files it writes (the journal, its marker, every temporary or salvaged
// file). Another local user must not be able to plant, replace or rewrite
// any of them: tether opens its files without following symbolic links,
// creates new ones exclusively, and refuses an existing one that is not a
// regular file owned by root or tether's own uid, or that others may write.
package access

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"syscall"
)

// tether's own uids, read once: each is a system call, and the check runs
// on every request and every spool file.
var selfEUID, selfUID = os.Geteuid(), os.Getuid()

// Allowed reports whether uid may declare intents: root, tether's own
// (effective or real) uid, or one of allow.
func Allowed(uid int, allow []int) bool {
	return uid == 0 || uid == selfEUID || uid == selfUID || slices.Contains(allow, uid)
}

// AllowedUsers describes the users Allowed accepts, for error messages.
func AllowedUsers(allow []int) string {
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

// fileGroup is the gid of the file fi describes (-1 if unknown).
func fileGroup(fi os.FileInfo) int {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return int(st.Gid)
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
		return fmt.Errorf("owned by uid %d, who may not use tether (only %s may own it)", uid, AllowedUsers(owners))
	}
	if fi.Mode().Perm()&0o022 != 0 && fi.Mode()&os.ModeSticky == 0 {
		return fmt.Errorf("mode %s lets others write to it and replace what is there; use a directory only tether's user can write (or one with the sticky bit, like /tmp)", fi.Mode().Perm())
	}
	return nil
}

// Shared reports whether fi is a directory every user may create files in
// (/tmp, the image's /var/lib/tether, both with the sticky bit): a name
// there may have been taken by anyone first.
func Shared(fi os.FileInfo) bool {
	return fi.IsDir() && fi.Mode().Perm()&0o002 != 0
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

// ErrRefused marks a file or directory tether will not use because another
// user could have planted or could change it; the error is a *RefusedError.
var ErrRefused = errors.New("refused")

// RefusedError names a path that breaks the rule, why, and what to do.
// Owner, when it is set (not 0), is the uid that owns the path when that is
// the reason: the file is most likely that uid's own tether's (a container
// run with --user UID writes its journal under uid-UID), so the fix is to
// act as that uid, never to take the file from it (a chown would stop that
// uid's tether from opening it). Group is the path's gid, for the command
// that acts as its owner.
type RefusedError struct {
	Path  string
	Why   string
	Owner int
	Group int
}

func (e *RefusedError) Error() string {
	msg := fmt.Sprintf("%s: %s; tether will not use it, as another user could have planted it or could change it. ", e.Path, e.Why)
	if e.Owner > 0 && e.Owner != selfEUID {
		gid := e.Group
		if gid < 0 {
			gid = e.Owner
		}
		return msg + fmt.Sprintf("If it is uid %d's (its own tether's: a container run with --user %d keeps its journal under uid-%d), run tether as that uid to use it: "+
			"setpriv --reuid=%d --regid=%d --clear-groups tether ..., or docker run --user %d ...; do not chown it, or uid %d's own tether can no longer open it. "+
			"If it is no tether's, remove it (or move it aside) as its owner or root", e.Owner, e.Owner, e.Owner, e.Owner, gid, e.Owner, e.Owner)
	}
	return msg + fmt.Sprintf("If it is not tether's, remove it (or move it aside) as its owner or root; if it is, make it writable by no one but its owner (chmod go-w %s)", e.Path)
}

func (e *RefusedError) Unwrap() error { return ErrRefused }

// OwnedBy is a RefusedError for path, fi, refused because uid owns it.
func OwnedBy(path string, fi os.FileInfo, why string) *RefusedError {
	return &RefusedError{Path: path, Why: why, Owner: FileOwner(fi), Group: fileGroup(fi)}
}

// CheckFile checks that fi, a file tether keeps, may be changed by tether's
// user alone: a regular file (not a link, which an opener would follow),
// owned by root or tether's effective uid, writable by neither group nor
// others. The error is a *RefusedError for path.
func CheckFile(path string, fi os.FileInfo) error {
	switch uid := FileOwner(fi); {
	case !fi.Mode().IsRegular():
		return &RefusedError{Path: path, Why: "it is " + DescribeType(fi.Mode()) + ", not a regular file"}
	case uid >= 0 && uid != 0 && uid != selfEUID:
		return OwnedBy(path, fi, "it is owned by uid "+strconv.Itoa(uid)+", not by tether's uid "+strconv.Itoa(selfEUID))
	case fi.Mode().Perm()&0o022 != 0:
		return &RefusedError{Path: path, Why: "its mode " + fi.Mode().Perm().String() + " lets others write to it"}
	}
	return nil
}

// OpenFile opens path as os.OpenFile does, never following a symbolic link
// in its last element, and checks the opened file (fstat of the
// descriptor, not the name, so nothing can be swapped in between) with
// CheckFile. With os.O_CREATE a file that does not exist is created
// exclusively (mode perm, O_TRUNC moot); one that exists is opened as it
// is, and must pass the check like any other.
func OpenFile(path string, flag int, perm os.FileMode) (*os.File, error) {
	flag |= syscall.O_NOFOLLOW | syscall.O_CLOEXEC
	if flag&os.O_CREATE != 0 && flag&os.O_EXCL == 0 {
		f, err := os.OpenFile(path, flag|os.O_EXCL, perm)
		if err == nil {
			return f, nil
		}
		if !errors.Is(err, os.ErrExist) {
			return nil, err
		}
		flag &^= os.O_CREATE // it exists: check what is there
	}
	f, err := os.OpenFile(path, flag, perm)
	if err != nil {
		if errors.Is(err, syscall.ELOOP) {
			return nil, &RefusedError{Path: path, Why: "it is a symbolic link"}
		}
		return nil, err
	}
	fi, err := f.Stat()
	if err == nil {
		err = CheckFile(path, fi)
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// OpenToRead opens path only to read it, never following a symbolic link
// in its last element, and refuses what is not a regular file. Unlike
// OpenFile it takes a file of any owner and mode the caller may read: a
// reader acts on nothing it reads (tether status shows a journal, it never
// drains it), so another uid's journal — a container's run with --user —
// is read where it lies, as root may, without being taken from its owner.
func OpenToRead(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, syscall.ELOOP) {
			return nil, &RefusedError{Path: path, Why: "it is a symbolic link"}
		}
		return nil, err
	}
	fi, err := f.Stat()
	if err == nil && !fi.Mode().IsRegular() {
		err = &RefusedError{Path: path, Why: "it is " + DescribeType(fi.Mode()) + ", not a regular file"}
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// CreateTemp creates path exclusively for writing, never through a link:
// the temporary file of a write that renames it into place. A file left
// there by an earlier tether that died mid-write (a regular file that
// passes CheckFile) is removed and created afresh; anything else at path
// is refused.
func CreateTemp(path string, perm os.FileMode) (*os.File, error) {
	flag := os.O_WRONLY | os.O_CREATE | os.O_EXCL | syscall.O_NOFOLLOW | syscall.O_CLOEXEC
	f, err := os.OpenFile(path, flag, perm)
	if !errors.Is(err, os.ErrExist) {
		return f, err
	}
	fi, lerr := os.Lstat(path)
	if lerr != nil {
		return nil, err
	}
	if cerr := CheckFile(path, fi); cerr != nil {
		return nil, cerr
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	return os.OpenFile(path, flag, perm)
}

// CheckExisting applies CheckFile to path without following a link; a path
// that does not exist passes.
func CheckExisting(path string) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	return CheckFile(path, fi)
}
