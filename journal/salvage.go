package journal

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/tether-run/tether/intent"
	"github.com/tether-run/tether/journal/access"
	"github.com/tether-run/tether/journal/boltcheck"
	"github.com/tether-run/tether/journal/durable"
	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
)

// SalvageReport says what Salvage could carry over and what it could not.
type SalvageReport struct {
	Owner string
	// Intents were copied; Live of them are live.
	Intents, Live int
	// Loose of the Intents were found only in pages the journal's tree no
	// longer reaches (a damaged branch page, or an older copy of a record
	// whose current page is lost): the newest copy found is kept.
	Loose int
	// Quarantined records could not be read (or the live index named an
	// intent whose record is lost); they are in the new journal's
	// quarantine, reported by every drain.
	Quarantined []Quarantined
	// Damage is what the walk of the old file found wrong.
	Damage []string
}

// Salvage copies what is readable of the journal at src — damaged or not —
// into a new journal at dst (which must not exist), under the same owner id
// so the sandboxes still prove theirs. src is only read, under a shared
// lock: a journal a live tether holds is refused with ErrLocked.
//
// It reads src with boltcheck's page walker, not with bbolt, so no damage can crash
// it: first the tree from the newest valid header, going on past damaged
// pages; then every page of the file that looks like a leaf, for records
// the tree no longer reaches. Each record is checked as the journal checks
// it (decodes, names its key, known state).
func Salvage(src, dst string) (SalvageReport, error) {
	var rep SalvageReport
	if _, err := os.Lstat(dst); err == nil {
		return rep, fmt.Errorf("salvage into %s: it exists; name a new file", dst)
	}
	f, err := access.OpenFile(src, os.O_RDONLY, 0)
	if err != nil {
		return rep, fmt.Errorf("salvage %s: %w", src, err)
	}
	defer f.Close()
	if err := lockFile(f, false, DefaultLockTimeout); err != nil {
		if errors.Is(err, berrors.ErrTimeout) {
			return rep, fmt.Errorf("salvage %s: %w (stop that tether first)", src, ErrLocked)
		}
		return rep, fmt.Errorf("salvage %s: %w", src, err)
	}
	fi, err := f.Stat()
	if err != nil {
		return rep, fmt.Errorf("salvage %s: %w", src, err)
	}
	if fi.Size() == 0 {
		return rep, fmt.Errorf("salvage %s: the file is empty; nothing is left to salvage", src)
	}

	s := &salvage{records: map[string]intent.Intent{}, live: map[string]bool{}, quarantined: map[string]Quarantined{}}
	pageSize, damage := boltcheck.Walk(f, fi.Size(), s.visit)
	for _, d := range damage {
		rep.Damage = append(rep.Damage, d.Error())
	}
	if pageSize == 0 {
		pageSize = os.Getpagesize() // no header says: scan at the machine's
	}
	rep.Loose = s.scanLoose(f, fi.Size(), pageSize)

	owner, err := s.owner()
	if err != nil {
		return rep, fmt.Errorf("salvage %s: %w", src, err)
	}
	rep.Owner = owner
	for id := range s.live {
		if _, ok := s.records[id]; !ok {
			if _, ok := s.quarantined[id]; !ok {
				s.quarantined[id] = Quarantined{ID: id, Reason: "the live index names this intent, but its record is lost", At: time.Now().UTC()}
			}
		}
	}
	for id := range s.records {
		delete(s.quarantined, id) // a readable copy was found after all
	}
	if err := s.write(dst, owner, &rep); err != nil {
		os.Remove(dst)
		return rep, fmt.Errorf("salvage into %s: %w", dst, err)
	}
	if err := ensureMarker(dst, owner); err != nil {
		return rep, fmt.Errorf("salvage into %s: %w", dst, err)
	}
	return rep, nil
}

type salvage struct {
	metaOwner   string
	records     map[string]intent.Intent
	live        map[string]bool
	quarantined map[string]Quarantined
	tree        map[string]bool // ids whose record the tree walk found
}

// visit takes the key/value pairs of the tree walk.
func (s *salvage) visit(path []string, k, v []byte) {
	if len(path) != 1 {
		return
	}
	switch path[0] {
	case string(bucketMeta):
		if string(k) == string(keyOwner) && intent.IsULID(string(v)) {
			s.metaOwner = string(v)
		}
	case string(bucketIntents):
		in, err := decode(k, v)
		if err != nil {
			s.quarantined[string(k)] = Quarantined{ID: string(k), Reason: err.Error(), Record: append([]byte(nil), v...), At: time.Now().UTC()}
			return
		}
		s.records[in.ID] = in
		if s.tree == nil {
			s.tree = map[string]bool{}
		}
		s.tree[in.ID] = true
	case string(bucketLive):
		s.live[string(k)] = true
	case string(bucketQuarantine):
		var q Quarantined
		if json.Unmarshal(v, &q) != nil {
			q = Quarantined{Reason: "quarantine entry itself unreadable", Record: append([]byte(nil), v...)}
		}
		q.ID = string(k)
		s.quarantined[q.ID] = q
	}
}

