package journal

// The intents by provider and state, kept in memory: a metrics scrape
// must cost the same on a journal of ten intents as on one of ten million,
// so it reads no record. Every write or delete of a record goes through putRecord or
// deleteRecord, which note what it does to the counts; the counts move by
// that once the transaction commits (bbolt runs a transaction's OnCommit
// handlers after a successful commit only, so a batch rolled back to rerun
// without a failed change moves nothing). Whatever removes records —
// quarantine, pruning — calls deleteRecord, and the counts follow.
//
// So that opening a journal of a million intents does not decode a million
// records, every commit of the commit loop also stores the counts in the
// meta bucket, with the id of the transaction that wrote them (they share
// the root page bbolt rewrites at every commit anyway). Open takes them as
// they are when no transaction came after that one; a journal written by
// anything else since (an older tether, a salvage, a compaction, bbolt's own
// tools) is counted again by one scan.

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"strings"
	"sync"

	"github.com/tether-run/tether/intent"
	bolt "go.etcd.io/bbolt"
)

var keyCounts = []byte("counts") // meta: storedCounts

// storedCounts is the meta bucket's copy of the counts.
type storedCounts struct {
	Tx int                  `json:"tx"` // the transaction that wrote them
	N  map[intent.State]int `json:"n"`  // by state
	// P are the same by the provider each intent names. A copy without
	// them (written by an older tether) is not taken: the journal is
	// counted again.
	P map[string]map[intent.State]int `json:"p"`
	// HandBack says the index of pending hand-backs (handback.go) was
	// kept in step with the records by the same transaction. A copy
	// without it (an older tether's) is not taken either: the scan that
	// counts the journal again builds the index.
	HandBack bool `json:"handback"`
	// Ended says the same of the index of ended intents (ended.go).
	Ended bool `json:"ended"`
}

// readStoredCounts returns the counts the meta bucket holds, with ok set
// when they are those of tx itself (no transaction came after the one that
// stored them) and by provider.
func readStoredCounts(tx *bolt.Tx) (s storedCounts, ok bool) {
	v := tx.Bucket(bucketMeta).Get(keyCounts)
	if v == nil || json.Unmarshal(v, &s) != nil {
		return storedCounts{}, false
	}
	return s, s.Tx == tx.ID() && s.P != nil
}

// counted is what a record is counted under: the provider it names ("" for
// none) and its state.
type counted struct {
	Provider string
	State    intent.State
}

// tally is a journal's intents by provider and state, and what the write
// transaction under way (tx) changes of them.
type tally struct {
	mu      sync.Mutex
	n       map[counted]int
	tx      *bolt.Tx
	pending map[counted]int
}

// tallies finds a journal's tally from inside one of its transactions
// (putRecord and deleteRecord get only the transaction). A database with no
// tally (opened read-only, being set up by Open, a salvage's new file)
// records nothing: its counts are taken by a scan when it is opened, or when
// they are asked for.
var tallies sync.Map // *bolt.DB → *tally

// Counts returns the journal's intents by state, from memory: no record is
// read. A record whose state cannot be read (a read that meets it will
// quarantine it) is not counted. On a journal opened read-only, it scans.
func (j *Journal) Counts() (map[intent.State]int, error) {
	n, err := j.counts()
	return byState(n), err
}

// CountsByProvider is Counts by the provider each intent names ("" for
// one that names none).
func (j *Journal) CountsByProvider() (map[string]map[intent.State]int, error) {
	n, err := j.counts()
	return byProvider(n), err
}

func (j *Journal) counts() (map[counted]int, error) {
	if t, ok := tallies.Load(j.db); ok {
		t := t.(*tally)
		t.mu.Lock()
		defer t.mu.Unlock()
		return maps.Clone(t.n), nil
	}
	var n map[counted]int
	err := j.view(func(tx *bolt.Tx) (err error) {
		n, err = scanCounted(tx)
		return err
	})
	return n, err
}

func byState(n map[counted]int) map[intent.State]int {
	out := map[intent.State]int{}
	for k, c := range n {
		out[k.State] += c
	}
	return out
}

