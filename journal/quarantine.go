package journal

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/tether-run/tether/intent"
	bolt "go.etcd.io/bbolt"
)

// One damaged record must not keep the healthy ones from being drained.
// bbolt checks its pages but not the values in them: a record whose bytes
// were damaged still sits in a sound page. When a read of the live intents
// meets a record it cannot decode (or that does not match its key, or an
// entry of the live index with no record), the record is moved to the
// quarantine bucket — kept byte for byte, out of the live index — and
// reported; the rest are returned as usual. Quarantined intents are never
// resolved by guesswork (their labels, on_drain and sandbox id are
// unknown), but their names are: the drain reports them, and `tether
// drain` counts them as unresolved.

var bucketQuarantine = []byte("quarantine") // id → JSON Quarantined

// ErrUnreadable marks a record that cannot be decoded into an intent.
var ErrUnreadable = errors.New("undecodable record")

// Quarantined is a record the journal could not read, as it keeps it.
type Quarantined struct {
	ID     string    `json:"id"`
	Reason string    `json:"reason"`
	Record []byte    `json:"record,omitempty"` // the bytes found, as they were
	At     time.Time `json:"quarantined_at"`
}

// Name is the sandbox name the quarantined intent stood for.
func (q Quarantined) Name() string { return intent.NamePrefix + q.ID }

// quarantine moves the records of ids out of the intents and the live index
// into the quarantine bucket, and logs each one. A record readable by now
// (rewritten meanwhile) is left where it is.
func (j *Journal) quarantine(bad map[string]error) {
	var moved []Quarantined
	_, err := j.Apply(context.Background(), &Change{run: func(tx *bolt.Tx) error {
		moved = moved[:0]
		var qs []Quarantined
		held := tx.Bucket(bucketQuarantine)
		for id, why := range bad {
			if held != nil && held.Get([]byte(id)) != nil {
				continue // a concurrent read quarantined it first
			}
			raw := tx.Bucket(bucketIntents).Get([]byte(id))
			if raw != nil {
				if _, err := decode([]byte(id), raw); err == nil {
					continue
				}
			}
			qs = append(qs, Quarantined{ID: id, Reason: why.Error(), Record: append([]byte(nil), raw...), At: time.Now().UTC()})
		}
		if len(qs) == 0 {
			return nil
		}
		qb, err := tx.CreateBucketIfNotExists(bucketQuarantine)
		if err != nil {
			return fmt.Errorf("create bucket %s: %w", bucketQuarantine, err)
		}
		for _, q := range qs {
			v, err := json.Marshal(q)
			if err != nil {
				return err
			}
			if err := qb.Put([]byte(q.ID), v); err != nil {
				return fmt.Errorf("write %s/%s: %w", bucketQuarantine, q.ID, err)
			}
			if err := deleteRecord(tx, []byte(q.ID)); err != nil {
				return err
			}
			if err := tx.Bucket(bucketLive).Delete([]byte(q.ID)); err != nil {
				return fmt.Errorf("delete %s/%s: %w", bucketLive, q.ID, err)
			}
		}
		moved = qs
		return nil
	}})
	if err != nil {
		j.log.Error("journal: could not quarantine unreadable records; they are skipped for now", "records", len(bad), "err", err)
		return
	}
	for _, q := range moved {
		j.log.Error("journal: a record could not be read and is quarantined; tether cannot resolve it",
			"intent", q.ID, "name", q.Name(), "reason", q.Reason,
			"what_to_do", fmt.Sprintf("a sandbox named %s labelled %s=%s may exist: delete it by hand if so", q.Name(), intent.LabelOwner, j.owner))
	}
}

// Quarantined returns the records the journal could not read, in id order.
func (j *Journal) Quarantined() ([]Quarantined, error) {
	var out []Quarantined
	err := j.view(func(tx *bolt.Tx) error {
		qb := tx.Bucket(bucketQuarantine)
		if qb == nil {
			return nil
		}
		return qb.ForEach(func(k, v []byte) error {
			var q Quarantined
			if err := json.Unmarshal(v, &q); err != nil {
				// Even the quarantine can be damaged: its key is the id.
				q = Quarantined{Reason: "quarantine entry itself unreadable", Record: append([]byte(nil), v...)}
			}
			q.ID = string(k)
			out = append(out, q)
			return nil
		})
	})
	return out, err
}

// checkRecord is what decode checks beyond the JSON: a record must be the
// intent its key names, in a state tether knows.
func checkRecord(k []byte, in intent.Intent) error {
	switch {
	case in.ID != string(k):
		return fmt.Errorf("record holds intent %q, not %s", intent.Clip(in.ID), k)
	case intent.ValidateIntentID(in.ID) != nil:
		return fmt.Errorf("id %q is not an intent id", intent.Clip(in.ID))
	case intent.ValidateSandboxName(in.Name) != nil:
		// tether-<id>, or the runner's own name the proxy journaled.
		return fmt.Errorf("name %q is not a sandbox name", intent.Clip(in.Name))
	case in.ParentIntent != "" && (intent.ValidateIntentID(in.ParentIntent) != nil || in.ParentIntent == in.ID):
		return fmt.Errorf("parent intent %q is not another intent's id", intent.Clip(in.ParentIntent))
	}
	if !intent.KnownState(in.State) {
		return fmt.Errorf("unknown state %q", intent.Clip(string(in.State)))
	}
	return nil
}
