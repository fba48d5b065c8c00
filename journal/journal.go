package journal

// Opening and closing the journal: its file, lock, buckets and owner.

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tether-run/tether/intent"
	"github.com/tether-run/tether/journal/access"
	"github.com/tether-run/tether/journal/durable"
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

// SchemaVersion is the layout of the journal's buckets and records. A
// journal of version 1 (records without their checksum, record.go) is
// moved to version 2 by Open, in one transaction; one written with any
// other version is refused, never rewritten, and so is a journal of
// version 2 by a tether that reads only version 1.
const SchemaVersion = 2

// schemaUnchecked is the version whose records carry no checksum.
const schemaUnchecked = 1

// Options tune Open. The zero value is the defaults.
type Options struct {
	// LockTimeout bounds the wait for the file lock (default DefaultLockTimeout).
	LockTimeout time.Duration
	// MaxBatch bounds the mutations committed in one transaction (default DefaultMaxBatch).
	MaxBatch int
	// Logger gets what the journal finds wrong while it keeps working: a
	// record it quarantined, a marker it could not write. Nil discards.
	Logger *slog.Logger
	// Retention, if positive, prunes in the background the intents that
	// ended longer ago than this (prune.go): a pass at once, then every
	// PruneEvery (default DefaultPruneEvery), until Close. Zero keeps them.
	Retention  time.Duration
	PruneEvery time.Duration
	// CrashPoint, if set, is called at the named points of a compaction
	// (CrashCompactBeforeRename, CrashCompactAfterRename): the crash tests
	// pass internal/crashpoint's Hit.
	CrashPoint func(name string)
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

	pruneEvery time.Duration
	stopPrune  context.CancelFunc // nil without a retention
	pruned     chan struct{}      // closed when the prune loop returned
}

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
	fi, statErr := os.Lstat(path)
	fresh := errors.Is(statErr, os.ErrNotExist)
	// A device or a directory is no journal at all, whoever owns it; a
	// symbolic link is refused by the access rule, which names the fix.
	if statErr == nil && fi.Mode()&os.ModeSymlink == 0 && !fi.Mode().IsRegular() {
		return nil, notRegular(path, fi.Mode())
	}
	if err := checkPlace(path); err != nil {
		return nil, err
	}

	// The freelist is rebuilt by a scan at open instead of being written
	// with every commit: fewer pages per commit, and journals stay small
	// enough for the scan to be quick.
	db, notes, err := openBolt(path, bolt.Options{Timeout: opts.LockTimeout, NoFreelistSync: true, FreelistType: bolt.FreelistMapType})
	if errors.Is(err, berrors.ErrTimeout) {
		return nil, fmt.Errorf("journal %s: %w (waited %s for its lock; run one tether per journal, or give this one its own --journal)", path, ErrLocked, opts.LockTimeout)
	}
	if errors.Is(err, ErrDamaged) || errors.Is(err, ErrEmptied) {
		return nil, damageAdvice(path, err)
	}
	if errors.Is(err, access.ErrRefused) {
		return nil, fmt.Errorf("journal %w", err)
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
	hit := opts.CrashPoint
	if hit == nil {
		hit = func(string) {}
	}
	removeStaleCompaction(path)
	recount := false
	if size, used, worth := mostlyFree(db, path); worth {
		start := time.Now()
		trusted := countsTrusted(db) // counts.go
		if ndb, err := compact(db, path, opts.LockTimeout, hit); err != nil {
			log.Warn("journal: could not compact the journal; it keeps its size", "journal", path, "err", err)
		} else {
			// A compacted file's transaction ids start anew, so its stored
			// counts no longer prove themselves current; the copy holds
			// them and the indexes exactly as they were.
			db = ndb
			recount = !trusted || restampCounts(db) != nil
			after, _, _ := mostlyFree(db, path)
			log.Info("journal: compacted", "journal", path, "bytes_before", size, "bytes_in_use", used, "bytes_after", after, "took", time.Since(start).Round(time.Millisecond))
		}
	}
	for _, n := range notes {
		// Normal after a crash in the middle of a commit (that commit was
		// never acknowledged); otherwise the last commit may be lost.
		log.Warn("journal: one of its two headers is not valid; using the transaction before it", "journal", path, "header", n)
	}
	if err := ensureMarker(path, owner); errors.Is(err, access.ErrRefused) {
		db.Close()
		return nil, fmt.Errorf("journal %s: %w", path, err)
	} else if err != nil {
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
	if err := j.startCounting(recount); err != nil { // counts.go
		db.Close()
		return nil, err
	}
	go j.commitLoop()
	if opts.Retention > 0 {
		j.pruneEvery = opts.PruneEvery
		if j.pruneEvery <= 0 {
			j.pruneEvery = DefaultPruneEvery
		}
		var ctx context.Context
		ctx, j.stopPrune = context.WithCancel(context.Background())
		j.pruned = make(chan struct{})
		go j.pruneLoop(ctx, opts.Retention)
	}
	return j, nil
}

// checkPlace refuses a journal whose directory others may change, or whose
// files (the journal, its marker, the marker's temporary file) someone
// else could have planted, before anything is created there: the same rule
// as the socket's and the spool directory's (package access).
func checkPlace(path string) error {
	dir := filepath.Dir(path)
	// A link in place of the directory is followed only if root or
	// tether's user made it: one planted by another user in a shared
	// directory would send the journal anywhere.
	if li, err := os.Lstat(dir); err == nil && li.Mode()&os.ModeSymlink != 0 {
		if uid := access.FileOwner(li); uid != 0 && uid != os.Geteuid() {
			return fmt.Errorf("journal %w", &access.RefusedError{Path: dir, Why: fmt.Sprintf("the journal's directory is a symbolic link owned by uid %d", uid)})
		}
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("journal %s: %w", path, err)
	}
	if err := access.CheckDir(fi, nil); err != nil {
		refused := &access.RefusedError{Path: dir, Why: "the journal's directory is " + err.Error()}
		if uid := access.FileOwner(fi); uid > 0 && uid != os.Geteuid() {
			refused = access.OwnedBy(dir, fi, refused.Why) // another uid's: say how to act as it
		}
		return fmt.Errorf("journal %w", refused)
	}
	for _, p := range companions(path) {
		if err := access.CheckExisting(p); err != nil {
			return fmt.Errorf("journal %w", err)
		}
	}
	return nil
}

// compactSuffix names the new journal a compaction writes before renaming
// it over the old one.
const compactSuffix = ".compact"

// companions are the files beside the journal at path that tether writes.
func companions(path string) []string {
	return []string{path, path + MarkerSuffix, path + MarkerSuffix + ".tmp", path + compactSuffix}
}

// openError says why the journal at path could not be opened, and what to
// do: a journal that did not exist could not be created there (there is no
// file to move aside); an existing one tether may not use is left alone,
// as is one that cannot be read as a journal.
func openError(path string, fresh bool, err error) error {
	switch {
	case fresh:
		return fmt.Errorf("journal %s: cannot create: %w (there was no journal at this path)", path, err)
	case errors.Is(err, fs.ErrPermission):
		return fmt.Errorf("journal %s: cannot open: %w (tether's user may not read and write this file; it was left as it is%s)", path, err, actAsOwner(path))
	}
	return fmt.Errorf("journal %s: cannot open: %w (the file was left as it is; move it aside to start a new journal)", path, err)
}

// actAsOwner says, for a journal another uid owns, how to act as that uid:
// it is most likely that uid's own tether's (a container run with --user),
// and taking it from its owner (chown) would stop that tether from opening
// it. "" when the journal is this user's, root's, or cannot be read.
func actAsOwner(path string) string {
	fi, err := os.Lstat(path)
	if err != nil {
		return ""
	}
	uid := access.FileOwner(fi)
	if uid <= 0 || uid == os.Geteuid() {
		return ""
	}
	return fmt.Sprintf("; it is uid %d's: run tether as that uid (setpriv --reuid=%d --regid=%d --clear-groups tether ..., or docker run --user %d ...) or as root, and do not chown it, or uid %d's own tether can no longer open it", uid, uid, uid, uid, uid)
}

// notRegular: the path given as a journal is /dev/null, a directory, ...:
// there is nothing to move aside, the path is wrong.
func notRegular(path string, m fs.FileMode) error {
	return fmt.Errorf("journal %s: not a regular file (%s): the journal must be a file of its own", path, access.DescribeType(m))
}

// openBolt opens path with bbolt behind the page check, and turns a panic
// inside bbolt on a damaged file into an error: a corrupt journal must be
// reported, never crash tether. openChecked takes the lock (exclusive, or
// shared for o.ReadOnly) and checks the file before bbolt maps it: a
// damaged file fails here instead of on bbolt's own goroutine. notes are
// what the check found worth a warning in a file it passed.
func openBolt(path string, o bolt.Options) (db *bolt.DB, notes []string, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("corrupt journal: %v", r)
		}
	}()
	o.OpenFile = openChecked(o.Timeout, &notes)
	db, err = bolt.Open(path, 0o600, &o)
	return db, notes, err
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
	fi, err := os.Lstat(path)
	if err != nil {
		return nil, fmt.Errorf("journal %s: %w", path, err)
	}
	if fi.Mode()&os.ModeSymlink == 0 && !fi.Mode().IsRegular() {
		return nil, notRegular(path, fi.Mode())
	}
	db, _, err := openBolt(path, bolt.Options{ReadOnly: true, Timeout: timeout})
	if errors.Is(err, berrors.ErrTimeout) {
		return nil, fmt.Errorf("journal %s: %w", path, ErrLocked)
	}
	if errors.Is(err, access.ErrRefused) {
		return nil, fmt.Errorf("journal %w", err)
	}
	if err != nil {
		if errors.Is(err, fs.ErrPermission) {
			return nil, fmt.Errorf("journal %s: cannot open: %w (this user may not read it%s)", path, err, actAsOwner(path))
		}
		return nil, fmt.Errorf("journal %s: cannot open: %w", path, err)
	}
	owner, _, ok := readyJournal(db)
	if !ok {
		db.Close()
		return nil, fmt.Errorf("journal %s: not a tether journal of schema %d or %d (or one never opened by tether run)", path, schemaUnchecked, SchemaVersion)
	}
	// Live and All skip a record they cannot read and try to quarantine
	// it; here that write fails, and its log line must not meet a nil
	// logger.
	j := &Journal{db: db, path: path, owner: owner, log: slog.New(slog.DiscardHandler), maxBatch: 1, ops: make(chan *op, 1), done: make(chan struct{})}
	go j.commitLoop() // writes fail in bbolt with "database is in read-only mode"
	return j, nil
}

