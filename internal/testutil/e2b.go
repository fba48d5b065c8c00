package testutil

import (
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/tether-run/tether/provider/e2b"
	"github.com/tether-run/tether/provider/e2b/e2btest"
)

// E2B is a simulated E2B API, closed at the test's end, and the real E2B
// provider speaking HTTP to it with the simulator's default key.
func E2B(t testing.TB, opts ...e2btest.Option) (*e2btest.Server, *e2b.Provider) {
	t.Helper()
	sim := e2btest.NewServer(opts...)
	t.Cleanup(sim.Close)
	return sim, E2BProvider(t, sim)
}

// E2BProvider is the real E2B provider on sim, with the simulator's
// default key and no logs; each configure adjusts its configuration first
// (another key, a logger, a call timeout).
func E2BProvider(t testing.TB, sim *e2btest.Server, configure ...func(*e2b.Config)) *e2b.Provider {
	t.Helper()
	cfg := e2b.Config{APIKey: e2btest.DefaultKey, APIURL: sim.URL, Logger: slog.New(slog.DiscardHandler)}
	for _, c := range configure {
		c(&cfg)
	}
	p, err := e2b.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// E2BEnv is the environment that points a tether process (or a runner)
// at sim with its default key.
func E2BEnv(sim *e2btest.Server) []string {
	return []string{e2b.EnvAPIURL + "=" + sim.URL, e2b.EnvAPIKey + "=" + e2btest.DefaultKey}
}

// E2BCall is a runner's own request to the E2B API at apiURL (the
// simulator, or tether's proxy in front of it), with the simulator's
// default key, on a connection of its own: its status, or the error that
// kept it from one. body is JSON, or "" for none.
func E2BCall(method, apiURL, path, body string) (int, error) {
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, strings.TrimRight(apiURL, "/")+path, rd)
	if err != nil {
		return 0, err
	}
	req.Close = true
	req.Header.Set("X-API-Key", e2btest.DefaultKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}
