// Package spooldir is the spool-directory protocol: runners that cannot speak
// HTTP to the socket (or write while tether is down) drop one JSON op per
// file into a directory. Write is the writer's side (tether intent without a
// socket uses it); Reader is tether's side, which journals each file through
// the journal's exported Change API and then removes it; FileOp and Decode
// are the one codec both use.
package spooldir

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/tether-run/tether/intent"
	"github.com/tether-run/tether/internal/crashpoint"
	"github.com/tether-run/tether/internal/intake"
	"github.com/tether-run/tether/journal"
)

// DefaultRescanInterval is how often the intake lists the spool directory
// even without a watcher event: a safety net for missed events (and the
// only mechanism when inotify is unavailable). Events make the usual delay
// far shorter.
const DefaultRescanInterval = 5 * time.Second

// DefaultWatchDelay is how long the intake waits before it starts its
// inotify watcher. Closing an inotify descriptor costs the kernel an RCU
// grace period (about 10 ms here), which a child that lives a few
// milliseconds would pay on every `tether run`; a runner that lives longer
// than this never notices. Files renamed in meanwhile are taken by the scan
// that follows the start of the watcher, so none is missed.
const DefaultWatchDelay = 250 * time.Millisecond

// DefaultPollInterval is how often the intake lists the spool directory
// while it has no watcher (inotify could not start: its per-user instance
// limit reached, or no inotify at all): often enough that a runner waiting
// for its file to be taken hardly notices, at the cost of one listing of a
// small directory.
const DefaultPollInterval = 250 * time.Millisecond

// DefaultWatchRetry is how often the intake tries again to start a watcher
// that could not start, polling meanwhile.
const DefaultWatchRetry = time.Minute

// FinalScanTimeout bounds the last scan the intake makes when it is stopped:
// the files the child renamed in just before it exited are journaled
// before the drain starts.
const FinalScanTimeout = 5 * time.Second

// RejectedDir is the subdirectory of the spool where invalid files go,
// each beside a NAME.err file that says why.
const RejectedDir = "rejected"

// intakeChunk bounds the files read and journaled together: they share
// group-committed transactions, and memory stays bounded in a burst.
const intakeChunk = 512

// Reader takes spool files: runners drop one JSON op per file into Dir,
// written as .NAME.tmp and renamed to NAME.json, so a file is complete once
// it has its name. Files are taken in lexical order, journaled, and only
// then removed; every op is idempotent, so a file taken twice after a crash
// does no harm.
type Reader struct {
	*intake.Intake
	Dir string
	// RescanInterval defaults to DefaultRescanInterval.
	RescanInterval time.Duration
	// WatchDelay defaults to DefaultWatchDelay; negative starts the watcher at once.
	WatchDelay time.Duration
	// PollInterval, how often Dir is listed while there is no watcher,
	// defaults to DefaultPollInterval (RescanInterval if that is shorter);
	// WatchRetry, how often the watcher is tried again meanwhile, to
	// DefaultWatchRetry.
	PollInterval, WatchRetry time.Duration
	// AllowUIDs are the uids, besides root and tether's own, whose files
	// are taken and who may own Dir: the socket's AllowUIDs.
	AllowUIDs []int
	// FinalScanCtx, when set, cuts the last scan short when it ends (tether
	// run ends it at the drain's deadline); FinalScanTimeout bounds that
	// scan in any case.
	FinalScanCtx context.Context

	log     *slog.Logger
	deletes sync.WaitGroup
	// newWatcher makes the watcher (fsnotify.NewWatcher; tests make it fail).
	newWatcher func() (*fsnotify.Watcher, error)
	// dir and rejected are Dir and its rejected/, opened and checked by
	// Open; files are opened, moved and written relative to them.
	dir, rejected *os.File
	// stuck are names that could neither be moved nor removed.
	stuck map[string]bool
	// caughtUp is closed once the files in Dir when Run started are taken.
	caughtUp     chan struct{}
	caughtUpOnce sync.Once
	// tally counts what Pass (or Run) did with the files it took.
	tally Tally

	// earlier are the names MarkEarlier found, until each is taken;
	// earlierIDs the intents their files declared (Earlier).
	mu         sync.Mutex
	earlier    map[string]bool
	earlierIDs []string
}

