package journal

// The journal's size is bounded by live work, not by history: an intent
// that has ended (gone, released, never-created, foreign, stopped) is kept
// for a retention period, long enough for `tether status` and an operator's
// questions, and then pruned, in small transactions through the group
// commit so no intake waits behind a long one. What pruning frees, bbolt
// reuses; a file left mostly free is compacted at the next Open
// (compact.go). A pass reads the index of ended intents (ended.go) up to
// its cutoff: it costs what it removes, and nothing when nothing is due.

import (
	"bytes"
	"context"
	"fmt"
	"time"

	"github.com/tether-run/tether/intent"
	bolt "go.etcd.io/bbolt"
)

// Defaults of pruning.
const (
	// DefaultPruneBatch bounds the intents one prune transaction removes:
	// small enough that a create queued behind it waits for little more
	// than its own fsync.
	DefaultPruneBatch = 256
	// DefaultPruneEvery is how often a journal opened with a Retention
	// prunes, after a first pass at once.
	DefaultPruneEvery = time.Hour
)

// Prune removes the intents that ended before cutoff (their last change,
// UpdatedAt, is older), at most batch (DefaultPruneBatch when <= 0) to a
// transaction, with their idempotency keys. Live intents are never
// touched, nor are quarantined records, nor records that cannot be read
// (the reads quarantine those). It returns how many it removed; ctx ends it
// between transactions.
func (j *Journal) Prune(ctx context.Context, cutoff time.Time, batch int) (int, error) {
	if batch <= 0 {
		batch = DefaultPruneBatch
	}
	indexed := false
	if err := j.view(func(tx *bolt.Tx) error { indexed = endedIndexed(tx); return nil }); err != nil {
		return 0, err
	}
	prunable := j.prunable
	if !indexed {
		prunable = j.prunableScan // a read-only open of a journal whose last writer kept no index
	}
	pruned := 0
	var after []byte
	for {
		if err := ctx.Err(); err != nil {
			return pruned, err
		}
		ids, entries, next, err := prunable(cutoff, after, batch)
		if err != nil {
			return pruned, err
		}
		if len(ids) > 0 {
			var n int
			if _, err := j.Apply(ctx, &Change{run: func(tx *bolt.Tx) error {
				n = 0
				for _, id := range ids {
					ok, err := pruneOne(tx, id, cutoff)
					if err != nil {
						return err
					}
					if ok {
						n++
					}
				}
				return dropEntries(tx, entries)
			}}); err != nil {
				return pruned, err
			}
			pruned += n
		}
		if next == nil {
			return pruned, nil
		}
		after = next
	}
}

// prunable reads up to batch entries of the index of ended intents whose
// time is before cutoff, from the first one after after: the ids they name
// and the entries themselves, for dropEntries; next is where the following
// call starts (nil past the last entry before cutoff).
func (j *Journal) prunable(cutoff time.Time, after []byte, batch int) (ids []string, entries [][]byte, next []byte, err error) {
	end := endedTime(cutoff)
	err = j.view(func(tx *bolt.Tx) error {
		c := tx.Bucket(bucketEnded).Cursor()
		k, _ := c.First()
		if after != nil {
			k, _ = c.Seek(after)
			if k != nil && bytes.Equal(k, after) {
				k, _ = c.Next()
			}
		}
		for ; k != nil && len(k) > endedTimeLen && bytes.Compare(k[:endedTimeLen], end) < 0; k, _ = c.Next() {
			entries = append(entries, append([]byte(nil), k...))
			ids = append(ids, string(k[endedTimeLen:]))
			if len(ids) == batch {
				next = entries[len(entries)-1]
				return nil
			}
		}
		return nil
	})
	return ids, entries, next, err
}

