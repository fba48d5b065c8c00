package reaper_test

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

	"github.com/tether-run/tether/intent"
	"github.com/tether-run/tether/provider"
	"github.com/tether-run/tether/provider/daytona"
)

// TestConfigurationErrorIsNotRetried: a provider whose server certificate
// the client does not trust fails every call the same way; the reaper
// gives up on the intent at once, saying why, instead of retrying it as an
// outage until the deadline.
func TestConfigurationErrorIsNotRetried(t *testing.T) {
	t.Parallel()
	tlsSrv := httptest.NewUnstartedServer(http.NotFoundHandler())
	tlsSrv.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshakes
	tlsSrv.StartTLS()
	t.Cleanup(tlsSrv.Close)
	w := newWorld(t)
	prov, err := daytona.New(daytona.Config{APIKey: apiKey, APIURL: tlsSrv.URL + "/api", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	w.r.Providers = provider.NewSet(prov)
	in, _, err := w.j.Create(context.Background(), intent.Declaration{Labels: scope, Provider: prov.Name(), Account: prov.Account()})
	if err != nil {
		t.Fatal(err)
	}
	in = w.observe(in, "sb-1")
	ctx, cancel := context.WithTimeout(context.Background(), generous)
	defer cancel()
	out, err := w.r.Resolve(ctx, in)
	if !errors.Is(err, provider.ErrMisconfigured) || !out.Live() {
		t.Fatalf("Resolve = %s, %v; want live with ErrMisconfigured", out.State, err)
	}
	if ctx.Err() != nil {
		t.Fatal("Resolve retried a configuration error until its deadline")
	}
	if got := w.journaled(in.ID); !strings.Contains(got.LastError, "certificate") || got.Attempts > 1 {
		t.Fatalf("the journal says %q after %d attempts; want one attempt, the certificate named", got.LastError, got.Attempts)
	}
}
