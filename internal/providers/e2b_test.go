package providers

import (
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tether-run/tether/intent"
	"github.com/tether-run/tether/internal/config"
	"github.com/tether-run/tether/internal/metrics"
	"github.com/tether-run/tether/internal/reaper"
	"github.com/tether-run/tether/internal/testutil"
	"github.com/tether-run/tether/journal"
	"github.com/tether-run/tether/provider"
	"github.com/tether-run/tether/provider/e2b"
	"github.com/tether-run/tether/provider/e2b/e2btest"
)

// TestE2BRenewalsCounted: the E2B guard's timeout cap of an observed
// sandbox and its renewals are counted as E2B's calls (as the simulator
// saw them), the capped sandbox as one E2B renews, and a run of failed
// renewals as one sandbox at risk, E2B's; nothing of it is Daytona's.
func TestE2BRenewalsCounted(t *testing.T) {
	esrv, p := testutil.E2B(t)
	j, err := journal.Open(filepath.Join(t.TempDir(), "journal.db"), journal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { j.Close() })
	m := metrics.New(j, "test", "daytona", "e2b")
	counted := m.Provider(p)
	cfg := config.Default()
	cfg.E2BMaxTimeout = 10 * time.Minute
	log := slog.New(slog.DiscardHandler)
	g, err := e2bGuardOf(Wiring{Config: cfg, Provider: counted, Journal: j, Logger: log, Recorder: m.Lease(e2b.ProviderName),
		Reaper: &reaper.Reaper{Journal: j, Providers: provider.NewSet(counted)}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	in, _, err := j.Create(ctx, intent.Declaration{Provider: e2b.ProviderName, Account: p.Account()})
	if err != nil {
		t.Fatal(err)
	}
	sb, err := p.Create(ctx, in.Name, in.Labels, e2b.CreateOptions{Timeout: 50 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if in, err = j.Observe(in.ID, sb.ID); err != nil {
		t.Fatal(err)
	}
	before := esrv.Calls()
	g.Observed(ctx, in)
	renewer := g.(*e2bGuard).renewer
	renewer.Renew(ctx)
	esrv.FailNext(e2btest.RouteTimeout, http.StatusUnauthorized, 2)
	renewer.Renew(ctx)
	renewer.Renew(ctx) // the same run of failures: still one at risk
	after := esrv.Calls()
	if rec, _ := esrv.Sandbox(sb.ID); time.Until(rec.EndAt) > 10*time.Minute {
		t.Fatalf("the timeout was not capped: ends in %s", time.Until(rec.EndAt))
	}
	srv := httptest.NewServer(m.Handler())
	t.Cleanup(srv.Close)
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	text := string(b)
	saw := func(route string) int { return after[route] - before[route] }
	for _, want := range []string{
		fmt.Sprintf(`tether_provider_calls_total{provider="e2b",op="get",outcome="ok"} %d`, saw(e2btest.RouteGet)),
		fmt.Sprintf(`tether_provider_calls_total{provider="e2b",op="set_timeout",outcome="ok"} %d`, saw(e2btest.RouteTimeout)-2),
		`tether_provider_calls_total{provider="e2b",op="set_timeout",outcome="unauthorized"} 2`,
		`tether_leased_sandboxes{provider="e2b"} 1`,
		`tether_lease_at_risk_total{provider="e2b"} 1`,
		`tether_leased_sandboxes{provider="daytona"} 0`,
		`tether_lease_at_risk_total{provider="daytona"} 0`,
	} {
		if !strings.Contains(text, want+"\n") {
			t.Errorf("the scrape lacks %s", want)
		}
	}
	if saw(e2btest.RouteTimeout) != 4 || saw(e2btest.RouteGet) != 1 {
		t.Fatalf("E2B saw %v: want one read and four timeouts (the cap, three renewals)", after)
	}
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(line, `tether_provider_calls_total{provider="daytona"`) && !strings.HasSuffix(line, " 0") {
			t.Errorf("a Daytona call counted: %s", line)
		}
	}
}
