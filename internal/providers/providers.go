// Package providers is every provider tether knows, by name: how each is
// opened from tether's environment, and what `tether run` runs beside its
// sandboxes (its Guard: the policy on a newly observed sandbox, its
// renewers, its zero-code API proxy, the durable work it hands on to the
// drain). It is the one place outside provider/ that names a provider:
// the sidecar, the commands, metrics and doctor hold providers by name
// through it, and `docs/graph_test.go` keeps it so.
//
// Adding a provider is one package tree under provider/ (the Provider, its
// simulator, its proxy if it has one), a file here that wires it (Kind),
// and its line in Registered; its demo (<name>_demo.go) and its checks for
// `tether doctor` (<name>_doctor.go) are optional hooks of its Kind.
package providers

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	"github.com/tether-run/tether/intent"
	"github.com/tether-run/tether/internal/config"
	"github.com/tether-run/tether/internal/intake"
	"github.com/tether-run/tether/internal/lease"
	"github.com/tether-run/tether/internal/reaper"
	"github.com/tether-run/tether/journal"
	"github.com/tether-run/tether/provider"
	"github.com/tether-run/tether/supervisor"
)

// Registered is every provider tether knows, in the order they are opened,
// checked and listed. The first is the wire contract's default
// (intent.DefaultProvider).
func Registered() []Kind {
	return []Kind{daytonaKind(), e2bKind(), dockerKind()}
}

// Kind is one provider tether knows.
type Kind struct {
	// Name is the provider's name, as intents journal it.
	Name string
	// Open reads the provider's setup from tether's environment.
	Open func(o OpenOptions) Setup
	// Guard builds what tether runs beside the provider's sandboxes. It is
	// called for every registered provider, with or without a Provider
	// (the Wiring's is nil then): each decides what it can run without one.
	// Nil: the drain alone acts on them.
	Guard func(w Wiring) (Guard, error)
	// Demo is the provider's part of `tether demo` (demo.go); nil: none.
	Demo *Demo
	// Doctor reads the provider's settings for `tether doctor` and says
	// whether the environment names it; its Check makes its checks
	// (doctor.go). Nil: the doctor says nothing of it.
	Doctor func(o DoctorOptions) Doctor
}

// OpenOptions are what opening a provider's setup takes.
type OpenOptions struct {
	Config config.Config
	Logger *slog.Logger
	// Level is the level at which a provider says where each of its
	// settings came from (info for tether run, debug elsewhere).
	Level slog.Level
}

// Setup is a provider's setup as tether's environment gives it.
type Setup struct {
	// Provider is nil when the setup is missing or broken: Err says why,
	// naming what to set.
	Provider provider.Provider
	Err      error
	// Wanted: the environment asks for this provider (a key or URL of it
	// is set, an engine is there). A provider not wanted is not used and
	// its Err is said only where it matters (the default provider's, when
	// tether has none at all; a declaration that names it).
	Wanted bool
	// Fatal: Err is not a setup to go on with even without the provider (a
	// malformed API URL its proxy would forward to as well).
	Fatal bool
	// Upstream is what the runner's SDK or client would call without
	// tether; the provider's proxy forwards there.
	Upstream string
}

// Wiring is what the sidecar hands a provider's Guard.
type Wiring struct {
	Config config.Config
	// Provider is the provider as the reaper holds it (counted and timed
	// with --metrics-addr).
	Provider provider.Provider
	Setup    Setup
	Journal  *journal.Journal
	Reaper   *reaper.Reaper
	// Intake is the shared intake for one component of this provider (its
	// proxy): a logger named for it, the metrics' count, and this provider
	// as what it declares for. Nil for `tether drain`, which starts no
	// intake.
	Intake func(component string) *intake.Intake
	// Recorder counts renewals (metrics); nil without them.
	Recorder lease.Recorder
	Logger   *slog.Logger
}

// Guard is what tether runs beside one provider's sandboxes. Every method
// must be safe to call on a Guard whose Listen was never called (`tether
// drain` builds one for BesideDrain alone).
type Guard interface {
	// Lease is the lease, in minutes, journaled with every intent of the
	// provider (lease mode); 0 outside it.
	Lease() int
	// Observed follows a sandbox id newly journaled for an intent of the
	// provider (the backstop, a timeout cap, a lease), bounded by ctx.
	Observed(ctx context.Context, in intent.Intent)
	// Listen makes the guard's actors ready before the child starts (its
	// renewers, its proxy) and says what the child's environment gets. On
	// an error nothing is left listening.
	Listen() (Listening, error)
	// Resume restarts, in the background, the durable work an earlier run
	// left (hand-backs of kept sandboxes).
	Resume()
	// BesideDrain finishes that work under the drain's deadline (ctx); the
	// channel closes when it is done or cut.
	BesideDrain(ctx context.Context) <-chan struct{}
	// Close stops what is still running; what it cut stays in the journal.
	Close()
}

