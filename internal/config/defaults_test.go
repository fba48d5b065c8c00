package config

import (
	"testing"

	"github.com/tether-run/tether/internal/reaper"
)

// The defaults config owns agree with the reaper's own, which it falls
// back to when a field is zero (a reaper built without a Config).
func TestDefaultsAgreeWithTheReaper(t *testing.T) {
	for _, c := range []struct {
		name      string
		got, want any
	}{
		{"drain concurrency", DefaultDrainConcurrency, reaper.DefaultConcurrency},
		{"never-created horizon", DefaultNeverCreatedHorizon, reaper.DefaultNeverCreatedHorizon},
		{"sweep concurrency", DefaultSweepConcurrency, reaper.DefaultSweepConcurrency},
	} {
		if c.got != c.want {
			t.Errorf("%s: config %v, reaper %v", c.name, c.got, c.want)
		}
	}
}
