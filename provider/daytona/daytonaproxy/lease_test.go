package daytonaproxy

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	apiclient "github.com/daytonaio/daytona/libs/api-client-go"
)

// In lease mode every create gets the short auto-stop, whatever the runner
// asked for, and an auto-delete of at most the lease: never (Daytona's
// default) and longer ones become the lease, an ephemeral one (0) and a
// shorter one stay. Replacements are logged.
func TestLeaseModeSetsTheIntervalsOfEveryCreate(t *testing.T) {
	t.Parallel()
	w := newWorld(t, nil)
	w.p.LeaseMinutes = 2
	for _, tc := range []struct {
		name       string
		req        func() *apiclient.CreateSandbox
		autoDelete int
	}{
		{"absent", apiclient.NewCreateSandbox, 2},
		{"runner's own", func() *apiclient.CreateSandbox {
			r := apiclient.NewCreateSandbox()
			r.SetAutoStopInterval(30)
			r.SetAutoDeleteInterval(-1)
			return r
		}, 2},
		{"off", func() *apiclient.CreateSandbox {
			r := apiclient.NewCreateSandbox()
			r.SetAutoStopInterval(0)
			return r
		}, 2},
		{"longer", func() *apiclient.CreateSandbox {
			r := apiclient.NewCreateSandbox()
			r.SetAutoDeleteInterval(60)
			return r
		}, 2},
		{"ephemeral", func() *apiclient.CreateSandbox {
			r := apiclient.NewCreateSandbox()
			r.SetAutoDeleteInterval(0)
			return r
		}, 0},
		{"shorter", func() *apiclient.CreateSandbox {
			r := apiclient.NewCreateSandbox()
			r.SetAutoDeleteInterval(1)
			return r
		}, 1},
	} {
		sb, _, err := w.runner().SandboxAPI.CreateSandbox(ctx(t)).CreateSandbox(*tc.req()).Execute()
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		rec, _ := w.sim.Sandbox(sb.GetId())
		if rec.AutoStopInterval != 2 || rec.AutoDeleteInterval != tc.autoDelete {
			t.Errorf("%s: auto-stop %d auto-delete %d, want the lease 2 and %d", tc.name, rec.AutoStopInterval, rec.AutoDeleteInterval, tc.autoDelete)
		}
	}
	if !strings.Contains(w.logs.String(), "lease mode replaces the runner's intervals") {
		t.Errorf("the runner's own intervals were replaced silently:\n%s", w.logs)
	}
}

func TestLeaseRuleKeepsEveryOtherField(t *testing.T) {
	t.Parallel()
	cb, err := parseCreate([]byte(`{"name":"a<b","autoStopInterval":5,"x":{"y":[1,2]}}`))
	if err != nil {
		t.Fatal(err)
	}
	out, _, replaced, err := cb.rewrite("tether-x", map[string]string{"tether-owner": "o"}, intervals{backstop: 15, lease: 3})
	if err != nil {
		t.Fatal(err)
	}
	want := `{"autoDeleteInterval":3,"autoStopInterval":3,"labels":{"tether-owner":"o"},"name":"a<b","x":{"y":[1,2]}}`
	if string(out) != want {
		t.Errorf("body %s, want %s", out, want)
	}
	if replaced["autoStopInterval"] != "5" || len(replaced) != 1 {
		t.Errorf("replaced %v", replaced)
	}
}

// FuzzLeaseRule: for every body the proxy accepts, lease mode never fails,
// sets the lease's auto-stop and an auto-delete from 0 (only if the runner
// asked for 0) to the lease, and keeps every other field as the rewrite
// without any interval rule sends it.
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
		del, err := strconv.ParseFloat(string(bytes.TrimSpace(after[fieldAutoDelete])), 64)
		if string(after[fieldAutoStop]) != "2" || err != nil || del < 0 || del > 2 {
			t.Fatalf("intervals %s %s", after[fieldAutoStop], after[fieldAutoDelete])
		}
		if asked, err := strconv.ParseFloat(string(bytes.TrimSpace(before[fieldAutoDelete])), 64); del == 0 && (err != nil || asked != 0) {
			t.Fatalf("made ephemeral: the runner sent auto-delete %s", before[fieldAutoDelete])
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
