package jsonstrict

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"
)

type request struct {
	Labels  map[string]string `json:"labels,omitempty"`
	OnDrain string            `json:"on_drain,omitempty"`
	Key     string            `json:"key,omitempty"`
	Nested  *struct {
		Name string `json:"name"`
	} `json:"nested,omitempty"`
	List   []string `json:"list,omitempty"`
	hidden string
	Skip   string `json:"-"`
}

func TestDecode(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		want       string // substring of the error; empty: accepted
	}{
		{"plain", `{"labels":{"a":"b"},"on_drain":"stop","key":"k"}`, ""},
		{"empty object", `{}`, ""},
		{"escapes", `{"key":"\u00e9\ud83d\ude00\\u0041\n"}`, ""},
		{"nested and list", `{"nested":{"name":"x"},"list":["a","b"]}`, ""},
		{"upper-case field", `{"LABELS":{"a":"b"}}`, `unknown field "LABELS" (field names are case-sensitive: want "labels")`},
		{"title-case field", `{"Key":"k"}`, `unknown field "Key"`},
		{"case beside the real one", `{"key":"a","KEY":"b"}`, `unknown field "KEY"`},
		{"nested case", `{"nested":{"Name":"x"}}`, `unknown field "nested.Name"`},
		{"unknown", `{"lables":{}}`, `unknown field "lables"`},
		{"json:- field", `{"Skip":"x"}`, `unknown field "Skip"`},
		{"unexported field", `{"hidden":"x"}`, `unknown field "hidden"`},
		{"duplicate field", `{"key":"a","key":"b"}`, "key: the field is given twice"},
		{"duplicate label", `{"labels":{"a":"1","a":"2"}}`, `labels["a"]: the key is given twice`},
		{"invalid UTF-8 value", "{\"labels\":{\"a\":\"\xff\"}}", `labels["a"]: not valid UTF-8`},
		{"invalid UTF-8 key", "{\"labels\":{\"\xc3\":\"v\"}}", `labels: a key: not valid UTF-8`},
		{"invalid UTF-8 field", "{\"k\xffey\":\"v\"}", `a field name: not valid UTF-8`},
		{"lone low surrogate", `{"key":"\udc00"}`, "key: an unpaired UTF-16 surrogate"},
		{"lone high surrogate", `{"key":"a\ud800b"}`, "key: an unpaired UTF-16 surrogate"},
		{"high then not low", `{"key":"\ud800\u0041"}`, "key: an unpaired UTF-16 surrogate"},
		{"wrong type", `{"key":1}`, "key: want a JSON string, got number"},
		{"truncated", `{"labels":`, "ends too early"},
		{"two values", `{} {}`, "more than one JSON value"},
		{"not an object", `["a"]`, "want one JSON object"},
		{"malformed", `{"key" "a"}`, "malformed JSON"},
		{"too deep", `{"list":` + strings.Repeat("[", 40) + strings.Repeat("]", 40) + `}`, "nested deeper than 32 levels"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var r request
			err := Decode([]byte(tc.body), &r)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				var std request
				if err := json.Unmarshal([]byte(tc.body), &std); err != nil || !reflect.DeepEqual(r, std) {
					t.Fatalf("decoded %+v, encoding/json %+v (%v)", r, std, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
			if tc.want == "ends too early" && !errors.Is(err, ErrTruncated) {
				t.Fatalf("%v is not ErrTruncated", err)
			}
		})
	}
}

// FuzzDecode: whatever Decode accepts, encoding/json decodes the same way;
// it is valid UTF-8 with no unpaired surrogate; and no key repeats.
func FuzzDecode(f *testing.F) {
	for _, s := range []string{`{"labels":{"a":"b"},"key":"k"}`, `{"LABELS":{}}`, `{"key":"\ud83d\ude00"}`, `{"labels":{"a":"1","a":"2"}}`, "{\"key\":\"\xff\"}", `{"nested":{"name":"n"},"list":[]}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var r request
		if Decode(data, &r) != nil {
			return
		}
		if !utf8.Valid(data) {
			t.Fatalf("accepted invalid UTF-8: %q", data)
		}
		var std request
		if err := json.Unmarshal(data, &std); err != nil || !reflect.DeepEqual(r, std) {
			t.Fatalf("decoded %+v, encoding/json %+v (%v)", r, std, err)
		}
		for _, s := range append([]string{r.Key, r.OnDrain}, r.List...) {
			if strings.ContainsRune(s, utf8.RuneError) && !bytes.Contains(data, []byte("\uFFFD")) && !bytes.Contains(bytes.ToLower(data), []byte(`\ufffd`)) {
				t.Fatalf("accepted a replacement character that was not in the input: %q", data)
			}
		}
	})
}