// Tally is what a Pass did: files journaled (and removed), files moved to
// rejected/, and spool files still in the directory when it returned
// (left for a retry after a journal failure, or renamed in meanwhile).
type Tally struct {
	Taken, Rejected, Left int
}

// CaughtUp returns a channel closed once Run has been through the files
// that were in Dir when it started (each journaled, rejected, or left for a
// retry when the journal failed), or has returned. Those files are older
// than this run: a runner killed with an earlier tether may have left its
// last ones untaken. The boot replay waits for it: decided on the journal
// alone, an intent whose runner deleted the sandbox and then released it in
// such a file is pending, its name absent (Daytona renames a sandbox when
// it accepts its delete), and it would close as never-created, a sandbox
// that existed.
func (in *Reader) CaughtUp() <-chan struct{} {
	in.caughtUpOnce.Do(func() { in.caughtUp = make(chan struct{}) })
	return in.caughtUp
}

// MarkEarlier notes the spool files in Dir now. Called before the child
// starts, it tells an earlier runner's files from this run's: once CaughtUp
// is closed, Earlier returns the intents they declared. It returns how many
// files it noted.
func (in *Reader) MarkEarlier() (int, error) {
	entries, err := os.ReadDir(in.Dir)
	if err != nil {
		return 0, fmt.Errorf("spool directory %s: %w", in.Dir, err)
	}
	names := map[string]bool{}
	for _, e := range entries {
		if isSpoolName(e.Name()) {
			names[e.Name()] = true
		}
	}
	in.mu.Lock()
	in.earlier = names
	in.mu.Unlock()
	return len(names), nil
}

// Earlier returns the ids of the intents declared by the files
// MarkEarlier noted that were journaled so far: every one of them once
// CaughtUp is closed, but those a journal failure left for a retry. Run
// takes each of those files in its first round: they were there before
// its first listing.
func (in *Reader) Earlier() []string {
	in.mu.Lock()
	defer in.mu.Unlock()
	return slices.Clone(in.earlierIDs)
}

