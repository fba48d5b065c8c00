// Package durable holds the file-system steps that make a write survive a
// crash of the machine, not only of the process: a new file or a rename is
// durable once its directory is fsynced.
package durable

import "os"

// SyncDir fsyncs directory dir, so the entries created or renamed in it
// survive a power loss. A directory that cannot be opened or synced (some
// file systems refuse) reports the error; callers that cannot do better log
// it or go on.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
