package spooldir

import (
	"strings"
	"testing"
)

// An intent file may name its provider; no other op may.
func TestDecodeProvider(t *testing.T) {
	f, err := Decode([]byte(`{"op":"intent","id":"01arz3ndektsv4rrffq69g5fav","provider":"e2b"}`))
	if err != nil || f.Provider != "e2b" {
		t.Fatalf("intent with provider: %+v, %v", f, err)
	}
	for _, op := range []string{`"observe","sandbox_id":"i1"`, `"release"`, `"delete"`} {
		_, err := Decode([]byte(`{"op":` + op + `,"id":"01arz3ndektsv4rrffq69g5fav","provider":"e2b"}`))
		if err == nil || !strings.Contains(err.Error(), "provider: not allowed") {
			t.Errorf("op %s with provider: %v", op, err)
		}
	}
}