// readyJournal returns the owner and schema version of a journal that has
// every bucket and a schema this tether reads (SchemaVersion, or
// schemaUnchecked, which Open moves to SchemaVersion); ok is false when
// initJournal has work to do (or an error to report).
func readyJournal(db *bolt.DB) (owner string, schema int, ok bool) {
	_ = db.View(func(tx *bolt.Tx) error {
		meta := tx.Bucket(bucketMeta)
		if meta == nil {
			return nil
		}
		schema, _ = strconv.Atoi(string(meta.Get(keySchema)))
		if schema != SchemaVersion && schema != schemaUnchecked {
			return nil
		}
		for _, b := range [][]byte{bucketIntents, bucketKeys, bucketLive} {
			if tx.Bucket(b) == nil {
				return nil
			}
		}
		owner = string(meta.Get(keyOwner))
		ok = intent.IsULID(owner)
		return nil
	})
	return owner, schema, ok
}

// initJournal creates the buckets and the owner id of a new journal,
// checks an existing one is a tether journal of a known schema, and moves
// one of schemaUnchecked to SchemaVersion.
func initJournal(db *bolt.DB) (owner string, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("corrupt journal: %v", r)
		}
	}()
	// A journal already set up is only read: a write transaction would
	// cost two fdatasyncs on every start for nothing.
	if owner, schema, ok := readyJournal(db); ok && schema == SchemaVersion {
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
		v := string(meta.Get(keySchema))
		if v != strconv.Itoa(SchemaVersion) && v != strconv.Itoa(schemaUnchecked) {
			return fmt.Errorf("journal schema version %q, this tether reads versions %d and %d", intent.Clip(v), schemaUnchecked, SchemaVersion)
		}
		owner = string(meta.Get(keyOwner))
		if !intent.IsULID(owner) {
			return fmt.Errorf("journal owner id %q is not a lower-case ULID: %w", intent.Clip(owner), errOwnerDamaged)
		}
		for _, b := range [][]byte{bucketIntents, bucketKeys, bucketLive, bucketHandBack, bucketEnded} {
			if _, err := tx.CreateBucketIfNotExists(b); err != nil {
				return err
			}
		}
		if v == strconv.Itoa(schemaUnchecked) {
			if err := sealAll(tx); err != nil {
				return err
			}
			return meta.Put(keySchema, []byte(strconv.Itoa(SchemaVersion)))
		}
		return nil
	})
	return owner, err
}

