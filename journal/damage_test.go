package journal

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tether-run/tether/intent"
	"github.com/tether-run/tether/journal/boltcheck"
	bolt "go.etcd.io/bbolt"
)

// damageSize is the size of the journal the damage tests start from: the
// 256 KiB of the reproduction.
const damageSize = 256 << 10

var template struct {
	once    sync.Once
	bytes   []byte
	intents map[string]intent.Intent
	owner   string
	err     error
}

// healthyJournal returns a copy of a journal of at least damageSize bytes
// of live intents (built once per test binary), and those intents.
func healthyJournal(t *testing.T) (path string, intents map[string]intent.Intent, owner string) {
	t.Helper()
	template.once.Do(func() {
		dir, err := os.MkdirTemp("", "tether-damage")
		if err != nil {
			template.err = err
			return
		}
		defer os.RemoveAll(dir)
		p := filepath.Join(dir, "journal.db")
		j, err := Open(p, Options{})
		if err != nil {
			template.err = err
			return
		}
		template.owner = j.Owner()
		template.intents = map[string]intent.Intent{}
		var mu sync.Mutex
		for {
			fi, err := os.Stat(p)
			if err != nil {
				template.err = err
				return
			}
			if fi.Size() >= damageSize {
				break
			}
			var wg sync.WaitGroup
			for i := range 64 {
				wg.Go(func() {
					in, _, err := j.Create(t.Context(), intent.Declaration{Labels: map[string]string{"run": fmt.Sprint(i), "team": strings.Repeat("x", 100)}, Key: newID()})
					mu.Lock()
					defer mu.Unlock()
					if err != nil {
						template.err = err
						return
					}
					if i%3 == 0 {
						in, err = j.Observe(in.ID, "sb-"+in.ID)
					}
					template.intents[in.ID] = in
				})
			}
			wg.Wait()
			if template.err != nil {
				return
			}
		}
		// Observe happened after the Create stored above; reread all.
		all, err := j.All()
		if err != nil {
			template.err = err
			return
		}
		for _, in := range all {
			template.intents[in.ID] = in
		}
		j.Close()
		template.bytes, template.err = os.ReadFile(p)
	})
	if template.err != nil {
		t.Fatal(template.err)
	}
	path = filepath.Join(t.TempDir(), "journal.db")
	if err := os.WriteFile(path, template.bytes, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path+MarkerSuffix, []byte(template.owner+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return path, template.intents, template.owner
}

// reachablePages lists the pages bbolt would read (the check's walk).
func reachablePages(t *testing.T, path string) (pages []uint64, pageSize int) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fi, _ := f.Stat()
	pages, pageSize, err = boltcheck.Reachable(f, fi.Size())
	if err != nil {
		t.Fatalf("the healthy journal fails the check: %v", err)
	}
	return pages, pageSize
}

// openDamaged opens a damaged journal: it must fail with ErrDamaged, say
// what to do, and leave the file as it was.
func openDamaged(t *testing.T, path string) {
	t.Helper()
	before, _ := os.ReadFile(path)
	j, err := Open(path, Options{})
	if err == nil {
		j.Close()
		t.Fatal("a damaged journal opened")
	}
	if !errors.Is(err, ErrDamaged) {
		t.Fatalf("error %v is not ErrDamaged", err)
	}
	for _, want := range []string{path, "--salvage-to"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("message does not say %q: %v", want, err)
		}
	}
	after, _ := os.ReadFile(path)
	if !bytes.Equal(before, after) {
		t.Error("the damaged file was changed")
	}
}

// salvaged salvages path into a new journal and returns its intents; every
// one of them must be exactly as it was journaled, under the same owner.
func salvaged(t *testing.T, path string, intents map[string]intent.Intent, owner string) (SalvageReport, map[string]intent.Intent) {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "salvaged.db")
	rep, err := Salvage(path, dst)
	if err != nil {
		t.Fatalf("salvage: %v", err)
	}
	j, err := Open(dst, Options{})
	if err != nil {
		t.Fatalf("the salvaged journal does not open: %v", err)
	}
	defer j.Close()
	if j.Owner() != owner || rep.Owner != owner {
		t.Fatalf("salvaged owner %s (report %s), want %s", j.Owner(), rep.Owner, owner)
	}
	all, err := j.All()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]intent.Intent{}
	for _, in := range all {
		want, ok := intents[in.ID]
		switch {
		case !ok:
			t.Fatalf("salvaged %+v, never journaled", in)
		case reflect.DeepEqual(in, want):
		case rep.Loose > 0 && in.UpdatedAt.Before(want.UpdatedAt) && in.Name == want.Name && reflect.DeepEqual(in.Labels, want.Labels):
			// An older copy, from a freed page, of a record whose
			// current page is lost: the best there is.
		default:
			t.Fatalf("salvaged %+v, journaled %+v", in, want)
		}
		got[in.ID] = in
	}
	live, err := j.Live()
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != rep.Intents || len(live) != rep.Live {
		t.Fatalf("report says %d intents (%d live), the journal holds %d (%d)", rep.Intents, rep.Live, len(got), len(live))
	}
	return rep, got
}

