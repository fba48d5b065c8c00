package spooldir

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/tether-run/tether/intent"
)

// FuzzDecode: no file makes the decoder panic, and whatever it
// accepts is a valid op that survives a round trip unchanged.
func FuzzDecode(f *testing.F) {
	for _, seed := range []string{
		`{"op":"intent","id":"run-1","labels":{"team":"a"},"on_drain":"delete"}`,
		`{"op":"observe","id":"run-1","sandbox_id":"sb"}`,
		`{"op":"release","id":"run-1","outcome":"kept"}`,
		`{"op":"delete","id":"run-1"}`,
		`{"op":"intent","id":"01arz3ndektsv4rrffq69g5fav"}`,
		`{"op":"observe","id":"x","labels":{}}`, `{"op":"intent","id":"UP"}`, `{"op":"intent",`,
		`{"op":"intent","id":"a","labels":{"tether-x":"1"}}`, `{"op":"intent","id":"a"}{}`, ``, `null`,
		`{"op":"intent","id":"` + strings.Repeat("a", 65) + `"}`,
		`{"OP":"intent","id":"a"}`, `{"op":"intent","id":"a","ID":"b"}`, `{"op":"intent","op":"delete","id":"a"}`,
		"{\"op\":\"intent\",\"id\":\"a\",\"labels\":{\"k\":\"\xff\"}}", `{"op":"intent","id":"a","labels":{"TETHER-x":"1"}}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		op, err := Decode(data)
		if err != nil {
			return
		}
		if !utf8.Valid(data) {
			t.Fatalf("accepted invalid UTF-8: %q", data)
		}
		var fields map[string]json.RawMessage
		if err := json.Unmarshal(data, &fields); err != nil {
			t.Fatalf("accepted %q, which is not one object: %v", data, err)
		}
		for k := range fields {
			switch k {
			case "op", "id", "labels", "on_drain", "sandbox_id", "outcome":
			default:
				t.Fatalf("accepted field %q", k)
			}
		}
		if intent.ValidateIntentID(op.ID) != nil {
			t.Fatalf("accepted a bad id %q", op.ID)
		}
		switch op.Op {
		case OpIntent:
			if intent.ValidateLabels(op.Labels) != nil || intent.ValidateOnDrain(op.OnDrain) != nil || op.SandboxID != "" || op.Outcome != "" {
				t.Fatalf("accepted a bad intent op %+v", op)
			}
		case OpObserve:
			if intent.ValidateSandboxID(op.SandboxID) != nil || op.Labels != nil {
				t.Fatalf("accepted a bad observe op %+v", op)
			}
		case OpRelease:
			if intent.ValidateOutcome(op.Outcome) != nil || op.SandboxID != "" {
				t.Fatalf("accepted a bad release op %+v", op)
			}
		case OpDelete:
			if op.SandboxID != "" || op.Outcome != "" || op.Labels != nil {
				t.Fatalf("accepted a bad delete op %+v", op)
			}
		default:
			t.Fatalf("accepted op %q", op.Op)
		}
		again, _ := json.Marshal(op)
		op2, err := Decode(again)
		if len(op.Labels) == 0 {
			op.Labels = nil
		}
		if err != nil || !reflect.DeepEqual(op, op2) {
			t.Fatalf("round trip: %+v → %s → %+v, %v", op, again, op2, err)
		}
	})
}
