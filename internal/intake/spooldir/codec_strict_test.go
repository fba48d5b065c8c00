package spooldir

import (
	"strings"
	"testing"
)

// Spool files are decoded as strictly as socket bodies (internal/jsonstrict):
// each refusal names the field. (The ids are ULIDs, valid as client ids and
// as intent ids alike.)
func TestDecodeStrict(t *testing.T) {
	t.Parallel()
	for name, c := range map[string]struct{ content, says string }{
		"upper-case field":   {`{"OP":"intent","id":"01arz3ndektsv4rrffq69g5fav"}`, `unknown field "OP"`},
		"field in two cases": {`{"op":"intent","id":"01arz3ndektsv4rrffq69g5fav","ID":"01arz3ndektsv4rrffq69g5fav"}`, `unknown field "ID"`},
		"duplicate field":    {`{"op":"intent","op":"delete","id":"01arz3ndektsv4rrffq69g5fav"}`, "op: the field is given twice"},
		"duplicate label":    {`{"op":"intent","id":"01arz3ndektsv4rrffq69g5fav","labels":{"k":"1","k":"2"}}`, `labels["k"]: the key is given twice`},
		"invalid UTF-8":      {"{\"op\":\"intent\",\"id\":\"a\",\"labels\":{\"k\":\"\xff\"}}", `labels["k"]: not valid UTF-8`},
		"unpaired surrogate": {`{"op":"intent","id":"01arz3ndektsv4rrffq69g5fav","labels":{"k":"\udfff"}}`, `labels["k"]`},
		"reserved any case":  {`{"op":"intent","id":"01arz3ndektsv4rrffq69g5fav","labels":{"Tether-Owner":"x"}}`, `labels["Tether-Owner"]`},
		"truncated":          {`{"op":"intent","id":`, "renamed before it was fully written"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Decode([]byte(c.content))
			if err == nil || !strings.Contains(err.Error(), c.says) {
				t.Fatalf("error %v, want it to say %q", err, c.says)
			}
		})
	}
}