// scanLoose reads every page of the file that says it is a leaf page and
// keeps the newest valid copy of each intent record the tree walk did not
// find. It returns how many it added.
func (s *salvage) scanLoose(f *os.File, size int64, pageSize int) int {
	found := map[string]intent.Intent{}
	boltcheck.ScanLeaves(f, size, pageSize, func(k, v []byte) {
		if !intent.IsULID(string(k)) || s.tree[string(k)] {
			return
		}
		in, err := decode(k, v)
		if err != nil {
			return
		}
		if old, ok := found[in.ID]; !ok || in.UpdatedAt.After(old.UpdatedAt) {
			found[in.ID] = in
		}
	})
	for id, in := range found {
		s.records[id] = in
	}
	return len(found)
}

// owner is the journal's owner id: from its meta bucket, else the one the
// records' ownership labels agree on.
func (s *salvage) owner() (string, error) {
	if s.metaOwner != "" {
		return s.metaOwner, nil
	}
	votes := map[string]int{}
	for _, in := range s.records {
		if o := in.Labels[intent.LabelOwner]; intent.IsULID(o) {
			votes[o]++
		}
	}
	best, n := "", 0
	for o, v := range votes {
		if v > n || v == n && o < best {
			best, n = o, v
		}
	}
	if best == "" {
		return "", errors.New("neither the journal's header nor any record says who owns it; nothing to salvage")
	}
	return best, nil
}

// write creates the new journal with everything salvaged.
func (s *salvage) write(dst, owner string, rep *SalvageReport) error {
	if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
		return err
	}
	fd, err := access.OpenFile(dst, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	fd.Close()
	db, err := bolt.Open(dst, 0o600, &bolt.Options{Timeout: DefaultLockTimeout, NoFreelistSync: true, FreelistType: bolt.FreelistMapType, OpenFile: access.OpenFile})
	if err != nil {
		return err
	}
	ids := make([]string, 0, len(s.records))
	for id, in := range s.records {
		if in.Labels[intent.LabelOwner] != owner {
			s.quarantined[id] = Quarantined{ID: id, Reason: fmt.Sprintf("record labelled %s=%s, not the journal's owner %s", intent.LabelOwner, intent.Clip(in.Labels[intent.LabelOwner]), owner), At: time.Now().UTC()}
			continue
		}
		ids = append(ids, id)
	}
	slices.Sort(ids)
	err = db.Update(func(tx *bolt.Tx) error {
		meta, err := tx.CreateBucket(bucketMeta)
		if err != nil {
			return err
		}
		if err := meta.Put(keyOwner, []byte(owner)); err != nil {
			return err
		}
		if err := meta.Put(keySchema, []byte(strconv.Itoa(SchemaVersion))); err != nil {
			return err
		}
		var bs [4]*bolt.Bucket
		for i, name := range [][]byte{bucketIntents, bucketKeys, bucketLive, bucketQuarantine} {
			if bs[i], err = tx.CreateBucket(name); err != nil {
				return err
			}
		}
		intents, keys, live, quarantine := bs[0], bs[1], bs[2], bs[3]
		for _, id := range ids {
			in := s.records[id]
			v, err := encodeRecord(in)
			if err != nil {
				return err
			}
			if err := intents.Put([]byte(id), v); err != nil {
				return err
			}
			if in.Key != "" && keys.Get([]byte(in.Key)) == nil {
				if err := keys.Put([]byte(in.Key), []byte(id)); err != nil {
					return err
				}
			}
			if in.Live() {
				if err := live.Put([]byte(id), []byte{}); err != nil {
					return err
				}
				rep.Live++
			}
			rep.Intents++
		}
		qids := make([]string, 0, len(s.quarantined))
		for id := range s.quarantined {
			qids = append(qids, id)
		}
		slices.Sort(qids)
		for _, id := range qids {
			q := s.quarantined[id]
			if id == "" {
				continue // a key damaged to nothing cannot be stored
			}
			v, err := json.Marshal(q)
			if err != nil {
				return err
			}
			if err := quarantine.Put([]byte(id), v); err != nil {
				return err
			}
			rep.Quarantined = append(rep.Quarantined, q)
		}
		return nil
	})
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		_ = durable.SyncDir(filepath.Dir(dst)) // as Open does for a new journal
	}
	return err
}