func TestOpenTruncatedJournal(t *testing.T) {
	for _, kib := range []int64{8, 12, 16, 32, 64, 100, 128} {
		t.Run(fmt.Sprintf("%dKiB", kib), func(t *testing.T) {
			path, intents, owner := healthyJournal(t)
			if err := os.Truncate(path, kib<<10); err != nil {
				t.Fatal(err)
			}
			openDamaged(t, path)
			if kib < 12 {
				// Nothing but the two header pages: not even the owner.
				if _, err := Salvage(path, filepath.Join(t.TempDir(), "new.db")); err == nil || !strings.Contains(err.Error(), "nothing to salvage") {
					t.Fatalf("salvage of the headers alone: %v", err)
				}
				return
			}
			if kib < 64 {
				// What the first pages hold depends on where bbolt put
				// the tree, which the group commit's timing varies: the
				// third page may be a branch or the freelist, with
				// neither a record nor the owner. Then there is
				// honestly nothing to salvage; anything else must be
				// salvaged right.
				if _, err := Salvage(path, filepath.Join(t.TempDir(), "probe.db")); err != nil && strings.Contains(err.Error(), "nothing to salvage") {
					t.Logf("the first %d KiB hold no record and no owner: %v", kib, err)
					return
				}
			}
			rep, got := salvaged(t, path, intents, owner)
			t.Logf("salvaged %d of %d intents; damage: %v", len(got), len(intents), rep.Damage)
			if kib >= 64 && len(got) == 0 {
				t.Errorf("nothing salvaged from the first %d KiB", kib)
			}
		})
	}
}

func TestOpenJournalWithRandomPages(t *testing.T) {
	for seed := range uint64(8) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			path, intents, owner := healthyJournal(t)
			pages, pageSize := reachablePages(t, path)
			rng := rand.New(rand.NewPCG(seed, 11))
			f, err := os.OpenFile(path, os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			garbage := make([]byte, pageSize)
			for range 3 {
				for i := range garbage {
					garbage[i] = byte(rng.Uint())
				}
				id := pages[rng.IntN(len(pages))]
				if _, err := f.WriteAt(garbage, int64(id)*int64(pageSize)); err != nil {
					t.Fatal(err)
				}
			}
			f.Close()
			openDamaged(t, path)
			_, got := salvaged(t, path, intents, owner)
			// At most three leaf pages' worth of records are lost.
			perPage := pageSize / 300
			if len(got) < len(intents)-3*perPage {
				t.Errorf("salvaged %d of %d intents; three pages hold at most %d", len(got), len(intents), 3*perPage)
			}
		})
	}
}

// The check must accept every healthy journal, whatever its shape.
func TestCheckAcceptsHealthyJournals(t *testing.T) {
	path, intents, owner := healthyJournal(t)
	j, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	live, err := j.Live()
	if err != nil || len(live) != len(intents) {
		t.Fatalf("%d live of %d: %v", len(live), len(intents), err)
	}
	// Close most of them: pages are rewritten and freed.
	for i, in := range live {
		if i%4 != 0 {
			if _, err := j.Release(in.ID, intent.OutcomeDeleted); err != nil {
				t.Fatal(err)
			}
		}
	}
	j.Close()
	j, err = Open(path, Options{})
	if err != nil {
		t.Fatalf("reopen after releases: %v", err)
	}
	all, err := j.All()
	if err != nil {
		t.Fatal(err)
	}
	j.Close()
	want := map[string]intent.Intent{}
	for _, in := range all {
		want[in.ID] = in
	}
	// A healthy journal salvages whole.
	if rep, got := salvaged(t, path, want, owner); len(got) != len(want) || len(rep.Damage) != 0 || rep.Live != (len(want)+3)/4 {
		t.Fatalf("salvaged %d of %d, %d live, damage %v", len(got), len(want), rep.Live, rep.Damage)
	}
	// An empty journal passes too.
	openTemp(t)
}

