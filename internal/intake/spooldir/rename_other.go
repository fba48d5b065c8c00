//go:build !linux

package spooldir

// renameNoReplace renames old (in olddir) to new (in newdir), failing with
// EEXIST instead of replacing a file that is there. rejected/ is writable
// by tether alone, so a check before the rename is enough.
func renameNoReplace(olddir int, old string, newdir int, new string) error {
	return renameChecked(olddir, old, newdir, new)
}
