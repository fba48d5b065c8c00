package providers

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/tether-run/tether/intent"
	"github.com/tether-run/tether/internal/config"
	"github.com/tether-run/tether/internal/dotenv"
	"github.com/tether-run/tether/internal/lease"
	"github.com/tether-run/tether/internal/reaper"
	"github.com/tether-run/tether/provider"
	"github.com/tether-run/tether/provider/daytona"
	"github.com/tether-run/tether/provider/daytona/daytonaproxy"
	"github.com/tether-run/tether/supervisor"
)

// Daytona: the default provider. Its setup is read as its SDKs read it
// (the environment, then .env.local, then .env); beside its sandboxes
// tether runs the auto-stop backstop, lease mode (--lease) and the
// hand-back of kept sandboxes, and its API proxy.

// observeTimeout bounds what a guard does after each observe (a
// backstop, a cap); it runs in the background and never delays an answer.
const observeTimeout = 30 * time.Second

func daytonaKind() Kind {
	return Kind{Name: daytona.ProviderName, Open: openDaytona, Guard: daytonaGuardOf, Demo: daytonaDemo(), Doctor: daytonaDoctor}
}

func openDaytona(o OpenOptions) Setup {
	env := DaytonaSettings(o.Logger, o.Level)
	s := daytona.SetupFrom(env.Get, o.Logger.With("component", "daytona"))
	out := Setup{Err: s.Err(), Upstream: daytona.DefaultAPIURL}
	for _, name := range daytonaSettings {
		if env.Get(name) != "" {
			out.Wanted = true
		}
	}
	for _, name := range []string{daytona.EnvAPIURL, daytona.EnvServerURL} {
		if v := env.Get(name); v != "" {
			out.Upstream = v
			break
		}
	}
	out.Fatal = errors.Is(out.Err, daytona.ErrBadAPIURL)
	if s.Provider != nil {
		out.Provider = s.Provider
	} else if o.Config.Lease > 0 {
		o.Logger.Warn("lease mode needs Daytona credentials; it is off for this run", "setting", "--lease", "env", config.EnvLease)
	}
	return out
}

// daytonaSettings are the variables whose origin is said at start: the
// API URL always (its default is a choice too), the others when set.
var daytonaSettings = []string{daytona.EnvAPIURL, daytona.EnvServerURL, daytona.EnvAPIKey,
	daytona.EnvJWTToken, daytona.EnvOrganizationID, daytona.EnvTarget}

// DaytonaSettings reads Daytona's variables as the TypeScript and Python
// SDKs do: the environment, then .env.local, then .env in the working
// directory, which is the child's too (it inherits tether's). The child's
// DAYTONA_API_URL is tether's proxy, so its SDK never reads the URL from
// these files: tether does, to forward where the runner meant to go, and
// takes its own credentials from them as the runner's SDK would. It says
// where each setting came from at level (never a value), and warns of each
// file it ignores (internal/dotenv: one another user could have written).
func DaytonaSettings(log *slog.Logger, level slog.Level) dotenv.Settings {
	dir, err := os.Getwd()
	if err != nil {
		dir = "."
	}
	env, problems := dotenv.Load(dir, "DAYTONA_")
	for _, p := range problems {
		log.Warn("daytona: a .env file is ignored; the settings in it are not used", "problem", p.Error())
	}
	for _, v := range env.Ambiguous() {
		log.Warn("daytona: the TypeScript and Python SDKs read this value differently (${...} or a backslash); tether reads it as the TypeScript SDK does, literally", "setting", v)
	}
	attrs := []any{"dir", dir}
	for _, name := range daytonaSettings {
		if origin := env.Origin(name); origin != dotenv.FromDefault || name == daytona.EnvAPIURL {
			attrs = append(attrs, name, origin)
		}
	}
	log.Log(context.Background(), level, "daytona: where each setting came from (env, then .env.local, then .env in dir, as the SDKs read them; default: set nowhere)", attrs...)
	return env
}

// daytonaGuard is what tether runs beside Daytona's sandboxes.
type daytonaGuard struct {
	w Wiring
	// keep hands back the sandboxes released as kept under a lease (every
	// run with Daytona credentials resumes them, lease mode or not); nil
	// without credentials. lease is the same policy in lease mode, nil
	// outside it.
	keep, lease *lease.Policy
}

func daytonaGuardOf(w Wiring) (Guard, error) {
	g := &daytonaGuard{w: w}
	if w.Provider == nil {
		return g, nil
	}
	g.keep = newLeasePolicy(w)
	if w.Config.Lease > 0 {
		g.lease = g.keep
		w.Logger.Info("lease mode", "auto_stop_minutes", w.Config.Lease, "renew_every", time.Duration(float64(w.Config.LeaseDuration())*lease.DefaultPeriodShare).Round(time.Millisecond))
	}
	return g, nil
}

// newLeasePolicy is lease mode's policy over w's reaper (for `tether
// drain`, only its hand-backs of kept sandboxes).
func newLeasePolicy(w Wiring) *lease.Policy {
	settle := scaledMinute(w.Config, reaper.DefaultLeaseSettle)
	return &lease.Policy{
		Reaper: leaseReaper{
			Reaper: w.Reaper,
			lease:  reaper.Lease{Minutes: w.Config.Lease, Settle: settle},
		},
		Journal:     w.Journal,
		Provider:    daytona.ProviderName,
		AutoStop:    w.Config.DaytonaAutoStop,
		CallTimeout: observeTimeout,
		Settle:      settle,
		Logger:      w.Logger.With("component", "lease"),
	}
}