// noteTaken records the intent a file MarkEarlier noted declared; a name
// counts once, so a file of this run that reuses it later does not.
func (in *Reader) noteTaken(p *pending) {
	if p.op.Op != OpIntent {
		return
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.earlier[p.name] {
		delete(in.earlier, p.name)
		in.earlierIDs = append(in.earlierIDs, p.result.ID)
	}
}

// markCaughtUp closes CaughtUp's channel; only Run calls it.
func (in *Reader) markCaughtUp() {
	select {
	case <-in.CaughtUp():
	default:
		close(in.caughtUp)
	}
}

// Run takes the files already in Dir, then watches it until ctx ends, and
// then takes what is there one last time (within FinalScanTimeout), so that
// what the child wrote before it exited reaches the journal before the drain.
// It returns nil when ctx ends, an error if the directory cannot be used or
// the journal closes underneath it.
func (in *Reader) Run(ctx context.Context) error {
	in.log = in.Log()
	if in.RescanInterval <= 0 {
		in.RescanInterval = DefaultRescanInterval
	}
	if in.WatchDelay == 0 {
		in.WatchDelay = DefaultWatchDelay
	}
	if in.PollInterval <= 0 {
		in.PollInterval = DefaultPollInterval
	}
	in.PollInterval = min(in.PollInterval, in.RescanInterval)
	if in.WatchRetry <= 0 {
		in.WatchRetry = DefaultWatchRetry
	}
	defer in.markCaughtUp()
	if err := in.Open(); err != nil {
		return err
	}
	defer in.close()
	in.stuck = map[string]bool{}
	defer in.deletes.Wait()

	// One round takes every file already here (each existed before its
	// first listing); the files a round leaves came in meanwhile.
	if _, err := in.round(ctx); err != nil {
		return err
	}
	in.markCaughtUp()
	if err := in.scan(ctx); err != nil {
		return err
	}
	var (
		w      *fsnotify.Watcher
		events chan fsnotify.Event
		werrs  chan error
	)
	defer func() {
		if w != nil {
			w.Close()
		}
	}()
	watchAt := time.NewTimer(max(in.WatchDelay, 0))
	defer watchAt.Stop()
	tick := time.NewTicker(in.RescanInterval)
	defer tick.Stop()
	tries := 0 // to start the watcher, failed so far
	for {
		select {
		case <-ctx.Done():
			return in.finalScan()
		case <-watchAt.C:
			// Watch first, then scan: a file renamed in between is seen by
			// both, and taking it twice is harmless; missing it would not be.
			w = in.watch(tries)
			switch {
			case w != nil:
				events, werrs = w.Events, w.Errors
				if tries > 0 {
					in.log.Info("spool: watcher started; polling stops", "dir", in.Dir, "rescan_every", in.RescanInterval)
					tick.Reset(in.RescanInterval)
				}
			case tries == 0:
				// Without events only a listing finds a file: list often,
				// not every RescanInterval, and try the watcher again.
				tick.Reset(in.PollInterval)
				fallthrough
			default:
				tries++
				watchAt.Reset(in.WatchRetry)
			}
		case ev, ok := <-events:
			if !ok {
				events = nil
				continue
			}
			// A rename into the directory reports Create; writes to a
			// file that already has its final name are not a protocol step.
			if !isSpoolName(filepath.Base(ev.Name)) || !ev.Has(fsnotify.Create) {
				continue
			}
			// One scan takes every file there, so the events queued behind
			// this one are already answered.
			for drained := false; !drained; {
				select {
				case _, ok := <-events:
					drained = !ok
				default:
					drained = true
				}
			}
		case err, ok := <-werrs:
			if !ok {
				werrs = nil
				continue
			}
			if errors.Is(err, fsnotify.ErrEventOverflow) {
				in.log.Warn("spool: watcher overflowed, rescanning", "dir", in.Dir)
			} else {
				in.log.Warn("spool: watcher error, rescanning", "dir", in.Dir, "err", err)
			}
		case <-tick.C:
		}
		if err := in.scan(ctx); err != nil {
			if ctx.Err() != nil {
				return in.finalScan()
			}
			return err
		}
	}
}

// Pass takes the spool files in Dir once, as Run's first round does, and
// returns: `tether drain`, with no child to wait for, takes what a dead
// runner left before it drains. Like Open it creates Dir if missing.
func (in *Reader) Pass(ctx context.Context) (Tally, error) {
	in.log = in.Log()
	if err := in.Open(); err != nil {
		return Tally{}, err
	}
	defer in.close()
	in.stuck = map[string]bool{}
	defer in.deletes.Wait()
	if _, err := in.round(ctx); err != nil {
		return in.tally, err
	}
	t := in.tally
	if left, err := in.list(); err == nil {
		t.Left = len(left)
	}
	return t, nil
}

// watch starts the inotify watcher on Dir; nil when it cannot (inotify's
// per-user instance limit reached, or no inotify): Run then polls every
// PollInterval and tries again every WatchRetry. The first failure is said
// at warn level, a failed retry at debug level (tries is how many failed
// before).
func (in *Reader) watch(tries int) *fsnotify.Watcher {
	newWatcher := in.newWatcher
	if newWatcher == nil {
		newWatcher = fsnotify.NewWatcher
	}
	w, err := newWatcher()
	if err == nil {
		if err = w.Add(in.Dir); err != nil {
			w.Close()
		}
	}
	if err == nil {
		return w
	}
	level := slog.LevelWarn
	if tries > 0 {
		level = slog.LevelDebug
	}
	in.log.Log(context.Background(), level, "spool: no watcher; polling the directory instead, and trying the watcher again",
		"dir", in.Dir, "poll_every", in.PollInterval, "retry_every", in.WatchRetry, "err", err)
	return nil
}

// finalScan takes the files present when the intake is stopped.
func (in *Reader) finalScan() error {
	parent := in.FinalScanCtx
	if parent == nil {
		parent = context.Background()
	}
	ctx, cancel := context.WithTimeout(parent, FinalScanTimeout)
	defer cancel()
	if err := in.scan(ctx); err != nil {
		in.log.Warn("spool: last scan before the drain failed; the files stay for the next start", "dir", in.Dir, "err", err)
	} else if ctx.Err() != nil {
		in.log.Warn("spool: last scan cut short; the files left stay for the next start", "dir", in.Dir)
	}
	in.log.Debug("spool: last scan done", "dir", in.Dir)
	return nil
}

// isSpoolName: NAME.json, not a hidden (half-written .NAME.tmp) file.
func isSpoolName(name string) bool {
	return strings.HasSuffix(name, ".json") && !strings.HasPrefix(name, ".") && len(name) > len(".json")
}

// scan takes every spool file present, in lexical order, until a listing
// finds none.
func (in *Reader) scan(ctx context.Context) error {
	for ctx.Err() == nil {
		handled, err := in.round(ctx)
		if err != nil || handled == 0 {
			// handled 0: no files, or only files the journal could not
			// take: they wait for the next event or rescan instead of a
			// busy loop.
			return err
		}
	}
	return nil
}

// round takes, in lexical order, the spool files present when it starts,
// and returns how many it removed or rejected.
//
// A directory listing is not a snapshot: files renamed in while it runs may
// or may not appear, so one listing can hold a runner's second file and
// miss its first. Any file seen by a first listing existed before a second
// one started, and so did every file its writer renamed in before it; the
// second listing has them all. So a round takes, from the second listing,
// the files that sort no later than the last name of the first; the rest
// wait for the next round.
func (in *Reader) round(ctx context.Context) (handled int, err error) {
	first, err := in.list()
	if err != nil || len(first) == 0 {
		return 0, nil
	}
	second, err := in.list()
	if err != nil {
		return 0, nil
	}
	last := first[len(first)-1]
	names := second
	for k, name := range second {
		if name > last {
			names = second[:k]
			break
		}
	}
	for len(names) > 0 && ctx.Err() == nil {
		n := min(len(names), intakeChunk)
		h, err := in.take(ctx, names[:n])
		if err != nil {
			return handled, err
		}
		handled += h
		names = names[n:]
	}
	return handled, nil
}

// list returns the names of the spool files in Dir, sorted.
func (in *Reader) list() ([]string, error) {
	entries, err := os.ReadDir(in.Dir) // sorted by name
	if err != nil {
		in.log.Warn("spool: cannot list", "dir", in.Dir, "err", err)
		return nil, err
	}
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		// Not only files: a directory or FIFO named NAME.json is rejected
		// (with a reason in rejected/) rather than left there unexplained.
		if isSpoolName(e.Name()) && !in.stuck[e.Name()] {
			names = append(names, e.Name())
		}
	}
	return names, nil
}

