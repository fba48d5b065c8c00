package sidecar

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A container's mount table: the root an overlay, a volume at /data, a
// tmpfs at /tmp, and a bind mount whose point has a space (escaped).
const containerMounts = `1203 1086 0:345 / / rw,relatime master:476 - overlay overlay rw,lowerdir=/var/lib/docker/overlay2/l/A,upperdir=/var/lib/docker/overlay2/x/diff,workdir=/var/lib/docker/overlay2/x/work
1204 1203 0:348 / /proc rw,nosuid,nodev,noexec,relatime - proc proc rw
1210 1203 254:1 /var/lib/docker/volumes/j/_data /data rw,relatime - ext4 /dev/vda1 rw
1211 1203 0:351 / /tmp rw,nosuid,nodev - tmpfs tmpfs rw,size=65536k
1212 1203 254:1 /home/u/state /my\040state rw,relatime - ext4 /dev/vda1 rw
1213 1210 0:352 / /data/scratch rw - tmpfs tmpfs rw
`

// A host's: the root on a disk, /tmp on it too.
const hostMounts = `27 1 254:0 / / rw,relatime - ext4 /dev/vda rw
25 24 0:23 / /dev/shm rw,relatime - tmpfs tmpfs rw
`

func TestEphemeral(t *testing.T) {
	dir := t.TempDir()
	write := func(name, table string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(table), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	container, host := write("container", containerMounts), write("host", hostMounts)
	for _, tc := range []struct {
		table, dir, says string // says: "" when it survives
	}{
		{container, "/var/lib/tether", "root file system (overlay)"},
		{container, "/", "root file system (overlay)"},
		{container, "/data", ""},
		{container, "/data/tether/deep", ""},
		{container, "/datastore", "root file system (overlay)"}, // not under /data
		{container, "/tmp/tether-1000", "in memory (tmpfs at /tmp)"},
		{container, "/my state/j", ""},
		{container, "/data/scratch/j", "in memory (tmpfs at /data/scratch)"},
		{host, "/var/lib/tether", ""},
		{host, "/tmp/tether-1000", ""},
		{host, "/dev/shm/j", "in memory (tmpfs at /dev/shm)"},
		{filepath.Join(dir, "missing"), "/tmp", ""}, // no table (not Linux): no guess
	} {
		got := ephemeral(tc.dir, tc.table)
		if (tc.says == "") != (got == "") || !strings.Contains(got, tc.says) {
			t.Errorf("%s in %s: %q, want %q", tc.dir, filepath.Base(tc.table), got, tc.says)
		}
	}
}
