package providers

import (
	"context"
	"os"

	"github.com/tether-run/tether/intent"
	"github.com/tether-run/tether/internal/lease"
	"github.com/tether-run/tether/provider/e2b"
	"github.com/tether-run/tether/provider/e2b/e2bproxy"
	"github.com/tether-run/tether/supervisor"
)

// E2B: on when tether's environment names it (E2B_API_KEY, E2B_API_URL or
// E2B_DOMAIN). Beside its sandboxes tether cuts every timeout to
// --e2b-max-timeout and renews it while the runner lives (E2B's backstop
// is its timeout), and runs its API proxy.

func e2bKind() Kind {
	return Kind{Name: e2b.ProviderName, Open: openE2B, Guard: e2bGuardOf}
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
}

func e2bGuardOf(w Wiring) (Guard, error) {
	if w.Provider == nil {
		return Idle{}, nil
	}
	g := &e2bGuard{w: w, renewer: &lease.TimeoutRenewer{
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
