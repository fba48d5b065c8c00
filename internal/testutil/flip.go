package testutil

import (
	"bytes"
	"os"
	"testing"
)

// FlipBitAfter flips the lowest bit of the byte just after needle in every
// copy of intent id's record in the journal file at path (bbolt may hold
// an older copy in a freed page too): a ULID character becomes another
// ('0'..'9', 'a'..'z' pair up), so the record stays valid JSON of a valid
// intent, and only its checksum tells.
func FlipBitAfter(t testing.TB, path, id, needle string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for i := 0; ; {
		r := bytes.Index(b[i:], []byte(`{"id":"`+id+`"`))
		if r < 0 {
			break
		}
		rec := i + r
		at := bytes.Index(b[rec:], []byte(needle))
		if at < 0 || at > 2000 {
			t.Fatalf("%q not in record %s", needle, id)
		}
		b[rec+at+len(needle)] ^= 0x01
		n++
		i = rec + 1
	}
	if n == 0 {
		t.Fatalf("record %s not in the journal file", id)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}
