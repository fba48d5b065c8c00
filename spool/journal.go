package spool

import (
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

	"github.com/tether-run/tether/spool/durable"
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
// write transaction. If it fails, the transaction is rolled back and the
// other ops of the batch are run again without it (as bbolt's own Batch
// does), so a failing op never leaves a half-write beside its neighbours'.
type op struct {
	fn   func(tx *bolt.Tx) error
	done chan error
}

// errRollback aborts a batch's transaction after one op failed.
var errRollback = errors.New("journal: rolled back to rerun the batch without a failed op")

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
		return nil, openError(path, fresh, err)
	}
	if fresh {
		// The file's directory entry must survive a power loss as well.
		_ = durable.SyncDir(filepath.Dir(path))
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
	for len(batch) > 0 {
		failed, ferr := -1, error(nil)
		err := j.db.Update(func(tx *bolt.Tx) error {
			// Intent ids are ULIDs taken in creation order, so new intents are
			// appended at the end of these two buckets: packing their pages
			// full halves the pages each commit writes, and bbolt writes each
			// page with its own pwrite before the fdatasync.
			tx.Bucket(bucketIntents).FillPercent = appendFillPercent
			tx.Bucket(bucketLive).FillPercent = appendFillPercent
			for i, o := range batch {
				if err := o.fn(tx); err != nil {
					failed, ferr = i, err
					return errRollback
				}
			}
			return nil
		})
		if failed >= 0 {
			// Nothing of this transaction is on disk: the failed op gets its
			// error, the others run again in a new one.
			batch[failed].done <- ferr
			batch = append(batch[:failed:failed], batch[failed+1:]...)
			continue
		}
		for _, o := range batch {
			if err != nil {
				o.done <- fmt.Errorf("journal %s: commit: %w", j.path, err)
			} else {
				o.done <- nil
			}
		}
		return
	}
}

// Change is one prepared mutation of the journal: what an intake (the socket
// API, the spool directory, the Daytona API proxy) asks of it. Prepare it
// with PrepareCreate, PrepareObserve, PrepareRelease or PrepareGet, Submit
// it, then Wait for it. Changes submitted one after another commit in that
// order, and those queued together share one transaction and one fsync; a
// change that is refused is rolled back alone.
type Change struct {
	op       op
	run      func(tx *bolt.Tx) error
	intent   Intent
	created  bool
	recorded bool
}

// Submit queues c for the committer without waiting for it.
func (j *Journal) Submit(c *Change) error {
	c.op = op{fn: c.run, done: make(chan error, 1)}
	j.mu.RLock()
	defer j.mu.RUnlock()
	if j.closed {
		return ErrClosed
	}
	j.ops <- &c.op
	return nil
}

// Wait returns the intent as c left it, once c is on disk (or refused). If
// ctx ends first the change may still be committed; callers with an
// idempotency key can retry safely.
func (c *Change) Wait(ctx context.Context) (Intent, error) {
	select {
	case err := <-c.op.done:
		if err != nil {
			return Intent{}, err
		}
		return c.intent, nil
	case <-ctx.Done():
		return Intent{}, fmt.Errorf("journal: gave up waiting for the commit (it may still land): %w", ctx.Err())
	}
}

// Created reports whether a committed create made a new intent (false: an
// idempotent retry answered with the live intent it had made before).
func (c *Change) Created() bool { return c.created }

// Recorded reports whether a committed observe recorded the sandbox id
// (false when it was already known), so a caller acts once per sandbox.
func (c *Change) Recorded() bool { return c.recorded }

// Apply submits c and waits for it.
func (j *Journal) Apply(ctx context.Context, c *Change) (Intent, error) {
	if err := ctx.Err(); err != nil {
		return Intent{}, err
	}
	if err := j.Submit(c); err != nil {
		return Intent{}, err
	}
	return c.Wait(ctx)
}