// scaledMinute turns a duration of Daytona's in real minutes into tether's
// minute (TETHER_LEASE_MINUTE, a minute but in tests).
func scaledMinute(cfg config.Config, d time.Duration) time.Duration {
	return time.Duration(float64(d) * float64(cfg.LeaseMinute) / float64(time.Minute))
}

// leaseReaper is the reaper as lease mode's policy asks for it.
type leaseReaper struct {
	*reaper.Reaper
	lease reaper.Lease
}

func (r leaseReaper) ApplyLease(ctx context.Context, in intent.Intent) error {
	return notOurs(r.Reaper.ApplyLease(ctx, in, r.lease))
}

func (r leaseReaper) EndLease(ctx context.Context, in intent.Intent, autoStop int) error {
	return notOurs(r.Reaper.EndLease(ctx, in, autoStop))
}

func (r leaseReaper) MarkKept(ctx context.Context, in intent.Intent) error {
	return notOurs(r.Reaper.MarkKept(ctx, in))
}

// notOurs says lease.ErrNotOurs for a sandbox that is not ours or is gone.
func notOurs(err error) error {
	if errors.Is(err, reaper.ErrForeign) || errors.Is(err, provider.ErrNotFound) {
		return fmt.Errorf("%w: %w", lease.ErrNotOurs, err)
	}
	return err
}

func (g *daytonaGuard) Lease() int {
	if g.lease == nil {
		return 0
	}
	return g.w.Config.Lease
}

// Observed sets the lease on a newly observed sandbox in lease mode, and
// else repairs its auto-stop backstop. Without a provider there is nothing
// to do it with; the drain reports the intent instead.
func (g *daytonaGuard) Observed(ctx context.Context, in intent.Intent) {
	switch {
	case g.w.Provider == nil:
	case g.lease != nil:
		g.lease.Apply(in)
	default:
		if err := g.w.Reaper.Backstop(ctx, in); err != nil {
			g.w.Logger.Warn("auto-stop backstop not applied", "intent", in.ID, "name", in.Name, "sandbox", in.SandboxID, "err", err)
		}
	}
}

// Listen starts lease mode's renewer and the Daytona API proxy (unless
// --daytona-proxy=false), which runs without tether's own credentials
// too: it journals what the runner creates with its own.
func (g *daytonaGuard) Listen() (Listening, error) {
	var l Listening
	if g.lease != nil {
		l.Actors = append(l.Actors, g.renewer())
	}
	if g.keep != nil {
		// Every sandbox released as kept is labelled while the runner
		// lives, not only at the drain (Resume, the renewer's Kept and
		// BesideDrain too).
		ctx, stop := context.WithCancel(context.Background())
		watch, _ := supervisor.Background("keep", func() error { g.keep.Watch(ctx, 0); return nil }, stop)
		l.Actors = append(l.Actors, watch)
	}
	if !g.w.Config.DaytonaProxy {
		return l, nil
	}
	p := &daytonaproxy.Proxy{
		Intake:          g.w.Intake("proxy"),
		Upstream:        g.w.Setup.Upstream,
		AutoStopMinutes: g.w.Config.DaytonaAutoStop,
		Vouch:           g.w.Reaper.Vouch,
		LeaseMinutes:    g.Lease(),
	}
	ln, err := p.Listen(g.w.Config.DaytonaProxyAddr)
	if err != nil {
		return Listening{}, err
	}
	// The URL carries the run's secret: the child's environment is the
	// one place it goes. Logs show it without.
	l.Env = append(l.Env, daytona.EnvAPIURL+"="+p.URL(ln))
	l.Proxy = p.ShownURL(ln)
	g.w.Logger.Debug("daytona proxy: serving; the child's DAYTONA_API_URL points at it", "url", l.Proxy)
	execute, interrupt := p.Actor(ln)
	l.Actors = append(l.Actors, supervisor.Actor{Name: "proxy", Execute: execute, Interrupt: interrupt})
	return l, nil
}

// renewer renews every observed sandbox while the child runs.
func (g *daytonaGuard) renewer() supervisor.Actor {
	r := &lease.Renewer{
		Journal:    g.w.Journal,
		Provider:   g.w.Provider,
		Lease:      g.w.Config.LeaseDuration(),
		MinSpacing: scaledMinute(g.w.Config, lease.DefaultMinSpacing),
		Logger:     g.w.Logger.With("component", "lease"),
		Kept:       g.lease.Kept,
		Rescue:     g.w.Config.DaytonaAutoStop,
		Restore:    g.lease.Apply,
		Recorder:   g.w.Recorder,
	}
	ctx, stop := context.WithCancel(context.Background())
	return supervisor.Actor{Name: "lease", Execute: func() error {
		if err := r.Run(ctx); err != nil {
			g.w.Logger.Error("lease mode: no renewals; sandboxes will be stopped by their short auto-stop under the live runner", "err", err)
			<-ctx.Done() // an actor that returns would end the group
		}
		return nil
	}, Interrupt: func(error) { stop() }}
}

func (g *daytonaGuard) Resume() {
	if g.keep != nil {
		g.keep.Resume()
	}
}

func (g *daytonaGuard) BesideDrain(ctx context.Context) <-chan struct{} {
	if g.keep == nil {
		return Idle{}.BesideDrain(ctx)
	}
	return g.keep.EndKept(ctx)
}

func (g *daytonaGuard) Close() {
	if g.keep != nil {
		g.keep.Close()
	}
}
