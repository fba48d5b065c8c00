package daytona_test

import (
	"context"
	"errors"
	"io"
	"log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/tether-run/tether/internal/testutil"
	"github.com/tether-run/tether/provider"
	"github.com/tether-run/tether/provider/daytona"
	"github.com/tether-run/tether/provider/daytona/daytonatest"
)

// TestSetupFromEnv: every problem the environment shows is reported, each
// naming the variable to set, and a provider is built only when there is
// none.
func TestSetupFromEnv(t *testing.T) {
	vars := []string{daytona.EnvAPIKey, daytona.EnvJWTToken, daytona.EnvOrganizationID,
		daytona.EnvAPIURL, daytona.EnvServerURL, daytona.EnvTarget}
	tests := []struct {
		name     string
		env      map[string]string
		provider bool
		want     []string // each must appear in the problems
	}{
		{"all set", map[string]string{"DAYTONA_API_KEY": "k", "DAYTONA_API_URL": "http://127.0.0.1:1/api"}, true, nil},
		{"no credentials", nil, false, []string{"DAYTONA_API_KEY", "DAYTONA_JWT_TOKEN"}},
		{"malformed URL", map[string]string{"DAYTONA_API_KEY": "k", "DAYTONA_API_URL": "localhost:3000/api"}, false, []string{`DAYTONA_API_URL="localhost:3000/api"`, "http(s)://"}},
		{"malformed server URL", map[string]string{"DAYTONA_API_KEY": "k", "DAYTONA_SERVER_URL": "ftp://x/api"}, false, []string{"DAYTONA_SERVER_URL"}},
		{"no credentials and a malformed URL", map[string]string{"DAYTONA_API_URL": "//nohost"}, false, []string{"DAYTONA_API_KEY", "DAYTONA_API_URL"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for _, v := range vars {
				t.Setenv(v, tc.env[v])
			}
			s := daytona.SetupFromEnv(slog.New(slog.DiscardHandler))
			if (s.Provider != nil) != tc.provider {
				t.Fatalf("provider %v, want %v (problems %v)", s.Provider != nil, tc.provider, s.Problems)
			}
			if len(tc.want) == 0 {
				if s.Err() != nil {
					t.Fatalf("problems %v, want none", s.Err())
				}
				return
			}
			err := s.Err()
			if err == nil {
				t.Fatal("no problem reported")
			}
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("problems not on one line: %q", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("problems %q do not say %q", err, w)
				}
			}
		})
	}
}

// TestCheck: one cheap authenticated read, and what to fix when it fails.
// A certificate the client does not trust, or a server that does not speak
// TLS, is a configuration error (not retried as an outage), on every call.
func TestCheck(t *testing.T) {
	ctx := context.Background()
	sim, _ := testutil.Daytona(t)

	t.Run("a good setup passes with one read", func(t *testing.T) {
		before := sim.Calls()[daytonatest.RouteList]
		if err := testutil.DaytonaProvider(t, sim).Check(ctx); err != nil {
			t.Fatal(err)
		}
		if n := sim.Calls()[daytonatest.RouteList] - before; n != 1 {
			t.Fatalf("%d list calls, want 1", n)
		}
	})

	t.Run("a wrong key is a configuration error naming the variable", func(t *testing.T) {
		p := testutil.DaytonaProvider(t, sim, func(c *daytona.Config) { c.APIKey = "dtn_wrong" })
		err := p.Check(ctx)
		if !errors.Is(err, provider.ErrUnauthorized) || !provider.ConfigError(err) || !strings.Contains(err.Error(), "DAYTONA_API_KEY") {
			t.Fatalf("Check = %v; want unauthorized naming DAYTONA_API_KEY", err)
		}
		if strings.Contains(err.Error(), "dtn_wrong") {
			t.Fatalf("the key leaked: %v", err)
		}
		// The list a sweep makes names the variable too.
		if _, err := p.List(ctx, nil); !errors.Is(err, provider.ErrUnauthorized) || !strings.Contains(err.Error(), "check DAYTONA_API_KEY") {
			t.Fatalf("List = %v; want unauthorized saying check DAYTONA_API_KEY", err)
		}
	})

	t.Run("a URL that is not the API", func(t *testing.T) {
		p := testutil.DaytonaProvider(t, sim, func(c *daytona.Config) { c.APIURL = strings.TrimSuffix(sim.URL, "/api") + "/nope" })
		err := p.Check(ctx)
		if !provider.ConfigError(err) || errors.Is(err, provider.ErrNotFound) || !strings.Contains(err.Error(), "DAYTONA_API_URL does not look like the Daytona API") {
			t.Fatalf("Check = %v; want a configuration error saying DAYTONA_API_URL does not look like the Daytona API", err)
		}
		// The list a sweep makes says the same, not "sandbox not found".
		if _, err := p.List(ctx, nil); !provider.ConfigError(err) || !strings.Contains(err.Error(), "DAYTONA_API_URL does not look like the Daytona API") {
			t.Fatalf("List = %v; want it to say DAYTONA_API_URL does not look like the Daytona API", err)
		}
	})

	t.Run("a certificate signed by an unknown authority", func(t *testing.T) {
		tlsSrv := httptest.NewUnstartedServer(http.NotFoundHandler())
		tlsSrv.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshakes
		tlsSrv.StartTLS()
		t.Cleanup(tlsSrv.Close)
		p, err := daytona.New(daytona.Config{APIKey: "k", APIURL: tlsSrv.URL + "/api"})
		if err != nil {
			t.Fatal(err)
		}
		err = p.Check(ctx)
		if !errors.Is(err, provider.ErrMisconfigured) || provider.Retryable(err) || !strings.Contains(err.Error(), "SSL_CERT_FILE") {
			t.Fatalf("Check = %v; want a configuration error about the certificate", err)
		}
		if _, err := p.Get(ctx, "some-id"); !errors.Is(err, provider.ErrMisconfigured) || provider.Retryable(err) {
			t.Fatalf("Get = %v; want a configuration error, not retryable", err)
		}
	})

	t.Run("https to a server that speaks plain HTTP", func(t *testing.T) {
		p := testutil.DaytonaProvider(t, sim, func(c *daytona.Config) { c.APIURL = strings.Replace(sim.URL, "http://", "https://", 1) })
		if err := p.Check(ctx); !errors.Is(err, provider.ErrMisconfigured) || !strings.Contains(err.Error(), "TLS") {
			t.Fatalf("Check = %v; want a configuration error about TLS", err)
		}
	})

	t.Run("a refused connection stays an outage", func(t *testing.T) {
		p := testutil.DaytonaProvider(t, sim, func(c *daytona.Config) { c.APIURL = "http://127.0.0.1:1/api" })
		if err := p.Check(ctx); !errors.Is(err, provider.ErrUnavailable) || provider.ConfigError(err) {
			t.Fatalf("Check = %v; want unavailable", err)
		}
	})
}
