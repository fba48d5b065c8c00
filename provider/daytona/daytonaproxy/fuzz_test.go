package daytonaproxy

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/tether-run/tether/internal/intake/apiproxy"
)

// FuzzRewriteCreate feeds arbitrary bytes to the create-body rewriting: it
// never panics, and for every body it accepts, every field the runner sent
// reaches Daytona — unchanged, except the name (set only when the runner
// gave none), the labels (the runner's plus tether's, tether's winning a
// clash) and an auto-stop of 0 or null (the backstop).
func FuzzRewriteCreate(f *testing.F) {
	for _, seed := range []string{
		`{}`,
		`{"name":"box","labels":{"team":"a"},"autoStopInterval":0}`,
		`{"snapshot":"daytonaio/sandbox:0.4","env":{"A":"1"},"cpu":2,"autoStopInterval":null,"volumes":[{"volumeId":"v","mountPath":"/m"}]}`,
		`{"name":"","labels":null,"autoStopInterval":0.0,"future":{"nested":[1,2,{"x":null}]}}`,
		`{"labels":{"tether-owner":"x","tether-intent":"y"},"name":"tether-y"}`,
		`{"name":"<b>&amp;</b>","labels":{"scope":"runner","k":"\u00e9"},"autoStopInterval":-0e5,"big":12345678901234567890123}`,
		`{"name":null,"name":"dup"}`,
		`[1]`, `null`, `"x"`, `{"name":1}`,
	} {
		f.Add([]byte(seed))
	}
	tether := map[string]string{"scope": "fuzz", "tether-owner": "owner", "tether-intent": "intent"}
	f.Fuzz(func(t *testing.T, body []byte) {
		cb, err := parseCreate(body)
		if err != nil {
			return
		}
		out, _, _, err := cb.rewrite("tether-intent", tether, intervals{backstop: 17})
		if err != nil {
			t.Fatalf("rewrite of an accepted body failed: %v", err)
		}
		var in, got map[string]json.RawMessage
		if err := json.Unmarshal(body, &in); err != nil {
			t.Fatalf("accepted body does not decode: %v", err)
		}
		if err := json.Unmarshal(out, &got); err != nil {
			t.Fatalf("rewritten body is not a JSON object: %v\n%s", err, out)
		}
		for k, v := range in {
			w, ok := got[k]
			if !ok {
				t.Fatalf("field %q lost", k)
			}
			switch k {
			case fieldName, fieldLabels, fieldAutoStop:
				continue
			}
			if !sameJSON(v, w) {
				t.Fatalf("field %q changed: %s → %s", k, v, w)
			}
		}
		var name string
		if err := json.Unmarshal(got[fieldName], &name); err != nil {
			t.Fatalf("name %s: %v", got[fieldName], err)
		}
		if cb.name != "" && name != cb.name || cb.name == "" && name != "tether-intent" {
			t.Fatalf("name %q (runner gave %q)", name, cb.name)
		}
		var labels map[string]string
		if err := json.Unmarshal(got[fieldLabels], &labels); err != nil {
			t.Fatalf("labels %s: %v", got[fieldLabels], err)
		}
		for k, v := range cb.labels {
			if _, ours := tether[k]; !ours && labels[k] != v {
				t.Fatalf("runner's label %q=%q lost: %v", k, v, labels)
			}
		}
		for k, v := range tether {
			if labels[k] != v {
				t.Fatalf("tether's label %q=%q missing: %v", k, v, labels)
			}
		}
		if raw, ok := in[fieldAutoStop]; ok {
			// Off is 0 in any spelling, or null: read here on its own, not
			// by the rule under test (intervalOff).
			var v any
			dec := json.NewDecoder(bytes.NewReader(raw))
			dec.UseNumber()
			off := apiproxy.IsNull(raw)
			if !off && dec.Decode(&v) == nil {
				if n, ok := v.(json.Number); ok {
					f, err := n.Float64()
					off = err == nil && f == 0
				}
			}
			if off {
				if string(got[fieldAutoStop]) != "17" {
					t.Fatalf("auto-stop off (%s) became %s, want the backstop", raw, got[fieldAutoStop])
				}
			} else if !sameJSON(raw, got[fieldAutoStop]) {
				t.Fatalf("auto-stop %s changed to %s", raw, got[fieldAutoStop])
			}
		} else if _, ok := got[fieldAutoStop]; ok {
			t.Fatalf("auto-stop added though the runner sent none")
		}
	})
}

// sameJSON compares two JSON values by meaning (numbers by their text).
func sameJSON(a, b []byte) bool {
	var x, y any
	da, db := json.NewDecoder(bytes.NewReader(a)), json.NewDecoder(bytes.NewReader(b))
	da.UseNumber()
	db.UseNumber()
	if da.Decode(&x) != nil || db.Decode(&y) != nil {
		return false
	}
	return reflect.DeepEqual(x, y)
}

