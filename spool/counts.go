package spool

// The intents by state, kept in memory: a metrics scrape must cost the same
// on a journal of ten intents as on one of ten million, so it reads no
// record. The counts are built from one scan when the journal opens, and
// every write or delete of a record goes through putRecord or deleteRecord,
// which move the counts by what the transaction changed once it commits
// (bbolt runs a transaction's OnCommit handlers after a successful commit
// only, so a batch rolled back to rerun without a failed change moves
// nothing). Whatever removes records — quarantine, pruning — calls
// deleteRecord, and the counts follow.

import (
	"encoding/json"
	"fmt"
	"maps"
	"sync"

	bolt "go.etcd.io/bbolt"
)

// tally is a journal's intents by state.
type tally struct {
	mu sync.Mutex
	n  map[State]int
}

func (t *tally) add(d map[State]int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for s, k := range d {
		t.n[s] += k
		if t.n[s] == 0 {
			delete(t.n, s)
		}
	}
}

// tallies finds a journal's tally from inside one of its transactions
// (putRecord and deleteRecord get only the transaction). A database with no
// tally (opened read-only, or being set up by Open before its scan, or a
// salvage's new file) records nothing: its counts are built by a scan when
// they are first asked for, or when it is opened.
var tallies sync.Map // *bolt.DB → *tally

// Counts returns the journal's intents by state, from memory: no record is
// read. A record whose state cannot be read (it will be quarantined when a
// read meets it) is not counted. On a journal opened read-only, it scans.
func (j *Journal) Counts() (map[State]int, error) {
	if t, ok := tallies.Load(j.db); ok {
		t := t.(*tally)
		t.mu.Lock()
		defer t.mu.Unlock()
		return maps.Clone(t.n), nil
	}
	var n map[State]int
	err := j.view(func(tx *bolt.Tx) (err error) {
		n, err = scanCounts(tx)
		return err
	})
	return n, err
}

// startCounting builds the tally with one scan and keeps it from now on.
// Open calls it before the commit loop starts, so no write can fall between
// the scan and the first counted change.
func (j *Journal) startCounting() error {
	var n map[State]int
	if err := j.db.View(func(tx *bolt.Tx) (err error) {
		n, err = scanCounts(tx)
		return err
	}); err != nil {
		return fmt.Errorf("journal %s: count intents: %w", j.path, err)
	}
	tallies.Store(j.db, &tally{n: n})
	return nil
}

// stopCounting forgets the tally (Close).
func (j *Journal) stopCounting() { tallies.Delete(j.db) }

func scanCounts(tx *bolt.Tx) (map[State]int, error) {
	n := map[State]int{}
	err := tx.Bucket(bucketIntents).ForEach(func(_, v []byte) error {
		if s, ok := countedState(v); ok {
			n[s]++
		}
		return nil
	})
	return n, err
}

// countedState is the state a record is counted under; ok is false for a
// record whose state cannot be read. The scan and every change use it, so a
// record is taken off the count it was put on, readable or not.
func countedState(v []byte) (State, bool) {
	if v == nil {
		return "", false
	}
	var r struct {
		State State `json:"state"`
	}
	if json.Unmarshal(v, &r) != nil || !knownState(r.State) {
		return "", false
	}
	return r.State, true
}

// putRecord writes record v of intent id, and counts the change once the
// transaction commits.
func putRecord(tx *bolt.Tx, id, v []byte) error {
	b := tx.Bucket(bucketIntents)
	d := delta(b.Get(id), v)
	if err := b.Put(id, v); err != nil {
		return fmt.Errorf("write %s/%s: %w", bucketIntents, truncate(string(id)), err)
	}
	countOnCommit(tx, d)
	return nil
}

// deleteRecord deletes the record of intent id, and counts it gone once the
// transaction commits.
func deleteRecord(tx *bolt.Tx, id []byte) error {
	b := tx.Bucket(bucketIntents)
	d := delta(b.Get(id), nil)
	if err := b.Delete(id); err != nil {
		return fmt.Errorf("delete %s/%s: %w", bucketIntents, truncate(string(id)), err)
	}
	countOnCommit(tx, d)
	return nil
}

// delta is what replacing record old by record v (nil: deleting it) does
// to the counts.
func delta(old, v []byte) map[State]int {
	d := map[State]int{}
	if s, ok := countedState(old); ok {
		d[s]--
	}
	if s, ok := countedState(v); ok {
		d[s]++
	}
	for s, k := range d {
		if k == 0 {
			delete(d, s)
		}
	}
	return d
}

func countOnCommit(tx *bolt.Tx, d map[State]int) {
	if len(d) == 0 {
		return
	}
	t, ok := tallies.Load(tx.DB())
	if !ok {
		return
	}
	tx.OnCommit(func() { t.(*tally).add(d) })
}
