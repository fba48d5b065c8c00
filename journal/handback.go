package journal

// The hand-backs still to do (Intent.HandBackPending) have an index of
// their own, the handback bucket: tether looks for them at every start and
// every drain, and a journal of 100,000 finished intents must not be
// decoded whole for the few, if any, that wait for one. putRecord and
// deleteRecord keep it in the transaction of every write of a record, as
// they keep the counts (counts.go). A journal written by anything that
// keeps no such index (an older tether, a salvage) has it built once, by
// the scan at open that counts it (startCounting): the stored counts say
// whether the index was kept with them.

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/tether-run/tether/intent"
	bolt "go.etcd.io/bbolt"
)

var bucketHandBack = []byte("handback") // id → nothing, for the intents whose hand-back is pending

// MarkHandedBack records that a sandbox released as kept needs nothing
// more from tether (Intent.HandedBack): its hand-back was
// confirmed, or it was gone or not ours. Only a released intent can be
// marked; marking one again changes nothing.
func (j *Journal) MarkHandedBack(id string) (intent.Intent, error) {
	return j.update(id, func(in *intent.Intent) (bool, error) {
		if in.State != intent.Released {
			return false, fmt.Errorf("intent %s is %s, not released: %w", in.ID, in.State, ErrIllegalTransition)
		}
		if in.HandedBack {
			return false, nil
		}
		in.HandedBack = true
		return true, nil
	})
}

// PendingHandBacks returns the intents whose hand-back is pending
// (Intent.HandBackPending), in id order. It reads their index and their
// records only, so it costs the same beside 10 finished intents as beside
// a million. A record it cannot read is quarantined, as Live does. On a
// journal opened read-only whose index was not kept by its last writer,
// it reads every intent instead.
func (j *Journal) PendingHandBacks() ([]intent.Intent, error) {
	index := bucketHandBack
	if err := j.view(func(tx *bolt.Tx) error {
		if !handBackIndexed(tx) {
			index = bucketIntents
		}
		return nil
	}); err != nil {
		return nil, err
	}
	all, err := j.scan(index)
	out := all[:0]
	for _, in := range all {
		if in.HandBackPending() {
			out = append(out, in)
		}
	}
	return out, err
}

// handBack is what decides a hand-back is pending, as a record stores it.
type handBack struct {
	State      intent.State `json:"state"`
	UpdatedAt  time.Time    `json:"updated_at"`
	Outcome    string       `json:"outcome"`
	SandboxID  string       `json:"sandbox_id"`
	Lease      int          `json:"lease_minutes"`
	HandedBack bool         `json:"handed_back"`
	KeepOwed   bool         `json:"keep_owed"`
}

func (r handBack) pending() bool {
	return intent.Intent{State: r.State, Outcome: r.Outcome, SandboxID: r.SandboxID, Lease: r.Lease, HandedBack: r.HandedBack, KeepOwed: r.KeepOwed}.HandBackPending()
}

// readHandBack decodes only the fields of record v that decide whether its
// hand-back is pending; ok is false for a record that cannot be read.
func readHandBack(v []byte) (r handBack, ok bool) {
	js, _, err := openRecord(v)
	if v == nil || err != nil || json.Unmarshal(js, &r) != nil {
		return handBack{}, false
	}
	return r, true
}

// pendingRecord reports whether record v, of a released intent, waits for
// its hand-back. Most released intents were deleted by their runner: the
// walk that finds their outcome (topLevelString, counts.go) settles it
// without decoding the record, which matters to the scan at open that
// builds the index from every record.
func pendingRecord(v []byte) bool {
	js, _, err := openRecord(v)
	if v == nil || err != nil {
		return false
	}
	if o, ok := topLevelString(js, "outcome"); ok && o != intent.OutcomeKept {
		return false
	}
	r, ok := readHandBack(v)
	return ok && r.pending()
}

// indexHandBack keeps intent id's entry in the index in step with its new
// record v, of state to (ok false: unreadable), as part of tx. Only a
// released intent can wait for a hand-back, so the record is decoded only
// for one (from is the state of the record v replaces): every other write
// costs the index nothing.
func indexHandBack(tx *bolt.Tx, id, v []byte, from, to counted, okFrom, okTo bool) error {
	b := tx.Bucket(bucketHandBack)
	if b == nil {
		return nil // being set up: startCounting builds it
	}
	if okTo && to.State == intent.Released {
		if pendingRecord(v) {
			if err := b.Put(id, []byte{}); err != nil {
				return fmt.Errorf("write %s/%s: %w", bucketHandBack, intent.Clip(string(id)), err)
			}
			return nil
		}
	}
	if okFrom && from.State != intent.Released {
		return nil // never indexed
	}
	return unindexHandBack(tx, id)
}

// unindexHandBack removes intent id from the index, if it is there.
func unindexHandBack(tx *bolt.Tx, id []byte) error {
	b := tx.Bucket(bucketHandBack)
	if b == nil {
		return nil
	}
	if err := b.Delete(id); err != nil {
		return fmt.Errorf("delete %s/%s: %w", bucketHandBack, intent.Clip(string(id)), err)
	}
	return nil
}

// handBackIndexed reports whether tx's index of pending hand-backs is in
// step with its records: the last commit was by a tether that keeps it
// (the counts it stored say so, counts.go).
func handBackIndexed(tx *bolt.Tx) bool {
	if tx.Bucket(bucketHandBack) == nil {
		return false
	}
	s, ok := readStoredCounts(tx)
	return ok && s.HandBack
}

// rebuildHandBack makes the index name exactly the pending ids, as part of
// tx, and says how many entries it changed.
func rebuildHandBack(tx *bolt.Tx, pending map[string]bool) (int, error) {
	b, err := tx.CreateBucketIfNotExists(bucketHandBack)
	if err != nil {
		return 0, fmt.Errorf("create bucket %s: %w", bucketHandBack, err)
	}
	var stale [][]byte
	if err := b.ForEach(func(k, _ []byte) error {
		if !pending[string(k)] {
			stale = append(stale, append([]byte(nil), k...))
		}
		return nil
	}); err != nil {
		return 0, err
	}
	changed := len(stale)
	for _, k := range stale {
		if err := b.Delete(k); err != nil {
			return 0, fmt.Errorf("delete %s/%s: %w", bucketHandBack, intent.Clip(string(k)), err)
		}
	}
	for id := range pending {
		if b.Get([]byte(id)) == nil {
			if err := b.Put([]byte(id), []byte{}); err != nil {
				return 0, fmt.Errorf("write %s/%s: %w", bucketHandBack, intent.Clip(id), err)
			}
			changed++
		}
	}
	return changed, nil
}
