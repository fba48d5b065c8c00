package proxy

import (
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

func TestLeaseBodyKeepsEveryOtherField(t *testing.T) {
	out, replaced, err := leaseBody([]byte(`{"name":"a<b","autoStopInterval":5,"x":{"y":[1,2]}}`), 3)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"autoDeleteInterval":0,"autoStopInterval":3,"name":"a<b","x":{"y":[1,2]}}`
	if string(out) != want {
		t.Errorf("body %s, want %s", out, want)
	}
	if replaced["autoStopInterval"] != "5" || len(replaced) != 1 {
		t.Errorf("replaced %v", replaced)
	}
}
