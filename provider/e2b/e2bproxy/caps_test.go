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

// TestForkOfAnotherSandboxJournaled: a fork of a sandbox tether does not
// know is a new sandbox this runner made: each fork is journaled before
// the call is forwarded, witnessed (proved by the id E2B answers, since it
// carries the parent's metadata, none of tether's), its id journaled from
// the answer, its timeout cut to the cap; the parent is untouched, its
// timeout unchanged.
func TestForkOfAnotherSandboxJournaled(t *testing.T) {
	w := newWorld(t)
	other := w.sim.AddSandbox(e2btest.DefaultTeam, e2btest.SeedSandbox{Metadata: map[string]string{"app": "x"}, Timeout: 50 * time.Minute})
	var results []struct {
		Sandbox created `json:"sandbox"`
	}
	if code := w.call("POST", "/sandboxes/"+other.ID+"/fork", map[string]any{"timeout": 3000, "count": 2}, &results); code != http.StatusCreated || len(results) != 2 {
		t.Fatalf("fork: %d %+v", code, results)
	}
	a := w.arrivals()
	if got := a[len(a)-1].body["timeout"]; got != float64(maxTimeout/time.Second) {
		t.Errorf("fork forwarded with timeout %v, want it capped to %s", got, maxTimeout)
	}
	byID := map[string]intent.Intent{}
	w.eventually("both forks journaled with their ids", func() bool {
		live, _ := w.j.Live()
		clear(byID)
		for _, in := range live {
			byID[in.SandboxID] = in
		}
		return len(live) == 2 && byID[results[0].Sandbox.SandboxID].ID != "" && byID[results[1].Sandbox.SandboxID].ID != ""
	})
	for _, res := range results {
		in, ok := byID[res.Sandbox.SandboxID]
		if !ok || !in.Witnessed || in.ParentIntent != "" || in.Account == "" {
			t.Errorf("fork %s: intent %+v; want a witnessed intent observing it", res.Sandbox.SandboxID, in)
		}
		rec, _ := w.sim.Sandbox(res.Sandbox.SandboxID)
		if rec.State != e2btest.StateRunning || time.Until(rec.EndAt) > maxTimeout || rec.Metadata["app"] != "x" {
			t.Errorf("the fork in the simulator's record: %+v; want running within the cap, with its parent's metadata", rec)
		}
		w.mu.Lock()
		_, told := w.capped[in.ID]
		w.mu.Unlock()
		if !told {
			t.Errorf("fork %s: its asked end was not told for the renewals", in.ID)
		}
	}
	if rec, _ := w.sim.Sandbox(other.ID); rec.State != e2btest.StateRunning || !rec.EndAt.Equal(other.EndAt) {
		t.Errorf("the parent: %+v; want untouched, ending at %s", rec, other.EndAt)
	}
}

// TestForeignSandboxUntouched: the calls that set a timeout, on a sandbox
// tether does not own (a workspace the runner reattaches to), pass as the
// runner sent them: neither cut nor told for renewals.
func TestForeignSandboxUntouched(t *testing.T) {
	w := newWorld(t)
	other := w.sim.AddSandbox(e2btest.DefaultTeam, e2btest.SeedSandbox{Metadata: map[string]string{"app": "ws"}, Timeout: time.Minute})
	for _, call := range []struct {
		path string
		body map[string]any
		want int
	}{
		{"/connect", map[string]any{"timeout": 3000}, http.StatusOK},
		{"/timeout", map[string]any{"timeout": 3500}, http.StatusNoContent},
		{"/refreshes", map[string]any{"duration": 3600}, http.StatusNoContent},
	} {
		if code := w.call("POST", "/sandboxes/"+other.ID+call.path, call.body, nil); code != call.want {
			t.Fatalf("%s: %d", call.path, code)
		}
		a := w.arrivals()
		for k, v := range call.body {
			if got := a[len(a)-1].body[k]; got != v.(int) && got != float64(v.(int)) {
				t.Errorf("%s forwarded %s=%v, want the runner's %v", call.path, k, got, v)
			}
		}
	}
	if rec, _ := w.sim.Sandbox(other.ID); time.Until(rec.EndAt) < 50*time.Minute {
		t.Errorf("the workspace ends in %s; want the runner's hour, not the cap", time.Until(rec.EndAt))
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.capped) != 0 {
		t.Errorf("renewals told of a sandbox tether does not own: %v", w.capped)
	}
}

