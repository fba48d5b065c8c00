package journal

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/tether-run/tether/intent"
	"github.com/tether-run/tether/journal/access"
	"github.com/tether-run/tether/journal/boltcheck"
	"github.com/tether-run/tether/journal/durable"
	berrors "go.etcd.io/bbolt/errors"
)

// What Open does about a journal file that is damaged, or empty when it
// should not be. The checks run inside bbolt's OpenFile hook, on the file
// descriptor bbolt goes on to use, after tether holds the file's lock:
// another tether writing the file meanwhile cannot make it look damaged,
// and no other process can take the lock between the check and bbolt's
// own open (bbolt locks the same open file again, which flock allows).

// MarkerSuffix names the marker file beside a journal: PATH + MarkerSuffix
// holds the owner id once the journal has been set up. A journal of 0 bytes
// without its marker is one whose first write never happened (tether died
// between creating the file and writing its header), and is set up afresh;
// with its marker, it is a journal that held intents and was truncated,
// and Open refuses it with ErrEmptied.
const MarkerSuffix = ".owner"

// ErrDamaged marks a journal file that is not a readable bbolt file; the
// error it wraps is a *DamageError saying where.
var ErrDamaged = boltcheck.ErrDamaged

// DamageError says what is wrong with a journal file and where.
type DamageError = boltcheck.DamageError

// ErrEmptied: the journal file is empty, but its marker says it was in use.
var ErrEmptied = errors.New("journal file is empty but was in use (truncated)")

// errOwnerDamaged: the journal's pages are sound but its owner id is not.
var errOwnerDamaged = errors.New("the header record is damaged")

// openChecked is bbolt's OpenFile: it opens the file, takes its lock within
// timeout (berrors.ErrTimeout otherwise, as bbolt's own lock would), and
// refuses a damaged or emptied file before bbolt maps it. What is worth a
// warning in a file it passes goes to notes.
func openChecked(timeout time.Duration, notes *[]string) func(string, int, os.FileMode) (*os.File, error) {
	return func(name string, flag int, perm os.FileMode) (*os.File, error) {
		f, err := openLocked(name, flag, perm, timeout)
		if err != nil {
			return nil, err
		}
		n, err := checkFile(name, f)
		if err != nil {
			f.Close() // releases the lock
			return nil, err
		}
		*notes = n
		return f, nil
	}
}

// openLocked opens name under the access rule (to write; one opened only
// to read is any regular file the user may read) and takes its lock:
// exclusive for a journal opened to write, shared for one opened only to
// read (bbolt's ReadOnly), as bbolt's own lock would be. A journal another
// tether compacted while this one waited for the lock was renamed over
// name: the file this one holds is then the old one, unlinked, and the
// new one at name is opened instead.
func openLocked(name string, flag int, perm os.FileMode, timeout time.Duration) (*os.File, error) {
	deadline := time.Now().Add(timeout)
	write := flag&(os.O_WRONLY|os.O_RDWR) != 0
	for {
		var f *os.File
		var err error
		if write {
			f, err = access.OpenFile(name, flag, perm)
		} else {
			// Only read (tether status, doctor): any journal the user
			// may read, another uid's included (access.OpenToRead).
			f, err = access.OpenToRead(name)
		}
		if err != nil {
			return nil, err
		}
		if err := lockFile(f, write, time.Until(deadline)); err != nil {
			f.Close()
			return nil, err
		}
		held, err := f.Stat()
		if err != nil {
			f.Close()
			return nil, err
		}
		now, err := os.Lstat(name)
		if err == nil && os.SameFile(held, now) {
			return f, nil
		}
		f.Close()
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, err
		}
		if time.Now().After(deadline) {
			return nil, berrors.ErrTimeout
		}
	}
}

