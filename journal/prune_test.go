package journal

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tether-run/tether/intent"
	"github.com/tether-run/tether/internal/testutil"
	bolt "go.etcd.io/bbolt"
)

// fill journals n intents with keys and labels of about pad bytes, 64 at
// a time (group commit), and ends every one but each keepEvery-th: released
// by the runner. It returns the live ones.
func fill(t *testing.T, j *Journal, n, pad, keepEvery int) map[string]intent.Intent {
	t.Helper()
	var mu sync.Mutex
	live := map[string]intent.Intent{}
	var wg sync.WaitGroup
	errs := make(chan error, n)
	next := make(chan int, n)
	for i := range n {
		next <- i
	}
	close(next)
	for range 64 {
		wg.Go(func() {
			for i := range next {
				in, _, err := j.Create(t.Context(), intent.Declaration{Key: fmt.Sprint("k", i), Labels: map[string]string{"n": fmt.Sprint(i), "pad": strings.Repeat("p", pad), "pad2": strings.Repeat("q", pad)}})
				if err != nil {
					errs <- err
					return
				}
				if keepEvery > 0 && i%keepEvery == 0 {
					mu.Lock()
					live[in.ID] = in
					mu.Unlock()
					continue
				}
				if _, err := j.Release(in.ID, intent.OutcomeDeleted); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	return live
}

func TestPrune(t *testing.T) {
	path := filepath.Join(t.TempDir(), "journal.db")
	j, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	live := fill(t, j, 700, 10, 7)
	all, _ := j.All()
	if len(all) != 700 {
		t.Fatalf("%d intents", len(all))
	}
	// Nothing ended before an hour ago: nothing goes.
	if n, err := j.Prune(t.Context(), time.Now().Add(-time.Hour), 64); n != 0 || err != nil {
		t.Fatalf("pruned %d, %v; want 0", n, err)
	}
	n, err := j.Prune(t.Context(), time.Now().Add(time.Second), 64)
	if err != nil || n != 700-len(live) {
		t.Fatalf("pruned %d, %v; want %d", n, err, 700-len(live))
	}
	all, _ = j.All()
	if len(all) != len(live) {
		t.Fatalf("%d intents left, want the %d live", len(all), len(live))
	}
	for _, in := range all {
		if _, ok := live[in.ID]; !ok || !in.Live() {
			t.Fatalf("left %+v", in)
		}
		if got, err := j.GetByKey(in.Key); err != nil || got.ID != in.ID {
			t.Fatalf("the key of a live intent: %v", err)
		}
	}
	// A pruned intent's key is gone with it: the key names a new intent.
	if _, err := j.GetByKey("k1"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("key of a pruned intent: %v", err)
	}
	in, created, err := j.Create(t.Context(), intent.Declaration{Key: "k1"})
	if err != nil || !created || in.State != intent.Pending {
		t.Fatalf("create with a pruned intent's key: %+v %v %v", in, created, err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := j.Prune(ctx, time.Now(), 0); !errors.Is(err, context.Canceled) {
		t.Fatalf("prune with an ended context: %v", err)
	}
}

// With a Retention, the journal prunes by itself, and Close stops it.
func TestPruneInTheBackground(t *testing.T) {
	path := filepath.Join(t.TempDir(), "journal.db")
	j, err := Open(path, Options{Retention: time.Millisecond, PruneEvery: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	live := fill(t, j, 100, 10, 10)
	testutil.Eventually(t, "ended intents pruned", func() (bool, string) {
		all, err := j.All()
		return err == nil && len(all) == len(live), fmt.Sprintf("%d intents, %v", len(all), err)
	})
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
}

// A journal mostly free after pruning is compacted at the next Open: the
// file shrinks, every intent left is as it was, and the copy's temporary
// file is gone.
func TestCompactAtOpen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "journal.db")
	j, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	live := fill(t, j, 3000, 250, 50)
	if _, err := j.Prune(t.Context(), time.Now().Add(time.Second), 0); err != nil {
		t.Fatal(err)
	}
	j.Close()
	before, _ := os.Stat(path)
	if before.Size() < compactMinSize {
		t.Fatalf("journal of %d bytes: too small to test compaction", before.Size())
	}
	// A stale copy a kill left behind is removed.
	if err := os.WriteFile(path+compactSuffix, []byte("stale"), 0o600); err != nil {
		t.Fatal(err)
	}
	j, err = Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	after, _ := os.Stat(path)
	if after.Size()*4 > before.Size() {
		t.Errorf("journal of %d bytes after compaction, %d before", after.Size(), before.Size())
	}
	if _, err := os.Lstat(path + compactSuffix); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the copy's file is left: %v", err)
	}
	got, err := j.Live()
	if err != nil || len(got) != len(live) {
		t.Fatalf("%d live after compaction, %v; want %d", len(got), err, len(live))
	}
	// The compacted file's counts are taken by a scan (its transaction
	// ids start anew), and match its records.
	if counts, _ := j.Counts(); !maps.Equal(counts, scanned(t, j)) {
		t.Errorf("counts after compaction %v, the records say %v", counts, scanned(t, j))
	}
	for _, in := range got {
		want := live[in.ID]
		if in.Name != want.Name || in.Key != want.Key || in.Labels["pad"] != want.Labels["pad"] {
			t.Fatalf("intent %s changed by compaction", in.ID)
		}
	}
	// The compacted journal takes writes, durably, and is held: a second
	// Open waits for its lock.
	if _, _, err := j.Create(t.Context(), intent.Declaration{}); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(path, Options{LockTimeout: 100 * time.Millisecond}); !errors.Is(err, ErrLocked) {
		t.Fatalf("second Open of a compacted journal: %v", err)
	}
	t.Logf("compacted %d → %d bytes", before.Size(), after.Size())
}

// pruneOne reads the record again inside its write transaction and removes
// it only if its intent, read there, ended before the cutoff: the ids the
// read before it listed are not trusted, and a live intent is never
// removed, whatever id it is handed.
func TestPruneOneReadsTheRecordAgain(t *testing.T) {
	j, err := Open(filepath.Join(t.TempDir(), "journal.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	live, _, err := j.Create(t.Context(), intent.Declaration{Key: "live"})
	if err != nil {
		t.Fatal(err)
	}
	ended, _, err := j.Create(t.Context(), intent.Declaration{Key: "ended"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := j.Release(ended.ID, intent.OutcomeDeleted); err != nil {
		t.Fatal(err)
	}
	future, past := time.Now().Add(time.Hour), time.Now().Add(-time.Hour)
	for _, c := range []struct {
		id     string
		cutoff time.Time
		want   bool
	}{
		{live.ID, future, false},
		{ended.ID, past, false},
		{ended.ID, future, true},
	} {
		var got bool
		if _, err := j.Apply(t.Context(), &Change{run: func(tx *bolt.Tx) (err error) {
			got, err = pruneOne(tx, c.id, c.cutoff)
			return err
		}}); err != nil {
			t.Fatal(err)
		}
		if got != c.want {
			t.Errorf("pruneOne(%s, %s) = %v, want %v", c.id, c.cutoff.Format(time.TimeOnly), got, c.want)
		}
	}
	if in, err := j.Get(live.ID); err != nil || !in.Live() {
		t.Fatalf("the live intent after pruneOne: %+v %v", in, err)
	}
	if in, err := j.GetByKey("live"); err != nil || in.ID != live.ID {
		t.Fatalf("the live intent's key after pruneOne: %+v %v", in, err)
	}
	if _, err := j.Get(ended.ID); !errors.Is(err, ErrNotFound) {
		t.Fatalf("the ended intent after pruneOne: %v", err)
	}
}

// FuzzEnded: what a prune pass decides without decoding a record is what
// decoding it decides.
func FuzzEnded(f *testing.F) {
	in := intent.Plan("01hzzzzzzzzzzzzzzzzzzzzzzz", intent.Declaration{ID: "01hzzzzzzzzzzzzzzzzzzzzzzz", Labels: map[string]string{"state": "pending"}}, time.Unix(1e9, 5))
	in.State, in.Outcome = intent.Released, intent.OutcomeDeleted
	v, _ := json.Marshal(in)
	f.Add(v, int64(1e9))
	f.Add(v, int64(2e9))
	f.Add([]byte(`{"state":"gone","updated_at":"2001-09-09T01:46:40Z","updated_at":"2031-01-01T00:00:00Z"}`), int64(1.5e9))
	f.Add([]byte(`{"state":"g\u006fne","updated_at":"2001-09-09T01:46:40+02:00"}`), int64(1e9))
	f.Add([]byte(`{"state":"pending","state":"gone","updated_at":"2001-09-09T01:46:40.5Z"}`), int64(2e9))
	f.Add([]byte(`{"state":"pending","STATE":"gone","updated_at":"2001-09-09T01:46:40Z"}`), int64(2e9))
	f.Add([]byte(`{"state":"pending","ſtate":"gone","updated_at":"2001-09-09T01:46:40Z"}`), int64(2e9))
	f.Add([]byte(`{"state":"gone","updated_at":"2031-01-01T00:00:00Z","upd\u0061ted_at":"2001-09-09T01:46:40Z"}`), int64(2e9))
	f.Fuzz(func(t *testing.T, js []byte, cutoff int64) {
		at := time.Unix(cutoff, 0)
		for _, v := range [][]byte{js, sealRecord(js)} {
			if got, want := ended(v, at), endedDecoded(v, at); got != want {
				t.Fatalf("ended(%q, %s) = %v, decoded %v", v, at, got, want)
			}
		}
	})
}

// An ended intent whose idempotency key a newer intent took (a runner's
// retry after the first sandbox was done with) is pruned past retention;
// the key is the newer intent's and stays so: it still resolves to it, and
// a create repeated with it makes no new intent, now and after a reopen.
func TestPruneLeavesAKeyANewerIntentHolds(t *testing.T) {
	path := filepath.Join(t.TempDir(), "journal.db")
	j, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { j.Close() }()
	ctx := t.Context()
	old, _, err := j.Create(ctx, intent.Declaration{Key: "job-7"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := j.Release(old.ID, intent.OutcomeDeleted); err != nil {
		t.Fatal(err)
	}
	newer, created, err := j.Create(ctx, intent.Declaration{Key: "job-7"})
	if err != nil || !created || newer.ID == old.ID {
		t.Fatalf("create with the ended intent's key: %+v created=%v %v; want a new intent", newer, created, err)
	}
	if n, err := j.Prune(ctx, time.Now().Add(time.Second), 0); err != nil || n != 1 {
		t.Fatalf("pruned %d, %v; want the ended one", n, err)
	}
	if _, err := j.Get(old.ID); !errors.Is(err, ErrNotFound) {
		t.Fatalf("the ended intent after the prune: %v, want pruned", err)
	}
	check := func(when string) {
		t.Helper()
		if got, err := j.GetByKey("job-7"); err != nil || got.ID != newer.ID {
			t.Fatalf("%s: key job-7 resolves to %+v, %v; want the newer intent %s", when, got, err, newer.ID)
		}
		again, created, err := j.Create(ctx, intent.Declaration{Key: "job-7"})
		if err != nil || created || again.ID != newer.ID {
			t.Fatalf("%s: create repeated with key job-7: %s created=%v %v; want the newer intent %s, nothing new", when, again.ID, created, err, newer.ID)
		}
		if all, _ := j.All(); len(all) != 1 {
			t.Fatalf("%s: %d intents, want the newer one alone", when, len(all))
		}
	}
	check("after the prune")
	j.Close()
	if j, err = Open(path, Options{}); err != nil {
		t.Fatal(err)
	}
	check("after a reopen")
}

// A journal mostly in use — a fifth of its intents pruned, well over half
// of the file still held by the others — is not compacted at Open: the copy is never made
// (the compaction's crash point is never reached) and the file is the one
// that was there. Compacting it would cost a start-up a copy of the whole
// file and save less than half of it.
func TestMostlyInUseIsNotCompacted(t *testing.T) {
	path := filepath.Join(t.TempDir(), "journal.db")
	j, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	fill(t, j, 300, 250, 0)
	cutoff := time.Now()
	fill(t, j, 1200, 250, 0)
	if n, err := j.Prune(t.Context(), cutoff, 0); err != nil || n != 300 {
		t.Fatalf("pruned %d, %v; want the first 300", n, err)
	}
	// The premise, on the file as Open finds it: big enough to be
	// compacted, with pages free, but more than half of it in use.
	size, used, worth := mostlyFree(j.db, path)
	if size < compactMinSize || used >= size || used*2 < size {
		t.Fatalf("journal of %d bytes, %d in use: not a journal mostly in use with pages free; the test shows nothing", size, used)
	}
	if worth {
		t.Errorf("mostlyFree says a journal %d%% in use is worth compacting", 100*used/size)
	}
	j.Close()
	before, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	var hits []string
	j, err = Open(path, Options{CrashPoint: func(name string) { hits = append(hits, name) }})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	if len(hits) != 0 {
		t.Errorf("Open compacted a journal %d%% in use (crash points %v)", 100*used/size, hits)
	}
	after, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if !os.SameFile(before, after) {
		t.Errorf("the journal's file was replaced at Open: %d bytes before, %d after", before.Size(), after.Size())
	}
	if _, err := os.Lstat(path + compactSuffix); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a compaction's copy is there: %v", err)
	}
	t.Logf("journal of %d bytes, %d in use (%d%%): kept as it is", size, used, 100*used/size)
}
