package config

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"syscall"

	"github.com/tether-run/tether/journal/access"
)

// The well-known directories: tether's journal and socket as root, and as
// any user who may write there. The image (the root Dockerfile) creates both
// world-writable with the sticky bit, like /tmp, so a container started with
// --user 1000 still journals on the volume at /var/lib/tether, and
// `docker exec C tether intent ls` finds the socket without a flag.
const (
	StateDir        = "/var/lib/tether"
	RuntimeDir      = "/run/tether"
	WellKnownSocket = RuntimeDir + "/tether.sock"
)

// wellKnown maps StateDir and RuntimeDir to the directories used; tests of
// the choice below replace them with temporary ones.
var wellKnown = map[string]string{StateDir: StateDir, RuntimeDir: RuntimeDir}

// defaultPath chooses where name lives when no flag or variable says:
//
//  1. root: rootDir (StateDir or RuntimeDir);
//  2. another user: rootDir too, if it exists and the user may write to it
//     (in tether's image, so the journal lands on the volume);
//  3. for the socket and spool: $XDG_RUNTIME_DIR/tether;
//  4. the user cache dir ($XDG_CACHE_HOME or $HOME/.cache)/tether, if it
//     can be created there (not with Docker's HOME=/ for a user without a
//     passwd entry, nor HOME=/nonexistent);
//  5. $TMPDIR/tether-<uid> (/tmp when unset): always writable, but lost
//     with the container; give --journal a volume in that case.
func defaultPath(name, rootDir string) string {
	rootDir = wellKnown[rootDir] // a test's stand-in, if any
	if os.Geteuid() == 0 || isWritableDir(rootDir) {
		return filepath.Join(rootDir, name)
	}
	if d := os.Getenv("XDG_RUNTIME_DIR"); d != "" && rootDir == wellKnown[RuntimeDir] {
		return filepath.Join(d, "tether", name)
	}
	if d, err := os.UserCacheDir(); err == nil && creatable(d) {
		return filepath.Join(d, "tether", name)
	}
	return filepath.Join(os.TempDir(), "tether-"+strconv.Itoa(os.Geteuid()), name)
}

// defaultJournal is defaultPath's choice for the journal, with one change:
// in a directory every user may write (the image's sticky /var/lib/tether,
// /tmp) the journal lives in a subdirectory uid-<euid> that tether creates
// for its user (0700), so no other user can have taken its name, its
// marker's or its temporary files' names first. A journal this user kept
// directly in that directory before (a regular file it owns that no one
// else may write: no one else could have planted that) is kept where it
// is, so its intents are not forgotten.
func defaultJournal() string {
	p := defaultPath("journal.db", StateDir)
	dir := filepath.Dir(p)
	fi, err := os.Stat(dir)
	if err != nil || !access.Shared(fi) {
		return p
	}
	if old, err := os.Lstat(p); err == nil && access.CheckFile(p, old) == nil && access.FileOwner(old) == os.Geteuid() {
		return p
	}
	return filepath.Join(dir, "uid-"+strconv.Itoa(os.Geteuid()), "journal.db")
}

// isWritableDir: dir exists, is a directory, and this process may create
// files in it.
func isWritableDir(dir string) bool {
	fi, err := os.Stat(dir)
	return err == nil && fi.IsDir() && syscall.Access(dir, accessWrite) == nil
}

// accessWrite is W_OK of access(2).
const accessWrite = 0x2

// creatable: dir exists and is writable, or its nearest existing ancestor
// is, so MkdirAll can make it. "/" is never taken as such an ancestor for a
// user: HOME=/ (Docker's, for a uid the image does not know) means no home.
func creatable(dir string) bool {
	if !filepath.IsAbs(dir) {
		return false
	}
	for d := filepath.Clean(dir); ; d = filepath.Dir(d) {
		if d == "/" {
			return false
		}
		if _, err := os.Stat(d); err == nil {
			return isWritableDir(d)
		} else if !errors.Is(err, os.ErrNotExist) {
			return false
		}
	}
}

// FindSocket returns the socket a client outside tether's child (`docker
// exec C tether intent ls`, an operator's shell) should speak when
// $TETHER_SOCKET is unset: where tether run would listen by default for
// this user, else the well-known root path; the first that holds a socket.
// It returns the paths it tried when none does.
func FindSocket() (string, []string) {
	tried := []string{Default().Socket}
	if tried[0] != WellKnownSocket {
		tried = append(tried, WellKnownSocket)
	}
	for _, p := range tried {
		if fi, err := os.Stat(p); err == nil && fi.Mode()&os.ModeSocket != 0 {
			return p, tried
		}
	}
	return "", tried
}