// sealAll gives every record of a schemaUnchecked journal its checksum, in
// the caller's transaction: the journal moves to SchemaVersion whole or not
// at all, so no tether ever meets half of one. A record that does not
// decode is left as it is, to be quarantined by the first read that meets
// it, as before.
func sealAll(tx *bolt.Tx) error {
	b := tx.Bucket(bucketIntents)
	var ks, vs [][]byte
	err := b.ForEach(func(k, v []byte) error {
		if _, err := decode(k, v); err != nil {
			return nil
		}
		if _, sealed, _ := openRecord(v); sealed {
			return nil
		}
		// Copies: the slices bbolt hands out die with the next Put.
		ks = append(ks, append([]byte(nil), k...))
		vs = append(vs, sealRecord(v))
		return nil
	})
	if err != nil {
		return err
	}
	for i := range ks {
		if err := b.Put(ks[i], vs[i]); err != nil {
			return fmt.Errorf("write %s/%s: %w", bucketIntents, intent.Clip(string(ks[i])), err)
		}
	}
	return nil
}

// Owner is the journal's owner id, created once with the journal.
func (j *Journal) Owner() string { return j.owner }

// Path is the journal's file.
func (j *Journal) Path() string { return j.path }

// Close waits for queued mutations to commit, then releases the file and
// its lock. Later calls fail with ErrClosed.
func (j *Journal) Close() error {
	if j.stopPrune != nil {
		j.stopPrune()
		<-j.pruned
	}
	j.mu.Lock()
	if j.closed {
		j.mu.Unlock()
		return nil
	}
	j.closed = true
	close(j.ops)
	j.mu.Unlock()
	<-j.done
	j.stopCounting()
	return j.db.Close()
}
