package journal

// bbolt reuses the pages pruning frees but never gives them back: a
// journal that once held 100,000 intents stays that size. Open compacts a
// journal that is mostly free, with bbolt's own Compact into a new file
// beside it, and renames that over the journal, so a kill at any moment
// leaves either the old journal or the new one, whole:
//
//  1. PATH.compact is created exclusively (a stale one of ours, from a kill
//     in an earlier compaction, is removed first) and filled by
//     bbolt.Compact, then fsynced. A kill here leaves the old journal as
//     it was, and a stale PATH.compact the next Open removes.
//  2. PATH.compact is renamed over PATH and the directory fsynced: the
//     rename is atomic, and the new file is complete on disk before it.
//
// The new file is locked (bbolt's flock) before the rename and kept open
// as the journal, so no other tether can take the journal in between; one
// that was waiting for the old file's lock finds, once it has it, that its
// file is no longer the one at PATH and opens the new one (openLocked).

import (
	"os"
	"path/filepath"
	"time"

	"github.com/tether-run/tether/journal/access"
	"github.com/tether-run/tether/journal/durable"
	bolt "go.etcd.io/bbolt"
)

// When Open compacts: the file holds at least compactMinSize bytes and less
// than half of it is in use. Below that size compaction would save little
// and cost a start-up its time.
const compactMinSize = 1 << 20

// compactTxMax bounds each transaction of the copy, so a large journal is
// copied without holding all of it in memory at once.
const compactTxMax = 16 << 20

// Crash points of a compaction (internal/crashpoint names them).
const (
	CrashCompactBeforeRename = "journal-compact-before-rename"
	CrashCompactAfterRename  = "journal-compact-after-rename"
)

// mostlyFree reports the journal file's size, the bytes its pages in use
// take, and whether compacting is worth it.
func mostlyFree(db *bolt.DB, path string) (size, used int64, worth bool) {
	fi, err := os.Stat(path)
	if err != nil {
		return 0, 0, false
	}
	var high int64
	if db.View(func(tx *bolt.Tx) error { high = tx.Size(); return nil }) != nil {
		return 0, 0, false
	}
	used = high - int64(db.Stats().FreePageN)*int64(db.Info().PageSize)
	return fi.Size(), used, fi.Size() >= compactMinSize && used*2 < fi.Size()
}

// compact copies src, the journal at path, into a new file and renames it
// over path (see above). On success src is closed and the new journal,
// open and locked, is returned; on failure src is left as it was, and
// open.
func compact(src *bolt.DB, path string, timeout time.Duration, hit func(string)) (*bolt.DB, error) {
	tmp := path + compactSuffix
	f, err := access.CreateTemp(tmp, 0o600)
	if err != nil {
		return nil, err
	}
	f.Close()
	// No fsync per transaction of the copy: one at the end, before the
	// rename, makes the whole file durable at once.
	dst, err := bolt.Open(tmp, 0o600, &bolt.Options{Timeout: timeout, NoSync: true, NoFreelistSync: true, FreelistType: bolt.FreelistMapType, OpenFile: access.OpenFile})
	if err != nil {
		os.Remove(tmp)
		return nil, err
	}
	fail := func(err error) (*bolt.DB, error) {
		dst.Close()
		os.Remove(tmp)
		return nil, err
	}
	if err := bolt.Compact(dst, src, compactTxMax); err != nil {
		return fail(err)
	}
	if err := dst.Sync(); err != nil {
		return fail(err)
	}
	hit(CrashCompactBeforeRename)
	if err := os.Rename(tmp, path); err != nil {
		return fail(err)
	}
	// The rename is done whatever the directory's fsync says: both files
	// are whole journals, and after a power loss either may be the one
	// found at path.
	_ = durable.SyncDir(filepath.Dir(path))
	hit(CrashCompactAfterRename)
	dst.NoSync = false
	src.Close()
	return dst, nil
}

// removeStaleCompaction removes the PATH.compact a kill in an earlier
// compaction left, if it is tether's (under the access rule): called with
// the journal's lock held, so no compaction is running.
func removeStaleCompaction(path string) {
	tmp := path + compactSuffix
	if _, err := os.Lstat(tmp); err == nil && access.CheckExisting(tmp) == nil {
		_ = os.Remove(tmp)
	}
}
