package sidecar

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tether-run/tether/intent"
	"github.com/tether-run/tether/internal/config"
	"github.com/tether-run/tether/internal/testutil"
	"github.com/tether-run/tether/supervisor"
)

// scrapeText is one GET /metrics, "" when the endpoint does not answer.
func scrapeText(addr string) string {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// TestMetricsLingerAfterTheDrain: with --metrics-linger, the endpoint is
// still up once the drain is over, and its scrape shows the drain (one
// drain, the sandbox gone) and the intent the proxy declared; Run returns
// when the linger ends (here: its context, as a TERM would).
func TestMetricsLingerAfterTheDrain(t *testing.T) {
	w := newWorld(t)
	w.cfg.MetricsAddr = "127.0.0.1:0"
	w.cfg.MetricsLinger = config.MaxMetricsLinger
	sc := w.open()
	addr := sc.metricsServer.Addr()
	if first := scrapeText(addr); !strings.Contains(first, "tether_drain_duration_seconds_count 0\n") {
		t.Fatalf("before the child, the drain series is not at 0:\n%s", first)
	}
	w.t.Setenv(envChild, "proxy")
	w.t.Setenv(envOut, filepath.Join(w.dir, "child.out"))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type result struct {
		st  supervisor.Status
		err error
	}
	done := make(chan result, 1)
	go func() {
		st, err := sc.Run(ctx, []string{os.Args[0], "-test.run=^$"}, nil)
		done <- result{st, err}
	}()
	var text string
	testutil.WaitFor(t, "a scrape showing the drain", func() bool {
		text = scrapeText(addr)
		return strings.Contains(text, "tether_drain_duration_seconds_count 1\n")
	})
	// One scrape more: the one that showed the drain may have read the
	// journal's counts just before the drain's last transition (a scrape
	// reads the journal first, then its series), so it can show the drain
	// done and its sandbox not yet gone (1 of 3 runs of the suite at -p 4).
	// This one starts after the drain was recorded.
	text = scrapeText(addr)
	for _, want := range []string{
		`tether_drain_intents_total{provider="daytona",state="gone"} 1`,
		`tether_drain_intents_total{provider="e2b",state="gone"} 0`,
		`tether_intents{provider="daytona",state="gone"} 1`,
		`tether_intents{provider="daytona",state="pending"} 0`,
		`tether_intents{provider="e2b",state="gone"} 0`,
		`tether_intents_declared_total{intake="proxy"} 1`,
		`tether_intents_declared_total{intake="socket"} 0`,
		`tether_unresolved_intents{provider="daytona"} 0`,
		`tether_unresolved_intents{provider="e2b"} 0`,
	} {
		if !strings.Contains(text, want+"\n") {
			t.Errorf("the scrape after the drain lacks %s", want)
		}
	}
	select {
	case r := <-done:
		t.Fatalf("Run returned during the linger: %+v %v", r.st, r.err)
	default:
	}
	cancel()
	select {
	case r := <-done:
		if r.err != nil || r.st.Code != 0 {
			t.Fatalf("Run: %+v %v", r.st, r.err)
		}
	case <-time.After(testutil.WaitBound):
		t.Fatal("Run did not return when the linger was cut")
	}
}

// declaredThrough checks, after a run whose runner declared one intent
// through intake, that the metrics counted it there and nowhere else (the
// endpoint stays up until Close).
func (w *world) declaredThrough(sc *Sidecar, intake string) {
	w.t.Helper()
	text := scrapeText(sc.metricsServer.Addr())
	for _, in := range []string{"proxy", "socket", "spool"} {
		want := `tether_intents_declared_total{intake="` + in + `"} 0`
		if in == intake {
			want = `tether_intents_declared_total{intake="` + in + `"} 1`
		}
		if !strings.Contains(text, want+"\n") {
			w.t.Errorf("the scrape after the run lacks %s", want)
		}
	}
}

// TestCleanupDebtByProviderWithoutCredentials: with no provider at all,
// the replay and the drain try nothing, and the cleanup debt (at start:
// what an earlier run left) and the intents left live are counted by the
// provider each intent names, from the journal.
func TestCleanupDebtByProviderWithoutCredentials(t *testing.T) {
	w := newWorld(t)
	t.Setenv("DAYTONA_API_KEY", "")
	t.Setenv("DAYTONA_API_URL", "")
	w.cfg.MetricsAddr = "127.0.0.1:0"
	log := slog.New(slog.NewTextHandler(&w.log, &slog.HandlerOptions{Level: slog.LevelDebug}))
	sc, err := Open(w.cfg, Options{Logger: log, Version: "test", Report: &w.log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sc.Close() })
	if sc.reaper.Providers.Len() > 0 {
		t.Fatal("a provider without credentials")
	}
	var ids []string
	for _, name := range []string{"daytona", "e2b", "e2b"} {
		in, _, err := sc.journal.Create(t.Context(), intent.Declaration{Provider: name})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, in.ID)
	}
	// At start, the debt is what an earlier run left (here: one of E2B's),
	// by provider.
	sc.replay(t.Context(), ids[2:])
	start := scrapeText(sc.metricsServer.Addr())
	for _, want := range []string{`tether_unresolved_intents{provider="daytona"} 0`, `tether_unresolved_intents{provider="e2b"} 1`} {
		if !strings.Contains(start, want+"\n") {
			t.Errorf("the scrape at start lacks %s", want)
		}
	}
	if err := sc.Listen(); err != nil {
		t.Fatal(err)
	}
	if _, err := w.run(sc, "true"); err != nil {
		t.Fatal(err)
	}
	text := scrapeText(sc.metricsServer.Addr())
	for _, want := range []string{
		`tether_unresolved_intents{provider="daytona"} 1`,
		`tether_unresolved_intents{provider="e2b"} 2`,
		`tether_drain_intents_total{provider="daytona",state="live"} 1`,
		`tether_drain_intents_total{provider="e2b",state="live"} 2`,
	} {
		if !strings.Contains(text, want+"\n") {
			t.Errorf("the scrape after the drain lacks %s", want)
		}
	}
}
