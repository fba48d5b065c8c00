package journal

// Group commit: every mutation is a Change the one commit loop runs, many
// to a transaction and an fsync.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tether-run/tether/intent"
	bolt "go.etcd.io/bbolt"
)

// appendFillPercent is how full bbolt packs the pages it splits in the
// buckets keyed by intent id (bbolt's default, 0.5, suits random inserts).
const appendFillPercent = 1.0

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
		j.commit(batch, time.Now())
	}
}

// commit runs batch in one transaction (a refused op rolled back alone, the
// others again) and counts it in Stats before any op's Wait returns, so
// that Stats cover every change whose Wait has returned.
func (j *Journal) commit(batch []*op, start time.Time) {
	j.stats.commits.Add(1)
	j.stats.ops.Add(int64(len(batch)))
	defer func() { j.stats.busy.Add(int64(time.Since(start))) }()
	for len(batch) > 0 {
		failed, ferr := -1, error(nil)
		err := j.db.Update(func(tx *bolt.Tx) error {
			// Intent ids are ULIDs taken in creation order, so new intents are
			// appended at the end of these two buckets: packing their pages
			// full halves the pages each commit writes, and bbolt writes each
			// page with its own pwrite before the fdatasync.
			tx.Bucket(bucketIntents).FillPercent = appendFillPercent
			tx.Bucket(bucketLive).FillPercent = appendFillPercent
			if e := tx.Bucket(bucketEnded); e != nil {
				e.FillPercent = appendFillPercent // keyed by end time: now, mostly
			}
			for i, o := range batch {
				if err := o.fn(tx); err != nil {
					failed, ferr = i, err
					return errRollback
				}
			}
			return storeCounts(tx) // counts.go
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
	intent   intent.Intent
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
func (c *Change) Wait(ctx context.Context) (intent.Intent, error) {
	select {
	case err := <-c.op.done:
		if err != nil {
			return intent.Intent{}, err
		}
		return c.intent, nil
	case <-ctx.Done():
		return intent.Intent{}, fmt.Errorf("journal: gave up waiting for the commit (it may still land): %w", ctx.Err())
	}
}

// Created reports whether a committed create made a new intent (false: an
// idempotent retry answered with the live intent it had made before).
func (c *Change) Created() bool { return c.created }

// Recorded reports whether a committed observe recorded the sandbox id
// (false when it was already known), so a caller acts once per sandbox.
func (c *Change) Recorded() bool { return c.recorded }

// Apply submits c and waits for it.
func (j *Journal) Apply(ctx context.Context, c *Change) (intent.Intent, error) {
	if err := ctx.Err(); err != nil {
		return intent.Intent{}, err
	}
	if err := j.Submit(c); err != nil {
		return intent.Intent{}, err
	}
	return c.Wait(ctx)
}
