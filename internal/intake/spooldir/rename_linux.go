package spooldir

import (
	"errors"

	"golang.org/x/sys/unix"
)

// renameNoReplace renames old (in olddir) to new (in newdir), failing with
// EEXIST instead of replacing a file that is there.
func renameNoReplace(olddir int, old string, newdir int, new string) error {
	err := unix.Renameat2(olddir, old, newdir, new, unix.RENAME_NOREPLACE)
	if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOSYS) {
		// A file system without RENAME_NOREPLACE: rejected/ is writable by
		// tether alone, so a check before the rename is enough there.
		return renameChecked(olddir, old, newdir, new)
	}
	return err
}
