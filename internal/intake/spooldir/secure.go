package spooldir

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tether-run/tether/internal/intake"
)

// The spool directory follows the socket's rules (intake.Allowed,
// intake.CheckDir): it must be a directory only tether, root and the allowed
// uids can change; a file is taken only from them (the owner of the opened
// file, never its name); nothing tether writes follows a symbolic link; and
// a rejected file never replaces an earlier one.

// rejectSlots bounds the names tried in rejected/ for one file: NAME,
// NAME.1 … NAME.9, then three with the time in nanoseconds.
const rejectSlots = 13

// maxStuck bounds the names a Reader remembers as impossible to move or
// remove (a directory of another user, say), so that they are reported
// once instead of on every scan.
const maxStuck = 4096

// Open creates the spool directory (0700) and rejected/ in it if missing,
// and checks both: the spool directory must pass intake.CheckDir (owned by
// root, tether or an allowed uid; writable by no one else unless sticky),
// and rejected/ must be a real directory (not a symbolic link) that only
// root or tether can write. Run opens the Reader if it is not open yet;
// call Open first to find a bad directory before the child starts.
func (in *Reader) Open() error {
	if in.dir != nil {
		return nil
	}
	if err := os.MkdirAll(in.Dir, 0o700); err != nil {
		return fmt.Errorf("spool directory %s: %w", in.Dir, err)
	}
	dir, err := openDir(unix.AT_FDCWD, in.Dir, 0)
	if err != nil {
		return fmt.Errorf("spool directory %s: %w", in.Dir, err)
	}
	if err := checkOpenDir(dir, in.AllowUIDs); err != nil {
		dir.Close()
		return fmt.Errorf("spool directory %s: %w", in.Dir, err)
	}
	// One reader at a time: a second (a tether drain of another journal,
	// a second tether run) would take the live runner's files into its
	// own journal. The lock goes with the descriptor: a tether that dies,
	// even by SIGKILL, leaves none.
	if err := unix.Flock(int(dir.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		dir.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return fmt.Errorf("spool directory %s: %w", in.Dir, ErrBusy)
		}
		return fmt.Errorf("spool directory %s: lock: %w", in.Dir, err)
	}
	if err := unix.Mkdirat(int(dir.Fd()), RejectedDir, 0o700); err != nil && !errors.Is(err, unix.EEXIST) {
		dir.Close()
		return fmt.Errorf("spool directory %s: create %s/: %w", in.Dir, RejectedDir, err)
	}
	// O_NOFOLLOW: a symbolic link named rejected is refused, not followed.
	rej, err := openDir(int(dir.Fd()), RejectedDir, unix.O_NOFOLLOW)
	if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) {
		err = errors.New("not a directory but a symbolic link or a file; tether writes rejected files only into a directory of its own")
	}
	if err == nil {
		err = checkOpenDir(rej, nil)
		if err != nil {
			rej.Close()
		}
	}
	if err != nil {
		dir.Close()
		return fmt.Errorf("spool directory %s: %s/: %w (remove it; tether creates it)", in.Dir, RejectedDir, err)
	}
	in.dir, in.rejected = dir, rej
	return nil
}

// ErrBusy: another tether takes this spool directory's files now.
var ErrBusy = errors.New("another tether takes this spool directory's files now (a tether run, or a tether drain); one reader at a time")

// Close releases the directory and its lock that Open took, for a caller
// that opened the reader without Run or Pass (which release them).
func (in *Reader) Close() { in.close() }

// close releases the directories Open opened.
func (in *Reader) close() {
	if in.dir != nil {
		in.dir.Close()
		in.rejected.Close()
		in.dir, in.rejected = nil, nil
	}
}

func openDir(at int, path string, flags int) (*os.File, error) {
	fd, err := unix.Openat(at, path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC|flags, 0)
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), path), nil
}

func checkOpenDir(f *os.File, owners []int) error {
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	return intake.CheckDir(fi, owners)
}

