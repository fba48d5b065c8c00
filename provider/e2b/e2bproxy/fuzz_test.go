package e2bproxy

import (
	"encoding/json"
	"testing"
	"time"
)

// FuzzParseBody: any body the runner sends is refused with an error or
// taken apart without a panic; a body taken apart and encoded again
// keeps the runner's metadata and every other field, and a capped
// timeout is never above the cap.
func FuzzParseBody(f *testing.F) {
	for _, s := range []string{``, `{}`, `null`, `[]`, `{"metadata":{"a":"b"},"timeout":3000,"templateID":"base"}`,
		`{"metadata":null,"timeout":null}`, `{"timeout":1e99}`, `{"timeout":-5}`, `{"timeout":1.5}`, `{"metadata":{"a":1}}`} {
		f.Add([]byte(s))
	}
	const max = 10 * time.Minute
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := parseBody(b)
		if err != nil {
			return
		}
		n := len(c.fields)
		c.capTimeout(max, time.Now())
		out, err := c.encode()
		if err != nil {
			t.Fatalf("encode: %v", err)
		}
		again, err := parseBody(out)
		if err != nil {
			t.Fatalf("re-parse of %s: %v", out, err)
		}
		if len(again.fields) != n || len(again.metadata) != len(c.metadata) {
			t.Fatalf("fields or metadata lost: %s → %s", b, out)
		}
		if again.timeout >= 0 && c.timeout*int64(time.Second) > int64(max) && again.timeout > int64(max/time.Second) {
			t.Fatalf("timeout %d not capped", again.timeout)
		}
		var v map[string]json.RawMessage
		if json.Unmarshal(out, &v) != nil {
			t.Fatalf("encoded body is not an object: %s", out)
		}
	})
}

// FuzzForkResults: a fork's answer, whatever E2B (or something in its
// place) sends, is read without a panic into one entry per result, each a
// sandbox id or an error status, never both, never neither.
func FuzzForkResults(f *testing.F) {
	for _, s := range []string{`[]`, `[{"sandbox":{"sandboxID":"i1"}},{"error":{"code":429,"message":"m"}}]`,
		`[{}]`, `[null]`, `[{"error":{}}]`, `{"sandboxID":"i1"}`, `[{"sandbox":{"sandboxID":""},"error":{"code":500}}]`, `null`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		made, err := forkResults(b)
		if err != nil {
			return
		}
		for i, m := range made {
			if (m.ID == "") == (m.Status == 0) {
				t.Fatalf("result %d of %s: %+v, want an id or a status", i, b, m)
			}
		}
	})
}
