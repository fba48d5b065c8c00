package e2bproxy

import (
	"net/http"
	"testing"
	"time"

	"github.com/tether-run/tether/intent"
	"github.com/tether-run/tether/provider/e2b"
	"github.com/tether-run/tether/provider/e2b/e2btest"
)

// TestResumeCapped: a resume of a paused sandbox of ours asking for longer
// than the cap is cut to it, the simulator's sandbox ends within the cap,
// and the end asked for is told for the renewals.
func TestResumeCapped(t *testing.T) {
	w := newWorld(t)
	var sb created
	w.call("POST", "/sandboxes", map[string]any{"templateID": "base", "timeout": 60}, &sb)
	in := w.arrivals()[0].journaled
	w.eventually("observed", func() bool { got, _ := w.j.Get(in.ID); return got.SandboxID != "" })
	if code := w.call("POST", "/sandboxes/"+sb.SandboxID+"/pause", nil, nil); code != http.StatusNoContent {
		t.Fatalf("pause: %d", code)
	}
	if code := w.call("POST", "/sandboxes/"+sb.SandboxID+"/resume", map[string]any{"timeout": 3000}, nil); code != http.StatusCreated {
		t.Fatalf("resume: %d", code)
	}
	a := w.arrivals()
	if got := a[len(a)-1].body["timeout"]; got != float64(maxTimeout/time.Second) {
		t.Errorf("resume forwarded with timeout %v, want it capped to %s", got, maxTimeout)
	}
	rec, _ := w.sim.Sandbox(sb.SandboxID)
	if rec.State != e2btest.StateRunning || time.Until(rec.EndAt) > maxTimeout {
		t.Errorf("simulator: %s, ends in %s; want running within the cap", rec.State, time.Until(rec.EndAt))
	}
	w.mu.Lock()
	_, told := w.capped[in.ID]
	w.mu.Unlock()
	if !told {
		t.Error("the capped resume was not told for the renewals")
	}
}

// TestDeclaredCreateCappedIsRenewed: a create the runner declared itself
// is cut to the cap like any other, and the end it asked for is told under
// the intent its metadata names, so that the sidecar renews it.
func TestDeclaredCreateCappedIsRenewed(t *testing.T) {
	w := newWorld(t)
	in, _, err := w.j.Create(t.Context(), intent.Declaration{Provider: "e2b"})
	if err != nil {
		t.Fatal(err)
	}
	md := intent.MergeLabels(in.Labels, map[string]string{e2b.MetadataName: in.Name})
	asked := time.Now().Add(3000 * time.Second)
	var sb created
	if code := w.call("POST", "/sandboxes", map[string]any{"templateID": "base", "timeout": 3000, "metadata": md}, &sb); code != http.StatusCreated {
		t.Fatalf("create: %d", code)
	}
	if rec, _ := w.sim.Sandbox(sb.SandboxID); rec.EndAt.Sub(rec.StartedAt) != maxTimeout {
		t.Errorf("simulator: lives %s, want the cap %s", rec.EndAt.Sub(rec.StartedAt), maxTimeout)
	}
	w.mu.Lock()
	end, told := w.capped[in.ID]
	w.mu.Unlock()
	if d := end.Sub(asked); !told || d < -time.Second || d > time.Minute {
		t.Errorf("Capped told for %s: %v, end %s; want the runner's %s", in.ID, told, end, asked)
	}
	if n, _ := w.j.LiveCount(); n != 1 {
		t.Errorf("%d live intents, want the declared one alone", n)
	}
}

// TestForkOfAnotherSandboxCapped: a fork of a sandbox tether does not
// know is not journaled, and its timeout is cut to the cap all the same:
// the cap bounds every sandbox made through the proxy.
func TestForkOfAnotherSandboxCapped(t *testing.T) {
	w := newWorld(t)
	other := w.sim.AddSandbox(e2btest.DefaultTeam, e2btest.SeedSandbox{Metadata: map[string]string{"app": "x"}})
	var results []struct {
		Sandbox created `json:"sandbox"`
	}
	if code := w.call("POST", "/sandboxes/"+other.ID+"/fork", map[string]any{"timeout": 3000, "count": 1}, &results); code != http.StatusCreated || len(results) != 1 {
		t.Fatalf("fork: %d %+v", code, results)
	}
	if n, _ := w.j.LiveCount(); n != 0 {
		t.Errorf("%d intents journaled for a fork of another sandbox", n)
	}
	a := w.arrivals()
	if got := a[len(a)-1].body["timeout"]; got != float64(maxTimeout/time.Second) {
		t.Errorf("fork forwarded with timeout %v, want it capped to %s", got, maxTimeout)
	}
	if rec, ok := w.sim.Sandbox(results[0].Sandbox.SandboxID); !ok || rec.State != e2btest.StateRunning || time.Until(rec.EndAt) > maxTimeout {
		t.Errorf("the fork in the simulator's record: %v, %s, ends in %s; want running within the cap", ok, rec.State, time.Until(rec.EndAt))
	}
}
