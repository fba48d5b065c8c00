package sidecar

import (
	"bufio"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// sayStatePaths says in one line where this run keeps its state and where the
// child's SDK is pointed — the paths actually used, which for a non-root
// user may be fallbacks the flags never named — and warns when the
// journal is somewhere it will not outlive the container.
func (sc *Sidecar) sayStatePaths() {
	journalPath := absolute(sc.cfg.Journal)
	attrs := []any{"journal", journalPath, "socket", absolute(sc.cfg.Socket), "spool", absolute(sc.cfg.Spool)}
	// Each provider's proxy as the child is pointed at it, without the
	// secret (the child's alone), or off.
	attrs = append(attrs, sc.proxies...)
	sc.log.Info("tether: where this run keeps its state", attrs...)
	if why := ephemeral(filepath.Dir(journalPath), "/proc/self/mountinfo"); why != "" {
		sc.log.Warn("tether: the journal will not survive the container: "+why+"; a crash or a restart then leaves sandboxes no later run or `tether drain` can find (put --journal on a volume)", "journal", journalPath)
	}
}

func absolute(path string) string {
	if abs, err := filepath.Abs(path); err == nil {
		return abs
	}
	return path
}

// ephemeral says why the directory dir is on a file system that goes with
// the container, as the mount table at mountinfo (/proc/self/mountinfo)
// shows it: one in memory (tmpfs), or the container's own root overlay
// (no volume mounted at dir or above it). "" when it is on anything else,
// or the table cannot be read (not Linux).
func ephemeral(dir, mountinfo string) string {
	if real, err := filepath.EvalSymlinks(dir); err == nil {
		dir = real
	}
	f, err := os.Open(mountinfo)
	if err != nil {
		return ""
	}
	defer f.Close()
	m, ok := mountOf(dir, f)
	if !ok {
		return ""
	}
	switch {
	case m.fstype == "tmpfs" || m.fstype == "ramfs":
		return "it is in memory (" + m.fstype + " at " + m.point + ")"
	case m.point == "/" && overlay(m.fstype):
		return "it is on the container's own root file system (" + m.fstype + "), not on a volume"
	}
	return ""
}

// overlay: the file systems container runtimes make a container's root of.
func overlay(fstype string) bool {
	switch fstype {
	case "overlay", "aufs", "fuse-overlayfs", "fuse.fuse-overlayfs":
		return true
	}
	return false
}

type mount struct{ point, fstype string }

// mountOf finds the mount dir is on in a mount table (proc(5)'s
// mountinfo): the one with the longest mount point above dir, the last
// listed when several share it (a later mount hides an earlier one).
func mountOf(dir string, r io.Reader) (mount, bool) {
	var best mount
	found := false
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		// id parent major:minor root point options [optional...] - fstype source super
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		f, g := strings.Fields(pre), strings.Fields(post)
		if !ok || len(f) < 5 || len(g) < 1 {
			continue
		}
		point := unescape(f[4])
		if !under(dir, point) {
			continue
		}
		if !found || len(point) >= len(best.point) {
			best, found = mount{point: point, fstype: g[0]}, true
		}
	}
	return best, found
}

// under reports whether dir is point or below it.
func under(dir, point string) bool {
	return point == "/" || dir == point || strings.HasPrefix(dir, point+"/")
}

// unescape undoes mountinfo's octal escapes (\040 for a space, …).
func unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
