package spooldir

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/tether-run/tether/journal/durable"
)

// Write writes f into the spool directory dir as the protocol says: the
// JSON in .NAME.tmp, fsynced, renamed to NAME.json, then the directory
// fsynced. tether never sees a half-written file, and the file survives a
// crash of the machine once Write returns. Names start with the wall clock
// in nanoseconds, so the files of one writer, written one after another,
// sort (and are taken) in the order they were written.
func Write(dir string, f FileOp) (name string, err error) {
	data, err := json.Marshal(f)
	if err != nil {
		return "", err
	}
	if _, err := Decode(data); err != nil {
		return "", fmt.Errorf("spool file would be rejected: %w", err)
	}
	var rnd [4]byte
	rand.Read(rnd[:])
	base := fmt.Sprintf("%020d-%s-%s", time.Now().UnixNano(), f.Op, hex.EncodeToString(rnd[:]))
	tmp := filepath.Join(dir, "."+base+".tmp")
	file, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return "", err
	}
	_, err = file.Write(append(data, '\n'))
	if err == nil {
		err = file.Sync()
	}
	if cerr := file.Close(); err == nil {
		err = cerr
	}
	name = base + ".json"
	if err == nil {
		err = os.Rename(tmp, filepath.Join(dir, name))
	}
	if err != nil {
		os.Remove(tmp)
		return "", err
	}
	_ = durable.SyncDir(dir) // the rename is done; a file system that cannot sync a directory still has it
	return name, nil
}