func byProvider(n map[counted]int) map[string]map[intent.State]int {
	out := map[string]map[intent.State]int{}
	for k, c := range n {
		if out[k.Provider] == nil {
			out[k.Provider] = map[intent.State]int{}
		}
		out[k.Provider][k.State] += c
	}
	return out
}

// fromProviders is the tally of a stored copy's counts by provider.
func fromProviders(p map[string]map[intent.State]int) map[counted]int {
	out := map[counted]int{}
	for prov, n := range p {
		for s, c := range n {
			if c != 0 {
				out[counted{prov, s}] = c
			}
		}
	}
	return out
}

// countsTrusted reports whether the counts stored in db are current and
// its indexes kept in step with them: what startCounting takes as is.
func countsTrusted(db *bolt.DB) bool {
	trusted := false
	db.View(func(tx *bolt.Tx) error {
		s, ok := readStoredCounts(tx)
		trusted = ok && s.HandBack && s.Ended && tx.Bucket(bucketHandBack) != nil && tx.Bucket(bucketEnded) != nil
		return nil
	})
	return trusted
}

// restampCounts stores again, under the current transaction, the counts a
// compaction copied: bolt.Compact copies every bucket as it is, the counts
// and the indexes with them, but the new file's transaction ids start anew.
// It spares a compacted journal the scan that rebuilds them (and the
// growth of the file that rebuilding its indexes at once would cause).
func restampCounts(db *bolt.DB) error {
	return db.Update(func(tx *bolt.Tx) error {
		v := tx.Bucket(bucketMeta).Get(keyCounts)
		var s storedCounts
		if v == nil || json.Unmarshal(v, &s) != nil || s.P == nil {
			return errors.New("no stored counts to keep")
		}
		return writeCounts(tx, fromProviders(s.P))
	})
}

// startCounting takes the counts the last commit stored, or scans for them
// when something else wrote the journal since (or scan is set), and keeps
// them from now on. Open calls it after the migration and the compaction
// it may make, and before the commit loop starts, so no change can fall
// between the two.
func (j *Journal) startCounting(scan bool) error {
	var n map[counted]int
	if err := j.db.View(func(tx *bolt.Tx) error {
		if s, ok := readStoredCounts(tx); ok && !scan && s.HandBack && s.Ended && tx.Bucket(bucketHandBack) != nil && tx.Bucket(bucketEnded) != nil {
			n = fromProviders(s.P)
		}
		return nil
	}); err != nil {
		return fmt.Errorf("journal %s: count intents: %w", j.path, err)
	}
	if n == nil {
		var err error
		if n, err = j.recount(); err != nil {
			return fmt.Errorf("journal %s: count intents: %w", j.path, err)
		}
	}
	tallies.Store(j.db, &tally{n: n})
	return nil
}

// recount counts the intents by one scan, builds the indexes of pending
// hand-backs (handback.go) and of ended intents (ended.go) from the same
// scan, and stores all three, so the next Open takes them as they are.
func (j *Journal) recount() (map[counted]int, error) {
	var n map[counted]int
	err := j.db.Update(func(tx *bolt.Tx) error {
		n = map[counted]int{}
		pending := map[string]bool{}
		s, _ := readStoredCounts(tx)
		wasEnded := s.Ended && tx.Bucket(bucketEnded) != nil
		ended, err := newEndedBuilder(tx)
		if err != nil {
			return err
		}
		if err := tx.Bucket(bucketIntents).ForEach(func(k, v []byte) error {
			c, ok := countedAs(v)
			if !ok {
				return nil
			}
			n[c]++
			if c.State == intent.Released && pendingRecord(v) { // handback.go
				pending[string(k)] = true
			}
			return ended.add(k, v, c)
		}); err != nil {
			return err
		}
		changed, err := rebuildHandBack(tx, pending)
		if err != nil {
			return err
		}
		if changed > 0 {
			j.log.Info("journal: indexed the hand-backs still to do", "journal", j.path, "pending", len(pending), "entries_changed", changed)
		}
		if !wasEnded {
			j.log.Info("journal: indexed the ended intents", "journal", j.path, "ended", ended.entries)
		}
		return writeCounts(tx, n)
	})
	return n, err
}

// stopCounting forgets the tally (Close).
func (j *Journal) stopCounting() { tallies.Delete(j.db) }

