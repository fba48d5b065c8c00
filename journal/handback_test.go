package journal

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/tether-run/tether/intent"
	bolt "go.etcd.io/bbolt"
)

// The lease an intent was declared under is journaled with it; a hand-back
// is pending from its release as kept until MarkHandedBack, which only a
// released intent takes, and which survives a reopen.
func TestHandBackIsJournaled(t *testing.T) {
	path := filepath.Join(t.TempDir(), "journal.db")
	j, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	in, _, err := j.Create(context.Background(), intent.Declaration{Lease: 2})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := j.Create(context.Background(), intent.Declaration{Lease: -1}); !errors.Is(err, ErrInvalid) {
		t.Errorf("a negative lease: %v, want ErrInvalid", err)
	}
	if in.Lease != 2 {
		t.Fatalf("lease %d, want 2", in.Lease)
	}
	if in, err = j.Observe(in.ID, "sb-1"); err != nil {
		t.Fatal(err)
	}
	if _, err := j.MarkHandedBack(in.ID); !errors.Is(err, ErrIllegalTransition) {
		t.Errorf("marking a live intent: %v, want ErrIllegalTransition", err)
	}
	if in, err = j.Release(in.ID, intent.OutcomeKept); err != nil || !in.HandBackPending() {
		t.Fatalf("released as kept: pending %v, %v", in.HandBackPending(), err)
	}
	if in, err = j.MarkHandedBack(in.ID); err != nil || in.HandBackPending() || !in.HandedBack {
		t.Fatalf("marked: %+v, %v", in, err)
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	if j, err = Open(path, Options{}); err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	if got, err := j.Get(in.ID); err != nil || !got.HandedBack || got.Lease != 2 {
		t.Errorf("after a reopen: %+v, %v", got, err)
	}
}

// Retention never prunes a sandbox's pending hand-back: the intent has
// ended, the work has not. Once handed back it goes like any other. A
// sandbox released as kept owes its hand-back (the keep mark) in lease
// mode or not; one released as deleted owes nothing.
func TestPruneKeepsPendingHandBacks(t *testing.T) {
	j, err := Open(filepath.Join(t.TempDir(), "journal.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	ctx := context.Background()
	pending, unleased := released(t, j, 2, intent.OutcomeKept), released(t, j, 0, intent.OutcomeKept)
	deleted := released(t, j, 0, intent.OutcomeDeleted)
	future := time.Now().Add(time.Hour)
	if n, err := j.Prune(ctx, future, 0); err != nil || n != 1 {
		t.Fatalf("pruned %d, %v; want the one released as deleted", n, err)
	}
	if _, err := j.Get(deleted.ID); !errors.Is(err, ErrNotFound) {
		t.Errorf("the ended intent without a hand-back: %v, want pruned", err)
	}
	for _, in := range []intent.Intent{pending, unleased} {
		if _, err := j.Get(in.ID); err != nil {
			t.Fatalf("the pending hand-back (lease %d) was pruned: %v", in.Lease, err)
		}
		if _, err := j.MarkHandedBack(in.ID); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := j.Prune(ctx, future.Add(time.Hour), 0); err != nil || n != 2 {
		t.Errorf("pruned %d, %v; want the handed-back ones", n, err)
	}
}

// released journals an intent observed as sandbox sb-ID and released with
// outcome, under lease (0: none).
func released(t *testing.T, j *Journal, lease int, outcome string) intent.Intent {
	t.Helper()
	in, _, err := j.Create(t.Context(), intent.Declaration{Lease: lease})
	if err != nil {
		t.Fatal(err)
	}
	if _, err = j.Observe(in.ID, "sb-"+in.ID); err != nil {
		t.Fatal(err)
	}
	if in, err = j.Release(in.ID, outcome); err != nil {
		t.Fatal(err)
	}
	return in
}

// indexed is what the hand-back index names, read from its bucket.
func indexed(t *testing.T, j *Journal) []string {
	t.Helper()
	return keysOf(t, j, bucketHandBack)
}

// checkPending: the index names exactly the intents whose records say a
// hand-back is pending, and PendingHandBacks returns them, in id order.
func checkPending(t *testing.T, j *Journal, when string, want ...intent.Intent) {
	t.Helper()
	wantIDs := []string{}
	for _, in := range want {
		wantIDs = append(wantIDs, in.ID)
	}
	slices.Sort(wantIDs)
	all, err := j.All()
	if err != nil {
		t.Fatal(err)
	}
	truth := []string{}
	for _, in := range all {
		if in.HandBackPending() {
			truth = append(truth, in.ID)
		}
	}
	if !slices.Equal(truth, wantIDs) {
		t.Fatalf("%s: the records say %v are pending, the test %v", when, truth, wantIDs)
	}
	if got := indexed(t, j); !slices.Equal(got, wantIDs) {
		t.Errorf("%s: the index names %v, want %v", when, got, wantIDs)
	}
	got, err := j.PendingHandBacks()
	if err != nil {
		t.Fatalf("%s: %v", when, err)
	}
	gotIDs := []string{}
	for _, in := range got {
		gotIDs = append(gotIDs, in.ID)
	}
	if !slices.Equal(gotIDs, wantIDs) {
		t.Errorf("%s: PendingHandBacks %v, want %v", when, gotIDs, wantIDs)
	}
}

// The index of pending hand-backs follows every change of a record: a
// release as kept adds it (under a lease or not), and nothing else; the hand-back,
// pruning, a quarantine, a reopen and a compaction keep it in step.
func TestHandBackIndexFollowsEveryChange(t *testing.T) {
	path := filepath.Join(t.TempDir(), "journal.db")
	j, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { j.Close() }()
	ctx := t.Context()
	checkPending(t, j, "new")
	a, b := released(t, j, 2, intent.OutcomeKept), released(t, j, 0, intent.OutcomeKept)
	released(t, j, 2, intent.OutcomeDeleted)
	released(t, j, 0, intent.OutcomeDeleted)
	unseen, _, err := j.Create(ctx, intent.Declaration{Lease: 2}) // no sandbox id: nothing to hand back
	if err != nil {
		t.Fatal(err)
	}
	if _, err := j.Release(unseen.ID, intent.OutcomeKept); err != nil {
		t.Fatal(err)
	}
	live, _, err := j.Create(ctx, intent.Declaration{Lease: 2})
	if err != nil {
		t.Fatal(err)
	}
	checkPending(t, j, "released", a, b)

	if _, err := j.MarkHandedBack(b.ID); err != nil {
		t.Fatal(err)
	}
	checkPending(t, j, "one handed back", a)
	if n, err := j.Prune(ctx, time.Now().Add(time.Hour), 0); err != nil || n != 4 {
		t.Fatalf("pruned %d, %v; want the 4 ended with nothing pending", n, err)
	}
	checkPending(t, j, "pruned", a)

	// A pending one whose record turns unreadable is quarantined by the
	// read that meets it, and leaves the index with its record.
	c := released(t, j, 2, intent.OutcomeKept)
	if _, err := j.Apply(ctx, &Change{run: func(tx *bolt.Tx) error {
		return tx.Bucket(bucketIntents).Put([]byte(c.ID), []byte("{not json"))
	}}); err != nil {
		t.Fatal(err)
	}
	if got, err := j.PendingHandBacks(); err != nil || len(got) != 1 || got[0].ID != a.ID {
		t.Fatalf("PendingHandBacks beside an unreadable record: %v, %v; want %s", got, err, a.ID)
	}
	if q, _ := j.Quarantined(); len(q) != 1 || q[0].ID != c.ID {
		t.Fatalf("quarantine %+v, want %s", q, c.ID)
	}
	checkPending(t, j, "quarantined", a)

	if _, err := j.Observe(live.ID, "sb-live"); err != nil {
		t.Fatal(err)
	}
	d, err := j.Release(live.ID, intent.OutcomeKept)
	if err != nil {
		t.Fatal(err)
	}
	j.Close()
	if j, err = Open(path, Options{}); err != nil {
		t.Fatal(err)
	}
	checkPending(t, j, "reopened", a, d)

	// Enough ended intents to make the file worth compacting once pruned.
	fill(t, j, 3000, 250, 0)
	if _, err := j.Prune(ctx, time.Now().Add(time.Second), 0); err != nil {
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
	checkPending(t, j, "compacted", a, d)
	if _, err := j.MarkHandedBack(a.ID); err != nil {
		t.Fatal(err)
	}
	checkPending(t, j, "handed back after the compaction", d)
}

// A journal whose last writer kept no index of hand-backs — an older
// tether, before the index or after it (a downgrade), a schema-1 journal,
// a salvage — gets it built at open, by the scan that counts it; a
// read-only open of one reads every intent instead.
func TestHandBackIndexBuiltAtOpen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "journal.db")
	j, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	a, b := released(t, j, 2, intent.OutcomeKept), released(t, j, 2, intent.OutcomeKept)
	released(t, j, 2, intent.OutcomeDeleted)
	ended, _, err := j.Create(t.Context(), intent.Declaration{Lease: 2})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := j.Observe(ended.ID, "sb-"+ended.ID); err != nil {
		t.Fatal(err)
	}
	j.Close()
	olderTether := func(change func(tx *bolt.Tx) error) {
		t.Helper()
		// The counts as an older tether stores them: current, by
		// provider, and silent about the index.
		writeAsOlderTether(t, path, storedCounts{}, change)
	}
	rewrite := func(tx *bolt.Tx, id string, change func(*intent.Intent)) error {
		in, err := load(tx, id)
		if err != nil {
			return err
		}
		change(&in)
		v, err := encodeRecord(in)
		if err != nil {
			return err
		}
		return tx.Bucket(bucketIntents).Put([]byte(id), v)
	}

	// Before the index: no bucket at all.
	olderTether(func(tx *bolt.Tx) error { return tx.DeleteBucket(bucketHandBack) })
	ro, err := OpenReadOnly(path, 0)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := ro.PendingHandBacks(); err != nil || len(got) != 2 || got[0].ID != a.ID || got[1].ID != b.ID {
		t.Errorf("read-only, no index: %v, %v; want %s and %s", got, err, a.ID, b.ID)
	}
	ro.Close()
	if j, err = Open(path, Options{}); err != nil {
		t.Fatal(err)
	}
	checkPending(t, j, "built", a, b)
	j.Close()

	// After it: an older tether hands one back and releases another as
	// kept, and the index it leaves says neither.
	olderTether(func(tx *bolt.Tx) error {
		if err := rewrite(tx, a.ID, func(in *intent.Intent) { in.HandedBack = true }); err != nil {
			return err
		}
		return rewrite(tx, ended.ID, func(in *intent.Intent) { in.State, in.Outcome = intent.Released, intent.OutcomeKept })
	})
	if j, err = Open(path, Options{}); err != nil {
		t.Fatal(err)
	}
	c, err := j.Get(ended.ID)
	if err != nil {
		t.Fatal(err)
	}
	checkPending(t, j, "rebuilt after an older tether", b, c)
	j.Close()

	// A salvage writes no index; the open after it builds one.
	dst := filepath.Join(t.TempDir(), "salvaged.db")
	if _, err := Salvage(path, dst); err != nil {
		t.Fatal(err)
	}
	if j, err = Open(dst, Options{}); err != nil {
		t.Fatal(err)
	}
	checkPending(t, j, "salvaged", b, c)
	j.Close()

	// Schema 1, from before records had checksums.
	legacy := filepath.Join(t.TempDir(), "legacy.db")
	old := intent.Plan(newID(), intent.Declaration{ID: newID(), Lease: 2}, time.Now().UTC())
	old.State, old.Outcome, old.SandboxID = intent.Released, intent.OutcomeKept, "sb-old"
	// Released as kept outside lease mode by a tether that owed no mark
	// then: its history costs nothing now.
	unleased := intent.Plan(old.Labels[intent.LabelOwner], intent.Declaration{ID: newID()}, time.Now().UTC())
	unleased.State, unleased.Outcome, unleased.SandboxID = intent.Released, intent.OutcomeKept, "sb-unleased"
	legacyJournal(t, legacy, old, unleased)
	if j, err = Open(legacy, Options{}); err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	checkPending(t, j, "schema 1", old)
}

// PendingHandBacks reads the index and the records it names, nothing of
// the journal's history: a damaged record among thousands of finished
// intents is not met (a read of them all would quarantine it).
func TestPendingHandBacksReadsNoHistory(t *testing.T) {
	j := openTemp(t)
	fill(t, j, 2000, 10, 0)
	a := released(t, j, 2, intent.OutcomeKept)
	finished := released(t, j, 2, intent.OutcomeDeleted)
	if _, err := j.Apply(t.Context(), &Change{run: func(tx *bolt.Tx) error {
		return tx.Bucket(bucketIntents).Put([]byte(finished.ID), []byte("{not json"))
	}}); err != nil {
		t.Fatal(err)
	}
	got, err := j.PendingHandBacks()
	if err != nil || len(got) != 1 || got[0].ID != a.ID {
		t.Fatalf("PendingHandBacks %v, %v; want %s", got, err, a.ID)
	}
	if q, _ := j.Quarantined(); len(q) != 0 {
		t.Fatalf("PendingHandBacks read the finished intents: it quarantined %+v", q)
	}
	// The damage is there for a read that meets it.
	if _, err := j.All(); err != nil {
		t.Fatal(err)
	}
	if q, _ := j.Quarantined(); len(q) != 1 || q[0].ID != finished.ID {
		t.Fatalf("quarantine after All %+v, want %s", q, finished.ID)
	}
}

// FuzzPendingRecord: the index's decision, which skips decoding a record
// whose outcome the walk finds is not kept, is the decoded record's.
func FuzzPendingRecord(f *testing.F) {
	in := intent.Plan("01hzzzzzzzzzzzzzzzzzzzzzzz", intent.Declaration{ID: "01hzzzzzzzzzzzzzzzzzzzzzzz", Lease: 2, Labels: map[string]string{"outcome": "deleted"}}, time.Now())
	in.State, in.Outcome, in.SandboxID = intent.Released, intent.OutcomeKept, "sb-1"
	v, _ := json.Marshal(in)
	f.Add(v)
	f.Add([]byte(`{"state":"released","outcome":"deleted","outcome":"kept","lease_minutes":2,"sandbox_id":"x"}`))
	f.Add([]byte(`{"state":"released","outcome":"k\u0065pt","lease_minutes":2,"sandbox_id":"x"}`))
	f.Add([]byte(`{"state":"released","outcome":"deleted","lease_minutes":"2"}`))
	f.Add([]byte(`{"state":"released","outcome":"deleted","OUTCOME":"kept","lease_minutes":2,"sandbox_id":"x"}`))
	f.Add([]byte(`{"state":"released","outcome":"deleted","\u006futcome":"kept","lease_minutes":2,"sandbox_id":"x"}`))
	f.Fuzz(func(t *testing.T, js []byte) {
		for _, v := range [][]byte{js, sealRecord(js)} {
			r, ok := readHandBack(v)
			if got, want := pendingRecord(v), ok && r.pending(); got != want {
				t.Fatalf("pendingRecord(%q) = %v, decoded %v", v, got, want)
			}
		}
	})
}

// writeAsOlderTether changes the journal at path as a tether that keeps
// only what flags says would (its indexes' flags, HandBack and Ended): the
// change, then the counts stored as current with those flags.
func writeAsOlderTether(t *testing.T, path string, flags storedCounts, change func(tx *bolt.Tx) error) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second, NoFreelistSync: true, FreelistType: bolt.FreelistMapType})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.Update(func(tx *bolt.Tx) error {
		if err := change(tx); err != nil {
			return err
		}
		n, err := scanCounted(tx)
		if err != nil {
			return err
		}
		v, _ := json.Marshal(storedCounts{Tx: tx.ID(), N: byState(n), P: byProvider(n), HandBack: flags.HandBack, Ended: flags.Ended})
		return tx.Bucket(bucketMeta).Put(keyCounts, v)
	}); err != nil {
		t.Fatal(err)
	}
}