func TestOneBadRecordIsQuarantined(t *testing.T) {
	path, intents, owner := healthyJournal(t)
	var victim intent.Intent
	for _, in := range intents {
		victim = in
		break
	}
	// Eight damaged bytes inside its record, in every copy in the file.
	b, _ := os.ReadFile(path)
	needle := []byte(`{"id":"` + victim.ID + `"`)
	n := 0
	for i := bytes.Index(b, needle); i >= 0; i = bytes.Index(b, needle) {
		copy(b[i+1:], "\x00\xff#!@$%^")
		n++
	}
	if n == 0 {
		t.Fatal("record not found in the file")
	}
	os.WriteFile(path, b, 0o600)

	j, err := Open(path, Options{})
	if err != nil {
		t.Fatalf("one damaged record keeps the journal from opening: %v", err)
	}
	live, err := j.Live()
	if err != nil {
		t.Fatalf("one damaged record fails Live: %v", err)
	}
	if len(live) != len(intents)-1 {
		t.Fatalf("%d live, want the %d healthy ones", len(live), len(intents)-1)
	}
	for _, in := range live {
		if in.ID == victim.ID || !reflect.DeepEqual(in, intents[in.ID]) {
			t.Fatalf("live %+v, journaled %+v", in, intents[in.ID])
		}
	}
	q, err := j.Quarantined()
	if err != nil || len(q) != 1 || q[0].ID != victim.ID || q[0].Name() != victim.Name || !strings.Contains(q[0].Reason, "undecodable") {
		t.Fatalf("quarantine %+v, %v; want %s", q, err, victim.ID)
	}
	if _, err := j.Get(victim.ID); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get of the quarantined intent: %v", err)
	}
	j.Close()
	// It stays quarantined, and salvage carries the quarantine over.
	rep, _ := salvaged(t, path, intents, owner)
	if len(rep.Quarantined) != 1 || rep.Quarantined[0].ID != victim.ID {
		t.Fatalf("salvage quarantine %+v", rep.Quarantined)
	}
	if rep.Intents != len(intents)-1 {
		t.Fatalf("salvaged %d intents, want %d", rep.Intents, len(intents)-1)
	}
}

func TestZeroByteJournal(t *testing.T) {
	t.Run("truncated after use", func(t *testing.T) {
		path, _, owner := healthyJournal(t)
		os.Truncate(path, 0)
		_, err := Open(path, Options{})
		if !errors.Is(err, ErrEmptied) {
			t.Fatalf("an emptied journal opened (or failed otherwise): %v", err)
		}
		for _, want := range []string{path, owner, path + MarkerSuffix} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("message does not say %q: %v", want, err)
			}
		}
		if fi, _ := os.Stat(path); fi.Size() != 0 {
			t.Error("the emptied journal was reinitialised")
		}
	})
	t.Run("crash before the first write", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "journal.db")
		os.WriteFile(path, nil, 0o600)
		j, err := Open(path, Options{})
		if err != nil {
			t.Fatalf("a journal never written to does not open: %v", err)
		}
		owner := j.Owner()
		j.Close()
		if m, _ := os.ReadFile(path + MarkerSuffix); strings.TrimSpace(string(m)) != owner {
			t.Fatalf("marker %q, want the owner %s", m, owner)
		}
	})
	t.Run("journal from before the marker", func(t *testing.T) {
		path, _, owner := healthyJournal(t)
		os.Remove(path + MarkerSuffix)
		j, err := Open(path, Options{})
		if err != nil {
			t.Fatal(err)
		}
		j.Close()
		if m, _ := os.ReadFile(path + MarkerSuffix); strings.TrimSpace(string(m)) != owner {
			t.Fatalf("marker %q, want the owner %s", m, owner)
		}
	})
}

