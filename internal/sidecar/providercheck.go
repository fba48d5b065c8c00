package sidecar

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tether-run/tether/provider"
	"github.com/tether-run/tether/provider/daytona"
)

// providerCheckDelay is how long after start the background provider check
// begins. Loading the system's CA certificates for an https URL costs
// tens of milliseconds of CPU (22-50 ms measured, docs/benchmarks.md),
// which a short-lived child would otherwise pay on every run; a child that
// lives longer than this gets the check, and a shorter one has its drain
// report any failure.
const providerCheckDelay = 250 * time.Millisecond

// checkProvider makes a broken provider setup known at start instead of at
// the drain, when every sandbox would already have leaked. What the
// environment shows (no credentials, a malformed URL) is said once, at warn
// level, naming the variable to set. Then the provider's check (CA
// certificates, then one cheap authenticated read: credentials, DNS, TLS)
// runs in the background, so the child never waits for the provider —
// unless --require-provider, which makes a missing provider or a failed
// check an error (tether run exits 125 before the child starts).
func (sc *Sidecar) checkProvider(setupErr error) error {
	if setupErr != nil {
		if errors.Is(setupErr, daytona.ErrBadAPIURL) {
			// Not a setup to go on with: the proxy would forward to it too.
			return setupErr
		}
		if sc.cfg.RequireProvider {
			return fmt.Errorf("provider setup (--require-provider): %w", setupErr)
		}
		sc.log.Warn("no Daytona provider: intents are journaled, but no sandbox can be deleted until this is fixed", "problem", setupErr.Error())
		return nil
	}
	c, ok := sc.reaper.Provider.(provider.Checker)
	if !ok {
		return nil
	}
	if sc.cfg.RequireProvider {
		ctx, cancel := context.WithTimeout(context.Background(), sc.cfg.CheckTimeout)
		defer cancel()
		if err := c.Check(ctx); err != nil {
			return fmt.Errorf("provider check (--require-provider): %w", err)
		}
		return nil
	}
	go func() {
		time.Sleep(providerCheckDelay)
		ctx, cancel := context.WithTimeout(context.Background(), sc.cfg.CheckTimeout)
		defer cancel()
		sc.reportCheck(c.Check(ctx))
	}()
	return nil
}

// reportCheck says how the start-up check went: a configuration error
// (credentials, certificates) at error level, since no drain can succeed
// until an operator acts; any other failure (DNS, an outage, a wrong URL)
// at warn level.
func (sc *Sidecar) reportCheck(err error) {
	switch {
	case err == nil:
		sc.log.Debug("daytona: provider check passed")
	case provider.ConfigError(err):
		sc.log.Error("daytona: provider check failed: no sandbox can be deleted until the setup is fixed", "err", err.Error())
	default:
		sc.log.Warn("daytona: provider check failed: the drain will retry, but check the setup", "err", err.Error())
	}
}