// pending is one spool file on its way through the journal.
type pending struct {
	name   string
	op     FileOp
	err    error // refused: the file is rejected with this reason
	change *journal.Change
	result intent.Intent
}

// take journals a chunk of files in order: every change is queued before
// any is awaited, so the chunk shares transactions, and in queue order, so a
// file may refer to an intent declared by a file before it.
// It returns how many files it removed or rejected.
func (in *Reader) take(ctx context.Context, names []string) (handled int, err error) {
	items := make([]*pending, 0, len(names))
	for _, name := range names {
		p := &pending{name: name}
		data, err := in.readFile(name)
		if errors.Is(err, os.ErrNotExist) {
			continue // taken by an earlier scan meanwhile
		}
		if err == nil {
			p.op, err = Decode(data)
		}
		if err == nil {
			p.change, err = in.prepare(p.op)
			if err != nil && !refused(err) {
				// The journal failed, not the file: it and the files after
				// it (which may refer to it) wait, in order, for a retry.
				in.log.Error("spool: journal failed, file left for a retry", "file", name, "err", err)
				break
			}
		}
		crashpoint.Hit(crashpoint.SpoolBeforeJournal)
		if err != nil {
			p.err = err
		} else if err := in.Journal.Submit(p.change); err != nil {
			if errors.Is(err, journal.ErrClosed) {
				return handled, fmt.Errorf("spool %s: %w", in.Dir, err)
			}
			in.log.Error("spool: journal failed, file left for a retry", "file", name, "err", err)
			break
		}
		items = append(items, p)
	}
	failed := false // a change of this chunk failed in the journal
	for _, p := range items {
		if p.change != nil {
			result, err := p.change.Wait(context.Background())
			if err != nil && !refused(err) {
				// The journal failed, not the file: leave it for the next scan.
				failed = true
				in.log.Error("spool: journal failed, file left for a retry", "file", p.name, "err", err)
				continue
			}
			if err != nil && failed {
				// Refused after an earlier file's change failed: it may
				// name what that one declared (an observation of an intent
				// whose commit failed is refused as unknown), so it is not
				// judged until the earlier one is taken. A change after
				// the failure that committed is done: the journal has it.
				in.log.Error("spool: refused after an earlier file's journal failure; file left for a retry", "file", p.name, "err", err)
				continue
			}
			if errors.Is(err, journal.ErrNotFound) {
				err = fmt.Errorf("id %q: no intent declared with this id: %w", p.op.ID, err)
			}
			p.result, p.err = result, err
		}
		handled++
		if p.err != nil {
			in.tally.Rejected++
			in.reject(p.name, p.err)
			continue
		}
		in.tally.Taken++
		in.done(ctx, p)
	}
	return handled, nil
}

