package journal

import (
	"encoding/json"
	"errors"
	"maps"
	"path/filepath"
	"testing"
	"time"

	"github.com/tether-run/tether/intent"
	bolt "go.etcd.io/bbolt"
)

// scanned is the ground truth: the journal's records read back now.
func scanned(t *testing.T, j *Journal) map[intent.State]int {
	t.Helper()
	var n map[intent.State]int
	if err := j.db.View(func(tx *bolt.Tx) (err error) {
		n, err = scanCounts(tx)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return n
}

// checkCounts compares the kept counts with want and with the records.
func checkCounts(t *testing.T, j *Journal, step string, want map[intent.State]int) {
	t.Helper()
	got, err := j.Counts()
	if err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(got, want) {
		t.Errorf("%s: counts %v, want %v", step, got, want)
	}
	if s := scanned(t, j); !maps.Equal(got, s) {
		t.Errorf("%s: counts %v, the records say %v", step, got, s)
	}
}

// gate holds the commit loop inside a transaction until it is closed, so
// the changes submitted meanwhile are committed together in the next one.
func gate(t *testing.T, j *Journal) chan struct{} {
	t.Helper()
	open, held := make(chan struct{}), make(chan struct{})
	if err := j.Submit(&Change{run: func(*bolt.Tx) error { close(held); <-open; return nil }}); err != nil {
		t.Fatal(err)
	}
	<-held
	return open
}

// TestCountsFollowEveryChange: the counts kept in memory match the records
// after every kind of change — create, observe, release, the drain's
// transitions, a batch rolled back around a refused change, a write rolled
// back after it was made, a quarantined record — and a reopen rebuilds the
// same counts from the records.
func TestCountsFollowEveryChange(t *testing.T) {
	path := filepath.Join(t.TempDir(), "journal.db")
	j, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { j.Close() }()
	checkCounts(t, j, "empty", map[intent.State]int{})

	var ids []string
	for range 10 {
		in, _, err := j.Create(t.Context(), intent.Declaration{Key: "k" + string(rune('a'+len(ids)))})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, in.ID)
	}
	// An idempotent retry creates nothing.
	if _, created, err := j.Create(t.Context(), intent.Declaration{Key: "ka"}); err != nil || created {
		t.Fatalf("retry: created=%v %v", created, err)
	}
	checkCounts(t, j, "created", map[intent.State]int{intent.Pending: 10})

	for i, id := range ids[:6] {
		if _, err := j.Observe(id, "sb-"+id); err != nil {
			t.Fatal(err)
		}
		if i == 0 { // observing the same id again changes nothing
			if _, err := j.Observe(id, "sb-"+id); err != nil {
				t.Fatal(err)
			}
		}
	}
	checkCounts(t, j, "observed", map[intent.State]int{intent.Pending: 4, intent.Observed: 6})

	if _, err := j.Release(ids[0], intent.OutcomeKept); err != nil {
		t.Fatal(err)
	}
	if _, err := j.Release(ids[0], intent.OutcomeKept); err != nil { // again: nothing
		t.Fatal(err)
	}
	checkCounts(t, j, "released", map[intent.State]int{intent.Pending: 4, intent.Observed: 5, intent.Released: 1})

	// The drain's steps.
	for _, id := range ids[1:3] {
		if _, err := j.Transition(id, intent.Releasing, ""); err != nil {
			t.Fatal(err)
		}
		if _, err := j.Note(id, "503"); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := j.Transition(ids[1], intent.Gone, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := j.Transition(ids[6], intent.NeverCreated, ""); err != nil {
		t.Fatal(err)
	}
	checkCounts(t, j, "drained", map[intent.State]int{intent.Pending: 3, intent.Observed: 3, intent.Releasing: 1, intent.Gone: 1, intent.Released: 1, intent.NeverCreated: 1})

	// A batch of four changes, one refused: the batch is rolled back and
	// rerun without it, and the counts move once for the three others.
	open := gate(t, j)
	var batch []*Change
	for _, prep := range []func() (*Change, error){
		func() (*Change, error) { return j.PrepareCreate(intent.Declaration{}) },
		func() (*Change, error) { return j.PrepareObserve(ids[3], "sb-other") }, // already observed another id
		func() (*Change, error) { return j.PrepareRelease(ids[7], intent.OutcomeDeleted) },
		func() (*Change, error) { return j.PrepareObserve(ids[8], "sb-8") },
	} {
		c, err := prep()
		if err != nil {
			t.Fatal(err)
		}
		if err := j.Submit(c); err != nil {
			t.Fatal(err)
		}
		batch = append(batch, c)
	}
	close(open)
	for i, c := range batch {
		_, err := c.Wait(t.Context())
		if (i == 1) != errors.Is(err, ErrObservedOther) {
			t.Fatalf("change %d: %v", i, err)
		}
	}
	if st := j.Stats(); st.Ops < st.Commits+3 {
		t.Fatalf("the four changes were not batched (%+v): the rollback is not tested", st)
	}
	checkCounts(t, j, "after a rolled-back batch", map[intent.State]int{intent.Pending: 2, intent.Observed: 4, intent.Releasing: 1, intent.Gone: 1, intent.Released: 2, intent.NeverCreated: 1})

	// A change that wrote a record and then failed: nothing of it counts.
	failed := errors.New("refused after writing")
	if _, err := j.Apply(t.Context(), &Change{run: func(tx *bolt.Tx) error {
		in, err := load(tx, ids[9])
		if err != nil {
			return err
		}
		in.State = intent.Gone
		if err := store(tx, in); err != nil {
			return err
		}
		return failed
	}}); !errors.Is(err, failed) {
		t.Fatalf("got %v", err)
	}
	checkCounts(t, j, "after a write rolled back", map[intent.State]int{intent.Pending: 2, intent.Observed: 4, intent.Releasing: 1, intent.Gone: 1, intent.Released: 2, intent.NeverCreated: 1})

	// A damaged record, quarantined by the read that meets it, leaves the
	// count it was on (pending): its state could still be read.
	if err := j.db.Update(func(tx *bolt.Tx) error {
		v := tx.Bucket(bucketIntents).Get([]byte(ids[9]))
		in, err := decode([]byte(ids[9]), v)
		if err != nil {
			return err
		}
		in.Name = "bad\x00name"
		return putRecord(tx, []byte(ids[9]), mustJSON(t, in))
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := j.Live(); err != nil {
		t.Fatal(err)
	}
	if q, _ := j.Quarantined(); len(q) != 1 {
		t.Fatalf("quarantined %v", q)
	}
	want := map[intent.State]int{intent.Pending: 1, intent.Observed: 4, intent.Releasing: 1, intent.Gone: 1, intent.Released: 2, intent.NeverCreated: 1}
	checkCounts(t, j, "after a quarantine", want)

	// Reopened: the scan at open finds the same.
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	if j, err = Open(path, Options{}); err != nil {
		t.Fatal(err)
	}
	checkCounts(t, j, "reopened", want)
}

// TestCountsReadNoRecord: Counts answers from memory. Records rewritten
// behind the journal's back (straight into bbolt, not through a change)
// do not move them, while a scan of the records does see them; so a
// scrape costs the same whatever the journal holds.
func TestCountsReadNoRecord(t *testing.T) {
	j := openTemp(t)
	for range 50 {
		if _, _, err := j.Create(t.Context(), intent.Declaration{}); err != nil {
			t.Fatal(err)
		}
	}
	checkCounts(t, j, "created", map[intent.State]int{intent.Pending: 50})
	if err := j.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketIntents)
		return b.ForEach(func(k, v []byte) error {
			in, err := decode(k, v)
			if err != nil {
				return err
			}
			in.State = intent.Gone
			return b.Put(k, mustJSON(t, in))
		})
	}); err != nil {
		t.Fatal(err)
	}
	got, err := j.Counts()
	if err != nil {
		t.Fatal(err)
	}
	if got[intent.Pending] != 50 || scanned(t, j)[intent.Gone] != 50 {
		t.Fatalf("Counts %v read the records (they say %v)", got, scanned(t, j))
	}
}

func mustJSON(t *testing.T, in intent.Intent) []byte {
	t.Helper()
	v, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestCountsAtOpen: Open takes the counts the last commit stored, without
// a scan (a stored copy made to look current is believed as it is), and
// scans again when the journal was written since by something that does
// not keep them (as an older tether, a salvage or bbolt's tools would).
func TestCountsAtOpen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "journal.db")
	j, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for range 4 {
		in, _, err := j.Create(t.Context(), intent.Declaration{})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, in.ID)
	}
	if _, err := j.Release(ids[0], intent.OutcomeDeleted); err != nil {
		t.Fatal(err)
	}
	j.Close()
	reopen := func() *Journal {
		t.Helper()
		j, err := Open(path, Options{})
		if err != nil {
			t.Fatal(err)
		}
		return j
	}
	j = reopen()
	checkCounts(t, j, "reopened", map[intent.State]int{intent.Pending: 3, intent.Released: 1})
	j.Close()

	// A stored copy that names the last transaction is taken as it is.
	raw := func(fn func(tx *bolt.Tx) error) {
		t.Helper()
		// As the journal opens it: with no freelist to write back.
		db, err := bolt.Open(path, 0o600, &bolt.Options{NoFreelistSync: true, FreelistType: bolt.FreelistMapType})
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		if err := db.Update(fn); err != nil {
			t.Fatal(err)
		}
	}
	raw(func(tx *bolt.Tx) error {
		v, _ := json.Marshal(storedCounts{Tx: tx.ID(), N: map[intent.State]int{intent.Gone: 77}, P: map[string]map[intent.State]int{"": {intent.Gone: 77}}, HandBack: true, Ended: true})
		return tx.Bucket(bucketMeta).Put(keyCounts, v)
	})
	j = reopen()
	if got, _ := j.Counts(); !maps.Equal(got, map[intent.State]int{intent.Gone: 77}) {
		t.Errorf("Open scanned (%v) though the stored counts were current", got)
	}
	j.Close()
	// One that does not say the hand-back index was kept with it (an
	// older tether's): scanned again.
	raw(func(tx *bolt.Tx) error {
		v, _ := json.Marshal(storedCounts{Tx: tx.ID(), N: map[intent.State]int{intent.Gone: 77}, P: map[string]map[intent.State]int{"": {intent.Gone: 77}}})
		return tx.Bucket(bucketMeta).Put(keyCounts, v)
	})
	j = reopen()
	checkCounts(t, j, "stored without the hand-back index", map[intent.State]int{intent.Pending: 3, intent.Released: 1})
	j.Close()

	// A record written by something that keeps no counts: scanned again.
	raw(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketIntents)
		in, err := decode([]byte(ids[1]), b.Get([]byte(ids[1])))
		if err != nil {
			return err
		}
		in.State = intent.Gone
		return b.Put([]byte(ids[1]), mustJSON(t, in))
	})
	j = reopen()
	defer j.Close()
	checkCounts(t, j, "written by another", map[intent.State]int{intent.Pending: 2, intent.Gone: 1, intent.Released: 1})
	// And the next commit stores them again.
	if _, err := j.Release(ids[2], intent.OutcomeKept); err != nil {
		t.Fatal(err)
	}
	j.Close()
	raw(func(tx *bolt.Tx) error {
		var s storedCounts
		if err := json.Unmarshal(tx.Bucket(bucketMeta).Get(keyCounts), &s); err != nil {
			return err
		}
		if want := (map[intent.State]int{intent.Pending: 1, intent.Gone: 1, intent.Released: 2}); s.Tx != tx.ID()-1 || !maps.Equal(s.N, want) {
			t.Errorf("stored counts %+v after the commit of tx %d, want %v", s, tx.ID()-1, want)
		}
		return nil
	})
}

