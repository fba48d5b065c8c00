package config

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"time"
)

// E2BSettings are E2B's: its API proxy (zero-code mode) and the cap on a
// sandbox's timeout, E2B's own end of a sandbox that nobody kills.
type E2BSettings struct {
	// E2BProxy serves the E2B API proxy and points the child's
	// E2B_API_URL at it (when tether has E2B credentials).
	E2BProxy     bool
	E2BProxyAddr string // loopback host:port; port 0 picks a free one
	// E2BMaxTimeout caps every E2B sandbox's timeout: a longer one is cut
	// to it at create (the proxy) or when it is observed, and renewed to
	// it while the child runs, so a sandbox of a lost host ends within it.
	E2BMaxTimeout time.Duration
	// E2BRestoreWindow is how long after killing an E2B sandbox it did not
	// see running (or after a kill it did not send) tether waits before it
	// believes the 404: a resume already restoring the sandbox when the
	// kill was accepted brings it back running (e2b-dev/infra#3636).
	E2BRestoreWindow time.Duration
}

// Env names of the E2B settings.
const (
	EnvE2BProxy         = "TETHER_E2B_PROXY"
	EnvE2BProxyAddr     = "TETHER_E2B_PROXY_ADDR"
	EnvE2BMaxTimeout    = "TETHER_E2B_MAX_TIMEOUT"
	EnvE2BRestoreWindow = "TETHER_E2B_RESTORE_WINDOW"
)

// Defaults of the E2B settings. An hour is E2B's own limit of a
// sandbox's life on its base tier, and four renewal periods of slack
// (renewed every quarter of it) for a tether under load.
const (
	DefaultE2BProxyAddr  = "127.0.0.1:0"
	DefaultE2BMaxTimeout = time.Hour
	// MinE2BMaxTimeout: E2B refuses a refresh shorter than 15 s
	// (infra packages/api/internal/handlers/sandbox_refresh.go).
	MinE2BMaxTimeout = 15 * time.Second
	// DefaultE2BRestoreWindow: E2B gives no bound on a restore; one takes
	// about a second, seconds under load (reaper.DefaultRestoreWindow).
	DefaultE2BRestoreWindow = 10 * time.Second
)

func defaultE2B() E2BSettings {
	return E2BSettings{E2BProxy: true, E2BProxyAddr: DefaultE2BProxyAddr, E2BMaxTimeout: DefaultE2BMaxTimeout, E2BRestoreWindow: DefaultE2BRestoreWindow}
}

func (c *Config) bindE2B(b *binder, want Group) {
	if want&Intake != 0 {
		b.bool(&c.E2BProxy, "e2b-proxy", EnvE2BProxy, "with E2B credentials, serve an E2B API proxy on loopback and point the child's E2B_API_URL at it, so unchanged runners are covered (false turns it off)")
		b.string(&c.E2BProxyAddr, "e2b-proxy-addr", EnvE2BProxyAddr, "loopback host:port of the E2B API proxy; port 0 picks a free one")
	}
	if want&(Drain|Sweep) != 0 {
		b.duration(&c.E2BRestoreWindow, "e2b-restore-window", EnvE2BRestoreWindow, "after killing an E2B sandbox it did not see running, how long tether waits before a 404 confirms it gone: a resume already restoring it then brings it back (e2b-dev/infra#3636)")
	}
	if want&Supervise != 0 {
		b.duration(&c.E2BMaxTimeout, "e2b-max-timeout", EnvE2BMaxTimeout, "longest timeout an E2B sandbox keeps: a longer one is cut to this and renewed while the child runs, so a lost host's sandboxes end within it (>= 15s)")
	}
}

func (c *Config) validateE2B() []error {
	var errs []error
	if c.E2BMaxTimeout < MinE2BMaxTimeout {
		errs = append(errs, fmt.Errorf("--e2b-max-timeout %s: must be at least %s (E2B refuses shorter renewals)", c.E2BMaxTimeout, MinE2BMaxTimeout))
	}
	if c.E2BRestoreWindow <= 0 {
		errs = append(errs, fmt.Errorf("--e2b-restore-window %s: must be positive", c.E2BRestoreWindow))
	}
	if c.E2BProxy {
		if err := checkLoopback(c.E2BProxyAddr); err != nil {
			errs = append(errs, fmt.Errorf("--e2b-proxy-addr %q: %v", c.E2BProxyAddr, err))
		}
	}
	return errs
}

// E2BFromEnv is the E2B settings as tether run reads them from its
// TETHER_E2B_* variables (flags aside), validated: what a command that
// does not take them (tether doctor) shows of them.
func E2BFromEnv() (E2BSettings, error) {
	c := Default()
	fs := flag.NewFlagSet("e2b", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	b := &binder{fs: fs}
	c.bindE2B(b, Supervise|Intake|Drain)
	errs := append(b.errs, c.validateE2B()...)
	return c.E2BSettings, errors.Join(errs...)
}
