package sidecar

import (
	"context"
	"fmt"
	"time"

	"github.com/tether-run/tether/provider"
)

// providerCheckDelay is how long after start the background provider check
// begins. Loading the system's CA certificates for an https URL costs
// tens of milliseconds of CPU (22-50 ms measured, docs/benchmarks.md),
// which a short-lived child would otherwise pay on every run; a child that
// lives longer than this gets the check, and a shorter one has its drain
// report any failure.
const providerCheckDelay = 250 * time.Millisecond

// checkProviders makes a broken provider setup known at start instead of
// at the drain, when every sandbox would already have leaked. What the
// environment shows (no credentials, a malformed URL) is said once, at warn
// level, naming the variable to set. Then each provider's check (CA
// certificates, then one cheap authenticated read: credentials, DNS, TLS)
// runs in the background, so the child never waits for a provider —
// unless --require-provider, which makes no provider at all, a broken
// setup the environment asks for, or a failed check an error (tether run
// exits 125 before the child starts). set is the providers as the reaper
// has them (counted, with --metrics-addr: a key that expired shows in its
// provider's series).
func (sc *Sidecar) checkProviders(set provider.Set) error {
	if err := sc.opened.Fatal(); err != nil {
		// Not a setup to go on with: the proxy would forward to it too.
		return err
	}
	if err := sc.opened.Err(); err != nil && sc.cfg.RequireProvider {
		return fmt.Errorf("provider setup (--require-provider): %w", err)
	}
	sc.opened.Say(sc.log)
	for _, p := range set.All() {
		c, ok := p.(provider.Checker)
		if !ok {
			continue
		}
		name := p.Name()
		if sc.cfg.RequireProvider {
			ctx, cancel := context.WithTimeout(context.Background(), sc.cfg.CheckTimeout)
			err := c.Check(ctx)
			cancel()
			if err != nil {
				return fmt.Errorf("%s provider check (--require-provider): %w", name, err)
			}
			continue
		}
		go func() {
			time.Sleep(providerCheckDelay)
			ctx, cancel := context.WithTimeout(context.Background(), sc.cfg.CheckTimeout)
			defer cancel()
			sc.reportCheck(name, c.Check(ctx))
		}()
	}
	return nil
}

// reportCheck says how the start-up check of provider name went: a
// configuration error (credentials, certificates) at error level, since no
// drain can succeed until an operator acts; any other failure (DNS, an
// outage, a wrong URL) at warn level.
func (sc *Sidecar) reportCheck(name string, err error) {
	switch {
	case err == nil:
		sc.log.Debug(name + ": provider check passed")
	case provider.ConfigError(err):
		sc.log.Error(name+": provider check failed: no sandbox can be deleted until the setup is fixed", "err", err.Error())
	default:
		sc.log.Warn(name+": provider check failed: the drain will retry, but check the setup", "err", err.Error())
	}
}
