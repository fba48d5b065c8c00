package lease

import (
	"context"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/tether-run/tether/intent"
	"github.com/tether-run/tether/internal/reaper"
	"github.com/tether-run/tether/internal/testutil"
	"github.com/tether-run/tether/journal"
	"github.com/tether-run/tether/provider"
	"github.com/tether-run/tether/provider/e2b"
	"github.com/tether-run/tether/provider/e2b/e2btest"
)

// renewWorld is a TimeoutRenewer over the simulated E2B API, with one
// live intent whose sandbox asked for 60 s.
type renewWorld struct {
	sim *e2btest.Server
	p   *e2b.Provider
	j   *journal.Journal
	k   *TimeoutRenewer
	in  intent.Intent
}

func newRenewWorld(t *testing.T) *renewWorld {
	t.Helper()
	sim, p := testutil.E2B(t)
	j, err := journal.Open(filepath.Join(t.TempDir(), "journal.db"), journal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { j.Close() })
	in, _, err := j.Create(context.Background(), intent.Declaration{Provider: e2b.ProviderName, Account: p.Account()})
	if err != nil {
		t.Fatal(err)
	}
	sb, err := p.Create(context.Background(), in.Name, in.Labels, e2b.CreateOptions{Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if in, err = j.Observe(in.ID, sb.ID); err != nil {
		t.Fatal(err)
	}
	k := &TimeoutRenewer{Provider: p, Journal: j, Max: 10 * time.Minute, CallTimeout: 30 * time.Second,
		Verifier: &reaper.Reaper{Journal: j, Providers: provider.NewSet(p)},
		Logger:   slog.New(slog.NewTextHandler(&testutil.Buffer{}, nil))}
	return &renewWorld{sim: sim, p: p, j: j, k: k, in: in}
}

func (w *renewWorld) endsIn(t *testing.T) time.Duration {
	t.Helper()
	rec, ok := w.sim.Sandbox(w.in.SandboxID)
	if !ok {
		t.Fatalf("no sandbox %s in the simulator's record", w.in.SandboxID)
	}
	return time.Until(rec.EndAt)
}

// A renewal never carries a sandbox past the end its runner asked for:
// when that comes before the cap, the sandbox is set to end then, and is
// renewed no more.
func TestTimeoutRenewStopsAtTheAskedEnd(t *testing.T) {
	w := newRenewWorld(t)
	w.k.ends = map[string]time.Time{w.in.ID: time.Now().Add(90 * time.Second)}
	w.k.failing = map[string]bool{}
	w.k.Renew(context.Background())
	if d := w.endsIn(t); d > 91*time.Second || d < 85*time.Second {
		t.Errorf("after the renewal the simulator's sandbox ends in %s, want the asked 90 s, not the cap %s", d, w.k.Max)
	}
	if len(w.k.ends) != 0 {
		t.Errorf("still renewing %v after the asked end was set", w.k.ends)
	}
}

// A runner that shortens its sandbox's timeout (POST /timeout may
// shorten, infra handlers/sandbox_timeout.go:52) sets its new end: the
// proxy tells it exactly, and the renewals, which were taking the sandbox
// to the cap toward the 2 h asked at create, stop: the runner's 2 min
// stands. A connect or a refresh asking for less never shortens what was
// asked.
func TestTimeoutRenewNeverPastTheRunnersShorterEnd(t *testing.T) {
	w := newRenewWorld(t)
	w.k.Asked(w.in.ID, time.Now().Add(2*time.Hour), true) // the create's, cut to the cap
	w.k.Renew(context.Background())
	if d := w.endsIn(t); d < w.k.Max-5*time.Second {
		t.Fatalf("renewed to %s, want the cap %s", d, w.k.Max)
	}
	w.k.Asked(w.in.ID, time.Now().Add(time.Minute), false) // a connect asking for less
	if _, ok := w.k.ends[w.in.ID]; !ok {
		t.Fatal("a connect asking for less dropped the asked end")
	}
	// The runner's own /timeout of 2 min, which the proxy passes to E2B.
	if err := w.p.SetTimeout(context.Background(), w.in.SandboxID, 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	w.k.Asked(w.in.ID, time.Now().Add(2*time.Minute), true)
	for range 3 {
		w.k.Renew(context.Background())
	}
	if d := w.endsIn(t); d > 2*time.Minute {
		t.Errorf("after the renewals the sandbox ends in %s, past the runner's 2 min", d)
	}
	if len(w.k.ends) != 0 {
		t.Errorf("still renewing %v past the runner's shorter end", w.k.ends)
	}
}

// A sandbox whose intent the runner released is not renewed: it is the
// runner's. Released as deleted, it ends by the timeout it has; released
// as kept, it gets back the end its runner asked for, which the cap had
// cut (the E2B hand-back), once.
func TestTimeoutRenewSkipsReleased(t *testing.T) {
	for _, outcome := range []string{intent.OutcomeDeleted, intent.OutcomeKept} {
		t.Run(outcome, func(t *testing.T) {
			w := newRenewWorld(t)
			w.k.Capped(w.in.ID, time.Now().Add(time.Hour))
			if _, err := w.j.Release(w.in.ID, outcome); err != nil {
				t.Fatal(err)
			}
			w.k.Renew(context.Background())
			d := w.endsIn(t)
			switch {
			case outcome == intent.OutcomeDeleted && d > time.Minute:
				t.Errorf("a released intent's sandbox was renewed: ends in %s, want its own minute", d)
			case outcome == intent.OutcomeKept && (d < 59*time.Minute || d > time.Hour):
				t.Errorf("a sandbox released as kept ends in %s, want the hour its runner asked for", d)
			}
			if len(w.k.ends) != 0 {
				t.Errorf("still renewing %v after the release", w.k.ends)
			}
		})
	}
}

// A sandbox still wanted past the cap is set to the cap again.
func TestTimeoutRenewUpToTheCap(t *testing.T) {
	w := newRenewWorld(t)
	w.k.Capped(w.in.ID, time.Now().Add(time.Hour))
	w.k.Renew(context.Background())
	if d := w.endsIn(t); d > w.k.Max || d < w.k.Max-2*time.Minute {
		t.Errorf("after the renewal the simulator's sandbox ends in %s, want the cap %s", d, w.k.Max)
	}
	if _, ok := w.k.ends[w.in.ID]; !ok {
		t.Error("no longer renewed while the runner still wants it")
	}
}

// A newly observed sandbox of a socket or spool intent that asked for
// longer than the cap is cut to it, once its metadata proves it the
// intent's, and the end it asked for is kept for the renewals.
func TestTimeoutCapObserved(t *testing.T) {
	w := newRenewWorld(t)
	if err := w.p.SetTimeout(context.Background(), w.in.SandboxID, time.Hour); err != nil {
		t.Fatal(err)
	}
	asked := time.Now().Add(time.Hour)
	w.k.CapObserved(context.Background(), w.in)
	if d := w.endsIn(t); d > w.k.Max || d < w.k.Max-2*time.Minute {
		t.Errorf("the simulator's sandbox ends in %s, want the cap %s", d, w.k.Max)
	}
	if end, ok := w.k.ends[w.in.ID]; !ok || end.Sub(asked) < -2*time.Minute || end.Sub(asked) > time.Minute {
		t.Errorf("renewals told %v (%v), want about %s", end, ok, asked)
	}
}

// A cap whose read or cut fails for a moment (a 503, a 500) is tried again
// until it holds: a sandbox left with the long timeout it asked for would
// outlive a lost host by that much.
func TestTimeoutCapObservedRetried(t *testing.T) {
	w := newRenewWorld(t)
	w.k.Verifier = &reaper.Reaper{Journal: w.j, Providers: provider.NewSet(w.p), RetryBase: time.Millisecond, RetryMax: 10 * time.Millisecond}
	if err := w.p.SetTimeout(context.Background(), w.in.SandboxID, time.Hour); err != nil {
		t.Fatal(err)
	}
	w.sim.FailNext(e2btest.RouteGet, 503, 1)
	w.sim.FailNext(e2btest.RouteTimeout, 500, 2)
	ctx, cancel := context.WithTimeout(context.Background(), testutil.WaitBound)
	defer cancel()
	w.k.CapObserved(ctx, w.in)
	if d := w.endsIn(t); d > w.k.Max || d < w.k.Max-2*time.Minute {
		t.Errorf("the simulator's sandbox ends in %s, want the cap %s after the failures", d, w.k.Max)
	}
	if _, ok := w.k.ends[w.in.ID]; !ok {
		t.Error("the cap held but is not renewed")
	}
	if n := w.sim.CallsFor(w.in.SandboxID)[e2btest.RouteTimeout]; n != 3+1 {
		t.Errorf("%d timeout calls, want the setup's, two failed and the one that held", n)
	}
}