// Listening is what a Guard's Listen made ready.
type Listening struct {
	Actors []supervisor.Actor
	// Env is what the child's environment gets (its proxy's URL).
	Env []string
	// Proxy is the proxy's address as logs may show it (without its
	// secret), "" without one.
	Proxy string
}

// Idle is a Guard that does nothing, for a provider whose drain is all
// tether does beside it (and to embed).
type Idle struct{}

func (Idle) Lease() int                              { return 0 }
func (Idle) Observed(context.Context, intent.Intent) {}
func (Idle) Listen() (Listening, error)              { return Listening{}, nil }
func (Idle) Resume()                                 {}
func (Idle) Close()                                  {}
func (Idle) BesideDrain(context.Context) <-chan struct{} {
	done := make(chan struct{})
	close(done)
	return done
}

// Opened is every registered provider's setup, in the order of
// Registered.
type Opened struct {
	Kinds  []Kind
	Setups []Setup
}

// Open reads every registered provider's setup.
func Open(o OpenOptions) Opened {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	var op Opened
	for _, k := range Registered() {
		op.Kinds = append(op.Kinds, k)
		op.Setups = append(op.Setups, k.Open(o))
	}
	return op
}

// Set is the providers tether has: those whose setup gave one.
func (op Opened) Set() provider.Set {
	var ps []provider.Provider
	for _, s := range op.Setups {
		ps = append(ps, s.Provider)
	}
	return provider.NewSet(ps...)
}

// Setup is the setup of the provider of that name.
func (op Opened) Setup(name string) (Setup, bool) {
	for i, k := range op.Kinds {
		if k.Name == name {
			return op.Setups[i], true
		}
	}
	return Setup{}, false
}

// Provider is the provider of that name, or why tether has none: its
// setup's problem, or that tether knows no provider of that name.
func (op Opened) Provider(name string) (provider.Provider, error) {
	s, ok := op.Setup(name)
	switch {
	case !ok:
		return nil, fmt.Errorf("%w %q: tether knows %s", reaper.ErrNoProvider, name, strings.Join(op.Names(), ", "))
	case s.Provider == nil:
		return nil, fmt.Errorf("no %s provider: %w", name, s.Err)
	}
	return s.Provider, nil
}

// Names is every registered provider's name.
func (op Opened) Names() []string {
	names := make([]string, len(op.Kinds))
	for i, k := range op.Kinds {
		names[i] = k.Name
	}
	return names
}

// Unavailable is, for every registered provider tether has no Provider
// for, why: what an intake says to a declaration that names it.
func (op Opened) Unavailable() map[string]string {
	out := map[string]string{}
	for i, k := range op.Kinds {
		if s := op.Setups[i]; s.Provider == nil {
			why := "no setup"
			if s.Err != nil {
				why = s.Err.Error()
			}
			out[k.Name] = why
		}
	}
	return out
}

// Err is why the providers cannot serve as configured: a setup the
// environment asks for (Wanted) that is broken, or no provider at all
// (then the default provider's problem, which names the variables to
// set).
func (op Opened) Err() error {
	for _, s := range op.Setups {
		if s.Wanted && s.Err != nil {
			return s.Err
		}
	}
	if op.Set().Len() == 0 && len(op.Setups) > 0 {
		return op.Setups[0].Err
	}
	return nil
}

// Fatal is a setup problem no run should start with (Setup.Fatal).
func (op Opened) Fatal() error {
	for _, s := range op.Setups {
		if s.Fatal && s.Err != nil {
			return s.Err
		}
	}
	return nil
}

// Say says, once at start, what tether cannot do for want of a setup.
// The default provider's intents are journaled whatever its setup (a
// later run, or `tether drain`, with credentials resolves them): its
// problem is said at warn level when tether has no provider at all or the
// environment asks for it, else at info level. Another provider's
// declarations are refused without its setup: its problem is said, at
// warn level, when the environment asks for it.
func (op Opened) Say(log *slog.Logger) {
	have := op.Set()
	for i, k := range op.Kinds {
		s := op.Setups[i]
		if s.Err == nil || s.Provider != nil {
			continue
		}
		switch {
		case k.Name == intent.DefaultProvider && have.Len() == 0:
			log.Warn("no "+k.Name+" provider (nor any other): intents are journaled, but no sandbox can be deleted until this is fixed", "problem", s.Err.Error())
		case k.Name == intent.DefaultProvider && s.Wanted:
			log.Warn("no "+k.Name+" provider: its intents are journaled, but none of their sandboxes can be deleted until this is fixed", "problem", s.Err.Error())
		case k.Name == intent.DefaultProvider:
			log.Info("no "+k.Name+" provider: its intents are journaled, but none of their sandboxes can be deleted; "+have.Names()+"'s can", "problem", s.Err.Error())
		case s.Wanted:
			log.Warn("no "+k.Name+" provider: "+k.Name+" intents are refused, and its proxy is off, until this is fixed", "problem", s.Err.Error())
		}
	}
}