// NewIntent is what a runner declares.
type NewIntent struct {
	// Key makes Create idempotent: a key used before returns that intent
	// while it is live; once it has ended, the key names a new intent.
	Key string
	// Labels are the scope and request labels (MergeLabels); Create adds
	// the ownership labels.
	Labels  map[string]string
	OnDrain OnDrain // empty means delete
	// Provider and Account are journaled with the intent for the reaper.
	Provider, Account string
	// ID, if set, is the intent id the client chose ([a-z0-9_-], e.g. in a
	// spool file written while tether was not up), so it knew the sandbox
	// name, NamePrefix+ID, in advance. The same id again returns that
	// intent while it is live and is refused once it has ended: a name is
	// never handed out twice. Empty: Create picks a ULID.
	ID string
	// Name, if set, is the creation name the runner itself chose (the
	// Daytona API proxy keeps a runner's own name and records it here,
	// since it is what finds a lost create). Empty: NamePrefix+ID.
	Name string
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
	if n.Name != "" {
		if err := ValidateSandboxName(n.Name); err != nil {
			return err
		}
	}
	return nil
}

// MergeLabels merges label sets, later ones over earlier ones: the scope
// labels of the configuration, then a request's own.
func MergeLabels(sets ...map[string]string) map[string]string {
	n := 0
	for _, s := range sets {
		n += len(s)
	}
	out := make(map[string]string, n)
	for _, s := range sets {
		for k, v := range s {
			out[k] = v
		}
	}
	return out
}

// Plan is the intent that n, declared at now in the journal of owner, is
// journaled as: its name and the labels the sandbox must carry. The journal
// builds every new intent with it, and a client that writes a spool file
// uses it to know the name and labels before tether takes the file.
func Plan(owner string, n NewIntent, now time.Time) Intent {
	labels := MergeLabels(n.Labels, map[string]string{LabelOwner: owner, LabelIntent: n.ID})
	if n.OnDrain == "" {
		n.OnDrain = DrainDelete
	}
	if n.Name == "" {
		n.Name = NamePrefix + n.ID
	}
	return Intent{
		ID: n.ID, Name: n.Name, Labels: labels,
		Provider: n.Provider, Account: n.Account, OnDrain: n.OnDrain,
		State: Pending, Key: n.Key, CreatedAt: now, UpdatedAt: now,
	}
}

// Create journals a new pending intent and returns it once it is fsynced.
// If n.Key names a live intent, it returns that one and created=false.
func (j *Journal) Create(ctx context.Context, n NewIntent) (in Intent, created bool, err error) {
	c, err := j.PrepareCreate(n)
	if err != nil {
		return Intent{}, false, err
	}
	in, err = j.Apply(ctx, c)
	return in, c.created, err
}

