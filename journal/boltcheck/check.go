// Package boltcheck reads bbolt's on-disk format with plain reads into Go
// slices, every offset bounds-checked, so that a damaged bbolt file is found
// and described before bbolt itself touches it, and what is readable of one
// can still be read.
//
// Why not bbolt's own tx.Check: bbolt reads pages through its memory map
// and asserts on what it finds. Opening a file without a synced freelist
// (tether's journals) walks every page on a goroutine of bbolt's own, and a
// failed assertion there — "Page expected to be: 43, but self identifies as
// 0" — or a page past the end of a truncated file (SIGBUS on the map) kills
// the process: no recover can catch a panic on another goroutine or a
// fault. A child process could run that check, but it would cost a fork and
// exec on every start. Check walks everything bbolt's open-time walk
// asserts (page ids, page types, each page reachable once, below the high
// water mark, key order) plus what bbolt trusts blindly (element offsets
// inside their page, pages inside the file), in the caller's goroutine and
// without a memory map: what it cannot read is an error, never a crash.
//
// The same walker, told to carry on past damage (Walk), and a scan of every
// page that says it is a leaf (ScanLeaves) are what a salvage reads a
// damaged file with. The package knows bbolt's format only; what the keys
// and values mean is its caller's business.
package boltcheck

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"os"
	"runtime/debug"
	"syscall"
)

// The constants of bbolt's format (go.etcd.io/bbolt/internal/common).
const (
	boltMagic        = 0xED0CDAED
	boltVersion      = 2
	boltPageHeader   = 16 // id u64, flags u16, count u16, overflow u32
	boltElementSize  = 16 // branch: pos, ksize u32, pgid u64; leaf: flags, pos, ksize, vsize u32
	boltBucketHeader = 16 // root pgid u64, sequence u64
	boltMetaSize     = 64 // magic .. checksum
	boltChecksumAt   = 56 // offset of the checksum inside the meta

	boltBranchPage   = 0x01
	boltLeafPage     = 0x02
	boltMetaPage     = 0x04
	boltFreelistPage = 0x10
	boltBucketLeaf   = 0x01

	boltNoFreelist = ^uint64(0)

	boltMinPageSize = 1 << 10
	boltMaxPageSize = 1 << 24
)

// bbolt writes its structures in the machine's byte order.
var boltOrder = binary.NativeEndian

// DamageError says what is wrong with a bbolt file and where.
type DamageError struct {
	Page   uint64 // 0 when the damage is not in one page (size, headers)
	Reason string
}

func (e *DamageError) Error() string {
	if e.Page != 0 {
		return fmt.Sprintf("page %d: %s", e.Page, e.Reason)
	}
	return e.Reason
}

// ErrDamaged marks a file that is not a readable bbolt file.
var ErrDamaged = errors.New("bbolt file is damaged")

func (e *DamageError) Unwrap() error { return ErrDamaged }

func damaged(page uint64, format string, args ...any) *DamageError {
	return &DamageError{Page: page, Reason: fmt.Sprintf(format, args...)}
}

type boltMeta struct {
	pageSize uint32
	root     uint64 // root page of the top-level bucket
	freelist uint64
	hwm      uint64 // high water mark: the first page id never allocated
	txid     uint64
}

// parseBoltMeta reads the meta of a page (b starts at the page header) and
// checks it as bbolt's Meta.Validate does.
func parseBoltMeta(b []byte) (boltMeta, error) {
	if len(b) < boltPageHeader+boltMetaSize {
		return boltMeta{}, errors.New("short meta page")
	}
	m := b[boltPageHeader : boltPageHeader+boltMetaSize]
	if boltOrder.Uint32(m[0:]) != boltMagic {
		return boltMeta{}, errors.New("no bbolt magic number")
	}
	if v := boltOrder.Uint32(m[4:]); v != boltVersion {
		return boltMeta{}, fmt.Errorf("bbolt format version %d, want %d", v, boltVersion)
	}
	h := fnv.New64a()
	h.Write(m[:boltChecksumAt])
	if h.Sum64() != boltOrder.Uint64(m[boltChecksumAt:]) {
		return boltMeta{}, errors.New("meta checksum mismatch")
	}
	return boltMeta{
		pageSize: boltOrder.Uint32(m[8:]),
		root:     boltOrder.Uint64(m[16:]),
		freelist: boltOrder.Uint64(m[32:]),
		hwm:      boltOrder.Uint64(m[40:]),
		txid:     boltOrder.Uint64(m[48:]),
	}, nil
}

