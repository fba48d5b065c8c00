package daytonaproxy

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	apiclient "github.com/daytonaio/daytona/libs/api-client-go"
)

// In lease mode every create gets the short auto-stop and auto-delete 0,
// whatever the runner asked for (and the replacement is logged).
func TestLeaseModeSetsTheIntervalsOfEveryCreate(t *testing.T) {
	w := newWorld(t, nil)
	w.p.LeaseMinutes = 2
	for _, tc := range []struct {
		name string
		req  func() *apiclient.CreateSandbox
	}{
		{"absent", apiclient.NewCreateSandbox},
		{"runner's own", func() *apiclient.CreateSandbox {
			r := apiclient.NewCreateSandbox()
			r.SetAutoStopInterval(30)
			r.SetAutoDeleteInterval(-1)
			return r
		}},
		{"off", func() *apiclient.CreateSandbox {
			r := apiclient.NewCreateSandbox()
			r.SetAutoStopInterval(0)
			return r
		}},
	} {
		sb, _, err := w.runner().SandboxAPI.CreateSandbox(ctx(t)).CreateSandbox(*tc.req()).Execute()
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		rec, _ := w.sim.Sandbox(sb.GetId())
		if rec.AutoStopInterval != 2 || rec.AutoDeleteInterval != 0 {
			t.Errorf("%s: auto-stop %d auto-delete %d, want the lease 2 and 0", tc.name, rec.AutoStopInterval, rec.AutoDeleteInterval)
		}
	}
	if !strings.Contains(w.logs.String(), "lease mode replaces the runner's intervals") {
		t.Errorf("the runner's own intervals were replaced silently:\n%s", w.logs)
	}
}

func TestLeaseRuleKeepsEveryOtherField(t *testing.T) {
	cb, err := parseCreate([]byte(`{"name":"a<b","autoStopInterval":5,"x":{"y":[1,2]}}`))
	if err != nil {
		t.Fatal(err)
	}
	out, _, replaced, err := cb.rewrite("tether-x", map[string]string{"tether-owner": "o"}, intervals{backstop: 15, lease: 3})
	if err != nil {
		t.Fatal(err)
	}
	want := `{"autoDeleteInterval":0,"autoStopInterval":3,"labels":{"tether-owner":"o"},"name":"a<b","x":{"y":[1,2]}}`
	if string(out) != want {
		t.Errorf("body %s, want %s", out, want)
	}
	if replaced["autoStopInterval"] != "5" || len(replaced) != 1 {
		t.Errorf("replaced %v", replaced)
	}
}

// FuzzLeaseRule: for every body the proxy accepts, lease mode never fails,
// sets exactly its two intervals and keeps every other field as the
// rewrite without any interval rule sends it.
func FuzzLeaseRule(f *testing.F) {
	for _, seed := range []string{
		`{}`, `{"autoStopInterval":5,"autoDeleteInterval":-1,"name":"x"}`,
		`{"autoDeleteInterval":null,"env":{"A":"<&>"},"big":12345678901234567890123}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		cb, err := parseCreate(body)
		if err != nil {
			return
		}
		labels := map[string]string{"tether-owner": "o"}
		plain, _, _, err := cb.rewrite("tether-x", labels, intervals{})
		if err != nil {
			t.Fatal(err)
		}
		out, _, replaced, err := cb.rewrite("tether-x", labels, intervals{backstop: 15, lease: 2})
		if err != nil {
			t.Fatalf("lease of an accepted body failed: %v", err)
		}
		var before, after map[string]json.RawMessage
		if json.Unmarshal(plain, &before) != nil || json.Unmarshal(out, &after) != nil {
			t.Fatal("a body does not decode")
		}
		if string(after[fieldAutoStop]) != "2" || string(after[fieldAutoDelete]) != "0" {
			t.Fatalf("intervals %s %s", after[fieldAutoStop], after[fieldAutoDelete])
		}
		for k, v := range before {
			if k != fieldAutoStop && k != fieldAutoDelete && !bytes.Equal(bytes.TrimSpace(after[k]), bytes.TrimSpace(v)) {
				t.Fatalf("field %s changed: %s -> %s", k, v, after[k])
			}
		}
		for _, k := range []string{fieldAutoStop, fieldAutoDelete} {
			if sent, ok := cb.fields[k]; ok && !bytes.Equal(bytes.TrimSpace(sent), after[k]) && replaced[k] != string(sent) {
				t.Fatalf("%s: the runner's %s was replaced without a record (%v)", k, sent, replaced)
			}
		}
	})
}