// A prune pass that meets, in the index of ended intents, an entry naming a
// sandbox's pending hand-back (an entry left behind: the record's bytes
// changed without a write, as a copy restored over it would leave them)
// reads the record again and keeps it: the intent has ended, its hand-back
// has not. The entry is dropped; once handed back the intent goes like any
// other.
func TestPruneKeepsAPendingHandBackTheIndexNames(t *testing.T) {
	j := openTemp(t)
	ctx := t.Context()
	kept := released(t, j, 2, intent.OutcomeKept)
	if !kept.HandBackPending() {
		t.Fatalf("intent %+v: want its hand-back pending", kept)
	}
	if _, err := j.Apply(ctx, &Change{run: func(tx *bolt.Tx) error {
		return tx.Bucket(bucketEnded).Put(append(endedTime(kept.UpdatedAt), kept.ID...), []byte{})
	}}); err != nil {
		t.Fatal(err)
	}
	future := time.Now().Add(time.Hour)
	if n, err := j.Prune(ctx, future, 0); err != nil || n != 0 {
		t.Fatalf("pruned %d, %v; want none: the one intent waits for its hand-back", n, err)
	}
	if got, err := j.Get(kept.ID); err != nil || !got.HandBackPending() {
		t.Fatalf("the pending hand-back after the prune: %+v, %v", got, err)
	}
	checkPending(t, j, "after the prune", kept)
	if got := endedEntries(t, j); len(got) != 0 {
		t.Errorf("the index of ended intents after the pass: %v, want the stale entry dropped", got)
	}
	if _, err := j.MarkHandedBack(kept.ID); err != nil {
		t.Fatal(err)
	}
	if n, err := j.Prune(ctx, future, 0); err != nil || n != 1 {
		t.Errorf("pruned %d, %v; want the handed-back intent", n, err)
	}
}
