package config

import (
	"fmt"
	"os"
	"time"
)

// LeaseSettings are lease mode's (tether run --lease): every sandbox tether
// learns of gets a short Daytona auto-stop (and, for on_drain delete, an
// auto-delete of at most the lease), renewed while the child runs, so that
// a tether lost with its host leaves nothing running for longer than the
// lease, nor stopped for longer than another.
type LeaseSettings struct {
	// Lease is the auto-stop interval in minutes; 0 turns lease mode off.
	Lease int
	// LeaseMinute is how long tether takes a minute to be, for its renewal
	// period and waits. For tests only (TETHER_LEASE_MINUTE, no flag), to
	// match a simulated Daytona whose minute is sped up; Daytona's minute
	// is a minute, and so is the default.
	LeaseMinute time.Duration
}

// Env names of the lease settings.
const (
	EnvLease = "TETHER_LEASE"
	// EnvLeaseMinute is test-only: see LeaseSettings.LeaseMinute.
	EnvLeaseMinute = "TETHER_LEASE_MINUTE"
)

// DefaultLeaseMinute is a minute.
const DefaultLeaseMinute = time.Minute

// LeaseDuration is the lease as a duration (0 when off).
func (l LeaseSettings) LeaseDuration() time.Duration {
	return time.Duration(l.Lease) * l.LeaseMinute
}

func (c *Config) bindLease(b *binder, want Group) {
	if want&Supervise == 0 {
		return
	}
	b.int(&c.Lease, "lease", EnvLease, "lease mode: minutes of Daytona auto-stop every sandbox gets (on_drain delete: and auto-delete after as many), renewed while the child runs, so sandboxes die with a lost host within about this; 0: off")
	if v, ok := os.LookupEnv(EnvLeaseMinute); ok && v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			b.errs = append(b.errs, fmt.Errorf("%s=%q: not a duration (e.g. 1m, 600ms)", EnvLeaseMinute, v))
		} else {
			c.LeaseMinute = d
		}
	}
}

func (c *Config) validateLease() []error {
	var errs []error
	if c.Lease < 0 {
		errs = append(errs, fmt.Errorf("--lease %d: must be 0 (off) or at least 1 minute", c.Lease))
	}
	if c.LeaseMinute <= 0 {
		errs = append(errs, fmt.Errorf("%s %s: must be positive (a test-only setting; leave it unset)", EnvLeaseMinute, c.LeaseMinute))
	}
	return errs
}
