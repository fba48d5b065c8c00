package e2b_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/tether-run/tether/intent"
	"github.com/tether-run/tether/provider/e2b"
	"github.com/tether-run/tether/provider/e2b/e2btest"
)

// A kill that cannot be sent before the drain's deadline (the route's
// bucket is empty past it) is handed off: the sandbox's timeout is cut to
// e2b.HandOffTimeout through its own route, which the kill's bucket does
// not hold, and the intent stays live saying so. A pause (on_drain stop)
// is not handed off: the timeout would kill a sandbox its runner asked to
// keep paused. Judged by the simulator's record.
func TestHandOffCutsTheTimeout(t *testing.T) {
	spent := e2btest.RateLimit{Rate: 1, Burst: 1, Period: time.Minute}
	w := newDrainWorld(t, e2btest.WithRateLimit(e2btest.PatternSandbox, spent), e2btest.WithRateLimit(e2btest.PatternPause, spent))
	observed := func(on intent.OnDrain) intent.Intent {
		in := w.intentDrained(w.p.Account(), on)
		sb, err := w.p.Create(ctx, in.Name, in.Labels, e2b.CreateOptions{Timeout: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		if in, err = w.j.Observe(in.ID, sb.ID); err != nil {
			t.Fatal(err)
		}
		// Proved ours, as the proxy's answer to the create does in a run.
		if err := w.r.Vouch(in, sb); err != nil {
			t.Fatal(err)
		}
		return in
	}
	del, pause := observed(intent.DrainDelete), observed(intent.DrainStop)
	// The team's buckets for the kill and the pause are spent (the
	// answers say so, remaining 0, for a minute).
	other := w.create("other", nil)
	if err := w.p.Delete(ctx, other.ID); err != nil {
		t.Fatal(err)
	}
	pausedOther := w.create("other-2", nil)
	if err := w.p.Stop(ctx, pausedOther.ID); err != nil {
		t.Fatal(err)
	}
	c, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	start := time.Now()
	rep := w.r.Drain(c, []intent.Intent{del, pause})
	if rep.HandedOff != 1 || rep.Live() != 2 {
		t.Fatalf("drain: %d handed off, %d live; want 1 handed off, both live: %+v", rep.HandedOff, rep.Live(), rep.Unresolved)
	}
	if f := w.fate(del.SandboxID); f.State != e2btest.StateRunning || f.EndAt.After(time.Now().Add(e2b.HandOffTimeout)) || f.EndAt.Before(start) {
		t.Errorf("handed off: %s, ends in %s; want running, ending within %s", f.State, time.Until(f.EndAt), e2b.HandOffTimeout)
	}
	if f := w.fate(pause.SandboxID); f.State != e2btest.StateRunning || time.Until(f.EndAt) < 50*time.Minute {
		t.Errorf("on_drain stop: %s, ends in %s; want its timeout untouched", f.State, time.Until(f.EndAt))
	}
	if got, _ := w.j.Get(del.ID); !got.Live() || !strings.Contains(got.LastError, "handed off to e2b") {
		t.Errorf("journal: %s %q; want live, handed off", got.State, got.LastError)
	}
	calls := w.srv.Calls()
	if calls[e2btest.RouteKill] != 1 || calls[e2btest.RoutePause] != 1 {
		t.Errorf("%d kills and %d pauses sent, want 1 and 1 (the ones that spent the buckets): none into a spent bucket", calls[e2btest.RouteKill], calls[e2btest.RoutePause])
	}
}
