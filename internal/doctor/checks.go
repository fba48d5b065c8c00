package doctor

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/tether-run/tether/journal"
)

// journalCheck looks at the journal path without changing anything but a
// probe file in its directory, removed at once.
func journalCheck(path string) (Verdict, string) {
	fi, err := os.Stat(path)
	switch {
	case err == nil && !fi.Mode().IsRegular():
		return Fail, "not a regular file: the journal must be a file of its own"
	case err == nil:
		j, err := journal.OpenReadOnly(path, 0)
		if errors.Is(err, journal.ErrLocked) {
			return Pass, "held by a running tether"
		}
		if err != nil {
			return Fail, err.Error()
		}
		defer j.Close()
		n, err := j.LiveCount()
		if err != nil {
			return Fail, err.Error()
		}
		if err := probe(filepath.Dir(path)); err != nil {
			return Fail, err.Error()
		}
		if n > 0 {
			return Warn, fmt.Sprintf("a journal of owner %s with %d live intents left by an earlier run: the next tether run replays them, or `tether drain --journal %s`", j.Owner(), n, path)
		}
		return Pass, fmt.Sprintf("a journal of owner %s, nothing live", j.Owner())
	case !errors.Is(err, os.ErrNotExist):
		return Fail, err.Error()
	}
	// No journal yet: the nearest directory that exists must let tether
	// make the rest and the file.
	dir := filepath.Dir(path)
	for {
		if _, err := os.Stat(dir); err == nil {
			break
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			break
		}
		dir = parent
	}
	if err := probe(dir); err != nil {
		return Fail, err.Error()
	}
	return Pass, "no journal yet; tether run creates it (" + dir + " is writable)"
}

// probe checks that dir takes a new file.
func probe(dir string) error {
	f, err := os.CreateTemp(dir, ".tether-doctor-*")
	if err != nil {
		return fmt.Errorf("directory %s: tether cannot write there: %w", dir, err)
	}
	name := f.Name()
	f.Close()
	return os.Remove(name)
}
