package spool

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/oklog/ulid/v2"
	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
)

// DefaultLockTimeout is how long Open waits for another process's lock on
// the journal before giving up with ErrLocked. A live tether holds it for
// its whole life, so waiting longer would only delay the error.
const DefaultLockTimeout = time.Second

// DefaultMaxBatch bounds how many mutations share one transaction (one
// fsync). Larger batches amortise the fsync further but make every waiter
// in the batch wait for the whole batch's encoding.
const DefaultMaxBatch = 1024

// appendFillPercent is how full bbolt packs the pages it splits in the
// buckets keyed by intent id (bbolt's default, 0.5, suits random inserts).
const appendFillPercent = 1.0

// SchemaVersion is the layout of the journal's buckets. A journal written
// with another version is refused, never rewritten.
const SchemaVersion = 1

// Options tune Open. The zero value is the defaults.
type Options struct {
	// LockTimeout bounds the wait for the file lock (default DefaultLockTimeout).
	LockTimeout time.Duration
	// MaxBatch bounds the mutations committed in one transaction (default DefaultMaxBatch).
	MaxBatch int
	// Logger gets what the journal finds wrong while it keeps working: a
	// record it quarantined, a marker it could not write. Nil discards.
	Logger *slog.Logger
}

// Errors of the journal. They are wrapped with the intent id or path.
var (
	// ErrLocked: another live process holds the journal.
	ErrLocked = errors.New("journal is held by another running tether")
	// ErrNotFound: no intent with that id or key.
	ErrNotFound = errors.New("intent not found")
	// ErrObservedOther: a different sandbox id was already observed for the intent.
	ErrObservedOther = errors.New("a different sandbox id was already observed")
	// ErrIllegalTransition: the state machine does not allow the move.
	ErrIllegalTransition = errors.New("illegal state transition")
	// ErrIDTaken: a client-chosen intent id is already used by another intent.
	ErrIDTaken = errors.New("intent id already in use")
	// ErrClosed: the journal was closed.
	ErrClosed = errors.New("journal closed")
	// ErrInvalid: the request itself is wrong (labels, key, on_drain ...).
	ErrInvalid = errors.New("invalid intent")
)

var (
	bucketMeta    = []byte("meta")
	bucketIntents = []byte("intents") // id → JSON Intent
	bucketKeys    = []byte("keys")    // idempotency key → id
	bucketLive    = []byte("live")    // id → nothing, for the live ones only
	keyOwner      = []byte("owner")
	keySchema     = []byte("schema")
)

// Journal is tether's durable record of intents: a bbolt file, held with an
// exclusive lock for as long as it is open. Every mutation is committed and
// fsynced before its method returns; concurrent mutations share one
// transaction (group commit), so throughput grows with concurrency while
// each caller still waits only for its own data to be on disk.
type Journal struct {
	db    *bolt.DB
	path  string
	owner string
	log   *slog.Logger

	maxBatch int
	ops      chan *op
	mu       sync.RWMutex // guards closed against sends on ops
	closed   bool
	done     chan struct{}
	stats    struct{ commits, ops, busy atomic.Int64 }
}

// CommitStats says how well group commit works: Ops/Commits is the mean
// batch size.
type CommitStats struct {
	Commits, Ops int64
	Busy         time.Duration // time spent committing
}

// Stats returns the commit counters since Open.
func (j *Journal) Stats() CommitStats {
	return CommitStats{Commits: j.stats.commits.Load(), Ops: j.stats.ops.Load(), Busy: time.Duration(j.stats.busy.Load())}
}

// op is one mutation waiting for the committer. fn runs inside the shared
// write transaction; it must check everything before it writes, so that a
// refused op leaves the transaction untouched for the others. Writes go
// through put/del, whose failures abort the whole batch.
type op struct {
	fn   func(tx *bolt.Tx) error
	done chan error
}

// writeError marks a failed write: the transaction may be half-changed, so
// the whole batch is rolled back and every op in it fails.
type writeError struct{ err error }

