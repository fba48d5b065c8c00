package socket

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
	"unicode/utf8"

	"github.com/tether-run/tether/intent"
	"github.com/tether-run/tether/intentapi"
)

// FuzzDecodeIntentRequest: no body makes the decoder panic, and whatever it
// accepts is valid and survives a round trip unchanged.
func FuzzDecodeIntentRequest(f *testing.F) {
	for _, seed := range []string{
		``, `{}`, `{"labels":{"team":"a"},"on_drain":"stop","key":"k-1"}`,
		`{"labels":{"tether-owner":"x"}}`, `{"labels":{"":""}}`, `{"on_drain":"nuke"}`,
		`{"key":"a b"}`, `{"labels":null}`, `{"labels":{"a":null}}`, `{"lables":{}}`,
		`{} {}`, `[`, `{"labels":{"a":"\u0000"}}`, `{"LABELS":{}}`, `{"Key":"k"}`, `{"key":"a","key":"b"}`,
		`{"labels":{"a":"1","a":"2"}}`, "{\"labels\":{\"a\":\"\xff\"}}", `{"labels":{"a":"\ud800"}}`, `{"labels":{"Tether-Owner":"x"}}`, `{"key":"` + string(bytes.Repeat([]byte("k"), 200)) + `"}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		req, err := DecodeCreateRequest(bytes.NewReader(body))
		if err != nil {
			return
		}
		if err := intent.ValidateLabels(req.Labels); err != nil {
			t.Fatalf("accepted invalid labels: %v", err)
		}
		if err := intent.ValidateOnDrain(req.OnDrain); err != nil {
			t.Fatalf("accepted invalid on_drain: %v", err)
		}
		if req.Key != "" && intent.ValidateKey(req.Key) != nil {
			t.Fatalf("accepted invalid key %q", req.Key)
		}
		// Strict decoding: what is accepted is valid UTF-8, and every
		// field name in it is spelt exactly (encoding/json alone would
		// take "LABELS" for "labels").
		if !utf8.Valid(body) {
			t.Fatalf("accepted invalid UTF-8: %q", body)
		}
		var fields map[string]json.RawMessage
		if len(bytes.TrimSpace(body)) > 0 {
			if err := json.Unmarshal(body, &fields); err != nil {
				t.Fatalf("accepted %q, which is not one object: %v", body, err)
			}
		}
		for k := range fields {
			if k != "labels" && k != "on_drain" && k != "key" {
				t.Fatalf("accepted field %q", k)
			}
		}
		again, _ := json.Marshal(req)
		req2, err := DecodeCreateRequest(bytes.NewReader(again))
		if err != nil || !reflect.DeepEqual(normal(req), normal(req2)) {
			t.Fatalf("round trip: %+v → %s → %+v, %v", req, again, req2, err)
		}
		// The other bodies share the decoder; they must not panic either.
		DecodeObserveRequest(bytes.NewReader(body))
		DecodeReleaseRequest(bytes.NewReader(body))
	})
}

// normal treats a nil and an empty label map alike (omitempty drops both).
func normal(r intentapi.CreateRequest) intentapi.CreateRequest {
	if len(r.Labels) == 0 {
		r.Labels = nil
	}
	return r
}