// boltFile is a bbolt file read with plain reads.
type boltFile struct {
	r        io.ReaderAt
	data     []byte // the whole file, when it is mapped
	size     int64
	pageSize int
	meta     boltMeta
	// metas are the valid metas, the one bbolt uses first.
	metas []boltMeta
	// badMeta says why a meta page is not valid, when one is not.
	badMeta []error
}

// openBoltFile reads the meta pages as bbolt does: the page size from the
// first valid meta, then the valid meta with the highest transaction id. It
// checks what bbolt would otherwise find by faulting: a file too short for
// its pages.
func openBoltFile(r io.ReaderAt, size int64) (*boltFile, error) {
	var buf [0x1000]byte
	pageSize := 0
	if n, _ := r.ReadAt(buf[:], 0); n == len(buf) {
		if m, err := parseBoltMeta(buf[:]); err == nil {
			pageSize = int(m.pageSize)
		}
	}
	if pageSize == 0 {
		// bbolt looks for the second meta at every power of two.
		for i := 0; i <= 14 && pageSize == 0; i++ {
			pos := int64(1024) << i
			if pos >= size-1024 {
				break
			}
			n, _ := r.ReadAt(buf[:], pos)
			if m, err := parseBoltMeta(buf[:n]); err == nil {
				pageSize = int(m.pageSize)
			}
		}
	}
	if pageSize == 0 {
		return nil, damaged(0, "no valid bbolt header (both meta pages are damaged, or this is not a bbolt file)")
	}
	if pageSize < boltMinPageSize || pageSize > boltMaxPageSize || pageSize&(pageSize-1) != 0 {
		return nil, damaged(0, "page size %d is not a power of two between %d and %d", pageSize, boltMinPageSize, boltMaxPageSize)
	}
	if size < 2*int64(pageSize) {
		return nil, damaged(0, "file is %d bytes, shorter than its two %d-byte header pages (truncated)", size, pageSize)
	}
	f := &boltFile{r: r, size: size, pageSize: pageSize}
	var metas []boltMeta
	var errs []error
	for id := int64(0); id < 2; id++ {
		b := make([]byte, pageSize)
		if _, err := r.ReadAt(b, id*int64(pageSize)); err != nil {
			errs = append(errs, fmt.Errorf("meta page %d: %w", id, err))
			continue
		}
		m, err := parseBoltMeta(b)
		if err != nil {
			errs = append(errs, fmt.Errorf("meta page %d: %w", id, err))
			continue
		}
		metas = append(metas, m)
	}
	if len(metas) == 0 {
		return nil, damaged(0, "no valid meta page: %v", errors.Join(errs...))
	}
	if len(metas) == 2 && metas[1].txid > metas[0].txid {
		metas[0], metas[1] = metas[1], metas[0]
	}
	f.metas, f.meta, f.badMeta = metas, metas[0], errs
	return f, nil
}

// checkMeta checks the meta bbolt will use against the file.
func (f *boltFile) checkMeta(m boltMeta) error {
	if int(m.pageSize) != f.pageSize {
		return damaged(0, "meta page size %d differs from the file's %d", m.pageSize, f.pageSize)
	}
	if m.hwm < 3 || m.hwm > uint64(f.size)/uint64(f.pageSize) {
		return damaged(0, "file is %d bytes, but its header says it holds %d pages of %d bytes (truncated)", f.size, m.hwm, f.pageSize)
	}
	if m.root < 2 || m.root >= m.hwm {
		return damaged(0, "root page %d outside the file's pages 2..%d", m.root, m.hwm-1)
	}
	if m.freelist != boltNoFreelist && (m.freelist < 2 || m.freelist >= m.hwm) {
		return damaged(0, "freelist page %d outside the file's pages 2..%d", m.freelist, m.hwm-1)
	}
	return nil
}

