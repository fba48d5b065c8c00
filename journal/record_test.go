package journal

import (
	"encoding/json"
	"errors"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tether-run/tether/intent"
	"github.com/tether-run/tether/internal/testutil"
	bolt "go.etcd.io/bbolt"
)

// One flipped bit in a name, or in an owner label, still makes valid JSON
// of a valid intent: only the checksum tells. The record is quarantined,
// never returned as live.
func TestFlippedBitQuarantined(t *testing.T) {
	for _, tc := range []struct{ name, needle string }{
		{"name", `"name":"tether-`},
		{"owner label", `"tether-owner":"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "journal.db")
			j, err := Open(path, Options{})
			if err != nil {
				t.Fatal(err)
			}
			victim, _, err := j.Create(t.Context(), intent.Declaration{})
			if err != nil {
				t.Fatal(err)
			}
			other, _, err := j.Create(t.Context(), intent.Declaration{})
			if err != nil {
				t.Fatal(err)
			}
			j.Close()
			// The byte after the needle: a ULID character of the name or
			// the owner, whose lowest bit flipped is another letter or
			// digit ('0'..'9' and 'a'..'z' pair up), so the JSON stays valid.
			testutil.FlipBitAfter(t, path, victim.ID, tc.needle)
			// Without its checksum the damaged record would be believed.
			db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true})
			if err != nil {
				t.Fatal(err)
			}
			db.View(func(tx *bolt.Tx) error {
				v := tx.Bucket(bucketIntents).Get([]byte(victim.ID))
				in, err := decode([]byte(victim.ID), v[recordHeader:])
				if err != nil || reflect.DeepEqual(in, victim) {
					t.Errorf("the flipped record, unchecked: %v (unchanged: %v)", err, reflect.DeepEqual(in, victim))
				}
				return nil
			})
			db.Close()
			j, err = Open(path, Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer j.Close()
			live, err := j.Live()
			if err != nil || len(live) != 1 || live[0].ID != other.ID {
				t.Fatalf("live %+v, %v; want only %s", live, err, other.ID)
			}
			q, err := j.Quarantined()
			if err != nil || len(q) != 1 || q[0].ID != victim.ID || !strings.Contains(q[0].Reason, "checksum mismatch") {
				t.Fatalf("quarantine %+v %v", q, err)
			}
			if _, err := j.Get(victim.ID); !errors.Is(err, ErrNotFound) {
				t.Fatalf("Get of the quarantined intent: %v", err)
			}
		})
	}
}

// legacyJournal writes a journal of schema 1, as a tether before checksums
// left it: records of bare JSON.
func legacyJournal(t *testing.T, path string, intents ...intent.Intent) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	err = db.Update(func(tx *bolt.Tx) error {
		meta, _ := tx.CreateBucket(bucketMeta)
		meta.Put(keyOwner, []byte(intents[0].Labels[intent.LabelOwner]))
		meta.Put(keySchema, []byte(strconv.Itoa(schemaUnchecked)))
		in, _ := tx.CreateBucket(bucketIntents)
		tx.CreateBucket(bucketKeys)
		live, _ := tx.CreateBucket(bucketLive)
		for _, x := range intents {
			v, _ := json.Marshal(x)
			in.Put([]byte(x.ID), v)
			live.Put([]byte(x.ID), []byte{})
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// A journal of schema 1 is read as it is, and Open seals every record at
// once, in the transaction that moves it to schema 2.
func TestLegacyJournalSealedAtOpen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "journal.db")
	owner := newID()
	var ins []intent.Intent
	for range 3 {
		id := newID()
		ins = append(ins, intent.Plan(owner, intent.Declaration{ID: id}, time.Now().UTC()))
	}
	legacyJournal(t, path, ins...)

	ro, err := OpenReadOnly(path, 0)
	if err != nil {
		t.Fatal(err)
	}
	if live, err := ro.Live(); err != nil || len(live) != 3 {
		t.Fatalf("read-only, before: %d live, %v", len(live), err)
	}
	ro.Close()

	j, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if live, err := j.Live(); err != nil || len(live) != 3 {
		t.Fatalf("after: %d live, %v", len(live), err)
	}
	j.Close()
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	db.View(func(tx *bolt.Tx) error {
		if v := string(tx.Bucket(bucketMeta).Get(keySchema)); v != strconv.Itoa(SchemaVersion) {
			t.Errorf("schema %q", v)
		}
		return tx.Bucket(bucketIntents).ForEach(func(k, v []byte) error {
			if _, sealed, err := openRecord(v); !sealed || err != nil {
				t.Errorf("record %s: sealed %v, %v", k, sealed, err)
			}
			return nil
		})
	})
}
