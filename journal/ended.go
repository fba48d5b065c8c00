package journal

// The intents that ended have an index of their own, the ended bucket,
// ordered by their end: retention (prune.go) removes what ended before a
// cutoff, and a pass must read what it removes, not every intent the
// journal keeps. putRecord and deleteRecord keep it in the transaction of
// every write of a record, as they keep the counts (counts.go) and the
// hand-backs (handback.go); a journal written by anything that keeps no
// such index (an older tether, a salvage) has it built once, by the scan
// at open that counts it (startCounting): the stored counts say whether
// the index was kept with them.
//
// An entry's key is the record's updated_at (Unix seconds, their sign bit
// flipped, and nanoseconds, big-endian: byte order is time order), then the
// intent's id. An ended intent whose hand-back is pending is left out
// until it is handed back (retention keeps it). A record whose bytes
// change without a write (damage) leaves its entry behind; the prune pass
// that reaches the entry drops it.

import (
	"encoding/binary"
	"fmt"
	"time"

	"github.com/tether-run/tether/intent"
	bolt "go.etcd.io/bbolt"
)

var bucketEnded = []byte("ended") // end time, id → nothing, for the intents retention may prune

// endedTimeLen is the length of an entry's time.
const endedTimeLen = 8 + 4

// endedTime is t as the index orders it.
func endedTime(t time.Time) []byte {
	k := make([]byte, endedTimeLen, endedTimeLen+26)
	binary.BigEndian.PutUint64(k, uint64(t.Unix())^1<<63)
	binary.BigEndian.PutUint32(k[8:], uint32(t.Nanosecond()))
	return k
}

// endedKey is record v's entry in the index (id is its intent's, c what
// countedAs counts it under, okC false for a record it cannot read); ok is
// false for a record the index leaves out: unreadable, live, or waiting
// for its hand-back. The time is the record's top-level updated_at, found
// by the walk of counts.go without decoding the record when it can
// (decoding it gives the same instant: both parse RFC 3339 alike); only a
// record it cannot walk is decoded. Whatever it indexes that a prune pass
// would not remove (a record that does not decode whole) is dropped by
// the first pass past its time.
func endedKey(id, v []byte, c counted, okC bool) ([]byte, bool) {
	if !okC || c.State.Live() {
		return nil, false
	}
	js, _, err := openRecord(v)
	if err != nil {
		return nil, false
	}
	if c.State == intent.Released && pendingRecord(v) { // handback.go
		return nil, false
	}
	var at time.Time
	if u, ok := topLevelString(js, "updated_at"); ok {
		if at, err = time.Parse(time.RFC3339Nano, u); err != nil {
			return nil, false
		}
	} else {
		r, ok := readHandBack(v)
		if !ok {
			return nil, false
		}
		at = r.UpdatedAt
	}
	return append(endedTime(at), id...), true
}

// indexEnded keeps intent id's entry in the index in step with its new
// record v (nil: deleted), replacing old, as part of tx. Most writes are
// of live intents, replacing live ones: they cost the index nothing.
func indexEnded(tx *bolt.Tx, id, old, v []byte, from, to counted, okFrom, okTo bool) error {
	b := tx.Bucket(bucketEnded)
	if b == nil {
		return nil // being set up: startCounting builds it
	}
	oldKey, wasIn := endedKey(id, old, from, okFrom)
	newKey, isIn := endedKey(id, v, to, okTo)
	if wasIn && isIn && string(oldKey) == string(newKey) {
		return nil
	}
	if wasIn {
		if err := b.Delete(oldKey); err != nil {
			return fmt.Errorf("delete %s/%s: %w", bucketEnded, intent.Clip(string(id)), err)
		}
	}
	if isIn {
		if err := b.Put(newKey, []byte{}); err != nil {
			return fmt.Errorf("write %s/%s: %w", bucketEnded, intent.Clip(string(id)), err)
		}
	}
	return nil
}

// endedIndexed reports whether tx's index of ended intents is in step with
// its records: the last commit was by a tether that keeps it (the counts
// it stored say so, counts.go).
func endedIndexed(tx *bolt.Tx) bool {
	if tx.Bucket(bucketEnded) == nil {
		return false
	}
	s, ok := readStoredCounts(tx)
	return ok && s.Ended
}

// endedBuilder builds the index anew, as part of the write transaction of
// the scan at open: the entries it had are dropped, and the scan adds one
// for every record it counts.
type endedBuilder struct {
	b       *bolt.Bucket
	entries int
}

func newEndedBuilder(tx *bolt.Tx) (*endedBuilder, error) {
	if tx.Bucket(bucketEnded) != nil {
		if err := tx.DeleteBucket(bucketEnded); err != nil {
			return nil, fmt.Errorf("delete bucket %s: %w", bucketEnded, err)
		}
	}
	b, err := tx.CreateBucket(bucketEnded)
	if err != nil {
		return nil, fmt.Errorf("create bucket %s: %w", bucketEnded, err)
	}
	b.FillPercent = appendFillPercent // the scan goes in id order, which is about the order of their ends
	return &endedBuilder{b: b}, nil
}

// add indexes record v of intent id, counted as c.
func (e *endedBuilder) add(id, v []byte, c counted) error {
	k, ok := endedKey(id, v, c, true)
	if !ok {
		return nil
	}
	if err := e.b.Put(k, []byte{}); err != nil {
		return fmt.Errorf("write %s/%s: %w", bucketEnded, intent.Clip(string(id)), err)
	}
	e.entries++
	return nil
}