// page reads page id and its overflow pages, checking its header.
func (f *boltFile) page(id, hwm uint64) ([]byte, error) {
	if id < 2 || id >= hwm {
		return nil, damaged(id, "page id outside the file's pages 2..%d", hwm-1)
	}
	ps := int64(f.pageSize)
	hdr, err := f.read(int64(id)*ps, boltPageHeader)
	if err != nil {
		return nil, damaged(id, "unreadable: %v", err)
	}
	if got := boltOrder.Uint64(hdr[0:]); got != id {
		return nil, damaged(id, "the page says it is page %d (overwritten)", got)
	}
	switch flags := boltOrder.Uint16(hdr[8:]); flags {
	case boltBranchPage, boltLeafPage, boltFreelistPage:
	default:
		return nil, damaged(id, "unknown page type %#x", flags)
	}
	overflow := uint64(boltOrder.Uint32(hdr[12:]))
	if id+overflow >= hwm || int64(id+overflow+1)*ps > f.size {
		return nil, damaged(id, "its %d overflow pages run past the end of the file", overflow)
	}
	b, err := f.read(int64(id)*ps, int64(overflow+1)*ps)
	if err != nil {
		return nil, damaged(id, "unreadable: %v", err)
	}
	return b, nil
}

// read returns n bytes at off: a slice of the mapped file, or a fresh copy.
func (f *boltFile) read(off, n int64) ([]byte, error) {
	if off < 0 || n < 0 || off+n > f.size {
		return nil, io.ErrUnexpectedEOF
	}
	if f.data != nil {
		return f.data[off : off+n : off+n], nil
	}
	b := make([]byte, n)
	if _, err := f.r.ReadAt(b, off); err != nil {
		return nil, err
	}
	return b, nil
}

// boltElem is one element of a branch or leaf page.
type boltElem struct {
	key, value []byte
	child      uint64 // branch: the child page
	bucket     bool   // leaf: the value is a bucket header
}

// elements parses the elements of a page (b starts at its header); each
// key and value must lie inside b.
func elements(id uint64, b []byte, buf []boltElem) (flags uint16, elems []boltElem, err error) {
	if len(b) < boltPageHeader {
		return 0, nil, damaged(id, "page shorter than its header")
	}
	flags = boltOrder.Uint16(b[8:])
	count := int(boltOrder.Uint16(b[10:]))
	if flags != boltBranchPage && flags != boltLeafPage {
		return flags, nil, damaged(id, "a %s page where a branch or leaf page belongs", pageType(flags))
	}
	if boltPageHeader+count*boltElementSize > len(b) {
		return flags, nil, damaged(id, "%d elements do not fit in the page", count)
	}
	if cap(buf) >= count {
		elems = buf[:count]
		clear(elems)
	} else {
		elems = make([]boltElem, count)
	}
	for i := range elems {
		at := boltPageHeader + i*boltElementSize
		e := b[at : at+boltElementSize]
		var pos, ksize, vsize uint64
		if flags == boltBranchPage {
			pos, ksize = uint64(boltOrder.Uint32(e[0:])), uint64(boltOrder.Uint32(e[4:]))
			elems[i].child = boltOrder.Uint64(e[8:])
		} else {
			elems[i].bucket = boltOrder.Uint32(e[0:])&boltBucketLeaf != 0
			pos, ksize, vsize = uint64(boltOrder.Uint32(e[4:])), uint64(boltOrder.Uint32(e[8:])), uint64(boltOrder.Uint32(e[12:]))
		}
		start := uint64(at) + pos
		if start+ksize+vsize > uint64(len(b)) {
			return flags, nil, damaged(id, "element %d points past the end of its page", i)
		}
		elems[i].key = b[start : start+ksize]
		elems[i].value = b[start+ksize : start+ksize+vsize]
	}
	return flags, elems, nil
}

func pageType(flags uint16) string {
	switch flags {
	case boltBranchPage:
		return "branch"
	case boltLeafPage:
		return "leaf"
	case boltMetaPage:
		return "meta"
	case boltFreelistPage:
		return "freelist"
	}
	return fmt.Sprintf("unknown (%#x)", flags)
}

// boltWalk walks the buckets of a file from one meta.
type boltWalk struct {
	f    *boltFile
	hwm  uint64
	seen pageSet
	pool [][]boltElem // element buffers, reused down the tree
	// tolerant walks on past damage, collecting it in problems; otherwise
	// the walk stops at the first.
	tolerant bool
	problems []error
	// visit, if set, gets every key/value pair that is not a bucket, with
	// the names of the buckets it is in.
	visit func(path []string, k, v []byte)
}