// storeCounts writes the counts as they will be once tx commits into the
// meta bucket, with tx's id. The commit loop calls it last in every
// transaction.
func storeCounts(tx *bolt.Tx) error {
	v, ok := tallies.Load(tx.DB())
	if !ok {
		return nil
	}
	t := v.(*tally)
	t.mu.Lock()
	n := maps.Clone(t.n)
	if t.tx == tx {
		for s, k := range t.pending {
			n[s] += k
		}
	}
	t.mu.Unlock()
	return writeCounts(tx, n)
}

// writeCounts stores counts n, as they will be once tx commits, with tx's
// id, in the meta bucket.
func writeCounts(tx *bolt.Tx, n map[counted]int) error {
	s := storedCounts{Tx: tx.ID(), N: byState(n), P: byProvider(n), HandBack: tx.Bucket(bucketHandBack) != nil, Ended: tx.Bucket(bucketEnded) != nil}
	raw, err := json.Marshal(s)
	if err != nil {
		return err
	}
	return tx.Bucket(bucketMeta).Put(keyCounts, raw)
}

func scanCounts(tx *bolt.Tx) (map[intent.State]int, error) {
	n, err := scanCounted(tx)
	return byState(n), err
}

func scanCounted(tx *bolt.Tx) (map[counted]int, error) {
	n := map[counted]int{}
	err := tx.Bucket(bucketIntents).ForEach(func(_, v []byte) error {
		if k, ok := countedAs(v); ok {
			n[k]++
		}
		return nil
	})
	return n, err
}

// countedState is the state a record is counted under (countedAs).
func countedState(v []byte) (intent.State, bool) {
	k, ok := countedAs(v)
	return k.State, ok
}

// countedAs is what a record is counted under; ok is false for a record
// whose state cannot be read. The scan and every change use it, so a
// record is taken off the count it was put on, readable or not (a record
// whose bytes flip after it was counted can leave its count one too high
// until the next scan). It runs in the commit loop for every write, so it
// finds the top-level "state" and "provider" members without decoding the
// record (topLevelString, one walk each of a record of a few hundred
// bytes); a record it cannot walk is decoded instead. A provider that is
// not a string, or that the walk cannot read (an escape in it), counts as
// none: the same record always counts the same.
func countedAs(v []byte) (counted, bool) {
	v, _, err := openRecord(v) // record.go: a record that fails its checksum is not counted
	if v == nil || err != nil {
		return counted{}, false
	}
	s, ok := topLevelString(v, "state")
	p, _ := topLevelString(v, "provider")
	if !ok {
		var r struct {
			State    intent.State `json:"state"`
			Provider any          `json:"provider"`
		}
		if json.Unmarshal(v, &r) != nil {
			return counted{}, false
		}
		s = string(r.State)
		p, _ = r.Provider.(string)
	}
	if !intent.KnownState(intent.State(s)) {
		return counted{}, false
	}
	return counted{Provider: p, State: intent.State(s)}, true
}

// topLevelString returns the value of member key of the JSON object v when
// it is a string without escapes (the last one, as encoding/json takes);
// ok is false when v is not an object it can walk, or key is not such a
// member. encoding/json also takes a member whose name differs in case
// ("STATE", "ſtate") or is escaped for key: any such member makes ok
// false too, so a caller that decodes instead never reads another value
// than encoding/json would. tether writes neither.
func topLevelString(v []byte, key string) (string, bool) {
	i := skipSpace(v, 0)
	if i >= len(v) || v[i] != '{' {
		return "", false
	}
	i++
	found, val := false, ""
	for {
		i = skipSpace(v, i)
		if i < len(v) && v[i] == '}' {
			return val, found
		}
		k, end, plain := scanString(v, i)
		if end < 0 {
			return "", false
		}
		i = skipSpace(v, end)
		if i >= len(v) || v[i] != ':' {
			return "", false
		}
		i = skipSpace(v, i+1)
		if !plain || string(k) != key && strings.EqualFold(string(k), key) {
			return "", false
		}
		if string(k) == key {
			s, end, plainVal := scanString(v, i)
			if end < 0 || !plainVal {
				return "", false
			}
			found, val, i = true, string(s), end
		} else if i = skipValue(v, i); i < 0 {
			return "", false
		}
		i = skipSpace(v, i)
		switch {
		case i < len(v) && v[i] == ',':
			i++
		case i < len(v) && v[i] == '}':
			return val, found
		default:
			return "", false
		}
	}
}

