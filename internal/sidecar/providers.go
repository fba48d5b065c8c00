package sidecar

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"

	"github.com/tether-run/tether/internal/config"
	"github.com/tether-run/tether/internal/dotenv"
	"github.com/tether-run/tether/internal/reaper"
	"github.com/tether-run/tether/journal"
	"github.com/tether-run/tether/provider"
	"github.com/tether-run/tether/provider/daytona"
	"github.com/tether-run/tether/provider/e2b"
)

// Providers are the clouds tether has credentials for: Daytona, the
// default of an intent that names none, and E2B. A runner may use both in
// one run; each intent is resolved by the provider it names.
type Providers struct {
	Daytona provider.Provider // nil without Daytona credentials
	E2B     *e2b.Provider     // nil without E2B credentials
	// DaytonaErr says why there is no Daytona provider; E2BErr why there
	// is none for E2B although the environment names it (E2B_API_KEY,
	// E2B_API_URL or E2B_DOMAIN set). Without any E2B variable E2B is
	// simply not used, and E2BErr is nil.
	DaytonaErr, E2BErr error
}

// OpenProviders reads every provider's setup from the environment (and,
// for Daytona, its SDKs' .env files: DaytonaSettings).
func OpenProviders(log *slog.Logger) Providers {
	ps, _ := openProviders(log, slog.LevelDebug)
	return ps
}

// openProviders is OpenProviders with Daytona's settings, which also choose
// the proxy's upstream; where each came from is said at level.
func openProviders(log *slog.Logger, level slog.Level) (Providers, dotenv.Settings) {
	var ps Providers
	var env dotenv.Settings
	ps.Daytona, env, ps.DaytonaErr = openProvider(log, level)
	if wantE2B() {
		s := e2b.SetupFromEnv(log.With("component", "e2b"))
		ps.E2B, ps.E2BErr = s.Provider, s.Err()
	}
	return ps, env
}

// wantE2B reports whether the environment names an E2B setup.
func wantE2B() bool { return e2b.Configured(os.Getenv) }

// List is the providers tether has, Daytona first: the reaper's Provider
// and Others.
func (ps Providers) List() []provider.Provider {
	var out []provider.Provider
	if ps.Daytona != nil {
		out = append(out, ps.Daytona)
	}
	if ps.E2B != nil {
		out = append(out, ps.E2B)
	}
	return out
}

// Named is the provider of that name, or nil.
func (ps Providers) Named(name string) provider.Provider {
	switch {
	case name == daytona.ProviderName && ps.Daytona != nil:
		return ps.Daytona
	case name == e2b.ProviderName && ps.E2B != nil:
		return ps.E2B
	}
	return nil
}

// Err is why the providers cannot serve as configured: an E2B setup the
// environment names but that is broken, or no provider at all (then
// Daytona's problem, which names the variables to set).
func (ps Providers) Err() error {
	if ps.E2BErr != nil {
		return ps.E2BErr
	}
	if ps.Daytona == nil && ps.E2B == nil {
		return ps.DaytonaErr
	}
	return nil
}

// newReaperOf is NewReaper with every provider of list: the first serves
// the intents that name none (nil list: no provider).
func newReaperOf(cfg config.Config, j *journal.Journal, list []provider.Provider, log *slog.Logger) *reaper.Reaper {
	var first provider.Provider
	if len(list) > 0 {
		first = list[0]
	}
	r := NewReaper(cfg, j, first, log)
	if len(list) > 1 {
		r.Others = list[1:]
	}
	return r
}

// DrainProviders is Drain with every provider of ps: one deadline, one
// report, each intent resolved by the provider it names, and beside it,
// with Daytona, the hand-backs of kept sandboxes a run left pending. Each provider is
// checked first, as Drain checks its one; a provider that fails is left
// out (its intents stay live and are reported), and when every one fails
// the drain ends at once (reaper.ErrNothingDone).
func DrainProviders(ctx context.Context, cfg config.Config, j *journal.Journal, ps Providers, log *slog.Logger, w io.Writer) (reaper.Report, error) {
	list := ps.List()
	if n, err := j.LiveCount(); err == nil && n > 0 && len(list) > 0 {
		var ok []provider.Provider
		var errs []error
		for _, p := range list {
			cctx, cancel := context.WithTimeout(ctx, cfg.CheckTimeout)
			err := reaper.Precheck(cctx, p)
			cancel()
			if err != nil {
				log.Error("drain: "+p.Name()+" cannot be used; its intents stay live", "err", err)
				errs = append(errs, err)
				continue
			}
			ok = append(ok, p)
		}
		if len(ok) == 0 {
			return reaper.Report{}, fmt.Errorf("%d live intents stay in the journal: %w", n, errors.Join(errs...))
		}
		list = ok
	}
	dctx, cancel := drainDeadline(ctx, cfg.DrainTimeout)
	defer cancel()
	r := newReaperOf(cfg, j, list, log)
	r.NameWaitGrace = DrainNameWaitGrace
	if r.Provider != nil && r.Provider.Name() == daytona.ProviderName {
		// The hand-backs of kept sandboxes are lease mode's, Daytona's.
		keep := newPolicy(cfg, r, j, log)
		defer keep.Close()
		kept := keep.EndKept(dctx)
		defer func() { <-kept }()
	}
	return r.DrainLive(dctx, j, w)
}