// lockFile takes f's flock (exclusive or shared) as bbolt does, polling
// until timeout.
func lockFile(f *os.File, exclusive bool, timeout time.Duration) error {
	how := syscall.LOCK_SH
	if exclusive {
		how = syscall.LOCK_EX
	}
	deadline := time.Now().Add(timeout)
	for {
		err := syscall.Flock(int(f.Fd()), how|syscall.LOCK_NB)
		if err == nil {
			return nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			return fmt.Errorf("lock: %w", err)
		}
		if time.Now().After(deadline) {
			return berrors.ErrTimeout
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// checkFile refuses a file bbolt could not open without crashing, and an
// empty file whose marker says it was a journal.
func checkFile(name string, f *os.File) (notes []string, err error) {
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if fi.Size() == 0 {
		owner, err := readMarker(name)
		if err != nil {
			return nil, err
		}
		if owner != "" {
			return nil, &emptiedError{marker: name + MarkerSuffix, owner: owner}
		}
		return nil, nil
	}
	return boltcheck.CheckMapped(f, fi.Size())
}

// readMarker returns the owner id in path's marker, or "" when there is no
// marker.
func readMarker(path string) (string, error) {
	b, err := readSmall(path + MarkerSuffix)
	if errors.Is(err, os.ErrNotExist) {
		return "", nil
	}
	if errors.Is(err, access.ErrRefused) {
		return "", err
	}
	if err != nil {
		return "", fmt.Errorf("marker %s: %w", path+MarkerSuffix, err)
	}
	owner := strings.TrimSpace(string(b))
	if owner == "" {
		owner = "(unreadable)"
	}
	return intent.Clip(owner), nil
}

// ensureMarker writes path's marker with owner unless it holds it already:
// one small read on every start, one small fsynced write the first time
// (or after a journal of another owner was moved into place).
func ensureMarker(path, owner string) error {
	marker := path + MarkerSuffix
	b, err := readSmall(marker)
	if err == nil && strings.TrimSpace(string(b)) == owner {
		return nil
	}
	if errors.Is(err, access.ErrRefused) {
		return err
	}
	tmp := marker + ".tmp"
	f, err := access.CreateTemp(tmp, 0o600)
	if errors.Is(err, access.ErrRefused) {
		return err
	}
	if err != nil {
		return fmt.Errorf("marker %s: %w", marker, err)
	}
	_, werr := f.WriteString(owner + "\n")
	serr := f.Sync()
	cerr := f.Close()
	if err := errors.Join(werr, serr, cerr); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("marker %s: %w", marker, err)
	}
	if err := os.Rename(tmp, marker); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("marker %s: %w", marker, err)
	}
	_ = durable.SyncDir(filepath.Dir(path)) // the marker only guards a later truncation
	return nil
}

// readSmall reads a small file tether wrote beside the journal, under the
// access rule (no link followed, owned by tether's user, not writable by
// others).
func readSmall(path string) ([]byte, error) {
	f, err := access.OpenFile(path, os.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, 4096))
}

// emptiedError is ErrEmptied with what the marker says.
type emptiedError struct{ marker, owner string }

func (e *emptiedError) Error() string {
	return fmt.Sprintf("%v: %s says it was set up as owner %s", ErrEmptied, e.marker, e.owner)
}

func (e *emptiedError) Unwrap() error { return ErrEmptied }

// damageAdvice is what Open says about a damaged or emptied journal.
func damageAdvice(path string, err error) error {
	var emptied *emptiedError
	if errors.As(err, &emptied) {
		return fmt.Errorf("journal %s: %w. The intents it held are lost: sandboxes labelled %s=%s may still exist; delete them by that label. "+
			"To start a new journal here, move %s and %s aside", path, err, intent.LabelOwner, emptied.owner, path, emptied.marker)
	}
	return fmt.Errorf("journal %s is damaged: %w. tether will not run on it. Salvage what is readable into a new journal with "+
		"`tether drain --journal %s --salvage-to NEW.db`, then use NEW.db (--journal, TETHER_JOURNAL); the damaged file was left as it is",
		path, err, path)
}