func (e *writeError) Error() string { return e.err.Error() }
func (e *writeError) Unwrap() error { return e.err }

// Open opens (or creates) the journal at path, creating its directory. A
// journal locked by another process fails within opts.LockTimeout with
// ErrLocked; a file that is not a readable tether journal fails with an
// error naming it, and is left exactly as it was.
func Open(path string, opts Options) (j *Journal, err error) {
	if opts.LockTimeout <= 0 {
		opts.LockTimeout = DefaultLockTimeout
	}
	if opts.MaxBatch <= 0 {
		opts.MaxBatch = DefaultMaxBatch
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("journal %s: create directory: %w", path, err)
	}
	_, statErr := os.Stat(path)
	fresh := errors.Is(statErr, os.ErrNotExist)

	db, notes, err := openBolt(path, opts.LockTimeout)
	if errors.Is(err, berrors.ErrTimeout) {
		return nil, fmt.Errorf("journal %s: %w (waited %s for its lock; run one tether per journal, or give this one its own --journal)", path, ErrLocked, opts.LockTimeout)
	}
	if errors.Is(err, ErrDamaged) || errors.Is(err, ErrEmptied) {
		return nil, damageAdvice(path, err)
	}
	if err != nil {
		return nil, fmt.Errorf("journal %s: cannot open: %w (the file was left as it is; move it aside to start a new journal)", path, err)
	}
	if fresh {
		// The file's directory entry must survive a power loss as well.
		syncDir(filepath.Dir(path))
	}
	owner, err := initJournal(db)
	if err != nil {
		db.Close()
		if errors.Is(err, errOwnerDamaged) {
			return nil, fmt.Errorf("journal %s: %w; its intents may be readable: salvage them with `tether drain --journal %s --salvage-to NEW.db` (the file was left as it is)", path, err, path)
		}
		return nil, fmt.Errorf("journal %s: %w (the file was left as it is)", path, err)
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	for _, n := range notes {
		// Normal after a crash in the middle of a commit (that commit was
		// never acknowledged); otherwise the last commit may be lost.
		log.Warn("journal: one of its two headers is not valid; using the transaction before it", "journal", path, "header", n)
	}
	if err := ensureMarker(path, owner); err != nil {
		// The journal works without it; only a later truncation to 0
		// bytes would go unnoticed.
		log.Warn("journal: cannot write the marker that tells an emptied journal from a new one", "err", err)
	}
	j = &Journal{
		db:       db,
		path:     path,
		owner:    owner,
		log:      log,
		maxBatch: opts.MaxBatch,
		ops:      make(chan *op, opts.MaxBatch),
		done:     make(chan struct{}),
	}
	go j.commitLoop()
	return j, nil
}

// openBolt turns a panic inside bbolt on a damaged file into an error: a
// corrupt journal must be reported, never crash tether.
func openBolt(path string, timeout time.Duration) (db *bolt.DB, notes []string, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("corrupt journal: %v", r)
		}
	}()
	// The freelist is rebuilt by a scan at open instead of being written
	// with every commit: fewer pages per commit, and journals stay small
	// enough for the scan to be quick.
	// openChecked takes the lock and checks the file before bbolt maps
	// it: a damaged file fails here instead of on bbolt's own goroutine.
	db, err = bolt.Open(path, 0o600, &bolt.Options{Timeout: timeout, NoFreelistSync: true, FreelistType: bolt.FreelistMapType,
		OpenFile: openChecked(timeout, &notes)})
	return db, notes, err
}

// readyJournal returns the owner of a journal that has every bucket and the
// schema this tether reads; ok is false when initJournal has work to do (or
// an error to report).
func readyJournal(db *bolt.DB) (owner string, ok bool) {
	_ = db.View(func(tx *bolt.Tx) error {
		meta := tx.Bucket(bucketMeta)
		if meta == nil || string(meta.Get(keySchema)) != strconv.Itoa(SchemaVersion) {
			return nil
		}
		for _, b := range [][]byte{bucketIntents, bucketKeys, bucketLive} {
			if tx.Bucket(b) == nil {
				return nil
			}
		}
		owner = string(meta.Get(keyOwner))
		ok = isULID(owner)
		return nil
	})
	return owner, ok
}

