package sidecar

import (
	"errors"
	"fmt"
	"io/fs"
	"syscall"

	"github.com/tether-run/tether/journal"
)

// withPathSetting adds to an error about one of tether's paths which setting
// chooses that path, so that a start that fails (often a non-root start on
// default paths) says what to change, not only what went wrong. A journal
// another tether holds already says so; other journal errors get the hint
// only when they are about the file system (permission, a missing or
// read-only directory), not about the file's content.
func withPathSetting(err error, flag, env string) error {
	if err == nil {
		return nil
	}
	if flag == "--journal" && (errors.Is(err, journal.ErrLocked) || !pathProblem(err)) {
		return err
	}
	return fmt.Errorf("%w (choose another path with %s or %s)", err, flag, env)
}

// pathProblem: err is about where a file is, not what is in it.
func pathProblem(err error) bool {
	for _, e := range []error{fs.ErrPermission, fs.ErrNotExist, syscall.EROFS, syscall.ENOTDIR, syscall.EISDIR, syscall.ENOSPC} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}
