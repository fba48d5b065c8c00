package e2bproxy

import (
	"net/http"
	"testing"

	"github.com/tether-run/tether/provider/e2b/e2btest"
)

// TestCreateRefusedWhenNotJournaled: a create whose intent cannot be
// journaled is refused, and E2B never hears of it.
func TestCreateRefusedWhenNotJournaled(t *testing.T) {
	w := newWorld(t)
	if err := w.j.Close(); err != nil {
		t.Fatal(err)
	}
	if code := w.call("POST", "/sandboxes", map[string]any{"templateID": "base", "timeout": 60}, nil); code != http.StatusServiceUnavailable {
		t.Errorf("create with the journal closed: %d, want 503", code)
	}
	if a := w.arrivals(); len(a) != 0 {
		t.Errorf("E2B saw %d calls, want none: %+v", len(a), a)
	}
	if all := w.sim.Sandboxes(); len(all) != 0 {
		t.Errorf("the simulator made %d sandboxes, want none", len(all))
	}
}

// TestForkOfAGoneParentCloses: a fork of a sandbox of ours that ended
// meanwhile (its timeout) is answered 404 before anything starts: the
// fork's intent is closed at once, not left for the drain to look for.
func TestForkOfAGoneParentCloses(t *testing.T) {
	w := newWorld(t)
	var sb created
	w.call("POST", "/sandboxes", map[string]any{"templateID": "base", "timeout": 60}, &sb)
	parent := w.arrivals()[0].journaled
	w.eventually("observed", func() bool { got, _ := w.j.Get(parent.ID); return got.SandboxID != "" })
	w.sim.Expire(sb.SandboxID)
	if rec, _ := w.sim.Sandbox(sb.SandboxID); rec.State != e2btest.StateKilled {
		t.Fatalf("the parent after its timeout: %s", rec.State)
	}
	if code := w.call("POST", "/sandboxes/"+sb.SandboxID+"/fork", map[string]any{"count": 2}, nil); code != http.StatusNotFound {
		t.Fatalf("fork of a gone parent: %d, want 404", code)
	}
	all, err := w.j.All()
	if err != nil {
		t.Fatal(err)
	}
	forks := 0
	for _, in := range all {
		if in.ParentIntent != parent.ID {
			continue
		}
		forks++
		if in.Live() {
			t.Errorf("fork intent %s still %s after E2B's 404", in.ID, in.State)
		}
	}
	if forks != 2 {
		t.Errorf("%d fork intents journaled, want the 2 asked for (each journaled before the call, then closed)", forks)
	}
}
