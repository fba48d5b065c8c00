// Command slowfs mounts a directory through FUSE with every fsync and
// fdatasync delayed by a fixed time before the real one runs: a disk whose
// flush really costs milliseconds, to measure the journal where fsync, not
// CPU, is the cost. The kernel has no device-mapper (dm-delay) in the VMs
// this was written on; everything else (reads, writes, mmap, flock) passes
// through to the backing directory.
//
// It is a benchmark tool, a module of its own under testdata so tether's
// build never sees its dependency:
//
//	cd internal/intake/socket/testdata/slowfs && go build -o /tmp/slowfs .
//	/tmp/slowfs -backing /var/tmp/slow-backing -mount /tmp/slow -delay 2ms &
//	TETHER_BENCH_DIR=/tmp/slow go test -run '^$' -bench ... ./internal/intake/socket/ ./spool/
//	umount /tmp/slow
package main

import (
	"context"
	"flag"
	"log"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

func main() {
	backing := flag.String("backing", "", "directory holding the files (required)")
	mount := flag.String("mount", "", "where to mount the slow view of it (required)")
	delay := flag.Duration("delay", 2*time.Millisecond, "added to every fsync/fdatasync")
	flag.Parse()
	if *backing == "" || *mount == "" {
		flag.Usage()
		os.Exit(2)
	}
	for _, d := range []string{*backing, *mount} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			log.Fatal(err)
		}
	}
	root, err := fs.NewLoopbackRoot(*backing)
	if err != nil {
		log.Fatal(err)
	}
	lr := root.(*fs.LoopbackNode).RootData
	lr.NewNode = func(r *fs.LoopbackRoot, _ *fs.Inode, _ string, _ *syscall.Stat_t) fs.InodeEmbedder {
		return &node{LoopbackNode: fs.LoopbackNode{RootData: r}, delay: *delay}
	}
	top := &node{LoopbackNode: fs.LoopbackNode{RootData: lr}, delay: *delay}
	lr.RootNode = top // paths are resolved from it
	server, err := fs.Mount(*mount, top, &fs.Options{
		MountOptions: fuse.MountOptions{
			DirectMount: true, FsName: "slowfs", Name: "slowfs",
			// Writes land in the page cache and reach the backing file at
			// fsync, as on a disk, instead of one FUSE round trip per pwrite.
			ExtraCapabilities: fuse.CAP_WRITEBACK_CACHE,
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	log.Printf("slowfs: %s on %s, fsync +%s", *backing, *mount, *delay)
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	go func() { <-sig; server.Unmount() }()
	server.Wait()
}

// node is a loopback node whose open files have the slow fsync.
type node struct {
	fs.LoopbackNode
	delay time.Duration
}

func (n *node) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	fh, fl, errno := n.LoopbackNode.Open(ctx, flags)
	return n.wrap(fh), fl, errno
}

func (n *node) Create(ctx context.Context, name string, flags, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	in, fh, fl, errno := n.LoopbackNode.Create(ctx, name, flags, mode, out)
	return in, n.wrap(fh), fl, errno
}

func (n *node) wrap(fh fs.FileHandle) fs.FileHandle {
	if lf, ok := fh.(*fs.LoopbackFile); ok {
		return &slowFile{LoopbackFile: lf, delay: n.delay}
	}
	return fh
}

// slowFile waits before each fsync: the added flush latency of a slow disk.
type slowFile struct {
	*fs.LoopbackFile
	delay time.Duration
}

func (f *slowFile) Fsync(ctx context.Context, flags uint32) syscall.Errno {
	time.Sleep(f.delay)
	return f.LoopbackFile.Fsync(ctx, flags)
}
