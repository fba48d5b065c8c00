package providers

import (
	"testing"
	"time"

	"github.com/tether-run/tether/intent"
	"github.com/tether-run/tether/provider/daytona/daytonatest"
	"github.com/tether-run/tether/provider/e2b"
	"github.com/tether-run/tether/provider/e2b/e2btest"
)

// TestDemoRecords: each simulator's record, as `tether demo NAME ls`
// lists it: the name a sandbox was created with, gone or not, what
// deleted it, and what ends it if no one does.
func TestDemoRecords(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.Local)
	for _, c := range []struct {
		name string
		got  DemoSandbox
		want DemoSandbox
	}{
		{"daytona, deleted by tether",
			daytonaDemoSandbox(daytonatest.Sandbox{ID: "d1", Name: "DESTROYED_tether-x_1767322000000", State: "destroyed", DeletedBy: "DELETE from tether"}),
			DemoSandbox{ID: "d1", Name: "tether-x", State: "destroyed", Gone: true, DeletedBy: "DELETE from tether"}},
		{"daytona, auto-stop off",
			daytonaDemoSandbox(daytonatest.Sandbox{ID: "d2", Name: "tether-y", State: "started"}),
			DemoSandbox{ID: "d2", Name: "tether-y", State: "started", Ends: "auto-stop off", Endless: true}},
		{"daytona, tether's backstop",
			daytonaDemoSandbox(daytonatest.Sandbox{ID: "d3", Name: "tether-z", State: "started", AutoStopInterval: 15}),
			DemoSandbox{ID: "d3", Name: "tether-z", State: "started", Ends: "auto-stop 15 min"}},
		{"e2b, killed by tether",
			e2bDemoSandbox(e2btest.Sandbox{ID: "e1", Metadata: map[string]string{e2b.MetadataName: "tether-a"}, State: e2btest.StateKilled, KillReason: e2btest.KillRequest, KilledBy: "DELETE from tether"}),
			DemoSandbox{ID: "e1", Name: "tether-a", State: "killed", Gone: true, DeletedBy: "DELETE from tether"}},
		{"e2b, ended by its timeout",
			e2bDemoSandbox(e2btest.Sandbox{ID: "e2", State: e2btest.StateKilled, KillReason: e2btest.KillTimeout}),
			DemoSandbox{ID: "e2", State: "killed", Gone: true, DeletedBy: "timeout"}},
		{"e2b, running",
			e2bDemoSandbox(e2btest.Sandbox{ID: "e3", State: e2btest.StateRunning, EndAt: at}),
			DemoSandbox{ID: "e3", State: "running", Ends: "timeout at 03:04:05"}},
		{"e2b, paused",
			e2bDemoSandbox(e2btest.Sandbox{ID: "e4", State: e2btest.StatePaused, EndAt: at}),
			DemoSandbox{ID: "e4", State: "paused", Ends: "paused: kept until killed", Endless: true}},
	} {
		c.got.Labels = nil
		if c.got.ID != c.want.ID || c.got.Name != c.want.Name || c.got.State != c.want.State || c.got.Gone != c.want.Gone ||
			c.got.DeletedBy != c.want.DeletedBy || c.got.Ends != c.want.Ends || c.got.Endless != c.want.Endless {
			t.Errorf("%s: %+v, want %+v", c.name, c.got, c.want)
		}
	}
}

// TestDemoHooks: every provider with a simulator to serve names itself,
// listens on a loopback address of its own, and gives the sample runner a
// client; the default provider tells the story.
func TestDemoHooks(t *testing.T) {
	addrs := map[string]string{}
	for _, k := range Registered() {
		d := k.Demo
		if d == nil {
			continue
		}
		if d.Title == "" || d.Runner == nil {
			t.Errorf("%s: a demo without a title or a runner's client", k.Name)
		}
		if d.Flags != nil {
			if d.LsAddr == nil || d.Usage == "" {
				t.Errorf("%s: a simulator served without ls or usage", k.Name)
				continue
			}
			if other, ok := addrs[d.Addr]; ok || d.Addr == "" {
				t.Errorf("%s: address %q, also %s's", k.Name, d.Addr, other)
			}
			addrs[d.Addr] = k.Name
			if got := d.LsAddr(func(string) string { return "" }); got != d.Addr {
				t.Errorf("%s: ls with nothing exported asks %s, want %s", k.Name, got, d.Addr)
			}
		}
	}
	if k, ok := Lookup(intent.DefaultProvider); !ok || k.Demo == nil || k.Demo.Story == nil {
		t.Error("the default provider tells no story")
	}
}