// dropEntries removes the index entries a pass reached, as part of tx.
// pruneOne took out those of the intents it removed; what is left names a
// record that is gone, changed or unreadable, or one that a pass never
// removes (it does not decode whole): none has anything left to tell a
// pass.
func dropEntries(tx *bolt.Tx, entries [][]byte) error {
	b := tx.Bucket(bucketEnded)
	for _, k := range entries {
		if err := b.Delete(k); err != nil {
			return fmt.Errorf("delete %s/%s: %w", bucketEnded, intent.Clip(string(k[endedTimeLen:])), err)
		}
	}
	return nil
}

// prunableScan is prunable without the index: it reads every record, for
// the ids of ended intents older than cutoff, from the first key after
// after.
func (j *Journal) prunableScan(cutoff time.Time, after []byte, batch int) (ids []string, _ [][]byte, next []byte, err error) {
	err = j.view(func(tx *bolt.Tx) error {
		c := tx.Bucket(bucketIntents).Cursor()
		k, v := c.First()
		if after != nil {
			k, v = c.Seek(after)
			if k != nil && bytes.Equal(k, after) {
				k, v = c.Next()
			}
		}
		for ; k != nil; k, v = c.Next() {
			if ended(v, cutoff) {
				ids = append(ids, string(k))
				if len(ids) == batch {
					next = append([]byte(nil), k...)
					return nil
				}
			}
		}
		return nil
	})
	return ids, nil, next, err
}

// ended reports whether record v is readable (its checksum holds) and of
// an intent that ended before cutoff, with no hand-back pending (lease
// mode's work on a sandbox released as kept outlives the intent's end).
// A pass without the index reads every record, and most are not due: one
// still live, or changed since cutoff, is told by the walk that finds its
// top-level state and updated_at (topLevelString, counts.go) without
// decoding it; the others decode only the fields that decide it.
func ended(v []byte, cutoff time.Time) bool {
	js, _, err := openRecord(v)
	if v == nil || err != nil {
		return false
	}
	if s, ok := topLevelString(js, "state"); ok && intent.State(s).Live() {
		return false
	}
	if u, ok := topLevelString(js, "updated_at"); ok {
		if at, err := time.Parse(time.RFC3339Nano, u); err == nil && !at.Before(cutoff) {
			return false
		}
	}
	return endedDecoded(v, cutoff)
}

// endedDecoded is ended, decoding the fields that decide it.
func endedDecoded(v []byte, cutoff time.Time) bool {
	r, ok := readHandBack(v) // handback.go
	return ok && intent.KnownState(r.State) && !r.State.Live() && !r.pending() && r.UpdatedAt.Before(cutoff)
}

// pruneOne removes intent id if, read again inside the write transaction,
// it still ended before cutoff; its key goes with it if the key still names
// it (an ended intent's key may name a newer intent by now).
func pruneOne(tx *bolt.Tx, id string, cutoff time.Time) (bool, error) {
	intents := tx.Bucket(bucketIntents)
	v := intents.Get([]byte(id))
	if v == nil || !ended(v, cutoff) {
		return false, nil
	}
	in, err := decode([]byte(id), v)
	if err != nil {
		return false, nil
	}
	if in.Key != "" {
		keys := tx.Bucket(bucketKeys)
		if string(keys.Get([]byte(in.Key))) == id {
			if err := keys.Delete([]byte(in.Key)); err != nil {
				return false, fmt.Errorf("delete %s/%s: %w", bucketKeys, intent.Clip(in.Key), err)
			}
		}
	}
	if err := deleteRecord(tx, []byte(id)); err != nil { // counts.go: the counts follow
		return false, err
	}
	return true, nil
}

// pruneLoop prunes what ended more than retention ago, at once and then
// every j.pruneEvery, until Close.
func (j *Journal) pruneLoop(ctx context.Context, retention time.Duration) {
	defer close(j.pruned)
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		start := time.Now()
		n, err := j.Prune(ctx, start.Add(-retention), DefaultPruneBatch)
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			j.log.Warn("journal: pruning ended intents failed; it is tried again later", "err", err)
		case n > 0:
			j.log.Info("journal: pruned ended intents", "intents", n, "retention", retention, "took", time.Since(start).Round(time.Millisecond))
		}
		t.Reset(j.pruneEvery)
	}
}