// breakRecord makes one of intents undecodable in every copy the file at
// path holds, and returns it.
func breakRecord(t *testing.T, path string, intents map[string]intent.Intent) intent.Intent {
	t.Helper()
	var victim intent.Intent
	for _, in := range intents {
		victim = in
		break
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	needle := []byte(`{"id":"` + victim.ID + `"`)
	n := 0
	for i := bytes.Index(b, needle); i >= 0; i = bytes.Index(b, needle) {
		b[i] = '!'
		n++
	}
	if n == 0 {
		t.Fatal("record not found in the file")
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return victim
}

// Reads that meet the same bad record at once quarantine it once, with
// the bytes that were found.
func TestQuarantineConcurrentReads(t *testing.T) {
	path, intents, _ := healthyJournal(t)
	victim := breakRecord(t, path, intents)
	j, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			if live, err := j.Live(); err != nil || len(live) != len(intents)-1 {
				t.Errorf("%d live, %v", len(live), err)
			}
		})
	}
	wg.Wait()
	q, err := j.Quarantined()
	if err != nil || len(q) != 1 || !bytes.HasPrefix(q[0].Record[recordHeader:], []byte(`!"id":"`+victim.ID)) {
		t.Fatalf("quarantine %+v %v", q, err)
	}
}

// A damaged owner id in sound pages: Open says to salvage, and the salvage
// takes the owner from the records' ownership labels.
func TestDamagedOwnerRecord(t *testing.T) {
	path, intents, owner := healthyJournal(t)
	b, _ := os.ReadFile(path)
	needle := []byte("owner" + owner)
	n := 0
	for i := bytes.Index(b, needle); i >= 0; i = bytes.Index(b, needle) {
		b[i+len("owner")] = 'Z'
		n++
	}
	if n == 0 {
		t.Fatal("owner record not found")
	}
	os.WriteFile(path, b, 0o600)
	_, err := Open(path, Options{})
	if err == nil || !strings.Contains(err.Error(), "--salvage-to") {
		t.Fatalf("open with a damaged owner id: %v", err)
	}
	if _, got := salvaged(t, path, intents, owner); len(got) != len(intents) {
		t.Fatalf("salvaged %d of %d", len(got), len(intents))
	}
}

// The marker follows the journal: one of another owner moved into place
// gets its own owner written.
func TestMarkerFollowsTheJournal(t *testing.T) {
	path, _, owner := healthyJournal(t)
	os.WriteFile(path+MarkerSuffix, []byte("01arz3ndektsv4rrffq69g5fav\n"), 0o600)
	j, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	j.Close()
	if m, _ := os.ReadFile(path + MarkerSuffix); strings.TrimSpace(string(m)) != owner {
		t.Fatalf("marker %q, want %s", m, owner)
	}
}

// A damaged newest header: bbolt falls back to the transaction before it,
// which is sound; Open says so in a warning instead of keeping quiet.
func TestDamagedNewestHeaderWarns(t *testing.T) {
	path, intents, _ := healthyJournal(t)
	b, _ := os.ReadFile(path)
	// Each meta page's transaction id: past the 16-byte page header, the
	// meta's seventh word, in the machine's byte order (bbolt's common.Meta).
	const ps, txid = 4096, 16 + 48
	newest := 0
	if binary.NativeEndian.Uint64(b[ps+txid:]) > binary.NativeEndian.Uint64(b[txid:]) {
		newest = 1
	}
	clear(b[newest*ps : newest*ps+ps])
	os.WriteFile(path, b, 0o600)
	var logs bytes.Buffer
	j, err := Open(path, Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatalf("the previous transaction is sound, yet: %v", err)
	}
	defer j.Close()
	if !strings.Contains(logs.String(), "one of its two headers is not valid") {
		t.Fatalf("no warning: %s", logs.String())
	}
	all, err := j.All()
	if err != nil || len(all) < len(intents)-DefaultMaxBatch {
		t.Fatalf("%d of %d intents: %v", len(all), len(intents), err)
	}
}

