package journal

// Reading the journal: one intent, the live ones, all of them, a page of
// them (the counts by state are counts.go's).

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"slices"

	"github.com/tether-run/tether/intent"
	bolt "go.etcd.io/bbolt"
)

// Get returns the intent with that id, or ErrNotFound.
func (j *Journal) Get(id string) (intent.Intent, error) {
	if err := intent.ValidateIntentID(id); err != nil {
		return intent.Intent{}, fmt.Errorf("%w: %w", ErrNotFound, err)
	}
	var in intent.Intent
	err := j.view(func(tx *bolt.Tx) (err error) {
		in, err = load(tx, id)
		return err
	})
	return in, err
}

// GetByKey returns the intent created with that idempotency key, or ErrNotFound.
func (j *Journal) GetByKey(key string) (intent.Intent, error) {
	var in intent.Intent
	err := j.view(func(tx *bolt.Tx) error {
		id := tx.Bucket(bucketKeys).Get([]byte(key))
		if id == nil {
			return fmt.Errorf("key %q: %w", intent.Clip(key), ErrNotFound)
		}
		var err error
		in, err = load(tx, string(id))
		return err
	})
	return in, err
}

// Live returns the live intents (pending, observed, releasing) in id order
// (creation order for the ULIDs tether picks). A record that cannot be read
// is quarantined and logged, not returned: one damaged record must not keep
// the others from the drain.
func (j *Journal) Live() ([]intent.Intent, error) { return j.scan(bucketLive) }

// LiveIDs returns the ids of the live intents in id order, without decoding
// them: the boot replay's snapshot of what an earlier run left live, taken
// before the child starts and cheap enough not to delay it (the intents are
// read, one by one, in the background).
func (j *Journal) LiveIDs() ([]string, error) {
	var out []string
	err := j.view(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketLive).ForEach(func(k, _ []byte) error {
			out = append(out, string(k))
			return nil
		})
	})
	return out, err
}

// LiveCount is len(Live()) without decoding the intents.
func (j *Journal) LiveCount() (int, error) {
	var n int
	err := j.view(func(tx *bolt.Tx) error {
		n = tx.Bucket(bucketLive).Stats().KeyN
		return nil
	})
	return n, err
}

// All returns every intent, live or not, in creation order; unreadable
// records are quarantined as Live does.
func (j *Journal) All() ([]intent.Intent, error) { return j.scan(bucketIntents) }

// scan decodes the intents whose ids are the keys of index (bucketLive,
// bucketHandBack, or bucketIntents itself for all of them), in id order.
// Records it cannot read, and ids of an index with no record, are
// quarantined after the read, not returned.
func (j *Journal) scan(index []byte) ([]intent.Intent, error) {
	out := []intent.Intent{}
	bad := map[string]error{}
	err := j.view(func(tx *bolt.Tx) error {
		intents := tx.Bucket(bucketIntents)
		return tx.Bucket(index).ForEach(func(k, v []byte) error {
			if !bytes.Equal(index, bucketIntents) {
				if v = intents.Get(k); v == nil {
					bad[string(k)] = fmt.Errorf("the %s index names intent %s, but it has no record", index, k)
					return nil
				}
			}
			in, err := decode(k, v)
			if err != nil {
				bad[string(k)] = err
				return nil
			}
			out = append(out, in)
			return nil
		})
	})
	if err == nil && len(bad) > 0 {
		j.quarantine(bad)
	}
	return out, err
}

// PageQuery asks for one page of intents in id order (creation order for
// the ULIDs tether picks).
type PageQuery struct {
	// States keeps only intents in these states; empty means the live ones
	// (pending, observed, releasing). Asking for live states only reads the
	// live index; asking for any other state reads every intent.
	States []intent.State
	// After is the id the page starts after (the previous page's Next);
	// empty starts at the beginning (or, with Reverse, at the end).
	After string
	// Limit bounds the page (DefaultPageLimit when 0, at most MaxPageLimit).
	Limit int
	// Reverse pages from the newest intent to the oldest.
	Reverse bool
}

// Page is one page of intents. Next is the id to pass as After for the
// page that follows; empty when this is the last.
type Page struct {
	Intents []intent.Intent
	Next    string
}

// ValidatePageQuery checks a query from outside (the socket API's query
// string) before it reaches the journal.
func ValidatePageQuery(q PageQuery) error {
	if q.Limit < 0 || q.Limit > intent.MaxPageLimit {
		return fmt.Errorf("limit %d: must be between 1 and %d", q.Limit, intent.MaxPageLimit)
	}
	if q.After != "" {
		if err := intent.ValidateIntentID(q.After); err != nil {
			return fmt.Errorf("cursor: %w", err)
		}
	}
	for _, s := range q.States {
		if !intent.KnownState(s) {
			return fmt.Errorf("state %q: not a state (pending, observed, releasing, gone, stopped, released, never-created, foreign)", s)
		}
	}
	return nil
}