// refused reports whether a journal error is about the op itself (the file
// is rejected) rather than the journal (the file is kept for a retry).
func refused(err error) bool {
	for _, e := range []error{journal.ErrInvalid, journal.ErrNotFound, journal.ErrIllegalTransition, journal.ErrObservedOther, journal.ErrIDTaken, intake.ErrUnknownProvider} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// prepare builds the journal change of one decoded file.
func (in *Reader) prepare(f FileOp) (*journal.Change, error) {
	switch f.Op {
	case OpIntent:
		// The writer chose the intent id, so it knew the sandbox name
		// (intent.NamePrefix + id) before tether took the file.
		n, err := in.NewIntentOf(f.Provider, f.Labels, f.OnDrain, "", f.ID)
		if err != nil {
			return nil, err
		}
		return in.Journal.PrepareCreate(n)
	case OpObserve:
		return in.Journal.PrepareObserve(f.ID, f.SandboxID)
	case OpRelease:
		return in.Journal.PrepareRelease(f.ID, f.Outcome)
	default: // delete: find the intent in commit order, delete after the commit
		return in.Journal.PrepareGet(f.ID)
	}
}

// done removes a journaled file and starts what follows from its op.
func (in *Reader) done(ctx context.Context, p *pending) {
	crashpoint.Hit(crashpoint.SpoolAfterJournal)
	if err := os.Remove(filepath.Join(in.Dir, p.name)); err != nil && !errors.Is(err, os.ErrNotExist) {
		in.log.Warn("spool: cannot remove a taken file (it will be taken again, harmlessly)", "file", p.name, "err", err)
	}
	in.log.Debug("spool: took file", "file", p.name, "op", p.op.Op, "intent", p.result.ID)
	in.noteTaken(p)
	in.Committed(p.change, p.result)
	if p.op.Op != OpDelete || !p.result.Live() {
		return
	}
	if in.Delete == nil {
		in.log.Info("spool: delete requested; the drain resolves it", "intent", p.result.ID)
		return
	}
	id := p.result.ID
	in.deletes.Add(1)
	go func() {
		defer in.deletes.Done()
		out, err := in.Delete(ctx, id)
		if err != nil || out.Live() {
			in.log.Warn("spool: delete not confirmed; the intent stays live for the drain", "intent", id, "err", err)
		}
	}()
}