// PrepareCreate prepares Create. The intent is built and encoded here, in
// the caller's goroutine, so the single commit loop only looks up the key
// and the id and writes bytes: per-intent CPU spent there delays every
// waiter of the batch. Its id is taken now, so ids follow the order callers
// prepared them, not the order of the commit.
func (j *Journal) PrepareCreate(n NewIntent) (*Change, error) {
	if err := n.validate(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	now := time.Now().UTC()
	if n.ID == "" {
		n.ID, now = newIDAt()
	}
	planned := Plan(j.owner, n, now)
	raw, err := json.Marshal(planned)
	if err != nil {
		return nil, fmt.Errorf("intent %s: encode: %w", n.ID, err)
	}
	c := &Change{}
	key, id, chosen := []byte(n.Key), []byte(n.ID), n.Key == "" && n.ID != ""
	c.run = func(tx *bolt.Tx) error {
		c.created, c.intent = false, Intent{}
		intents, keys := tx.Bucket(bucketIntents), tx.Bucket(bucketKeys)
		if len(key) > 0 {
			if old := keys.Get(key); old != nil {
				in, err := load(tx, string(old))
				if err != nil {
					return err
				}
				if in.Live() {
					c.intent = in
					return nil
				}
				// The key's intent has ended: the key names a new one.
			}
		}
		if v := intents.Get(id); v != nil {
			in, err := decode(id, v)
			if err != nil {
				return err
			}
			if chosen && in.Live() {
				c.intent = in // the same spool file taken twice
				return nil
			}
			return fmt.Errorf("intent %s is %s: %w", n.ID, in.State, ErrIDTaken)
		}
		if len(key) > 0 {
			if err := keys.Put(key, id); err != nil {
				return err
			}
		}
		if err := intents.Put(id, raw); err != nil {
			return err
		}
		if err := tx.Bucket(bucketLive).Put(id, []byte{}); err != nil {
			return err
		}
		c.intent, c.created = planned, true
		return nil
	}
	return c, nil
}

// PrepareGet prepares a read of intent id in commit order, so an intake can
// act on an intent a change queued before it declared.
func (j *Journal) PrepareGet(id string) (*Change, error) {
	return j.prepareUpdate(id, func(*Intent) (bool, error) { return false, nil }), nil
}

// prepareUpdate loads intent id inside the transaction, lets change decide
// (and refuse before anything is written), and stores the result if change
// reports it changed something.
func (j *Journal) prepareUpdate(id string, change func(in *Intent) (changed bool, err error)) *Change {
	c := &Change{}
	c.run = func(tx *bolt.Tx) error {
		if err := ValidateIntentID(id); err != nil {
			return fmt.Errorf("%w: %w", ErrNotFound, err)
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
		c.intent = in
		return nil
	}
	return c
}

func (j *Journal) update(id string, change func(in *Intent) (changed bool, err error)) (Intent, error) {
	return j.Apply(context.Background(), j.prepareUpdate(id, change))
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
	c, err := j.PrepareObserve(id, sandboxID)
	if err != nil {
		return Intent{}, false, err
	}
	in, err = j.Apply(context.Background(), c)
	return in, c.recorded, err
}

// PrepareObserve prepares Observe.
func (j *Journal) PrepareObserve(id, sandboxID string) (*Change, error) {
	if err := ValidateSandboxID(sandboxID); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	var c *Change
	c = j.prepareUpdate(id, func(in *Intent) (bool, error) {
		c.recorded = false
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
		c.recorded = true
		return true, nil
	})
	return c, nil
}

// Transition moves an intent to state to, if the state machine allows it,
// and records lastErr (empty clears it).
func (j *Journal) Transition(id string, to State, lastErr string) (Intent, error) {
	return j.update(id, func(in *Intent) (bool, error) {
		return moveTo(in, to, lastErr)
	})
}

// moveTo is the state machine's step on an intent being updated: it moves
// in to state to, recording lastErr, or refuses with ErrIllegalTransition.
func moveTo(in *Intent, to State, lastErr string) (bool, error) {
	if !CanTransition(in.State, to) {
		return false, fmt.Errorf("intent %s: %s → %s: %w", in.ID, in.State, to, ErrIllegalTransition)
	}
	in.State = to
	in.LastError = lastErr
	return true, nil
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
	c, err := j.PrepareRelease(id, outcome)
	if err != nil {
		return Intent{}, err
	}
	return j.Apply(context.Background(), c)
}

// PrepareRelease prepares Release.
func (j *Journal) PrepareRelease(id string, outcome string) (*Change, error) {
	if err := ValidateOutcome(outcome); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if outcome == "" {
		outcome = OutcomeDeleted
	}
	return j.prepareUpdate(id, func(in *Intent) (bool, error) {
		if in.State == Released {
			return false, nil
		}
		if !CanTransition(in.State, Released) {
			return false, fmt.Errorf("intent %s is %s, cannot be released: %w", in.ID, in.State, ErrIllegalTransition)
		}
		in.State = Released
		in.Outcome = outcome
		return true, nil
	}), nil
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

// Live returns the live intents (pending, observed, releasing) in id order
// (creation order for the ULIDs tether picks). A record that cannot be read
// is quarantined and logged, not returned: one damaged record must not keep
// the others from the drain.
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
		return fmt.Errorf("intent %s: encode: %w", in.ID, err)
	}
	if err := put(tx, bucketIntents, in.ID, v); err != nil {
		return err
	}
	if in.Live() {
		return put(tx, bucketLive, in.ID, nil)
	}
	return tx.Bucket(bucketLive).Delete([]byte(in.ID))
}

func put(tx *bolt.Tx, bucket []byte, k string, v []byte) error {
	if v == nil {
		v = []byte{}
	}
	if err := tx.Bucket(bucket).Put([]byte(k), v); err != nil {
		return fmt.Errorf("write %s/%s: %w", bucket, truncate(k), err)
	}
	return nil
}