// readFile reads the spool file name: a regular file with one link, owned
// by a user Allowed accepts, at most MaxFileSize bytes. It never follows a
// symbolic link, blocks on a FIFO or reads a file it refuses.
func (in *Reader) readFile(name string) ([]byte, error) {
	fd, err := unix.Openat(int(in.dir.Fd()), name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ELOOP) {
		return nil, errors.New("a symbolic link, not a regular file")
	}
	if errors.Is(err, unix.EACCES) {
		// tether (not root) may not read another user's file: say whose.
		var st unix.Stat_t
		if unix.Fstatat(int(in.dir.Fd()), name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && !intake.Allowed(int(st.Uid), in.AllowUIDs) {
			return nil, fmt.Errorf("written by uid %d, who may not use tether (only %s may)", st.Uid, intake.AllowedUsers(in.AllowUIDs))
		}
	}
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: name, Err: err}
	}
	f := os.NewFile(uintptr(fd), name)
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if uid := intake.FileOwner(fi); uid >= 0 && !intake.Allowed(uid, in.AllowUIDs) {
		return nil, fmt.Errorf("written by uid %d, who may not use tether (only %s may)", uid, intake.AllowedUsers(in.AllowUIDs))
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("not a regular file but %s", intake.DescribeType(fi.Mode()))
	}
	if fi.Size() > MaxFileSize {
		return nil, fmt.Errorf("file larger than %d bytes", MaxFileSize)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Nlink > 1 {
		// Written as the protocol says (.NAME.tmp renamed), a file has one
		// name; a hard link could be anyone's file under a new name.
		return nil, fmt.Errorf("a file with %d hard links; write each spool file anew", st.Nlink)
	}
	data, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return nil, err
	}
	if len(data) > MaxFileSize {
		return nil, fmt.Errorf("file larger than %d bytes", MaxFileSize)
	}
	return data, nil
}

// reject moves the spool file name into rejected/ beside a .err file that
// says why. Both are created under a name no earlier rejected file has
// (NAME, else NAME.1 … NAME.9, else NAME.<nanoseconds>), the .err file with
// O_EXCL|O_NOFOLLOW and the move without replacing anything, so a planted
// symbolic link is never written through and no earlier reason is lost.
// A file that can be neither moved nor removed is remembered and skipped.
func (in *Reader) reject(name string, reason error) {
	in.log.Warn("spool: rejected file", "file", name, "reason", reason)
	base := strings.TrimSuffix(name, ".json")
	rej := int(in.rejected.Fd())
	for k := 0; ; k++ {
		if k >= rejectSlots {
			in.log.Error("spool: found no free name in rejected/; removing the file", "file", name)
			in.remove(name)
			return
		}
		slot := base
		switch {
		case k >= 1 && k <= 9:
			slot += "." + strconv.Itoa(k)
		case k > 9:
			slot += "." + strconv.FormatInt(time.Now().UnixNano(), 10)
		}
		fd, err := unix.Openat(rej, slot+".err", unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
		if errors.Is(err, unix.EEXIST) {
			continue
		}
		created := err == nil
		if err != nil {
			in.log.Error("spool: cannot write the reason of a rejected file", "file", name, "err", err)
		} else {
			f := os.NewFile(uintptr(fd), slot+".err")
			if _, err := f.WriteString(reason.Error() + "\n"); err != nil {
				in.log.Error("spool: cannot write the reason of a rejected file", "file", name, "err", err)
			}
			f.Close()
		}
		err = renameNoReplace(int(in.dir.Fd()), name, rej, slot+".json")
		if errors.Is(err, unix.EEXIST) || errors.Is(err, unix.ENOENT) {
			// EEXIST: a .json without its .err is there (left by a crash
			// between the two, or planted); it stays, and this file goes
			// under the next free name. ENOENT: the file is gone meanwhile.
			if created {
				unix.Unlinkat(rej, slot+".err", 0)
			}
			if errors.Is(err, unix.EEXIST) {
				continue
			}
			return
		}
		if err != nil {
			in.log.Error("spool: cannot move a rejected file; removing it", "file", name, "err", err)
			in.remove(name)
		}
		return
	}
}

// remove deletes a spool file (or empty directory) tether could not move;
// what it cannot delete either is skipped from now on.
func (in *Reader) remove(name string) {
	err := unix.Unlinkat(int(in.dir.Fd()), name, 0)
	if errors.Is(err, unix.EISDIR) || errors.Is(err, unix.EPERM) {
		err = unix.Unlinkat(int(in.dir.Fd()), name, unix.AT_REMOVEDIR)
	}
	if err == nil || errors.Is(err, unix.ENOENT) {
		return
	}
	in.log.Error("spool: cannot remove a rejected file either; it is skipped from now on (remove it by hand)", "file", filepath.Join(in.Dir, name), "err", err)
	if len(in.stuck) < maxStuck {
		in.stuck[name] = true
	}
}

// renameChecked is renameNoReplace where the kernel cannot refuse to
// replace: it checks first.
func renameChecked(olddir int, old string, newdir int, new string) error {
	var st unix.Stat_t
	if err := unix.Fstatat(newdir, new, &st, unix.AT_SYMLINK_NOFOLLOW); err == nil {
		return unix.EEXIST
	}
	return unix.Renameat(olddir, old, newdir, new)
}
