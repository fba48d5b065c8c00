package journal

// The changes an intent goes through: created, observed, moved along the
// state machine, noted, released, its observed id replaced.

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/oklog/ulid/v2"
	"github.com/tether-run/tether/intent"

	bolt "go.etcd.io/bbolt"
)

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

// Create journals a new pending intent and returns it once it is fsynced.
// If n.Key names a live intent, it returns that one and created=false.
func (j *Journal) Create(ctx context.Context, n intent.Declaration) (in intent.Intent, created bool, err error) {
	c, err := j.PrepareCreate(n)
	if err != nil {
		return intent.Intent{}, false, err
	}
	in, err = j.Apply(ctx, c)
	return in, c.created, err
}

// PrepareCreate prepares Create. The intent is built and encoded here, in
// the caller's goroutine, so the single commit loop only looks up the key
// and the id and writes bytes: per-intent CPU spent there delays every
// waiter of the batch. Its id is taken now, so ids follow the order callers
// prepared them, not the order of the commit.
func (j *Journal) PrepareCreate(n intent.Declaration) (*Change, error) {
	if err := n.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	now := time.Now().UTC()
	if n.ID == "" {
		n.ID, now = newIDAt()
	}
	planned := intent.Plan(j.owner, n, now)
	raw, err := encodeRecord(planned)
	if err != nil {
		return nil, err
	}
	c := &Change{}
	key, id, chosen := []byte(n.Key), []byte(n.ID), n.Key == "" && n.ID != ""
	c.run = func(tx *bolt.Tx) error {
		c.created, c.intent = false, intent.Intent{}
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
		if err := putRecord(tx, id, raw); err != nil {
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
	return j.prepareUpdate(id, func(*intent.Intent) (bool, error) { return false, nil }), nil
}

// Observe records the provider's sandbox id for an intent: pending becomes
// observed; observing the id already recorded changes nothing; while
// releasing the id is recorded and the state kept. A different id than the
// one recorded is ErrObservedOther.
func (j *Journal) Observe(id, sandboxID string) (intent.Intent, error) {
	in, _, err := j.ObserveRecorded(id, sandboxID)
	return in, err
}

// ObserveRecorded is Observe, also reporting whether this call recorded the
// id (false when it was already known), so a caller acts once per sandbox.
func (j *Journal) ObserveRecorded(id, sandboxID string) (in intent.Intent, recorded bool, err error) {
	c, err := j.PrepareObserve(id, sandboxID)
	if err != nil {
		return intent.Intent{}, false, err
	}
	in, err = j.Apply(context.Background(), c)
	return in, c.recorded, err
}

// PrepareObserve prepares Observe.
func (j *Journal) PrepareObserve(id, sandboxID string) (*Change, error) {
	if err := intent.ValidateSandboxID(sandboxID); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	var c *Change
	c = j.prepareUpdate(id, func(in *intent.Intent) (bool, error) {
		c.recorded = false
		switch {
		case in.SandboxID == sandboxID:
			return false, nil
		case in.SandboxID != "":
			return false, fmt.Errorf("intent %s: sandbox %s already observed, not %s: %w", in.ID, in.SandboxID, sandboxID, ErrObservedOther)
		case in.State == intent.Pending:
			in.State = intent.Observed
		case in.State == intent.Releasing:
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
func (j *Journal) Transition(id string, to intent.State, lastErr string) (intent.Intent, error) {
	return j.update(id, func(in *intent.Intent) (bool, error) {
		return moveTo(in, to, lastErr)
	})
}

// moveTo is the state machine's step on an intent being updated: it moves
// in to state to, recording lastErr, or refuses with ErrIllegalTransition.
func moveTo(in *intent.Intent, to intent.State, lastErr string) (bool, error) {
	if !intent.CanTransition(in.State, to) {
		return false, fmt.Errorf("intent %s: %s → %s: %w", in.ID, in.State, to, ErrIllegalTransition)
	}
	in.State = to
	in.LastError = lastErr
	return true, nil
}

// Note records one more resolve attempt and its error, keeping the state.
func (j *Journal) Note(id string, lastErr string) (intent.Intent, error) {
	return j.update(id, func(in *intent.Intent) (bool, error) {
		in.Attempts++
		in.LastError = lastErr
		return true, nil
	})
}

// Release records that the runner handled the sandbox itself (outcome
// deleted or kept; empty means deleted): the intent becomes released and
// tether stops tracking it. Releasing a released intent again changes nothing.
func (j *Journal) Release(id string, outcome string) (intent.Intent, error) {
	c, err := j.PrepareRelease(id, outcome)
	if err != nil {
		return intent.Intent{}, err
	}
	return j.Apply(context.Background(), c)
}

// PrepareRelease prepares Release.
func (j *Journal) PrepareRelease(id string, outcome string) (*Change, error) {
	if err := intent.ValidateOutcome(outcome); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if outcome == "" {
		outcome = intent.OutcomeDeleted
	}
	return j.prepareUpdate(id, func(in *intent.Intent) (bool, error) {
		if in.State == intent.Released {
			return false, nil
		}
		if !intent.CanTransition(in.State, intent.Released) {
			return false, fmt.Errorf("intent %s is %s, cannot be released: %w", in.ID, in.State, ErrIllegalTransition)
		}
		in.State = intent.Released
		in.Outcome = outcome
		// A sandbox released as kept is marked so that no sweep deletes
		// it, durably: its hand-back is pending until the provider
		// confirms the mark (intent.Intent.HandBackPending).
		in.KeepOwed = outcome == intent.OutcomeKept
		return true, nil
	}), nil
}

// ReplaceObserved replaces the sandbox id observed for intent id, wrongID,
// by foundID. It is the one way an observed id changes, and it is for the
// reaper only: a runner that observed a wrong id (a typo, two ids swapped)
// leaves the intent pointing at a sandbox that does not exist or is not
// ours, and a 404 of that id would close the intent as gone while its
// sandbox runs. The caller must have found foundID under the intent's exact
// name and verified it as the intent's (name and every label) — the journal
// cannot check that; Observe, which runners use, still refuses a different
// id (ErrObservedOther).
//
// It is a compare-and-swap: the intent must be live (observed or
// releasing, its state is kept) with wrongID observed, else
// ErrObservedOther (someone changed the id meanwhile) or
// ErrIllegalTransition. The wrong id is kept in Replaced and named in
// LastError. Replacing by the id already recorded changes nothing.
func (j *Journal) ReplaceObserved(id, wrongID, foundID string) (intent.Intent, error) {
	if err := intent.ValidateSandboxID(foundID); err != nil {
		return intent.Intent{}, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return j.update(id, func(in *intent.Intent) (bool, error) {
		switch {
		case in.SandboxID == foundID:
			return false, nil
		case in.State != intent.Observed && in.State != intent.Releasing:
			return false, fmt.Errorf("intent %s is %s, its observed id cannot be replaced: %w", in.ID, in.State, ErrIllegalTransition)
		case in.SandboxID != wrongID:
			return false, fmt.Errorf("intent %s: sandbox %s observed, not %s: %w", in.ID, in.SandboxID, wrongID, ErrObservedOther)
		}
		in.Replaced = append(in.Replaced, wrongID)
		if n := len(in.Replaced); n > intent.MaxReplaced {
			in.Replaced = append([]string(nil), in.Replaced[n-intent.MaxReplaced:]...)
		}
		in.SandboxID = foundID
		in.LastError = fmt.Sprintf("observed sandbox id %s was wrong: the sandbox named %s is %s", wrongID, in.Name, foundID)
		return true, nil
	})
}

// prepareUpdate loads intent id inside the transaction, lets change decide
// (and refuse before anything is written), and stores the result if change
// reports it changed something.
func (j *Journal) prepareUpdate(id string, change func(in *intent.Intent) (changed bool, err error)) *Change {
	c := &Change{}
	c.run = func(tx *bolt.Tx) error {
		if err := intent.ValidateIntentID(id); err != nil {
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

func (j *Journal) update(id string, change func(in *intent.Intent) (changed bool, err error)) (intent.Intent, error) {
	return j.Apply(context.Background(), j.prepareUpdate(id, change))
}

// store writes an intent and keeps the live index in step with its state.
func store(tx *bolt.Tx, in intent.Intent) error {
	v, err := encodeRecord(in)
	if err != nil {
		return err
	}
	if err := putRecord(tx, []byte(in.ID), v); err != nil {
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
		return fmt.Errorf("write %s/%s: %w", bucket, intent.Clip(k), err)
	}
	return nil
}