// problem records err; it returns err when the walk must stop.
func (w *boltWalk) problem(path []string, err error) error {
	if len(path) > 0 {
		err = fmt.Errorf("bucket %s: %w", bytes.Join(toBytes(path), []byte("/")), err)
	}
	w.problems = append(w.problems, err)
	if w.tolerant {
		return nil
	}
	return err
}

func toBytes(ss []string) [][]byte {
	out := make([][]byte, len(ss))
	for i, s := range ss {
		out[i] = []byte(s)
	}
	return out
}

// walk checks the meta and every page reachable from it.
func (w *boltWalk) walk(m boltMeta) (err error) {
	// Every read above is bounds-checked; should one have been missed, it
	// is a damaged file, not a crash.
	defer func() {
		if r := recover(); r != nil {
			err = w.problem(nil, damaged(0, "unreadable structure: %v", r))
		}
	}()
	w.hwm = m.hwm
	if err := w.f.checkMeta(m); err != nil {
		if err := w.problem(nil, err); err != nil {
			return err
		}
		// Salvaging a truncated file: read the pages that are left.
		if pages := uint64(w.f.size) / uint64(w.f.pageSize); w.hwm > pages {
			w.hwm = pages
		}
		if m.root < 2 || m.root >= w.hwm {
			return nil
		}
	}
	w.seen = make(pageSet, (w.hwm+63)/64)
	if m.freelist != boltNoFreelist && !w.tolerant {
		if err := w.freelist(m.freelist); err != nil {
			return err
		}
	}
	_, _, err = w.tree(nil, m.root, nil, nil, true)
	return err
}

// freelist checks a synced freelist page as bbolt reads it at open.
func (w *boltWalk) freelist(id uint64) error {
	b, err := w.f.page(id, w.hwm)
	if err != nil {
		return w.problem(nil, err)
	}
	if flags := boltOrder.Uint16(b[8:]); flags != boltFreelistPage {
		return w.problem(nil, damaged(id, "a %s page where the freelist belongs", pageType(flags)))
	}
	idx, count := uint64(0), uint64(boltOrder.Uint16(b[10:]))
	if count == 0xffff {
		if len(b) < boltPageHeader+8 {
			return w.problem(nil, damaged(id, "freelist too short"))
		}
		idx, count = 1, boltOrder.Uint64(b[boltPageHeader:])
	}
	if count > uint64(len(b)) || boltPageHeader+(idx+count)*8 > uint64(len(b)) {
		return w.problem(nil, damaged(id, "freelist of %d ids does not fit in its pages", count))
	}
	return nil
}

// tree walks the pages of one bucket's b-tree from page id; every key must
// be in [lo, hi). It returns the first and the largest key found.
//
// Beyond bbolt's own check it holds what bbolt's writes assume: no empty
// key, no empty page below the root, and each branch key equal to the first
// key of its child (bbolt finds a child in its parent by that key; a
// mismatch makes the next write reference the child twice and panic).
func (w *boltWalk) tree(path []string, id uint64, lo, hi []byte, root bool) (first, max []byte, err error) {
	if w.seen.has(id) {
		return nil, nil, w.problem(path, damaged(id, "reachable twice"))
	}
	b, err := w.f.page(id, w.hwm)
	if err != nil {
		return nil, nil, w.problem(path, err)
	}
	overflow := uint64(len(b)/w.f.pageSize) - 1
	for i := uint64(0); i <= overflow; i++ {
		if w.seen.has(id + i) {
			return nil, nil, w.problem(path, damaged(id+i, "reachable twice"))
		}
		w.seen.add(id + i)
	}
	flags, elems, err := elements(id, b, w.take())
	defer w.give(elems)
	if err != nil {
		return nil, nil, w.problem(path, err)
	}
	if len(elems) == 0 && (flags == boltBranchPage || !root) {
		return nil, nil, w.problem(path, damaged(id, "an empty %s page below the root", pageType(flags)))
	}
	// bbolt's key order: each key above the previous one (the previous
	// subtree's largest, on a branch page), the first at least lo, all
	// below hi.
	prev := lo
	for i, e := range elems {
		err := keyInOrder(id, i, e.key, prev, hi)
		if err == nil && len(e.key) == 0 {
			err = damaged(id, "key %d is empty", i)
		}
		if err != nil {
			if err := w.problem(path, err); err != nil {
				return nil, nil, err
			}
		}
		if i == 0 {
			first = e.key
		}
		if flags == boltBranchPage {
			next := hi
			if i+1 < len(elems) {
				next = elems[i+1].key
			}
			cf, m, err := w.tree(path, e.child, e.key, next, false)
			if err != nil {
				return nil, nil, err
			}
			if cf != nil && !bytes.Equal(cf, e.key) {
				if err := w.problem(path, damaged(id, "key %d differs from the first key of its child page %d", i, e.child)); err != nil {
					return nil, nil, err
				}
			}
			prev = m
			max = m
			continue
		}
		prev, max = e.key, e.key
		if err := w.leafElem(path, id, e); err != nil {
			return nil, nil, err
		}
	}
	return first, max, nil
}

