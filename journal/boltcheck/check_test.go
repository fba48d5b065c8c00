package boltcheck

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"
)

// records is how many records seedFile writes: enough for a branch page in
// as few pages as that takes (the fuzzer slows down with its input's size).
const records = 24

// seedFile writes a bbolt file shaped as tether writes its journal (no
// synced freelist, the map freelist, one transaction per record, so freed
// pages hold older copies) and returns its bytes and the values by key.
func seedFile(tb testing.TB) ([]byte, map[string][]byte) {
	tb.Helper()
	path := filepath.Join(tb.TempDir(), "seed.db")
	db, err := bolt.Open(path, 0o600, &bolt.Options{NoFreelistSync: true, FreelistType: bolt.FreelistMapType})
	if err != nil {
		tb.Fatal(err)
	}
	want := map[string][]byte{}
	err = db.Update(func(tx *bolt.Tx) error {
		meta, err := tx.CreateBucket([]byte("meta"))
		if err != nil {
			return err
		}
		want["owner"] = []byte("01arz3ndektsv4rrffq69g5fav")
		if err := meta.Put([]byte("owner"), want["owner"]); err != nil {
			return err
		}
		_, err = tx.CreateBucket([]byte("intents"))
		return err
	})
	for i := range records {
		if err != nil {
			break
		}
		k := fmt.Sprintf("01jd%022d", i)
		v := fmt.Appendf(nil, `{"id":%q,"n":%d,"pad":%q}`, k, i, strings.Repeat("p", 300))
		want[k] = v
		err = db.Update(func(tx *bolt.Tx) error { return tx.Bucket([]byte("intents")).Put([]byte(k), v) })
	}
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		tb.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	return b, want
}

func TestHealthyFile(t *testing.T) {
	file, want := seedFile(t)
	if err := Check(bytes.NewReader(file), int64(len(file))); err != nil {
		t.Fatalf("a healthy file fails: %v", err)
	}
	pages, pageSize, err := Reachable(bytes.NewReader(file), int64(len(file)))
	if err != nil || pageSize != 4096 || len(pages) < 3 || !slices.IsSorted(pages) {
		t.Fatalf("reachable %v of %d bytes: %v", pages, pageSize, err)
	}
	got := map[string][]byte{}
	ps, damage := Walk(bytes.NewReader(file), int64(len(file)), func(path []string, k, v []byte) {
		got[string(k)] = bytes.Clone(v)
	})
	if ps != pageSize || len(damage) != 0 || len(got) != len(want) {
		t.Fatalf("walk: page size %d, damage %v, %d of %d pairs", ps, damage, len(got), len(want))
	}
	for k, v := range want {
		if !bytes.Equal(got[k], v) {
			t.Fatalf("walk gave %s = %q, want %q", k, got[k], v)
		}
	}
	leaves := map[string]bool{}
	ScanLeaves(bytes.NewReader(file), int64(len(file)), pageSize, func(k, v []byte) { leaves[string(k)] = true })
	for k := range want {
		if !leaves[k] {
			t.Fatalf("the leaf scan missed %s", k)
		}
	}
}

// Damage is an ErrDamaged naming the page, for the strict check; the
// tolerant walk reports it and still gives what it can reach.
func TestDamagedFile(t *testing.T) {
	file, want := seedFile(t)
	pages, pageSize, err := Reachable(bytes.NewReader(file), int64(len(file)))
	if err != nil {
		t.Fatal(err)
	}
	// The reachable leaf that holds the first record, not the root: the
	// walk must get past it to the records of the other leaves.
	var victim uint64
	for _, id := range pages {
		page := file[int(id)*pageSize : int(id+1)*pageSize]
		if boltOrder.Uint16(page[8:]) == boltLeafPage && bytes.Contains(page, []byte(`"n":0,`)) {
			victim = id
		}
	}
	if victim == 0 {
		t.Fatal("no reachable leaf holds the first record")
	}
	clear(file[int(victim)*pageSize : int(victim+1)*pageSize])
	err = Check(bytes.NewReader(file), int64(len(file)))
	var de *DamageError
	if !errors.Is(err, ErrDamaged) || !errors.As(err, &de) || de.Page != victim {
		t.Fatalf("check of a file with page %d zeroed: %v", victim, err)
	}
	got := 0
	_, damage := Walk(bytes.NewReader(file), int64(len(file)), func([]string, []byte, []byte) { got++ })
	if len(damage) == 0 || got == 0 || got >= len(want) {
		t.Fatalf("tolerant walk: %d of %d pairs, damage %v", got, len(want), damage)
	}
	if err := Check(bytes.NewReader(file[:3*pageSize]), 3*int64(pageSize)); !errors.Is(err, ErrDamaged) || !strings.Contains(err.Error(), "truncated") {
		t.Fatalf("check of a truncated file: %v", err)
	}
}

// FuzzCheckBoltFile: no damage makes the check panic, and a file it passes
// opens, reads and takes a write without bbolt crashing the process.
func FuzzCheckBoltFile(f *testing.F) {
	seed, _ := seedFile(f)
	// The file is not part of the input (the fuzzer crawls with inputs of
	// 64 KiB): the input is where to write what, and where to cut.
	f.Add(uint32(0), []byte{}, uint32(0))
	f.Add(uint32(2*4096+20), []byte{0xff, 0xff}, uint32(0))
	f.Add(uint32(3*4096), []byte("\x09\x00\x00\x00\x00\x00\x00\x00"), uint32(0))
	f.Add(uint32(0), []byte{}, uint32(5*4096))
	f.Fuzz(func(t *testing.T, at uint32, patch []byte, cut uint32) {
		file := bytes.Clone(seed)
		copy(file[int(at)%len(file):], patch)
		if cut > 0 && int(cut) < len(file) {
			file = file[:cut]
		}
		if Check(bytes.NewReader(file), int64(len(file))) != nil {
			return
		}
		// What tether's journal does to a file, without its fsyncs (they
		// would make the fuzzer crawl): open, read every bucket, write.
		path := filepath.Join(t.TempDir(), "journal.db")
		os.WriteFile(path, file, 0o600)
		db, err := bolt.Open(path, 0o600, &bolt.Options{NoSync: true, NoGrowSync: true, NoFreelistSync: true, FreelistType: bolt.FreelistMapType})
		if err != nil {
			return
		}
		defer db.Close()
		db.View(func(tx *bolt.Tx) error {
			return tx.ForEach(func(name []byte, b *bolt.Bucket) error {
				b.Stats()
				return b.ForEach(func(k, v []byte) error { return nil })
			})
		})
		db.Update(func(tx *bolt.Tx) error {
			b, err := tx.CreateBucketIfNotExists([]byte("intents"))
			if err != nil {
				return err
			}
			if k, _ := b.Cursor().First(); k != nil {
				b.Delete(k)
			}
			return b.Put([]byte(fmt.Sprintf("01jz%022d", len(file))), bytes.Repeat([]byte("v"), 300))
		})
	})
}