// ListPage returns one page of intents. Only the intents of the page are
// decoded (and, when every state asked for is live, only the live index is
// walked), so a page costs about the same at 100 live intents as at 100,000.
func (j *Journal) ListPage(q PageQuery) (Page, error) {
	var p Page
	err := j.view(func(tx *bolt.Tx) (err error) {
		p, err = listPage(tx, q)
		return err
	})
	return p, err
}

func listPage(tx *bolt.Tx, q PageQuery) (Page, error) {
	if err := ValidatePageQuery(q); err != nil {
		return Page{}, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	limit := q.Limit
	if limit == 0 {
		limit = intent.DefaultPageLimit
	}
	states := q.States
	liveOnly := true
	if len(states) == 0 {
		states = []intent.State{intent.Pending, intent.Observed, intent.Releasing}
	}
	for _, s := range states {
		liveOnly = liveOnly && s.Live()
	}
	bucket := bucketIntents
	if liveOnly {
		bucket = bucketLive
	}
	c := tx.Bucket(bucket).Cursor()
	first, next := c.First, c.Next
	if q.Reverse {
		first, next = c.Last, c.Prev
	}
	k, _ := first()
	if q.After != "" {
		after := []byte(q.After)
		k, _ = c.Seek(after)
		switch {
		case q.Reverse && k == nil:
			k, _ = c.Last()
		case q.Reverse && !bytes.Equal(k, after):
			k, _ = c.Prev() // Seek lands on the first key >= after
		}
		if k != nil && bytes.Equal(k, after) {
			k, _ = next()
		}
	}
	out := Page{Intents: []intent.Intent{}}
	for ; k != nil; k, _ = next() {
		in, err := load(tx, string(k))
		if err != nil {
			return Page{}, err
		}
		if !slices.Contains(states, in.State) {
			continue
		}
		if len(out.Intents) == limit {
			out.Next = out.Intents[limit-1].ID
			break
		}
		out.Intents = append(out.Intents, in)
	}
	return out, nil
}

// LiveCountByState counts the live intents by state, walking only the live
// index and reading only the state of each record: what `tether status`
// shows above a page, at a cost bounded by the live intents, not by the
// journal's history. A record it cannot read counts under "unreadable".
func (j *Journal) LiveCountByState() (map[intent.State]int, error) {
	out := map[intent.State]int{}
	err := j.view(func(tx *bolt.Tx) error {
		intents := tx.Bucket(bucketIntents)
		return tx.Bucket(bucketLive).ForEach(func(k, _ []byte) error {
			var s struct {
				State intent.State `json:"state"`
			}
			v := intents.Get(k)
			js, _, err := openRecord(v)
			if v == nil || err != nil || json.Unmarshal(js, &s) != nil {
				s.State = "unreadable"
			}
			out[s.State]++
			return nil
		})
	})
	return out, err
}

// Size is the journal file's size in bytes.
func (j *Journal) Size() (int64, error) {
	fi, err := os.Stat(j.path)
	if err != nil {
		return 0, err
	}
	return fi.Size(), nil
}

func (j *Journal) view(fn func(tx *bolt.Tx) error) error {
	j.mu.RLock()
	closed := j.closed
	j.mu.RUnlock()
	if closed {
		return ErrClosed
	}
	return j.db.View(fn)
}

func load(tx *bolt.Tx, id string) (intent.Intent, error) {
	v := tx.Bucket(bucketIntents).Get([]byte(id))
	if v == nil {
		return intent.Intent{}, fmt.Errorf("intent %s: %w", id, ErrNotFound)
	}
	return decode([]byte(id), v)
}

// decode reads a record; a record that is not the intent its key names is
// ErrUnreadable, like one that is not JSON.
func decode(k, v []byte) (intent.Intent, error) {
	js, _, err := openRecord(v)
	if err != nil {
		return intent.Intent{}, fmt.Errorf("intent %s: %w: %w", intent.Clip(string(k)), ErrUnreadable, err)
	}
	var in intent.Intent
	if err := json.Unmarshal(js, &in); err != nil {
		return intent.Intent{}, fmt.Errorf("intent %s: %w: %w", intent.Clip(string(k)), ErrUnreadable, err)
	}
	if err := checkRecord(k, in); err != nil {
		return intent.Intent{}, fmt.Errorf("intent %s: %w: %w", intent.Clip(string(k)), ErrUnreadable, err)
	}
	return in, nil
}