// take and give reuse element buffers: one per level of the tree is live
// at a time, instead of one allocation per page.
func (w *boltWalk) take() []boltElem {
	if n := len(w.pool); n > 0 {
		b := w.pool[n-1]
		w.pool = w.pool[:n-1]
		return b
	}
	return nil
}

func (w *boltWalk) give(b []boltElem) {
	if cap(b) > 0 {
		w.pool = append(w.pool, b[:0])
	}
}

// pageSet is a set of page ids below the high water mark.
type pageSet []uint64

func (s pageSet) has(id uint64) bool {
	return id/64 < uint64(len(s)) && s[id/64]&(1<<(id%64)) != 0
}

func (s pageSet) add(id uint64) {
	if id/64 < uint64(len(s)) {
		s[id/64] |= 1 << (id % 64)
	}
}

func keyInOrder(id uint64, i int, key, prev, hi []byte) error {
	if prev != nil {
		c := bytes.Compare(prev, key)
		if i == 0 && c > 0 || i > 0 && c >= 0 {
			return damaged(id, "key %d out of order", i)
		}
	}
	if hi != nil && bytes.Compare(key, hi) >= 0 {
		return damaged(id, "key %d beyond its parent's range", i)
	}
	return nil
}

// leafElem visits a key/value pair, or walks the bucket it holds.
func (w *boltWalk) leafElem(path []string, id uint64, e boltElem) error {
	if !e.bucket {
		if w.visit != nil {
			w.visit(path, e.key, e.value)
		}
		return nil
	}
	sub := append(path[:len(path):len(path)], string(e.key))
	if len(e.value) < boltBucketHeader {
		return w.problem(sub, damaged(id, "bucket header of %d bytes", len(e.value)))
	}
	root := boltOrder.Uint64(e.value[0:])
	if root != 0 {
		_, _, err := w.tree(sub, root, nil, nil, true)
		return err
	}
	// An inline bucket: its one leaf page is the rest of the value.
	inline := e.value[boltBucketHeader:]
	flags, elems, err := elements(id, inline, w.take())
	defer w.give(elems)
	if err == nil && flags != boltLeafPage {
		err = damaged(id, "inline bucket %q is not a leaf page", e.key)
	}
	if err != nil {
		return w.problem(sub, err)
	}
	var prev []byte
	for i, ie := range elems {
		err := keyInOrder(id, i, ie.key, prev, nil)
		if err == nil && len(ie.key) == 0 {
			err = damaged(id, "key %d of inline bucket %q is empty", i, e.key)
		}
		if err != nil {
			if err := w.problem(sub, err); err != nil {
				return err
			}
		}
		prev = ie.key
		if err := w.leafElem(sub, id, ie); err != nil {
			return err
		}
	}
	return nil
}

// Check is the strict check of a whole file: nil means bbolt can open it
// and read every page without tripping on anything.
func Check(r io.ReaderAt, size int64) error {
	f, err := openBoltFile(r, size)
	if err != nil {
		return err
	}
	if b, ok := r.(*bytes.Reader); ok && b.Size() == size {
		// Tests and the fuzzer: the file is in memory already.
		f.data = make([]byte, size)
		b.ReadAt(f.data, 0)
	}
	w := &boltWalk{f: f}
	return w.walk(f.meta)
}

