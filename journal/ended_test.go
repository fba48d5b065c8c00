package journal

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/tether-run/tether/intent"
	bolt "go.etcd.io/bbolt"
)

// endedEntries is what the index of ended intents holds, in its order.
func endedEntries(t *testing.T, j *Journal) []string {
	t.Helper()
	return keysOf(t, j, bucketEnded)
}

// keysOf are the keys of one of the journal's buckets, in its order.
func keysOf(t *testing.T, j *Journal, bucket []byte) []string {
	t.Helper()
	keys := []string{}
	if err := j.view(func(tx *bolt.Tx) error {
		return tx.Bucket(bucket).ForEach(func(k, _ []byte) error {
			keys = append(keys, string(k))
			return nil
		})
	}); err != nil {
		t.Fatal(err)
	}
	return keys
}

// checkEnded: the index names exactly the intents whose decoded records
// have ended with no hand-back pending, each at its UpdatedAt, in the
// order of their end; extra are the entries it may hold beside them (of
// records damaged under it).
func checkEnded(t *testing.T, j *Journal, when string, extra ...string) {
	t.Helper()
	all, err := j.All()
	if err != nil {
		t.Fatal(err)
	}
	want := slices.Clone(extra)
	for _, in := range all {
		if !in.Live() && !in.HandBackPending() {
			want = append(want, string(endedTime(in.UpdatedAt))+in.ID)
		}
	}
	slices.Sort(want)
	if got := endedEntries(t, j); !slices.Equal(got, want) {
		t.Errorf("%s: the index holds %d entries %v, want %d %v", when, len(got), readable(got), len(want), readable(want))
	}
}

// readable is entries of the index as id@time.
func readable(entries []string) []string {
	out := []string{}
	for _, k := range entries {
		if len(k) <= endedTimeLen {
			out = append(out, fmt.Sprintf("%x", k))
			continue
		}
		sec := int64(binary.BigEndian.Uint64([]byte(k[:8])) ^ 1<<63)
		ns := int64(binary.BigEndian.Uint32([]byte(k[8:endedTimeLen])))
		out = append(out, k[endedTimeLen:]+"@"+time.Unix(sec, ns).UTC().Format(time.RFC3339Nano))
	}
	return out
}

