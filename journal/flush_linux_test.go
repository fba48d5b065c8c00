package journal

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"unsafe"

	"github.com/tether-run/tether/intent"
	"golang.org/x/sys/unix"
)

// cachestat is the Linux cachestat(2) answer for a file: how many of its
// pages are in the page cache, and how many of those are dirty (written, not
// yet on the disk) or being written back. A dirty page is what a power cut
// loses; SIGKILL, which the page cache survives, cannot tell.
type cachestat struct {
	Cache, Dirty, Writeback, Evicted, RecentlyEvicted uint64
}

func statCache(t *testing.T, path string) cachestat {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rng := [2]uint64{0, 0} // offset 0, length 0: the whole file
	var cs cachestat
	_, _, errno := unix.Syscall6(unix.SYS_CACHESTAT, f.Fd(), uintptr(unsafe.Pointer(&rng)), uintptr(unsafe.Pointer(&cs)), 0, 0, 0)
	if errno != 0 {
		if errors.Is(errno, unix.ENOSYS) || errors.Is(errno, unix.EPERM) {
			t.Skipf("cachestat(2) unavailable (%v): needs Linux 6.5", errno)
		}
		t.Fatalf("cachestat %s: %v", path, errno)
	}
	return cs
}

// requireDirtyPagesVisible proves that in dir a write not flushed shows as
// dirty pages, so that a clean answer below means flushed, not unseen (on
// tmpfs, say, every page is always "dirty" or never is).
func requireDirtyPagesVisible(t *testing.T, dir string) {
	t.Helper()
	probe := filepath.Join(dir, "probe")
	if err := os.WriteFile(probe, make([]byte, 64<<10), 0o600); err != nil {
		t.Fatal(err)
	}
	if cs := statCache(t, probe); cs.Dirty == 0 && cs.Writeback == 0 {
		t.Skipf("the file system of %s does not show unflushed writes as dirty pages", dir)
	}
	f, err := os.OpenFile(probe, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if cs := statCache(t, probe); cs.Dirty != 0 || cs.Writeback != 0 {
		t.Skipf("the file system of %s shows dirty pages after fsync: %+v", dir, cs)
	}
}

// TestAcknowledgedMeansFlushed: when a journal write returns (and so when an
// intake acknowledges it), not one page of the journal file is left dirty in
// the page cache: a power cut at that moment loses nothing acknowledged.
// A journal opened with NoSync (acknowledged before the flush) fails here,
// though every crash test passes with it (SIGKILL spares the page cache).
// Checked for single writes and for a group commit of concurrent ones.
func TestAcknowledgedMeansFlushed(t *testing.T) {
	dir := t.TempDir()
	requireDirtyPagesVisible(t, dir)
	path := filepath.Join(dir, "journal.db")
	j, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	clean := func(what string) {
		t.Helper()
		if cs := statCache(t, path); cs.Dirty != 0 || cs.Writeback != 0 {
			t.Fatalf("after %s: %d dirty and %d writeback pages of the journal: acknowledged before the flush", what, cs.Dirty, cs.Writeback)
		}
	}
	clean("open")
	ctx := context.Background()
	labels := map[string]string{"run": "flush"}
	for i := range 5 {
		in, _, err := j.Create(ctx, intent.Declaration{Labels: labels, OnDrain: intent.DrainDelete})
		if err != nil {
			t.Fatal(err)
		}
		clean("a create")
		if _, err := j.Observe(in.ID, "sb-"+in.ID); err != nil {
			t.Fatal(err)
		}
		clean("an observe")
		if i%2 == 0 {
			if _, err := j.Release(in.ID, "deleted"); err != nil {
				t.Fatal(err)
			}
			clean("a release")
		}
	}
	var wg sync.WaitGroup
	for range 32 {
		wg.Go(func() {
			if _, _, err := j.Create(ctx, intent.Declaration{Labels: labels, OnDrain: intent.DrainDelete}); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	clean("32 concurrent creates")
}
