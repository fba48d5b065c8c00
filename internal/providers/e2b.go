package providers

import (
	"context"
	"os"
	"sync"
	"time"

	"github.com/tether-run/tether/intent"
	"github.com/tether-run/tether/internal/lease"
	"github.com/tether-run/tether/provider"
	"github.com/tether-run/tether/provider/e2b"
	"github.com/tether-run/tether/provider/e2b/e2bproxy"
	"github.com/tether-run/tether/supervisor"
)

// E2B: on when tether's environment names it (E2B_API_KEY, E2B_API_URL or
// E2B_DOMAIN). Beside its sandboxes tether cuts every timeout to
// --e2b-max-timeout and renews it while the runner lives (E2B's backstop
// is its timeout), and runs its API proxy.

func e2bKind() Kind {
	return Kind{Name: e2b.ProviderName, Open: openE2B, Guard: e2bGuardOf, Demo: e2bDemo(), Doctor: e2bDoctor}
}

func openE2B(o OpenOptions) Setup {
	s := e2b.SetupFrom(os.Getenv, o.Logger.With("component", "e2b"))
	out := Setup{Err: s.Err(), Wanted: e2b.Configured(os.Getenv), Upstream: s.APIURL}
	if s.Provider != nil {
		out.Provider = s.Provider
		out.Upstream = s.Provider.APIURL()
	}
	return out
}

// e2bGuard is what tether runs beside E2B's sandboxes: the timeout
// renewer and the proxy. Lease mode is Daytona's: E2B's backstop is the
// timeout cap.
type e2bGuard struct {
	Idle
	w       Wiring
	renewer *lease.TimeoutRenewer

	life context.Context // ends at Close: the hand-backs of Resume run under it
	stop context.CancelFunc
	wg   sync.WaitGroup
}

func e2bGuardOf(w Wiring) (Guard, error) {
	if w.Provider == nil {
		return Idle{}, nil
	}
	life, stop := context.WithCancel(context.Background())
	g := &e2bGuard{w: w, life: life, stop: stop, renewer: &lease.TimeoutRenewer{
		Provider:    w.Provider.(lease.Timeouts),
		Journal:     w.Journal,
		Verifier:    w.Reaper,
		Max:         w.Config.E2BMaxTimeout,
		CallTimeout: observeTimeout,
		Recorder:    w.Recorder,
		Logger:      w.Logger.With("component", "e2b"),
	}}
	return g, nil
}

// Observed cuts the timeout of a sandbox a socket or spool intent
// observed (the proxy cuts those it forwards).
func (g *e2bGuard) Observed(ctx context.Context, in intent.Intent) {
	g.renewer.CapObserved(ctx, in)
}

// Listen starts the renewals, and the proxy unless --e2b-proxy=false.
func (g *e2bGuard) Listen() (Listening, error) {
	ctx, stop := context.WithCancel(context.Background())
	renew, _ := supervisor.Background("e2b-renew", func() error { return g.renewer.Run(ctx) }, stop)
	l := Listening{Actors: []supervisor.Actor{renew}}
	if !g.w.Config.E2BProxy {
		return l, nil
	}
	p := &e2bproxy.Proxy{
		Intake:     g.w.Intake("e2b-proxy"),
		Upstream:   g.w.Setup.Upstream,
		MaxTimeout: g.w.Config.E2BMaxTimeout,
		Asked:      g.renewer.Asked,
		Deleted:    g.w.Reaper.NoteDeleted,
		Vouch:      g.w.Reaper.Vouch,
	}
	ln, err := p.Listen(g.w.Config.E2BProxyAddr)
	if err != nil {
		stop()
		return Listening{}, err
	}
	l.Env = append(l.Env, e2b.EnvAPIURL+"="+p.URL(ln))
	l.Proxy = p.ShownURL(ln)
	g.w.Logger.Debug("e2b proxy: serving; the child's E2B_API_URL points at it", "url", l.Proxy) // the secret is the child's alone
	execute, interrupt := p.Actor(ln)
	l.Actors = append(l.Actors, supervisor.Actor{Name: "e2b-proxy", Execute: execute, Interrupt: interrupt})
	return l, nil
}

// Resume finishes, in the background, the hand-backs an earlier run left
// of E2B sandboxes released as kept (handBacks).
func (g *e2bGuard) Resume() {
	g.wg.Go(func() { g.handBacks(g.life) })
}

// BesideDrain does the hand-backs of E2B sandboxes released as kept that
// are still owed, under the drain's deadline.
func (g *e2bGuard) BesideDrain(ctx context.Context) <-chan struct{} {
	done := make(chan struct{})
	g.wg.Go(func() {
		defer close(done)
		g.handBacks(ctx)
	})
	return done
}

// Close stops the hand-backs under way; what is not done stays owed.
func (g *e2bGuard) Close() {
	g.stop()
	g.wg.Wait()
}

// handBacks does the hand-back of every E2B sandbox released as kept that
// the journal still owes (intent.Intent.HandBackPending): E2B has nothing
// tether can write on a sandbox after its create that a sweep could read
// (its metadata is fixed at create: infra handlers/sandbox_create.go:155,
// and no route changes it), so the hand-back is the end its runner asked
// for, where tether cut it (TimeoutRenewer.HandBack), and then it is done.
// A hand-back ctx cuts stays owed for the next start or drain.
func (g *e2bGuard) handBacks(ctx context.Context) {
	pending, err := g.w.Journal.PendingHandBacks()
	if err != nil {
		g.w.Logger.Warn("e2b: cannot read the journal for sandboxes released as kept", "err", err)
		return
	}
	for _, in := range pending {
		if in.ProviderName() != e2b.ProviderName {
			continue
		}
		wait := time.Second
		for {
			err := g.renewer.HandBack(ctx, in)
			if err == nil || !provider.Retryable(err) {
				break
			}
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			wait = min(2*wait, time.Minute)
		}
		if _, err := g.w.Journal.MarkHandedBack(in.ID); err != nil {
			g.w.Logger.Warn("e2b: a hand-back is done but not journaled; it is done again at the next start", "intent", in.ID, "err", err)
		}
	}
}