// The index of ended intents follows every change of a record: an end
// adds an intent at its UpdatedAt, a later change of an ended intent
// moves it, a pending hand-back is left out until handed back; pruning,
// a quarantine, a reopen and a compaction keep it in step.
func TestEndedIndexFollowsEveryChange(t *testing.T) {
	path := filepath.Join(t.TempDir(), "journal.db")
	j, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { j.Close() }()
	ctx := t.Context()
	checkEnded(t, j, "new")
	create := func() intent.Intent {
		t.Helper()
		in, _, err := j.Create(ctx, intent.Declaration{Lease: 2})
		if err != nil {
			t.Fatal(err)
		}
		return in
	}
	live, gone, never := create(), create(), create()
	checkEnded(t, j, "created")
	a := released(t, j, 0, intent.OutcomeDeleted)
	checkEnded(t, j, "released")
	if _, err := j.MarkDeleteRequested(gone.ID); err != nil {
		t.Fatal(err)
	}
	checkEnded(t, j, "releasing")
	if _, err := j.Transition(gone.ID, intent.Gone, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := j.CloseRefusedCreate(never.ID, "refused"); err != nil {
		t.Fatal(err)
	}
	checkEnded(t, j, "gone and never created")
	kept := released(t, j, 2, intent.OutcomeKept)
	checkEnded(t, j, "a hand-back pending")
	if _, err := j.MarkHandedBack(kept.ID); err != nil {
		t.Fatal(err)
	}
	checkEnded(t, j, "handed back")
	// A later change of an ended intent (a note) moves its entry to the
	// new UpdatedAt: the old one is gone.
	if _, err := j.Note(a.ID, "noted"); err != nil {
		t.Fatal(err)
	}
	checkEnded(t, j, "an ended intent noted")

	// A pass removes what ended before its cutoff, and those entries only.
	g, err := j.Get(gone.ID)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := j.Prune(ctx, g.UpdatedAt.Add(time.Nanosecond), 0); err != nil || n != 1 {
		t.Fatalf("pruned %d, %v; want the gone one", n, err)
	}
	checkEnded(t, j, "pruned")

	// An ended record damaged under the index is quarantined by the read
	// that meets it; its entry, which no write took out, is dropped by
	// the pass that reaches it, and the quarantined record stays.
	n, err := j.Get(never.ID)
	if err != nil {
		t.Fatal(err)
	}
	stale := string(endedTime(n.UpdatedAt)) + n.ID
	if _, err := j.Apply(ctx, &Change{run: func(tx *bolt.Tx) error {
		return tx.Bucket(bucketIntents).Put([]byte(never.ID), []byte("{not json"))
	}}); err != nil {
		t.Fatal(err)
	}
	checkEnded(t, j, "damaged", stale)
	if q, _ := j.Quarantined(); len(q) != 1 || q[0].ID != never.ID {
		t.Fatalf("quarantine %+v, want %s", q, never.ID)
	}
	if n, err := j.Prune(ctx, n.UpdatedAt.Add(time.Nanosecond), 0); err != nil || n != 0 {
		t.Fatalf("pruned %d, %v; want none", n, err)
	}
	checkEnded(t, j, "the damaged one's entry dropped")
	if q, _ := j.Quarantined(); len(q) != 1 || q[0].ID != never.ID {
		t.Fatalf("quarantine after the pass %+v, want %s", q, never.ID)
	}

	// A record that passes its checksum but names another intent is
	// quarantined too; its entry, which its bytes still name, leaves with
	// it.
	misnamed := released(t, j, 0, intent.OutcomeDeleted)
	if _, err := j.Apply(ctx, &Change{run: func(tx *bolt.Tx) error {
		in := misnamed
		in.ID = live.ID
		v, err := encodeRecord(in)
		if err != nil {
			return err
		}
		return putRecord(tx, []byte(misnamed.ID), v)
	}}); err != nil {
		t.Fatal(err)
	}
	checkEnded(t, j, "misnamed, quarantined")
	if q, _ := j.Quarantined(); len(q) != 2 {
		t.Fatalf("quarantine %+v, want %s beside %s", q, misnamed.ID, never.ID)
	}

	if _, err := j.Release(live.ID, intent.OutcomeDeleted); err != nil {
		t.Fatal(err)
	}
	j.Close()
	if j, err = Open(path, Options{}); err != nil {
		t.Fatal(err)
	}
	checkEnded(t, j, "reopened")

	// Enough ended intents to make the file worth compacting once pruned.
	fill(t, j, 3000, 250, 0)
	cutoff := time.Now()
	fill(t, j, 20, 250, 0)
	if _, err := j.Prune(ctx, cutoff, 0); err != nil {
		t.Fatal(err)
	}
	j.Close()
	before, _ := os.Stat(path)
	if j, err = Open(path, Options{}); err != nil {
		t.Fatal(err)
	}
	if after, _ := os.Stat(path); after.Size()*2 > before.Size() {
		t.Fatalf("not compacted: %d bytes, %d before", after.Size(), before.Size())
	}
	checkEnded(t, j, "compacted")
	if got := len(endedEntries(t, j)); got != 20 {
		t.Errorf("%d entries after the compaction, want the 20 ended after the cutoff", got)
	}
	if n, err := j.Prune(ctx, time.Now().Add(time.Second), 0); err != nil || n != 20 {
		t.Fatalf("pruned %d, %v after the compaction; want 20", n, err)
	}
	checkEnded(t, j, "pruned after the compaction")
}

// A journal whose last writer kept no index of ended intents — an older
// tether, before the index or after it (a downgrade), a schema-1 journal,
// a salvage — gets it built at open, by the scan that counts it; a
// read-only open of one prunes (or fails to) by reading every intent.
func TestEndedIndexBuiltAtOpen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "journal.db")
	j, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	a := released(t, j, 0, intent.OutcomeDeleted)
	released(t, j, 2, intent.OutcomeKept)
	b := released(t, j, 0, intent.OutcomeDeleted)
	if _, _, err := j.Create(t.Context(), intent.Declaration{}); err != nil {
		t.Fatal(err)
	}
	j.Close()
	olderTether := func(change func(tx *bolt.Tx) error) {
		t.Helper()
		// The counts as a tether with the hand-back index but not this
		// one stores them.
		writeAsOlderTether(t, path, storedCounts{HandBack: true}, change)
	}

	// Before the index: no bucket at all.
	olderTether(func(tx *bolt.Tx) error { return tx.DeleteBucket(bucketEnded) })
	ro, err := OpenReadOnly(path, 0)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := ro.Prune(t.Context(), a.UpdatedAt, 0); n != 0 || err != nil {
		t.Errorf("read-only, no index, nothing due: pruned %d, %v", n, err)
	}
	if n, err := ro.Prune(t.Context(), time.Now().Add(time.Hour), 0); n != 0 || err == nil {
		t.Errorf("read-only, no index, two due: pruned %d, %v; want the write refused", n, err)
	}
	ro.Close()
	if j, err = Open(path, Options{}); err != nil {
		t.Fatal(err)
	}
	checkEnded(t, j, "built")
	j.Close()

	// After it: an older tether prunes one and notes another, and leaves
	// the index as it was.
	olderTether(func(tx *bolt.Tx) error {
		if err := tx.Bucket(bucketIntents).Delete([]byte(a.ID)); err != nil {
			return err
		}
		in, err := load(tx, b.ID)
		if err != nil {
			return err
		}
		in.LastError, in.UpdatedAt = "noted", in.UpdatedAt.Add(time.Minute)
		v, err := encodeRecord(in)
		if err != nil {
			return err
		}
		return tx.Bucket(bucketIntents).Put([]byte(b.ID), v)
	})
	if j, err = Open(path, Options{}); err != nil {
		t.Fatal(err)
	}
	checkEnded(t, j, "rebuilt after an older tether")
	j.Close()

	// A salvage writes no index; the open after it builds one.
	dst := filepath.Join(t.TempDir(), "salvaged.db")
	if _, err := Salvage(path, dst); err != nil {
		t.Fatal(err)
	}
	if j, err = Open(dst, Options{}); err != nil {
		t.Fatal(err)
	}
	checkEnded(t, j, "salvaged")
	j.Close()

	// Schema 1, from before records had checksums.
	legacy := filepath.Join(t.TempDir(), "legacy.db")
	old := intent.Plan(newID(), intent.Declaration{ID: newID()}, time.Now().UTC())
	old.State = intent.Gone
	legacyJournal(t, legacy, old)
	if j, err = Open(legacy, Options{}); err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	checkEnded(t, j, "schema 1")
	if got := len(endedEntries(t, j)); got != 1 {
		t.Errorf("schema 1: %d entries, want 1", got)
	}
}

