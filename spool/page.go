package spool

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
)

// MaxPageLimit bounds one page of intents: a page is decoded and encoded in
// memory at once, and a client that wants more pages through them.
const MaxPageLimit = 1000

// DefaultPageLimit is the page size when a query asks for paging without a limit.
const DefaultPageLimit = 100

// PageQuery asks for one page of intents in id order (creation order for
// the ULIDs tether picks).
type PageQuery struct {
	// States keeps only intents in these states; empty means the live ones
	// (pending, observed, releasing). Asking for live states only reads the
	// live index; asking for any other state reads every intent.
	States []State
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
	Intents []Intent
	Next    string
}

// ValidatePageQuery checks a query from outside (the socket API's query
// string) before it reaches the journal.
func ValidatePageQuery(q PageQuery) error {
	if q.Limit < 0 || q.Limit > MaxPageLimit {
		return fmt.Errorf("limit %d: must be between 1 and %d", q.Limit, MaxPageLimit)
	}
	if q.After != "" {
		if err := ValidateIntentID(q.After); err != nil {
			return fmt.Errorf("cursor: %w", err)
		}
	}
	for _, s := range q.States {
		if !knownState(s) {
			return fmt.Errorf("state %q: not a state (pending, observed, releasing, gone, stopped, released, never-created, foreign)", s)
		}
	}
	return nil
}

func knownState(s State) bool {
	switch s {
	case Pending, Observed, Releasing, Gone, Stopped, Released, NeverCreated, Foreign:
		return true
	}
	return false
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
		limit = DefaultPageLimit
	}
	states := q.States
	liveOnly := true
	if len(states) == 0 {
		states = []State{Pending, Observed, Releasing}
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
	out := Page{Intents: []Intent{}}
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

// CountByState counts every intent of the journal by state. It reads only
// the state of each record, not the whole intent.
func (j *Journal) CountByState() (map[State]int, error) {
	out := map[State]int{}
	err := j.view(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketIntents).ForEach(func(k, v []byte) error {
			var s struct {
				State State `json:"state"`
			}
			if err := json.Unmarshal(v, &s); err != nil {
				return fmt.Errorf("intent %s: undecodable record: %w", k, err)
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

// DefaultReadOnlyLockTimeout bounds OpenReadOnly's wait for the shared lock.
// A live tether holds the exclusive lock for its whole life, so a short wait
// is enough to tell "held" from "free".
const DefaultReadOnlyLockTimeout = 200 * time.Millisecond

// OpenReadOnly opens an existing journal for reading only, as `tether
// status` does beside a stopped (or dead) tether: it never creates the file
// nor writes to it. A journal a live tether holds fails within timeout
// (DefaultReadOnlyLockTimeout when 0) with ErrLocked, without waiting for
// it; ask that tether over its socket instead. Mutations on the returned
// journal fail.
func OpenReadOnly(path string, timeout time.Duration) (*Journal, error) {
	if timeout <= 0 {
		timeout = DefaultReadOnlyLockTimeout
	}
	if _, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("journal %s: %w", path, err)
	}
	db, err := openBoltReadOnly(path, timeout)
	if errors.Is(err, berrors.ErrTimeout) {
		return nil, fmt.Errorf("journal %s: %w", path, ErrLocked)
	}
	if err != nil {
		return nil, fmt.Errorf("journal %s: cannot open: %w", path, err)
	}
	owner, ok := readyJournal(db)
	if !ok {
		db.Close()
		return nil, fmt.Errorf("journal %s: not a tether journal of schema %d (or one never opened by tether run)", path, SchemaVersion)
	}
	j := &Journal{db: db, path: path, owner: owner, maxBatch: 1, ops: make(chan *op, 1), done: make(chan struct{})}
	go j.commitLoop() // writes fail in bbolt with "database is in read-only mode"
	return j, nil
}

func openBoltReadOnly(path string, timeout time.Duration) (db *bolt.DB, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("corrupt journal: %v", r)
		}
	}()
	// openChecked takes the (shared) lock and checks the file before bbolt
	// maps it: a damaged journal is an error here, never a panic on bbolt's
	// own goroutine.
	var notes []string
	return bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, Timeout: timeout, OpenFile: openChecked(timeout, &notes)})
}
