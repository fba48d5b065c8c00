package metrics_test

import (
	"context"
	"net/http"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/tether-run/tether/intent"
	"github.com/tether-run/tether/internal/metrics"
	"github.com/tether-run/tether/internal/reaper"
	"github.com/tether-run/tether/internal/testutil"
	"github.com/tether-run/tether/journal"
	"github.com/tether-run/tether/provider"
	"github.com/tether-run/tether/provider/daytona"
	"github.com/tether-run/tether/provider/daytona/daytonatest"
	"github.com/tether-run/tether/provider/e2b"
	"github.com/tether-run/tether/provider/e2b/e2btest"
)

// TestMeasuredKeepsEachProviderShape: the reaper chooses its path by what
// a provider can do (a shared name's look-up for E2B, labels and leases
// for Daytona), so the counted provider can do exactly what it wraps can.
// Whether its 404 is per account and its delete synchronous, it answers
// for what it wraps.
func TestMeasuredKeepsEachProviderShape(t *testing.T) {
	j, err := journal.Open(filepath.Join(t.TempDir(), "journal.db"), journal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	m := metrics.New(j, "test", "daytona", "e2b")
	_, day := testutil.Daytona(t)
	_, e2bp := testutil.E2B(t)
	kinds := map[string]reflect.Type{
		"NameSharer":    reflect.TypeFor[provider.NameSharer](),
		"Leaser":        reflect.TypeFor[provider.Leaser](),
		"Labeler":       reflect.TypeFor[provider.Labeler](),
		"Account":       reflect.TypeFor[provider.Account](),
		"Throttled":     reflect.TypeFor[provider.Throttled](),
		"Quotas":        reflect.TypeFor[provider.Quotas](),
		"HandOffer":     reflect.TypeFor[provider.HandOffer](),
		"TimeoutSetter": reflect.TypeFor[metrics.TimeoutSetter](),
		"Checker":       reflect.TypeFor[provider.Checker](),
	}
	for _, p := range []provider.Provider{day, e2bp} {
		w := m.Provider(p)
		for name, k := range kinds {
			if got, want := reflect.TypeOf(w).Implements(k), reflect.TypeOf(p).Implements(k); got != want {
				t.Errorf("%s: counted provider is %s: %v; the provider itself: %v", p.Name(), name, got, want)
			}
		}
		if provider.NeedsAccount(w) != provider.NeedsAccount(p) || provider.DeletesSynchronously(w) != provider.DeletesSynchronously(p) {
			t.Errorf("%s: the counted provider answers for its account or deletes otherwise", p.Name())
		}
	}
}

// twoClouds is a journal, Daytona and E2B simulators, and a reaper over
// both clouds' counted providers.
type twoClouds struct {
	j    *journal.Journal
	m    *metrics.Metrics
	dsrv *daytonatest.Server
	esrv *e2btest.Server
	day  provider.Provider
	e2b  *e2b.Provider
	r    *reaper.Reaper
}

func newTwoClouds(t *testing.T) *twoClouds {
	t.Helper()
	j, err := journal.Open(filepath.Join(t.TempDir(), "journal.db"), journal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { j.Close() })
	dsrv, day := testutil.Daytona(t)
	esrv, e2bp := testutil.E2B(t)
	w := &twoClouds{j: j, m: metrics.New(j, "test", "daytona", "e2b"), dsrv: dsrv, esrv: esrv, day: day, e2b: e2bp}
	w.r = &reaper.Reaper{
		Journal: j, Providers: provider.NewSet(w.m.Provider(day), w.m.Provider(w.e2b)), Concurrency: 4,
		RetryBase: 10 * time.Millisecond, RetryMax: 100 * time.Millisecond,
		PollInterval: 10 * time.Millisecond, PollMax: 50 * time.Millisecond,
		ConfirmDelay: 5 * time.Millisecond, RecheckDelay: 5 * time.Millisecond,
		// A kill E2B refused with a 429 is sent again without a read
		// before it, and confirmed after this window.
		RestoreWindow: 100 * time.Millisecond,
	}
	return w
}

// observed journals n intents of each cloud, each with its sandbox.
func (w *twoClouds) observed(t *testing.T, n int) {
	t.Helper()
	for range n {
		for _, p := range []provider.Provider{w.day, w.e2b} {
			in, _, err := w.j.Create(t.Context(), intent.Declaration{Labels: map[string]string{"run": "m"}, Provider: p.Name(), Account: p.Account()})
			if err != nil {
				t.Fatal(err)
			}
			var id string
			if p == provider.Provider(w.e2b) {
				sb, err := w.e2b.Create(t.Context(), in.Name, in.Labels, e2b.CreateOptions{})
				if err != nil {
					t.Fatal(err)
				}
				id = sb.ID
			} else {
				sb, err := w.dsrv.AddSandbox(daytonatest.DefaultOrg, daytonatest.SeedSandbox{Name: in.Name, Labels: in.Labels})
				if err != nil {
					t.Fatal(err)
				}
				id = sb.ID
			}
			if _, err := w.j.Observe(in.ID, id); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func (w *twoClouds) drain(t *testing.T) reaper.Report {
	t.Helper()
	live, err := w.j.Live()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	rep := w.r.Drain(ctx, live)
	w.m.RecordDrain(rep)
	return rep
}

// TestTwoCloudsCountedApart drains a journal of both clouds while E2B
// answers 429, then again after E2B's key was revoked (401), and checks
// each provider's series against its own simulator's record: the calls
// each saw by route, the 429s and 401s E2B answered, and nothing of E2B's
// counted as Daytona's.
func TestTwoCloudsCountedApart(t *testing.T) {
	t.Parallel()
	const n = 3
	w := newTwoClouds(t)
	w.observed(t, n)
	dBefore, eBefore := w.dsrv.Calls(), w.esrv.Calls()
	const limited = 2
	w.esrv.Inject(e2btest.RouteKill, limited, e2btest.Scripted{Status: http.StatusTooManyRequests, RetryAfter: time.Second})
	if rep := w.drain(t); rep.Gone != 2*n {
		t.Fatalf("first drain: %+v, want every sandbox gone", rep)
	}

	// E2B's key expires: its next intent is left live, Daytona's is gone.
	w.observed(t, 1)
	w.esrv.RemoveKey(e2btest.DefaultKey)
	if rep := w.drain(t); rep.Gone != 1 || rep.Live() != 1 {
		t.Fatalf("second drain: %+v, want Daytona's gone and E2B's left", rep)
	}
	dAfter, eAfter := w.dsrv.Calls(), w.esrv.Calls()
	dSaw := func(route string) float64 { return float64(dAfter[route] - dBefore[route]) }
	eSaw := func(route string) float64 { return float64(eAfter[route] - eBefore[route]) }

	fams := scrape(t, w.m.Handler())
	calls := func(labels ...string) float64 { return sum(fams, "tether_provider_calls_total", labels...) }
	for _, c := range []struct {
		what      string
		got, want float64
	}{
		{"Daytona GET /sandbox/{id}", calls("provider", "daytona", "op", "get"), dSaw(daytonatest.RouteGet)},
		{"Daytona DELETE", calls("provider", "daytona", "op", "delete"), dSaw(daytonatest.RouteDelete)},
		{"every Daytona call", calls("provider", "daytona"), dSaw(daytonatest.RouteGet) + dSaw(daytonatest.RouteDelete)},
		{"E2B GET /sandboxes/{id}", calls("provider", "e2b", "op", "get"), eSaw(e2btest.RouteGet)},
		{"E2B DELETE (kill)", calls("provider", "e2b", "op", "delete"), eSaw(e2btest.RouteKill)},
		{"every E2B call", calls("provider", "e2b"), eSaw(e2btest.RouteGet) + eSaw(e2btest.RouteKill) + eSaw(e2btest.RouteList)},
		{"E2B 429s", calls("provider", "e2b", "outcome", "rate_limited"), limited},
		{"E2B rate-limit waits", sum(fams, "tether_rate_limit_waits_total", "provider", "e2b"), limited},
		{"E2B rate-limit wait seconds", sum(fams, "tether_rate_limit_wait_seconds_total", "provider", "e2b"), limited},
		{"Daytona 429s", calls("provider", "daytona", "outcome", "rate_limited"), 0},
		{"Daytona rate-limit waits", sum(fams, "tether_rate_limit_waits_total", "provider", "daytona"), 0},
		{"E2B 401s", calls("provider", "e2b", "outcome", "unauthorized"), 1},
		{"Daytona 401s", calls("provider", "daytona", "outcome", "unauthorized"), 0},
		{"Daytona latency observations", sum(fams, "tether_provider_call_duration_seconds", "provider", "daytona"), calls("provider", "daytona")},
		{"E2B latency observations", sum(fams, "tether_provider_call_duration_seconds", "provider", "e2b"), calls("provider", "e2b")},
		{"Daytona's intents gone", sum(fams, "tether_drain_intents_total", "provider", "daytona", "state", "gone"), n + 1},
		{"E2B's intents gone", sum(fams, "tether_drain_intents_total", "provider", "e2b", "state", "gone"), n},
		{"E2B's intents left", sum(fams, "tether_drain_intents_total", "provider", "e2b", "state", "live"), 1},
		{"Daytona's intents left", sum(fams, "tether_drain_intents_total", "provider", "daytona", "state", "live"), 0},
		{"E2B's cleanup debt", sum(fams, "tether_unresolved_intents", "provider", "e2b"), 1},
		{"Daytona's cleanup debt", sum(fams, "tether_unresolved_intents", "provider", "daytona"), 0},
		{"Daytona's intents gone, in the journal", sum(fams, "tether_intents", "provider", "daytona", "state", "gone"), n + 1},
		{"E2B's intents gone, in the journal", sum(fams, "tether_intents", "provider", "e2b", "state", "gone"), n},
		{"E2B's intents live, in the journal", sum(fams, "tether_intents", "provider", "e2b", "state", "releasing") + sum(fams, "tether_intents", "provider", "e2b", "state", "observed"), 1},
	} {
		if c.got != c.want {
			t.Errorf("%s: scraped %v, the simulator or the drain says %v", c.what, c.got, c.want)
		}
	}
	if eSaw(e2btest.RouteKill) <= n {
		t.Fatalf("E2B saw %v kills for %d sandboxes: the 429s did not bite", eSaw(e2btest.RouteKill), n)
	}
}

// TestE2BTimeoutsCounted: E2B's timeout (the cap and its renewals) and its
// look-up of a shared name are counted as E2B's own operations.
func TestE2BTimeoutsCounted(t *testing.T) {
	w := newTwoClouds(t)
	sb, err := w.e2b.Create(t.Context(), "tether-x", map[string]string{"run": "m"}, e2b.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ts, ok1 := w.e2bCounted().(metrics.TimeoutSetter)
	ns, ok2 := w.e2bCounted().(provider.NameSharer)
	if !ok1 || !ok2 {
		t.Fatalf("the counted E2B provider sets no timeout (%v) or looks up no shared name (%v)", ok1, ok2)
	}
	before := w.esrv.Calls()
	if err := ts.SetTimeout(t.Context(), sb.ID, time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, err := ns.Named(t.Context(), "tether-x"); err != nil {
		t.Fatal(err)
	}
	w.m.Lease("e2b").Leased(1)
	after := w.esrv.Calls()
	fams := scrape(t, w.m.Handler())
	for _, c := range []struct {
		labels []string
		want   float64
	}{
		{[]string{"provider", "e2b", "op", "set_timeout", "outcome", "ok"}, float64(after[e2btest.RouteTimeout] - before[e2btest.RouteTimeout])},
		{[]string{"provider", "e2b", "op", "named", "outcome", "ok"}, float64(after[e2btest.RouteList] - before[e2btest.RouteList])},
		{[]string{"provider", "daytona"}, 0},
	} {
		if got := sum(fams, "tether_provider_calls_total", c.labels...); got != c.want || c.want < 0 {
			t.Errorf("tether_provider_calls_total%v = %v, the simulator saw %v", c.labels, got, c.want)
		}
	}
	if got := sum(fams, "tether_leased_sandboxes", "provider", "e2b"); got != 1 {
		t.Errorf("E2B's renewed sandboxes: %v", got)
	}
}

// TestDaytonaKeepLabelCounted: the tether-keep label set on a sandbox
// stopped on purpose is counted as Daytona's set_labels.
func TestDaytonaKeepLabelCounted(t *testing.T) {
	w := newTwoClouds(t)
	sb, err := w.dsrv.AddSandbox(daytonatest.DefaultOrg, daytonatest.SeedSandbox{Name: "x"})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.daytonaCounted().(provider.Labeler).SetLabels(t.Context(), sb.ID, map[string]string{provider.LabelKeep: "true"}); err != nil {
		t.Fatal(err)
	}
	fams := scrape(t, w.m.Handler())
	if got := sum(fams, "tether_provider_calls_total", "provider", "daytona", "op", "set_labels", "outcome", "ok"); got != 1 {
		t.Errorf("Daytona set_labels: %v, want 1", got)
	}
	if got, _ := w.dsrv.Sandbox(sb.ID); got.Labels[provider.LabelKeep] != "true" {
		t.Errorf("the simulator's sandbox labels: %v", got.Labels)
	}
}

// e2bCounted is the E2B provider as the reaper holds it: counted.
func (w *twoClouds) e2bCounted() provider.Provider {
	p, _ := w.r.Providers.Named(e2b.ProviderName)
	return p
}

// daytonaCounted is the Daytona provider as the reaper holds it: counted.
func (w *twoClouds) daytonaCounted() provider.Provider {
	p, _ := w.r.Providers.Named(daytona.ProviderName)
	return p
}