// initJournal creates the buckets and the owner id of a new journal, and
// checks an existing one is a tether journal of a known schema.
func initJournal(db *bolt.DB) (owner string, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("corrupt journal: %v", r)
		}
	}()
	// A journal already set up is only read: a write transaction would
	// cost two fdatasyncs on every start for nothing.
	if owner, ok := readyJournal(db); ok {
		return owner, nil
	}
	err = db.Update(func(tx *bolt.Tx) error {
		meta := tx.Bucket(bucketMeta)
		if meta == nil {
			empty := true
			_ = tx.ForEach(func([]byte, *bolt.Bucket) error { empty = false; return nil })
			if !empty {
				return errors.New("not a tether journal (it has data but no meta bucket)")
			}
			var err error
			if meta, err = tx.CreateBucket(bucketMeta); err != nil {
				return err
			}
			if err := meta.Put(keyOwner, []byte(newID())); err != nil {
				return err
			}
			if err := meta.Put(keySchema, []byte(strconv.Itoa(SchemaVersion))); err != nil {
				return err
			}
		}
		if v := string(meta.Get(keySchema)); v != strconv.Itoa(SchemaVersion) {
			return fmt.Errorf("journal schema version %q, this tether reads version %d", v, SchemaVersion)
		}
		owner = string(meta.Get(keyOwner))
		if !isULID(owner) {
			return fmt.Errorf("journal owner id %q is not a lower-case ULID: %w", truncate(owner), errOwnerDamaged)
		}
		for _, b := range [][]byte{bucketIntents, bucketKeys, bucketLive} {
			if _, err := tx.CreateBucketIfNotExists(b); err != nil {
				return err
			}
		}
		return nil
	})
	return owner, err
}

func syncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
}

// newID returns a fresh lower-case ULID. ulid.Make is monotonic within the
// process, so ids sort in creation order.
func newID() string { return strings.ToLower(ulid.Make().String()) }

// idMu makes the id and the creation time of concurrent creates one step,
// so intents sorted by id (the order the journal keeps) are also sorted by
// CreatedAt.
var idMu sync.Mutex

// newIDAt is newID with the creation time taken in the same step.
func newIDAt() (string, time.Time) {
	idMu.Lock()
	defer idMu.Unlock()
	now := time.Now().UTC()
	return newID(), now
}

// Owner is the journal's owner id, created once with the journal.
func (j *Journal) Owner() string { return j.owner }

// Path is the journal's file.
func (j *Journal) Path() string { return j.path }

// Close waits for queued mutations to commit, then releases the file and
// its lock. Later calls fail with ErrClosed.
func (j *Journal) Close() error {
	j.mu.Lock()
	if j.closed {
		j.mu.Unlock()
		return nil
	}
	j.closed = true
	close(j.ops)
	j.mu.Unlock()
	<-j.done
	return j.db.Close()
}

// commitLoop is the group committer: it takes every op queued while the
// previous transaction was being fsynced and commits them together. Under
// no load a batch is one op and waits for nothing; under load the batch
// grows, up to maxBatch, with no timer involved.
func (j *Journal) commitLoop() {
	defer close(j.done)
	batch := make([]*op, 0, j.maxBatch)
	for first := range j.ops {
		batch = append(batch[:0], first)
	fill:
		for len(batch) < j.maxBatch {
			select {
			case o, ok := <-j.ops:
				if !ok {
					break fill
				}
				batch = append(batch, o)
			default:
				break fill
			}
		}
		start := time.Now()
		j.commit(batch)
		j.stats.commits.Add(1)
		j.stats.ops.Add(int64(len(batch)))
		j.stats.busy.Add(int64(time.Since(start)))
	}
}

