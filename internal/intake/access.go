package intake

import (
	"os"

	"github.com/tether-run/tether/journal/access"
)

// Who may use tether is one rule, shared by both intakes and the journal so
// that they never disagree (package journal/access): root, tether's own user,
// and the uids the operator allows. The socket applies it to the peer of
// each connection (SO_PEERCRED) and to its directory; the spool directory
// to the owner of each file (fstat of the opened file, not its name) and to
// itself; the journal to its files.

// Allowed reports whether uid may declare intents: root, tether's own
// (effective or real) uid, or one of allow.
func Allowed(uid int, allow []int) bool { return access.Allowed(uid, allow) }

// AllowedUsers describes the users Allowed accepts, for error messages.
func AllowedUsers(allow []int) string { return access.AllowedUsers(allow) }

// FileOwner is the uid owning the file fi describes (-1 if unknown).
func FileOwner(fi os.FileInfo) int { return access.FileOwner(fi) }

// CheckDir checks that fi, the directory an intake uses, can be changed
// only by users Allowed accepts; see access.CheckDir.
func CheckDir(fi os.FileInfo, owners []int) error { return access.CheckDir(fi, owners) }

// DescribeType names the type of a file in words ("a named pipe (FIFO)").
func DescribeType(m os.FileMode) string { return access.DescribeType(m) }