// A pass reads the index up to its cutoff, none of the journal's history:
// an intent that ended long ago, written behind the index's back among
// thousands of recent finished ones, is not met by a pass (a read of every
// record would prune it), nor is the index's first recent entry removed.
func TestPruneReadsNoHistory(t *testing.T) {
	j := openTemp(t)
	fill(t, j, 2000, 10, 0)
	in, _, err := j.Create(t.Context(), intent.Declaration{})
	if err != nil {
		t.Fatal(err)
	}
	in.State, in.UpdatedAt = intent.Gone, time.Now().Add(-48*time.Hour).UTC()
	if _, err := j.Apply(t.Context(), &Change{run: func(tx *bolt.Tx) error {
		if err := tx.Bucket(bucketLive).Delete([]byte(in.ID)); err != nil {
			return err
		}
		v, err := encodeRecord(in)
		if err != nil {
			return err
		}
		return tx.Bucket(bucketIntents).Put([]byte(in.ID), v)
	}}); err != nil {
		t.Fatal(err)
	}
	before := endedEntries(t, j)
	if n, err := j.Prune(t.Context(), time.Now().Add(-time.Hour), 0); n != 0 || err != nil {
		t.Fatalf("pruned %d, %v; want nothing", n, err)
	}
	if _, err := j.Get(in.ID); err != nil {
		t.Fatalf("the pass met a record the index does not name: %v", err)
	}
	if got := endedEntries(t, j); !slices.Equal(got, before) || len(got) != 2000 {
		t.Fatalf("the pass changed the index: %d entries, %d before", len(got), len(before))
	}
}

// FuzzEndedKey: the index misses no record a pass would remove: every
// record ended before a cutoff has an entry, at a time before the cutoff.
func FuzzEndedKey(f *testing.F) {
	in := intent.Plan("01hzzzzzzzzzzzzzzzzzzzzzzz", intent.Declaration{ID: "01hzzzzzzzzzzzzzzzzzzzzzzz", Labels: map[string]string{"updated_at": "2031-01-01T00:00:00Z"}}, time.Unix(1e9, 5))
	in.State, in.Outcome = intent.Released, intent.OutcomeDeleted
	v, _ := json.Marshal(in)
	f.Add(v, int64(1e9))
	f.Add(v, int64(2e9))
	f.Add([]byte(`{"state":"gone","updated_at":"2001-09-09T01:46:40Z","updated_at":"2031-01-01T00:00:00Z"}`), int64(1.5e9))
	f.Add([]byte(`{"state":"gone","updated_at":"2001-09-09T01:46:40+02:00"}`), int64(1e9))
	f.Add([]byte(`{"state":"gone","updated_at":"0001-01-01T00:00:00Z"}`), int64(-1e12))
	f.Add([]byte(`{"state":"gone","updated_at":"1969-12-31T23:59:59.5Z"}`), int64(0))
	f.Add([]byte(`{"state":"gone","updated_at":"2031-01-01T00:00:00Z","upd\u0061ted_at":"2001-09-09T01:46:40Z"}`), int64(2e9))
	f.Add([]byte(`{"state":"released","outcome":"kept","lease_minutes":2,"sandbox_id":"x","updated_at":"2001-09-09T01:46:40Z"}`), int64(2e9))
	f.Fuzz(func(t *testing.T, js []byte, cutoff int64) {
		at := time.Unix(cutoff, 0)
		for _, v := range [][]byte{js, sealRecord(js)} {
			if !ended(v, at) {
				continue
			}
			c, okC := countedAs(v)
			k, ok := endedKey([]byte("id"), v, c, okC)
			if !ok || bytes.Compare(k[:endedTimeLen], endedTime(at)) >= 0 {
				t.Fatalf("ended(%q, %s), but its entry is %v (%v)", v, at, readable([]string{string(k)}), ok)
			}
		}
	})
}
