package testutil

import (
	"log/slog"
	"testing"

	"github.com/tether-run/tether/provider/daytona"
	"github.com/tether-run/tether/provider/daytona/daytonatest"
)

// Daytona is a simulated Daytona API, closed at the test's end, and the real
// Daytona provider speaking HTTP to it with the simulator's default key.
func Daytona(t testing.TB, opts ...daytonatest.Option) (*daytonatest.Server, *daytona.Provider) {
	t.Helper()
	sim := daytonatest.NewServer(opts...)
	t.Cleanup(sim.Close)
	return sim, DaytonaProvider(t, sim)
}

// DaytonaProvider is the real Daytona provider on sim, with the simulator's
// default key and no logs; each configure adjusts its configuration first
// (another key, a logger).
func DaytonaProvider(t testing.TB, sim *daytonatest.Server, configure ...func(*daytona.Config)) *daytona.Provider {
	t.Helper()
	cfg := daytona.Config{APIKey: daytonatest.DefaultKey, APIURL: sim.URL, Logger: slog.New(slog.DiscardHandler)}
	for _, c := range configure {
		c(&cfg)
	}
	p, err := daytona.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// DaytonaEnv is the environment that points a tether process (or a runner)
// at sim with its default key.
func DaytonaEnv(sim *daytonatest.Server) []string {
	return []string{daytona.EnvAPIURL + "=" + sim.URL, daytona.EnvAPIKey + "=" + daytonatest.DefaultKey}
}