// FuzzCountedState: on any valid JSON, the state the counts read without
// decoding is the one encoding/json reads; on anything, it does not panic.
func FuzzCountedState(f *testing.F) {
	in := intent.Plan("01hzzzzzzzzzzzzzzzzzzzzzzz", intent.Declaration{
		ID: "01hzzzzzzzzzzzzzzzzzzzzzzz", Labels: map[string]string{"state": "gone", `q"uote`: `{"state":"x"}`}, Provider: "daytona",
	}, time.Now())
	v, _ := json.Marshal(in)
	f.Add(v)
	f.Add([]byte(`{"state":"gone","state":"pending"}`))
	f.Add([]byte(`{"labels":{"state":"gone"},"x":[1,{"state":"a"}],"state":"observed"}`))
	f.Add([]byte(`{"st\u0061te":"gone"}`))
	f.Add([]byte(`{"state":"g\u006fne"}`))
	f.Add([]byte(` { "a" : true , "state" : "released" } `))
	f.Add([]byte(`{"state":"gone"`))
	f.Fuzz(func(t *testing.T, v []byte) {
		got, ok := countedState(v)
		if !json.Valid(v) {
			return
		}
		var r struct {
			State intent.State `json:"state"`
		}
		if json.Unmarshal(v, &r) != nil {
			return // valid JSON that is not an object (or a state that is not a string)
		}
		want, wantOK := r.State, intent.KnownState(r.State)
		if ok != wantOK || (ok && got != want) {
			t.Fatalf("%q: counted as %q (%v), encoding/json reads %q (%v)", v, got, ok, want, wantOK)
		}
	})
}

