package spool

import (
	"strings"
	"testing"
)

// Spool files are decoded as strictly as socket bodies (internal/jsonstrict):
// each refusal names the field.
func TestDecodeSpoolFileStrict(t *testing.T) {
	for name, c := range map[string]struct{ content, says string }{
		"upper-case field":   {`{"OP":"intent","id":"a"}`, `unknown field "OP"`},
		"field in two cases": {`{"op":"intent","id":"a","ID":"b"}`, `unknown field "ID"`},
		"duplicate field":    {`{"op":"intent","op":"delete","id":"a"}`, "op: the field is given twice"},
		"duplicate label":    {`{"op":"intent","id":"a","labels":{"k":"1","k":"2"}}`, `labels["k"]: the key is given twice`},
		"invalid UTF-8":      {"{\"op\":\"intent\",\"id\":\"a\",\"labels\":{\"k\":\"\xff\"}}", `labels["k"]: not valid UTF-8`},
		"unpaired surrogate": {`{"op":"intent","id":"a","labels":{"k":"\udfff"}}`, `labels["k"]`},
		"reserved any case":  {`{"op":"intent","id":"a","labels":{"Tether-Owner":"x"}}`, `labels["Tether-Owner"]`},
		"truncated":          {`{"op":"intent","id":`, "renamed before it was fully written"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := DecodeSpoolFile([]byte(c.content))
			if err == nil || !strings.Contains(err.Error(), c.says) {
				t.Fatalf("error %v, want it to say %q", err, c.says)
			}
		})
	}
}
