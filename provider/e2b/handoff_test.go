package e2b_test

import (
	"context"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tether-run/tether/intent"
	"github.com/tether-run/tether/internal/testutil"
	"github.com/tether-run/tether/provider"
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

// The read before a kill and the kill share one bucket of the team's;
// among a fleet's tethers, the others' calls take a share of it. Here
// another tether of the team takes the token right before every second
// call this tether makes for its sandbox (a bucket of one call per 300 ms,
// burst 1): a read and its kill never both get through, a lone kill does.
// Once the kill is refused it is sent again without a read — were each try
// a read and a kill, the kill would be refused every time (it was, before:
// the sandbox lived through the drain). Such a kill's 204 is not final (no
// read right before it showed the sandbox running), so the intent is gone
// only after a read once the restore window has passed; a drain that ends
// before the window leaves it releasing, unconfirmed, its sandbox killed.
// Judged by the simulator's record.
func TestContendedKillGoesWithoutItsRead(t *testing.T) {
	t.Parallel()
	oneAtATime := e2btest.RateLimit{Rate: 1, Burst: 1, Period: 300 * time.Millisecond}
	for _, c := range []struct {
		name          string
		restoreWindow time.Duration
		deadline      time.Duration // each wait for the bucket is 1 s: E2B's Retry-After is whole seconds
		wantGone      bool
	}{
		{"confirmed after the restore window", testRestoreWindow, 10 * time.Second, true},
		{"the window outlasts the drain", time.Minute, 4 * time.Second, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			w := newDrainWorld(t, e2btest.WithRateLimit(e2btest.PatternSandbox, oneAtATime))
			other := w.create("another-tethers", nil)
			in, sb := w.observed(e2b.CreateOptions{Timeout: time.Hour})
			var n atomic.Int32
			theirs := func(req *http.Request) {
				if !strings.HasPrefix(req.URL.Path, "/sandboxes/"+sb.ID) || n.Add(1)%2 != 0 {
					return
				}
				if code, err := testutil.E2BCall(http.MethodGet, w.srv.URL, "/sandboxes/"+other.ID, ""); err != nil || code != http.StatusOK {
					t.Errorf("the other tether's read: %d, %v; want it served", code, err)
				}
			}
			w.r.Providers = provider.NewSet(w.provider(e2btest.DefaultKey, 5*time.Second, before{w.tr, theirs}))
			w.r.RestoreWindow = c.restoreWindow
			w.r.ConfirmYield = 50 * time.Millisecond // one tether: nobody else's kills to yield to
			ctx, cancel := context.WithTimeout(context.Background(), c.deadline)
			defer cancel()
			rep := w.r.Drain(ctx, []intent.Intent{in})
			if f := w.fate(sb.ID); f.State != e2btest.StateKilled || f.KillReason != e2btest.KillRequest {
				t.Fatalf("sandbox: %s (%s), calls %v; want killed by a request: the refused kill sent again", f.State, f.KillReason, w.srv.CallsFor(sb.ID))
			}
			calls := w.srv.CallsFor(sb.ID)
			if calls[e2btest.RouteKill] != 2 {
				t.Errorf("calls %v: want 2 kills, the refused one and the one sent again without a read", calls)
			}
			got, err := w.j.Get(in.ID)
			if err != nil {
				t.Fatal(err)
			}
			if c.wantGone {
				if rep.Gone != 1 || got.State != intent.Gone || calls[e2btest.RouteGet] < 2 {
					t.Errorf("drain: %d gone, journal %s (%s), calls %v; want gone, confirmed by a read after the window\n%s", rep.Gone, got.State, got.LastError, calls, w.logs.String())
				}
				return
			}
			if rep.Gone != 0 || got.State != intent.Releasing {
				t.Errorf("drain: %d gone, journal %s; want releasing: a 404 within the restore window is no proof", rep.Gone, got.State)
			}
		})
	}
}

// before is a transport that calls hook before each request it sends.
type before struct {
	next http.RoundTripper
	hook func(*http.Request)
}

func (b before) RoundTrip(req *http.Request) (*http.Response, error) {
	b.hook(req)
	return b.next.RoundTrip(req)
}