// TestCountsFollowPruning: pruning removes finished intents in small
// transactions, and the counts lose exactly those.
func TestCountsFollowPruning(t *testing.T) {
	j := openTemp(t)
	var ids []string
	for range 10 {
		in, _, err := j.Create(t.Context(), intent.Declaration{})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, in.ID)
	}
	for _, id := range ids[:7] {
		if _, err := j.Release(id, intent.OutcomeDeleted); err != nil {
			t.Fatal(err)
		}
	}
	checkCounts(t, j, "before pruning", map[intent.State]int{intent.Pending: 3, intent.Released: 7})
	n, err := j.Prune(t.Context(), time.Now().Add(time.Hour), 3)
	if err != nil || n != 7 {
		t.Fatalf("pruned %d: %v", n, err)
	}
	checkCounts(t, j, "after pruning", map[intent.State]int{intent.Pending: 3})
}

// TestCountsByProvider: the counts by provider follow creates and changes
// of intents of several providers (and of none), match the records, are
// taken as stored at a reopen, and a stored copy without them (an older
// tether's) is not taken: the journal is counted again.
func TestCountsByProvider(t *testing.T) {
	path := filepath.Join(t.TempDir(), "journal.db")
	j, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { j.Close() }()
	check := func(step string, want map[string]map[intent.State]int) {
		t.Helper()
		got, err := j.CountsByProvider()
		if err != nil {
			t.Fatal(err)
		}
		var scan map[counted]int
		if err := j.db.View(func(tx *bolt.Tx) (err error) {
			scan, err = scanCounted(tx)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		eq := func(a, b map[string]map[intent.State]int) bool {
			return maps.EqualFunc(a, b, func(x, y map[intent.State]int) bool { return maps.Equal(x, y) })
		}
		if !eq(got, want) {
			t.Errorf("%s: counts by provider %v, want %v", step, got, want)
		}
		if s := byProvider(scan); !eq(got, s) {
			t.Errorf("%s: counts by provider %v, the records say %v", step, got, s)
		}
	}
	ids := map[string]string{}
	for _, p := range []string{"daytona", "e2b", ""} {
		in, _, err := j.Create(t.Context(), intent.Declaration{Provider: p})
		if err != nil {
			t.Fatal(err)
		}
		ids[p] = in.ID
	}
	if _, _, err := j.Create(t.Context(), intent.Declaration{Provider: "e2b"}); err != nil {
		t.Fatal(err)
	}
	// A declaration that names no provider is the default's, as journaled.
	check("created", map[string]map[intent.State]int{"daytona": {intent.Pending: 2}, "e2b": {intent.Pending: 2}})
	if _, err := j.Observe(ids["e2b"], "sb-1"); err != nil {
		t.Fatal(err)
	}
	if _, err := j.Transition(ids["daytona"], intent.NeverCreated, ""); err != nil {
		t.Fatal(err)
	}
	want := map[string]map[intent.State]int{"daytona": {intent.NeverCreated: 1, intent.Pending: 1}, "e2b": {intent.Pending: 1, intent.Observed: 1}}
	check("changed", want)
	if got, _ := j.Counts(); !maps.Equal(got, map[intent.State]int{intent.Pending: 2, intent.Observed: 1, intent.NeverCreated: 1}) {
		t.Errorf("counts by state %v", got)
	}
	j.Close()
	if j, err = Open(path, Options{}); err != nil {
		t.Fatal(err)
	}
	check("reopened", want)
	j.Close()

	// A stored copy by state alone, made to look current: not taken.
	db, err := bolt.Open(path, 0o600, &bolt.Options{NoFreelistSync: true, FreelistType: bolt.FreelistMapType})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(tx *bolt.Tx) error {
		v, _ := json.Marshal(map[string]any{"tx": tx.ID(), "n": map[intent.State]int{intent.Gone: 77}})
		return tx.Bucket(bucketMeta).Put(keyCounts, v)
	}); err != nil {
		t.Fatal(err)
	}
	db.Close()
	if j, err = Open(path, Options{}); err != nil {
		t.Fatal(err)
	}
	check("reopened after an older tether", want)
}