// The check must never refuse a journal tether wrote: records of every size
// (overflow pages), long keys, deletes from the live index, many reopens.
func TestCheckAcceptsEveryShape(t *testing.T) {
	path := filepath.Join(t.TempDir(), "journal.db")
	rng := rand.New(rand.NewPCG(3, 4))
	var live []string
	for round := range 4 {
		j, err := Open(path, Options{})
		if err != nil {
			t.Fatalf("round %d: a journal tether wrote is refused: %v", round, err)
		}
		var wg sync.WaitGroup
		var mu sync.Mutex
		for g := range 8 {
			rng := rand.New(rand.NewPCG(uint64(round), uint64(g)))
			wg.Go(func() {
				for i := range 15 {
					labels := map[string]string{}
					for k := range rng.IntN(intent.MaxLabels) {
						labels[fmt.Sprintf("k%02d", k)] = strings.Repeat("v", rng.IntN(intent.MaxLabelValue+1))
					}
					key := ""
					if i%2 == 0 {
						key = fmt.Sprintf("%d-%d-%d-", round, g, i) + strings.Repeat("k", rng.IntN(intent.MaxKey-20))
					}
					in, _, err := j.Create(t.Context(), intent.Declaration{Labels: labels, Key: key})
					if err != nil {
						t.Error(err)
						return
					}
					mu.Lock()
					live = append(live, in.ID)
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		// Close about half of what is live, in random order.
		rng.Shuffle(len(live), func(a, b int) { live[a], live[b] = live[b], live[a] })
		for _, id := range live[:len(live)/2] {
			if rng.IntN(2) == 0 {
				j.Release(id, intent.OutcomeDeleted)
			} else {
				j.Observe(id, "sb-"+id)
				j.Transition(id, intent.Releasing, "")
				j.Transition(id, intent.Gone, "")
			}
		}
		live = live[len(live)/2:]
		j.Close()
	}
	j, err := Open(path, Options{})
	if err != nil {
		t.Fatalf("final open: %v", err)
	}
	got, err := j.Live()
	j.Close()
	if err != nil || len(got) != len(live) {
		t.Fatalf("%d live, want %d: %v", len(got), len(live), err)
	}
	pages, _ := reachablePages(t, path)
	t.Logf("%d pages reachable", len(pages))
}

// The check also guards a read-only open (bbolt's ReadOnly, shared lock):
// a damaged file is refused before bbolt maps it, and two readers share.
func TestCheckedReadOnlyOpen(t *testing.T) {
	path, _, _ := healthyJournal(t)
	open := func() (*bolt.DB, error) {
		var notes []string
		return bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, Timeout: time.Second, OpenFile: openChecked(time.Second, &notes)})
	}
	a, err := open()
	if err != nil {
		t.Fatal(err)
	}
	b, err := open()
	if err != nil {
		t.Fatalf("a second reader: %v", err)
	}
	a.Close()
	b.Close()
	os.Truncate(path, 64<<10)
	if _, err := open(); !errors.Is(err, ErrDamaged) {
		t.Fatalf("read-only open of a truncated journal: %v", err)
	}
}

// A read-only journal (`tether status` beside a stopped tether) skips a
// damaged record as a writable one does, though it cannot quarantine it.
func TestReadOnlySkipsADamagedRecord(t *testing.T) {
	path, intents, _ := healthyJournal(t)
	breakRecord(t, path, intents)
	j, err := OpenReadOnly(path, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	live, err := j.Live()
	if err != nil || len(live) != len(intents)-1 {
		t.Fatalf("%d live of %d, %v", len(live), len(intents), err)
	}
	if q, err := j.Quarantined(); err != nil || len(q) != 0 {
		t.Fatalf("a read-only journal quarantined %+v, %v", q, err)
	}
}

// An entry of the live index whose record is lost is quarantined by name,
// and the other live intents are still read.
func TestLiveIndexWithoutRecord(t *testing.T) {
	path := filepath.Join(t.TempDir(), "journal.db")
	j, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for range 3 {
		in, _, err := j.Create(t.Context(), intent.Declaration{})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, in.ID)
	}
	j.Close()
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucketIntents).Delete([]byte(ids[1])) })
	db.Close()
	if err != nil {
		t.Fatal(err)
	}
	j, err = Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	live, err := j.Live()
	if err != nil || len(live) != 2 || live[0].ID != ids[0] || live[1].ID != ids[2] {
		t.Fatalf("live %+v, %v; want %s and %s", live, err, ids[0], ids[2])
	}
	q, err := j.Quarantined()
	if err != nil || len(q) != 1 || q[0].ID != ids[1] || !strings.Contains(q[0].Reason, "no record") {
		t.Fatalf("quarantine %+v, %v; want %s", q, err, ids[1])
	}
	if n, err := j.LiveCount(); err != nil || n != 2 {
		t.Fatalf("live count %d after the quarantine, %v", n, err)
	}
}