func (j *Journal) commit(batch []*op) {
	results := make([]error, len(batch))
	err := j.db.Update(func(tx *bolt.Tx) error {
		// Intent ids are ULIDs taken in creation order, so new intents are
		// appended at the end of these two buckets: packing their pages
		// full halves the pages each commit writes, and bbolt writes each
		// page with its own pwrite before the fdatasync.
		tx.Bucket(bucketIntents).FillPercent = appendFillPercent
		tx.Bucket(bucketLive).FillPercent = appendFillPercent
		for i, o := range batch {
			results[i] = o.fn(tx)
			var we *writeError
			if errors.As(results[i], &we) {
				return we.err
			}
		}
		return nil
	})
	for i, o := range batch {
		if err != nil {
			o.done <- fmt.Errorf("journal %s: commit: %w", j.path, err)
		} else {
			o.done <- results[i]
		}
	}
}

// mutate runs fn in a group-committed transaction and returns once that
// transaction is on disk (or failed). If ctx ends first the mutation may
// still be committed; callers with an idempotency key can retry safely.
func (j *Journal) mutate(ctx context.Context, fn func(tx *bolt.Tx) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	o, err := j.submit(fn)
	if err != nil {
		return err
	}
	select {
	case err := <-o.done:
		return err
	case <-ctx.Done():
		return fmt.Errorf("journal: gave up waiting for the commit (it may still land): %w", ctx.Err())
	}
}

// submit queues fn for the committer without waiting. Ops submitted one
// after another from one goroutine commit in that order.
func (j *Journal) submit(fn func(tx *bolt.Tx) error) (*op, error) {
	o := &op{fn: fn, done: make(chan error, 1)}
	j.mu.RLock()
	defer j.mu.RUnlock()
	if j.closed {
		return nil, ErrClosed
	}
	j.ops <- o
	return o, nil
}

// NewIntent is what a runner declares.
type NewIntent struct {
	// Key makes Create idempotent: a key used before returns that intent.
	Key string
	// Labels are the scope labels; the ownership labels are added by Create.
	Labels  map[string]string
	OnDrain OnDrain // empty means delete
	// Provider and Account are journaled with the intent for the reaper.
	Provider, Account string
	// ID, if set, is the intent id to use (a lower-case ULID chosen by the
	// client, e.g. a spool file written while tether was not up, so the
	// runner knew the sandbox name in advance). Empty: Create picks one.
	ID string
}

func (n NewIntent) validate() error {
	if err := ValidateLabels(n.Labels); err != nil {
		return err
	}
	if err := ValidateOnDrain(n.OnDrain); err != nil {
		return err
	}
	if n.Key != "" {
		if err := ValidateKey(n.Key); err != nil {
			return err
		}
	}
	if n.ID != "" {
		if err := ValidateIntentID(n.ID); err != nil {
			return err
		}
	}
	return nil
}

// Create journals a new pending intent and returns it once it is fsynced.
// If n.Key was used before, it returns that intent and created=false.
func (j *Journal) Create(ctx context.Context, n NewIntent) (in Intent, created bool, err error) {
	in, _, created, err = j.CreateJSON(ctx, n)
	return in, created, err
}