// TestAskedEndFollowsTheRunner: a runner's /timeout that shortens is its
// new end, told exactly (the renewals never go past it); a connect of a
// running sandbox and a refresh only lengthen; a pause ends it; a resume
// is exact again. Only what E2B accepted is told.
func TestAskedEndFollowsTheRunner(t *testing.T) {
	w := newWorld(t)
	var sb created
	w.call("POST", "/sandboxes", map[string]any{"templateID": "base", "timeout": 3600}, &sb)
	in := w.arrivals()[0].journaled
	w.eventually("observed", func() bool { got, _ := w.j.Get(in.ID); return got.SandboxID != "" })
	told := func(what string, after time.Duration, exact bool) {
		t.Helper()
		w.mu.Lock()
		end, ex := w.capped[in.ID], w.exact[in.ID]
		w.mu.Unlock()
		if d := time.Until(end) - after; d > 5*time.Second || d < -5*time.Second || ex != exact {
			t.Errorf("%s: told end in %s (exact %v), want about %s (exact %v)", what, time.Until(end).Round(time.Second), ex, after, exact)
		}
	}
	told("create", time.Hour, true)
	if code := w.call("POST", "/sandboxes/"+sb.SandboxID+"/timeout", map[string]any{"timeout": 120}, nil); code != http.StatusNoContent {
		t.Fatalf("timeout: %d", code)
	}
	told("a shorter /timeout", 2*time.Minute, true)
	if rec, _ := w.sim.Sandbox(sb.SandboxID); time.Until(rec.EndAt) > 2*time.Minute {
		t.Errorf("simulator: ends in %s, want the runner's 2m", time.Until(rec.EndAt))
	}
	w.call("POST", "/sandboxes/"+sb.SandboxID+"/connect", map[string]any{"timeout": 1800}, nil)
	told("a connect of a running sandbox", 30*time.Minute, false)
	w.call("POST", "/sandboxes/"+sb.SandboxID+"/refreshes", map[string]any{"duration": 60}, nil)
	told("a refresh", time.Minute, false)
	w.call("POST", "/sandboxes/"+sb.SandboxID+"/pause", nil, nil)
	told("a pause", 0, true)
	if code := w.call("POST", "/sandboxes/"+sb.SandboxID+"/resume", map[string]any{"timeout": 2400}, nil); code != http.StatusCreated {
		t.Fatalf("resume: %d", code)
	}
	told("a resume", 40*time.Minute, true)
	if code := w.call("POST", "/sandboxes/"+sb.SandboxID+"/resume", map[string]any{"timeout": 60}, nil); code != http.StatusConflict {
		t.Fatalf("resume of a running sandbox: %d", code)
	}
	told("a refused resume", 40*time.Minute, true)
}

// TestKillTellsWhetherARestoreMayRace: the runner's kill of a sandbox of
// ours tells the drain whether a restore may be in flight: not for a
// sandbox made without auto-resume and no resume under way; yes while a
// resume of it is being restored, and for one made with auto-resume.
func TestKillTellsWhetherARestoreMayRace(t *testing.T) {
	w := newWorld(t)
	mk := func(body map[string]any) (string, string) {
		var sb created
		body["templateID"] = "base"
		w.call("POST", "/sandboxes", body, &sb)
		a := w.arrivals()
		in := a[len(a)-1].journaled
		w.eventually("observed", func() bool { got, _ := w.j.Get(in.ID); return got.SandboxID != "" })
		return in.ID, sb.SandboxID
	}
	plain, plainSB := mk(map[string]any{"timeout": 60})
	w.call("DELETE", "/sandboxes/"+plainSB, nil, nil)
	auto, autoSB := mk(map[string]any{"timeout": 60, "autoResume": map[string]any{"enabled": true}})
	w.call("DELETE", "/sandboxes/"+autoSB, nil, nil)
	racing, racingSB := mk(map[string]any{"timeout": 60})
	w.call("POST", "/sandboxes/"+racingSB+"/pause", nil, nil)
	w.sim.HoldRestores()
	done := make(chan int)
	go func() { done <- w.call("POST", "/sandboxes/"+racingSB+"/resume", map[string]any{"timeout": 60}, nil) }()
	w.eventually("the restore", func() bool { rec, _ := w.sim.Sandbox(racingSB); return rec.State == e2btest.StateResuming })
	if code := w.call("DELETE", "/sandboxes/"+racingSB, nil, nil); code != http.StatusNoContent {
		t.Fatalf("delete during the restore: %d", code)
	}
	w.sim.ReleaseRestores()
	<-done
	w.mu.Lock()
	defer w.mu.Unlock()
	for id, want := range map[string]bool{plain: false, auto: true, racing: true} {
		if got, ok := w.deleted[id]; !ok || got != want {
			t.Errorf("intent %s: told %v (%v), want restoring %v", id, got, ok, want)
		}
	}
}

// TestBearerAccountIsTheTeam: a runner that authenticates with an auth
// provider's token and X-Team-ID (no key) has its sandboxes journaled
// under the team's account (e2b.TeamFingerprint), one account however
// often its token is refreshed.
func TestBearerAccountIsTheTeam(t *testing.T) {
	w := newWorld(t)
	w.sim.AddBearer("jwt-1", e2btest.DefaultTeam)
	w.sim.AddBearer("jwt-2", e2btest.DefaultTeam)
	for _, token := range []string{"jwt-1", "jwt-2"} {
		w.bearer = token
		if code := w.call("POST", "/sandboxes", map[string]any{"templateID": "base", "timeout": 60}, nil); code != http.StatusCreated {
			t.Fatalf("create with a bearer: %d", code)
		}
		a := w.arrivals()
		if in := a[len(a)-1].journaled; in.Account != e2b.TeamFingerprint(w.p.Upstream, e2btest.DefaultTeam) {
			t.Errorf("token %s: journaled under %q, want the team's account", token, in.Account)
		}
	}
}