// FuzzMergeLabelsBody feeds arbitrary label replacements for a sandbox of
// tether's: it never panics; an accepted one keeps every field and every
// label of the runner's (but a value it gave one of tether's keys), and
// carries every label of tether's with its value, so no replacement
// removes or spoofs one.
func FuzzMergeLabelsBody(f *testing.F) {
	for _, seed := range []string{
		`{"labels":{}}`, `{"labels":{"a":"1","tether-owner":"evil"}}`, `{"labels":null}`, `{}`,
		`{"labels":{"scope":""},"extra":[1,{"x":null}]}`, `{"labels":{"a":1}}`, `[]`, `null`,
		`{"labels":{"tether-intent":"x"},"labels":{"b":"2"}}`,
	} {
		f.Add([]byte(seed))
	}
	tether := map[string]string{"scope": "fuzz", "tether-owner": "owner", "tether-intent": "intent"}
	f.Fuzz(func(t *testing.T, body []byte) {
		out, _, err := mergeLabelsBody(body, tether)
		if err != nil {
			return
		}
		var in, got map[string]json.RawMessage
		if err := json.Unmarshal(body, &in); err != nil {
			t.Fatalf("accepted body does not decode: %v", err)
		}
		if err := json.Unmarshal(out, &got); err != nil {
			t.Fatalf("merged body is not a JSON object: %v\n%s", err, out)
		}
		for k, v := range in {
			if k == fieldLabelsBody {
				continue
			}
			if w, ok := got[k]; !ok || !sameJSON(v, w) {
				t.Fatalf("field %q lost or changed: %s → %s", k, v, w)
			}
		}
		var runner, labels map[string]string
		if raw := in[fieldLabelsBody]; raw != nil && !apiproxy.IsNull(raw) {
			if err := json.Unmarshal(raw, &runner); err != nil {
				t.Fatalf("accepted labels do not decode: %v", err)
			}
		}
		if err := json.Unmarshal(got[fieldLabelsBody], &labels); err != nil {
			t.Fatalf("labels %s: %v", got[fieldLabelsBody], err)
		}
		for k, v := range runner {
			if _, ours := tether[k]; !ours && labels[k] != v {
				t.Fatalf("runner's label %q=%q lost: %v", k, v, labels)
			}
		}
		for k, v := range tether {
			if labels[k] != v {
				t.Fatalf("tether's label %q=%q removed or spoofed: %v", k, v, labels)
			}
		}
		if len(labels) > len(runner)+len(tether) {
			t.Fatalf("labels %v: more than the runner's and tether's", labels)
		}
	})
}

// FuzzSetterRule feeds arbitrary setter intervals (the path segment) to the
// interval rule: an auto-stop that means "never" never reaches Daytona
// while a backstop is set, lease mode always sends its own auto-stop and an
// auto-delete of at most the lease, and every other interval passes as the
// runner sent it.
func FuzzSetterRule(f *testing.F) {
	for _, seed := range []string{"0", "0.0", "-0", "15", "-1", "1e3", "abc", "", "null", " 0"} {
		f.Add(seed, false)
		f.Add(seed, true)
	}
	f.Fuzz(func(t *testing.T, sent string, lease bool) {
		iv := intervals{backstop: 17}
		if lease {
			iv.lease = 3
		}
		for _, field := range []string{fieldAutoStop, fieldAutoDelete, "autoArchiveInterval"} {
			v, set := iv.apply(field, json.RawMessage(sent))
			switch {
			case lease && field == fieldAutoStop:
				if strings.TrimSpace(string(v)) != "3" {
					t.Fatalf("lease: auto-stop %q sent as %q", sent, v)
				}
			case lease && field == fieldAutoDelete:
				// At most the lease; 0 (ephemeral: the runner's own stop
				// deletes it) only when the runner sent 0.
				got, err := strconv.ParseFloat(strings.TrimSpace(string(v)), 64)
				asked, aerr := strconv.ParseFloat(strings.TrimSpace(sent), 64)
				if err != nil || got < 0 || got > 3 || got == 0 && (aerr != nil || asked != 0) {
					t.Fatalf("lease: auto-delete %q sent as %q", sent, v)
				}
			case field == fieldAutoStop && intervalOff(json.RawMessage(sent)):
				if string(v) != "17" || !set {
					t.Fatalf("auto-stop off (%q) sent as %q", sent, v)
				}
			default:
				if set || string(v) != sent {
					t.Fatalf("%s %q changed to %q", field, sent, v)
				}
			}
			if set == (string(v) == sent) {
				t.Fatalf("%s %q → %q: replaced=%v", field, sent, v, set)
			}
		}
	})
}
