package metrics_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/tether-run/tether/intent"
	"github.com/tether-run/tether/internal/testutil"
	"github.com/tether-run/tether/provider"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/tether-run/tether/internal/metrics"
	"github.com/tether-run/tether/internal/reaper"
	"github.com/tether-run/tether/journal"
	"github.com/tether-run/tether/provider/daytona"
	"github.com/tether-run/tether/provider/daytona/daytonatest"
)

// scrape reads the endpoint as Prometheus would: its text format.
func scrape(t *testing.T, h http.Handler) map[string]*dto.MetricFamily {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if rec.Code != 200 {
		t.Fatalf("scrape: %d %s", rec.Code, rec.Body.String())
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(rec.Body)
	if err != nil {
		t.Fatalf("scrape: not the Prometheus text format: %v", err)
	}
	return fams
}

// sum adds the values of a family's series whose labels include every pair.
func sum(fams map[string]*dto.MetricFamily, name string, labels ...string) float64 {
	f, ok := fams[name]
	if !ok {
		return -1
	}
	total := 0.0
next:
	for _, m := range f.GetMetric() {
		for i := 0; i+1 < len(labels); i += 2 {
			found := false
			for _, lp := range m.GetLabel() {
				if lp.GetName() == labels[i] && lp.GetValue() == labels[i+1] {
					found = true
				}
			}
			if !found {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			total += m.GetCounter().GetValue()
		case m.Gauge != nil:
			total += m.GetGauge().GetValue()
		case m.Histogram != nil:
			total += float64(m.GetHistogram().GetSampleCount())
		}
	}
	return total
}

func refused(s daytonatest.ThrottleStats) int {
	n := 0
	for _, v := range s.Refused {
		n += v
	}
	return n
}

// TestScrapeAfterADrainWithFaults drains sandboxes through a provider that
// answers 429 and 503 at random, scrapes, and checks the numbers against
// what the simulated Daytona itself counted.
func TestScrapeAfterADrainWithFaults(t *testing.T) {
	t.Parallel()
	const n = 24
	srv, _ := testutil.Daytona(t)
	const key = "metrics-key"
	srv.AddKey(key, daytonatest.DefaultOrg)
	prov := testutil.DaytonaProvider(t, srv, func(c *daytona.Config) { c.APIKey = key })
	journalPath := filepath.Join(t.TempDir(), "journal.db")
	j, err := journal.Open(journalPath, journal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	for i := 0; i < n; i++ {
		in, _, err := j.Create(t.Context(), intent.Declaration{Labels: map[string]string{"run": "m"}, Provider: prov.Name(), Account: prov.Account()})
		if err != nil {
			t.Fatal(err)
		}
		sb, err := prov.Create(t.Context(), in.Name, in.Labels, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := j.Observe(in.ID, sb.ID); err != nil {
			t.Fatal(err)
		}
	}

	m := metrics.New(j, "test", "daytona", "e2b")
	r := &reaper.Reaper{
		Journal: j, Providers: provider.NewSet(m.Provider(prov)), Concurrency: 8,
		RetryBase: 10 * time.Millisecond, RetryMax: 100 * time.Millisecond,
		PollInterval: 10 * time.Millisecond, PollMax: 50 * time.Millisecond,
	}
	before := srv.Calls()
	srv.SetFaults(daytonatest.Faults{Seed: 3, Rate429: 0.15, Rate5xx: 0.15, RetryAfter: time.Second})
	live, _ := j.Live()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	rep := r.Drain(ctx, live)
	m.RecordDrain(rep)
	srv.SetFaults(daytonatest.Faults{})
	after := srv.Calls()
	limited := refused(srv.Throttle())

	fams := scrape(t, m.Handler())
	for _, c := range []struct {
		what      string
		got, want float64
	}{
		{"GET /sandbox/{id} calls", sum(fams, "tether_provider_calls_total", "provider", "daytona", "op", "get"), float64(after[daytonatest.RouteGet] - before[daytonatest.RouteGet])},
		{"DELETE calls", sum(fams, "tether_provider_calls_total", "provider", "daytona", "op", "delete"), float64(after[daytonatest.RouteDelete] - before[daytonatest.RouteDelete])},
		{"429 answers", sum(fams, "tether_provider_calls_total", "provider", "daytona", "outcome", "rate_limited"), float64(limited)},
		{"rate-limit waits", sum(fams, "tether_rate_limit_waits_total", "provider", "daytona"), float64(limited)},
		{"rate-limit wait seconds", sum(fams, "tether_rate_limit_wait_seconds_total", "provider", "daytona"), float64(limited)}, // Retry-After: 1 s each
		{"latency observations", sum(fams, "tether_provider_call_duration_seconds"), sum(fams, "tether_provider_calls_total")},
		{"gone intents", sum(fams, "tether_intents", "state", "gone"), n},
		{"live intents", sum(fams, "tether_intents", "state", "pending") + sum(fams, "tether_intents", "state", "observed") + sum(fams, "tether_intents", "state", "releasing"), 0},
		{"cleanup debt", sum(fams, "tether_unresolved_intents"), 0},
		{"drains", sum(fams, "tether_drain_duration_seconds"), 1},
		{"drained gone", sum(fams, "tether_drain_intents_total", "provider", "daytona", "state", "gone"), n},
	} {
		if c.got != c.want {
			t.Errorf("%s: scraped %v, simulator or journal says %v", c.what, c.got, c.want)
		}
	}
	if limited == 0 || sum(fams, "tether_provider_calls_total", "outcome", "unavailable") == 0 {
		t.Fatalf("the faults did not bite (429s %d): the test proves nothing", limited)
	}
	// The simulator's own record: every sandbox is destroyed.
	for _, sb := range srv.Sandboxes() {
		if sb.State != "destroyed" {
			t.Errorf("sandbox %s is %s", sb.ID, sb.State)
		}
	}
	fi, _ := os.Stat(journalPath)
	if got := sum(fams, "tether_journal_size_bytes"); got != float64(fi.Size()) {
		t.Errorf("journal size %v, file is %d bytes", got, fi.Size())
	}
}

// TestScrapeShowsCleanupDebt: a drain without a reachable provider leaves
// its intents live, and the scrape says so.
func TestScrapeShowsCleanupDebt(t *testing.T) {
	j, err := journal.Open(filepath.Join(t.TempDir(), "journal.db"), journal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	for i := 0; i < 3; i++ {
		if _, _, err := j.Create(t.Context(), intent.Declaration{}); err != nil {
			t.Fatal(err)
		}
	}
	m := metrics.New(j, "test", "daytona", "e2b")
	live, _ := j.Live()
	m.SetUnresolved(map[string]int{"": len(live)})
	r := &reaper.Reaper{Journal: j}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	m.RecordReplay(time.Second, r.Drain(ctx, live))
	fams := scrape(t, m.Handler())
	if got := sum(fams, "tether_unresolved_intents"); got != 3 {
		t.Fatalf("cleanup debt %v, want 3", got)
	}
	if got := sum(fams, "tether_replay_duration_seconds"); got != 1 {
		t.Fatalf("replays %v", got)
	}
	if got := sum(fams, "tether_intents", "state", "pending"); got != 3 {
		t.Fatalf("pending %v", got)
	}
	// The endpoint itself, on a real port.
	s, err := m.Listen("127.0.0.1:0", nil)
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve()
	defer s.Close()
	resp, err := http.Get(fmt.Sprintf("http://%s/metrics", s.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("GET /metrics: %d", resp.StatusCode)
	}
}

// Cleanup debt under both spellings of Daytona: an intent that named no
// provider was journaled with "" by an older tether and with "daytona"
// now (intent.DefaultProvider), and a journal may hold both. Their debt is
// one series, provider="daytona", and it is their sum — at start
// (SetUnresolved) and after a drain or replay (its report by provider);
// there is no series for "".
func TestCleanupDebtSumsBothSpellingsOfDaytona(t *testing.T) {
	j, err := journal.Open(filepath.Join(t.TempDir(), "journal.db"), journal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	for range 5 {
		if _, _, err := j.Create(t.Context(), intent.Declaration{}); err != nil {
			t.Fatal(err)
		}
	}
	live, err := j.Live()
	if err != nil || len(live) != 5 {
		t.Fatalf("%d live, %v", len(live), err)
	}
	byProvider := map[string]int{}
	for i := range live {
		if live[i].Provider != intent.DefaultProvider {
			t.Fatalf("intent journaled with provider %q, want %q", live[i].Provider, intent.DefaultProvider)
		}
		if i < 2 {
			live[i].Provider = "" // as an older journal holds them (counted as the sidecar's liveByProvider counts)
		}
		byProvider[live[i].Provider]++
	}
	check := func(what string, fams map[string]*dto.MetricFamily, family string, labels ...string) {
		t.Helper()
		if got := sum(fams, family, append([]string{"provider", "daytona"}, labels...)...); got != 5 {
			t.Errorf("%s: %s%v of daytona %v, want 5 (2 journaled with no provider, 3 with daytona)", what, family, labels, got)
		}
		if got := sum(fams, family, "provider", ""); got > 0 {
			t.Errorf("%s: %s has a series with provider=\"\": %v", what, family, got)
		}
	}

	start := metrics.New(j, "test", "daytona", "e2b")
	start.SetUnresolved(byProvider)
	check("at start", scrape(t, start.Handler()), "tether_unresolved_intents")

	// A drain's report counts each intent under the provider its record
	// names (reaper.Report.add): what a drain of such a journal reports.
	drained := metrics.New(j, "test", "daytona", "e2b")
	rep := reaper.Report{Total: 5, ByProvider: map[string]reaper.Tally{"": {Live: 2}, "daytona": {Live: 3}}}
	drained.RecordDrain(rep)
	fams := scrape(t, drained.Handler())
	check("after the drain", fams, "tether_unresolved_intents")
	check("after the drain", fams, "tether_drain_intents_total", "state", "live")
}
