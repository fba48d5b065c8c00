package config

import (
	"strings"
	"testing"
	"time"
)

func TestLeaseSettings(t *testing.T) {
	c, envErr, err := bind(t, nil)
	if envErr != nil || err != nil || c.Lease != 0 || c.LeaseDuration() != 0 {
		t.Fatalf("default: lease %d (%s), env %v, validate %v; want off", c.Lease, c.LeaseDuration(), envErr, err)
	}
	if c, _, err = bind(t, nil, "--lease", "2"); err != nil || c.LeaseDuration() != 2*time.Minute {
		t.Fatalf("--lease 2: %s, %v", c.LeaseDuration(), err)
	}
	t.Run("env", func(t *testing.T) {
		c, envErr, err := bind(t, map[string]string{EnvLease: "3", EnvLeaseMinute: "100ms"})
		if envErr != nil || err != nil || c.LeaseDuration() != 300*time.Millisecond {
			t.Fatalf("TETHER_LEASE=3 with a 100ms minute: %s, env %v, validate %v", c.LeaseDuration(), envErr, err)
		}
	})
	if _, _, err = bind(t, nil, "--lease", "-1"); err == nil || !strings.Contains(err.Error(), "--lease -1") {
		t.Fatalf("--lease -1: %v, want an error naming it", err)
	}
	t.Run("bad minute", func(t *testing.T) {
		if _, envErr, _ := bind(t, map[string]string{EnvLeaseMinute: "soon"}); envErr == nil || !strings.Contains(envErr.Error(), EnvLeaseMinute) {
			t.Fatalf("a bad %s: %v", EnvLeaseMinute, envErr)
		}
	})
}