// CheckMapped is Check over f mapped read-only: the pages are read where
// the page cache holds them, not copied one pread at a time (a third of the
// time on a tether journal of 10,000 intents). The map covers the file's
// size and no more, so every read the walk makes is inside it; a fault
// (someone truncating the file under the caller's lock) becomes an error
// through SetPanicOnFault, on this goroutine.
//
// notes are what is worth a warning in a file that passes: a meta page that
// is not valid (bbolt then uses the transaction before it).
func CheckMapped(f *os.File, size int64) (notes []string, err error) {
	if size <= 0 || int64(int(size)) != size {
		return nil, Check(f, size)
	}
	data, err := syscall.Mmap(int(f.Fd()), 0, int(size), syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		return nil, Check(f, size) // no map: plain reads
	}
	defer syscall.Munmap(data)
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			err = damaged(0, "unreadable while checking: %v", r)
		}
	}()
	bf, err := openBoltFile(bytes.NewReader(data), size)
	if err != nil {
		return nil, err
	}
	bf.data = data
	w := &boltWalk{f: bf}
	if err := w.walk(bf.meta); err != nil {
		return nil, err
	}
	for _, e := range bf.badMeta {
		notes = append(notes, e.Error())
	}
	return notes, nil
}

// Walk reads every key/value pair it can reach from the newest valid meta
// page, going on past damaged pages, and gives each one that is not a
// bucket to visit with the names of the buckets it is in. It returns the
// file's page size (0 when no header names one) and the damage it met.
func Walk(r io.ReaderAt, size int64, visit func(path []string, k, v []byte)) (pageSize int, damage []error) {
	bf, err := openBoltFile(r, size)
	if err != nil {
		return 0, []error{err}
	}
	w := &boltWalk{f: bf, tolerant: true, visit: visit}
	w.walk(bf.meta)
	return bf.pageSize, w.problems
}

// ScanLeaves reads every page of the file that says it is a leaf page,
// reachable or not (a freed page still holds older copies of its values),
// and gives each key/value pair in it that is not a bucket to visit,
// including those of inline buckets. A page that fooled the checks is
// skipped.
func ScanLeaves(r io.ReaderAt, size int64, pageSize int, visit func(k, v []byte)) {
	var visitElems func(id uint64, b []byte)
	visitElems = func(id uint64, b []byte) {
		flags, elems, err := elements(id, b, nil)
		if err != nil || flags != boltLeafPage {
			return
		}
		for _, e := range elems {
			if e.bucket {
				if len(e.value) > boltBucketHeader && boltOrder.Uint64(e.value) == 0 {
					visitElems(id, e.value[boltBucketHeader:])
				}
				continue
			}
			visit(e.key, e.value)
		}
	}
	pages := size / int64(pageSize)
	buf := make([]byte, pageSize)
	for id := int64(2); id < pages; id++ {
		if _, err := r.ReadAt(buf, id*int64(pageSize)); err != nil {
			break
		}
		if boltOrder.Uint64(buf) != uint64(id) || boltOrder.Uint16(buf[8:]) != boltLeafPage {
			continue
		}
		b := buf
		if overflow := int64(boltOrder.Uint32(buf[12:])); overflow > 0 && id+overflow < pages {
			b = make([]byte, (overflow+1)*int64(pageSize))
			if _, err := r.ReadAt(b, id*int64(pageSize)); err != nil {
				continue
			}
		}
		func() {
			defer func() { _ = recover() }() // a page that fooled the checks is skipped
			visitElems(uint64(id), b)
		}()
	}
}

// Reachable lists the pages bbolt reads from the newest valid meta (every
// page of every bucket's tree, with their overflow pages), in id order, and
// the file's page size: where damage would be met. A file that fails Check
// is an error.
func Reachable(r io.ReaderAt, size int64) (pages []uint64, pageSize int, err error) {
	bf, err := openBoltFile(r, size)
	if err != nil {
		return nil, 0, err
	}
	w := &boltWalk{f: bf}
	if err := w.walk(bf.meta); err != nil {
		return nil, 0, err
	}
	for id := uint64(0); id < w.hwm; id++ {
		if w.seen.has(id) {
			pages = append(pages, id)
		}
	}
	return pages, bf.pageSize, nil
}