// CreateJSON is Create, also returning the intent's JSON exactly as it is
// journaled (json.Marshal of the Intent), so a server can answer with it
// without encoding the intent a second time.
func (j *Journal) CreateJSON(ctx context.Context, n NewIntent) (in Intent, raw []byte, created bool, err error) {
	if err := n.validate(); err != nil {
		return Intent{}, nil, false, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if n.OnDrain == "" {
		n.OnDrain = DrainDelete
	}
	c, err := j.prepareCreate(n)
	if err != nil {
		return Intent{}, nil, false, err
	}
	if err := j.mutate(ctx, c.fn); err != nil {
		return Intent{}, nil, false, err
	}
	if !c.created {
		// A retry with a known key: the journaled intent, decoded here
		// rather than inside the shared transaction.
		in, err := decode([]byte(c.in.ID), c.raw)
		return in, c.raw, false, err
	}
	return c.in, c.raw, true, nil
}

// createOp is one Create. The intent is built and encoded by the caller
// (prepareCreate), so the single commit loop only looks up the key and the
// id and writes bytes: per-intent CPU spent there delays every waiter of
// the batch.
type createOp struct {
	key     []byte
	in      Intent
	raw     []byte // the record; after a key hit, a copy of the earlier one
	created bool
}

// prepareCreate builds and encodes the intent n (already validated) would
// create. Its id is taken now, so ids follow the order callers prepared
// them, not the order of the commit.
func (j *Journal) prepareCreate(n NewIntent) (*createOp, error) {
	id, now := n.ID, time.Time{}
	if id == "" {
		id, now = newIDAt()
	} else {
		now = time.Now().UTC()
	}
	labels := make(map[string]string, len(n.Labels)+2)
	for k, v := range n.Labels {
		labels[k] = v
	}
	labels[LabelOwner] = j.owner
	labels[LabelIntent] = id
	c := &createOp{in: Intent{
		ID: id, Name: NamePrefix + id, Labels: labels,
		Provider: n.Provider, Account: n.Account, OnDrain: n.OnDrain,
		State: Pending, Key: n.Key, CreatedAt: now, UpdatedAt: now,
	}}
	if n.Key != "" {
		c.key = []byte(n.Key)
	}
	raw, err := json.Marshal(c.in)
	if err != nil {
		return nil, fmt.Errorf("intent %s: encode: %w", id, err)
	}
	c.raw = raw
	return c, nil
}

// fn is the createOp's work inside the shared transaction: refuse or
// replay before any write, then three puts.
func (c *createOp) fn(tx *bolt.Tx) error {
	c.created = false
	if c.key != nil {
		if id := tx.Bucket(bucketKeys).Get(c.key); id != nil {
			v := tx.Bucket(bucketIntents).Get(id)
			if v == nil {
				return fmt.Errorf("intent %s: %w", id, ErrNotFound)
			}
			// bbolt's memory is only valid inside the transaction.
			c.in.ID, c.raw = string(id), bytes.Clone(v)
			return nil
		}
	}
	id := []byte(c.in.ID)
	intents := tx.Bucket(bucketIntents)
	if intents.Get(id) != nil {
		return fmt.Errorf("intent %s: %w", c.in.ID, ErrIDTaken)
	}
	if c.key != nil {
		if err := tx.Bucket(bucketKeys).Put(c.key, id); err != nil {
			return &writeError{fmt.Errorf("write %s/%s: %w", bucketKeys, truncate(string(c.key)), err)}
		}
	}
	if err := intents.Put(id, c.raw); err != nil {
		return &writeError{fmt.Errorf("write %s/%s: %w", bucketIntents, c.in.ID, err)}
	}
	if err := tx.Bucket(bucketLive).Put(id, []byte{}); err != nil {
		return &writeError{fmt.Errorf("write %s/%s: %w", bucketLive, c.in.ID, err)}
	}
	c.created = true
	return nil
}

// createFn is Create's work inside a transaction for callers that collect
// the result themselves (the spool intake); n is already validated.
func (j *Journal) createFn(n NewIntent, out *Intent, created *bool) (func(tx *bolt.Tx) error, error) {
	c, err := j.prepareCreate(n)
	if err != nil {
		return nil, err
	}
	return func(tx *bolt.Tx) error {
		*out, *created = Intent{}, false
		if err := c.fn(tx); err != nil {
			return err
		}
		if !c.created {
			var err error
			*out, err = decode([]byte(c.in.ID), c.raw)
			return err
		}
		*out, *created = c.in, true
		return nil
	}, nil
}

// update loads intent id, lets change decide (and refuse before any write),
// and stores the result if change reports it changed something.
func (j *Journal) update(id string, change func(in *Intent) (changed bool, err error)) (Intent, error) {
	if err := ValidateIntentID(id); err != nil {
		return Intent{}, fmt.Errorf("%w: %w", ErrNotFound, err)
	}
	var out Intent
	err := j.mutate(context.Background(), updateFn(func(*bolt.Tx) (string, error) { return id, nil }, change, &out))
	return out, err
}

// updateFn is update's work inside a transaction. resolve finds the intent
// id inside the same transaction, so a spool file can refer to an intent a
// file before it in the same batch declared.
func updateFn(resolve func(tx *bolt.Tx) (string, error), change func(in *Intent) (bool, error), out *Intent) func(tx *bolt.Tx) error {
	return func(tx *bolt.Tx) error {
		id, err := resolve(tx)
		if err != nil {
			return err
		}
		in, err := load(tx, id)
		if err != nil {
			return err
		}
		changed, err := change(&in)
		if err != nil {
			return err
		}
		if changed {
			in.UpdatedAt = time.Now().UTC()
			if err := store(tx, in); err != nil {
				return err
			}
		}
		*out = in
		return nil
	}
}

// Observe records the provider's sandbox id for an intent: pending becomes
// observed; observing the id already recorded changes nothing; while
// releasing the id is recorded and the state kept. A different id than the
// one recorded is ErrObservedOther.
func (j *Journal) Observe(id, sandboxID string) (Intent, error) {
	in, _, err := j.ObserveRecorded(id, sandboxID)
	return in, err
}

// ObserveRecorded is Observe, also reporting whether this call recorded the
// id (false when it was already known), so a caller acts once per sandbox.
func (j *Journal) ObserveRecorded(id, sandboxID string) (in Intent, recorded bool, err error) {
	if err := ValidateSandboxID(sandboxID); err != nil {
		return Intent{}, false, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	in, err = j.update(id, observeChange(sandboxID, &recorded))
	return in, recorded, err
}

func observeChange(sandboxID string, recorded *bool) func(in *Intent) (bool, error) {
	return func(in *Intent) (bool, error) {
		*recorded = false
		switch {
		case in.SandboxID == sandboxID:
			return false, nil
		case in.SandboxID != "":
			return false, fmt.Errorf("intent %s: sandbox %s already observed, not %s: %w", in.ID, in.SandboxID, sandboxID, ErrObservedOther)
		case in.State == Pending:
			in.State = Observed
		case in.State == Releasing:
		default:
			return false, fmt.Errorf("intent %s is %s, cannot observe a sandbox: %w", in.ID, in.State, ErrIllegalTransition)
		}
		in.SandboxID = sandboxID
		*recorded = true
		return true, nil
	}
}

// Transition moves an intent to state to, if the state machine allows it,
// and records lastErr (empty clears it).
func (j *Journal) Transition(id string, to State, lastErr string) (Intent, error) {
	return j.update(id, func(in *Intent) (bool, error) {
		if !CanTransition(in.State, to) {
			return false, fmt.Errorf("intent %s: %s → %s: %w", in.ID, in.State, to, ErrIllegalTransition)
		}
		in.State = to
		in.LastError = lastErr
		return true, nil
	})
}

// Note records one more resolve attempt and its error, keeping the state.
func (j *Journal) Note(id string, lastErr string) (Intent, error) {
	return j.update(id, func(in *Intent) (bool, error) {
		in.Attempts++
		in.LastError = lastErr
		return true, nil
	})
}

// Release records that the runner handled the sandbox itself (outcome
// deleted or kept; empty means deleted): the intent becomes released and
// tether stops tracking it. Releasing a released intent again changes nothing.
func (j *Journal) Release(id string, outcome string) (Intent, error) {
	if err := ValidateOutcome(outcome); err != nil {
		return Intent{}, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if outcome == "" {
		outcome = OutcomeDeleted
	}
	return j.update(id, releaseChange(outcome))
}

func releaseChange(outcome string) func(in *Intent) (bool, error) {
	return func(in *Intent) (bool, error) {
		if in.State == Released {
			return false, nil
		}
		if !CanTransition(in.State, Released) {
			return false, fmt.Errorf("intent %s is %s, cannot be released: %w", in.ID, in.State, ErrIllegalTransition)
		}
		in.State = Released
		in.Outcome = outcome
		return true, nil
	}
}

// Get returns the intent with that id, or ErrNotFound.
func (j *Journal) Get(id string) (Intent, error) {
	if err := ValidateIntentID(id); err != nil {
		return Intent{}, fmt.Errorf("%w: %w", ErrNotFound, err)
	}
	var in Intent
	err := j.view(func(tx *bolt.Tx) (err error) {
		in, err = load(tx, id)
		return err
	})
	return in, err
}

// GetByKey returns the intent created with that idempotency key, or ErrNotFound.
func (j *Journal) GetByKey(key string) (Intent, error) {
	var in Intent
	err := j.view(func(tx *bolt.Tx) error {
		id := tx.Bucket(bucketKeys).Get([]byte(key))
		if id == nil {
			return fmt.Errorf("key %q: %w", truncate(key), ErrNotFound)
		}
		var err error
		in, err = load(tx, string(id))
		return err
	})
	return in, err
}

// Live returns the live intents (pending, observed, releasing) in creation
// order. A record that cannot be read is quarantined and logged, not
// returned: one damaged record must not keep the others from the drain.
func (j *Journal) Live() ([]Intent, error) {
	out := []Intent{}
	bad := map[string]error{}
	err := j.view(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketLive).ForEach(func(k, _ []byte) error {
			in, err := load(tx, string(k))
			if errors.Is(err, ErrUnreadable) || errors.Is(err, ErrNotFound) {
				if errors.Is(err, ErrNotFound) {
					err = fmt.Errorf("the live index names intent %s, but it has no record", k)
				}
				bad[string(k)] = err
				return nil
			}
			if err != nil {
				return err
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
func (j *Journal) All() ([]Intent, error) {
	out := []Intent{}
	bad := map[string]error{}
	err := j.view(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketIntents).ForEach(func(k, v []byte) error {
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

func (j *Journal) view(fn func(tx *bolt.Tx) error) error {
	j.mu.RLock()
	closed := j.closed
	j.mu.RUnlock()
	if closed {
		return ErrClosed
	}
	return j.db.View(fn)
}

func load(tx *bolt.Tx, id string) (Intent, error) {
	v := tx.Bucket(bucketIntents).Get([]byte(id))
	if v == nil {
		return Intent{}, fmt.Errorf("intent %s: %w", id, ErrNotFound)
	}
	return decode([]byte(id), v)
}

// decode reads a record; a record that is not the intent its key names is
// ErrUnreadable, like one that is not JSON.
func decode(k, v []byte) (Intent, error) {
	var in Intent
	if err := json.Unmarshal(v, &in); err != nil {
		return Intent{}, fmt.Errorf("intent %s: %w: %w", truncate(string(k)), ErrUnreadable, err)
	}
	if err := checkRecord(k, in); err != nil {
		return Intent{}, fmt.Errorf("intent %s: %w: %w", truncate(string(k)), ErrUnreadable, err)
	}
	return in, nil
}

// store writes an intent and keeps the live index in step with its state.
func store(tx *bolt.Tx, in Intent) error {
	v, err := json.Marshal(in)
	if err != nil {
		return &writeError{fmt.Errorf("intent %s: encode: %w", in.ID, err)}
	}
	if err := put(tx, bucketIntents, in.ID, v); err != nil {
		return err
	}
	if in.Live() {
		return put(tx, bucketLive, in.ID, nil)
	}
	if err := tx.Bucket(bucketLive).Delete([]byte(in.ID)); err != nil {
		return &writeError{err}
	}
	return nil
}

func put(tx *bolt.Tx, bucket []byte, k string, v []byte) error {
	if v == nil {
		v = []byte{}
	}
	if err := tx.Bucket(bucket).Put([]byte(k), v); err != nil {
		return &writeError{fmt.Errorf("write %s/%s: %w", bucket, truncate(k), err)}
	}
	return nil
}