func skipSpace(v []byte, i int) int {
	for i < len(v) && (v[i] == ' ' || v[i] == '\t' || v[i] == '\n' || v[i] == '\r') {
		i++
	}
	return i
}

// scanString reads the string starting at v[i]: its bytes, the index after
// it (-1 when there is none), and whether it had no escape.
func scanString(v []byte, i int) ([]byte, int, bool) {
	if i >= len(v) || v[i] != '"' {
		return nil, -1, false
	}
	plain := true
	for j := i + 1; j < len(v); j++ {
		switch v[j] {
		case '\\':
			plain = false
			j++
		case '"':
			return v[i+1 : j], j + 1, plain
		}
	}
	return nil, -1, false
}

// skipValue returns the index after the value starting at v[i], or -1.
func skipValue(v []byte, i int) int {
	if i >= len(v) {
		return -1
	}
	switch v[i] {
	case '"':
		_, end, _ := scanString(v, i)
		return end
	case '{', '[':
		depth := 0
		for j := i; j < len(v); j++ {
			switch v[j] {
			case '"':
				_, end, _ := scanString(v, j)
				if end < 0 {
					return -1
				}
				j = end - 1
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return j + 1
				}
			}
		}
		return -1
	}
	j := i
	for j < len(v) && v[j] != ',' && v[j] != '}' && v[j] != ']' && v[j] != ' ' && v[j] != '\n' && v[j] != '\t' && v[j] != '\r' {
		j++
	}
	if j == i {
		return -1
	}
	return j
}

// putRecord writes record v of intent id, and counts the change and
// indexes it (handback.go, ended.go).
func putRecord(tx *bolt.Tx, id, v []byte) error {
	b := tx.Bucket(bucketIntents)
	old := b.Get(id)
	from, okFrom := countedAs(old)
	to, okTo := countedAs(v)
	count(tx, from, to, okFrom, okTo)
	// The index's entry is found from the old record, which the Put below
	// may overwrite in place: it is settled first.
	if err := indexEnded(tx, id, old, v, from, to, okFrom, okTo); err != nil {
		return err
	}
	if err := b.Put(id, v); err != nil {
		return fmt.Errorf("write %s/%s: %w", bucketIntents, intent.Clip(string(id)), err)
	}
	return indexHandBack(tx, id, v, from, to, okFrom, okTo)
}

// deleteRecord deletes the record of intent id, and counts it gone and
// takes it out of the indexes (handback.go, ended.go).
func deleteRecord(tx *bolt.Tx, id []byte) error {
	b := tx.Bucket(bucketIntents)
	old := b.Get(id)
	from, okFrom := countedAs(old)
	count(tx, from, counted{}, okFrom, false)
	if err := indexEnded(tx, id, old, nil, from, counted{}, okFrom, false); err != nil {
		return err
	}
	if err := b.Delete(id); err != nil {
		return fmt.Errorf("delete %s/%s: %w", bucketIntents, intent.Clip(string(id)), err)
	}
	return unindexHandBack(tx, id)
}

// count notes what replacing a record counted as from by one counted as
// to (okFrom, okTo false: none, or unreadable) does to the counts, as part
// of tx. A failed write after it rolls the whole transaction back, and the
// note with it.
func count(tx *bolt.Tx, from, to counted, okFrom, okTo bool) {
	if okFrom == okTo && from == to {
		return
	}
	got, ok := tallies.Load(tx.DB())
	if !ok {
		return
	}
	t := got.(*tally)
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.tx != tx {
		// The first change of a new transaction: what an earlier one
		// noted was applied at its commit, or dropped with its rollback.
		t.tx, t.pending = tx, map[counted]int{}
		tx.OnCommit(func() {
			t.mu.Lock()
			defer t.mu.Unlock()
			for s, k := range t.pending {
				if t.n[s] += k; t.n[s] == 0 {
					delete(t.n, s)
				}
			}
			t.tx, t.pending = nil, nil
		})
	}
	if okFrom {
		t.pending[from]--
	}
	if okTo {
		t.pending[to]++
	}
}
