package e2e_test

import (
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tether-run/tether/intent"
	"github.com/tether-run/tether/internal/testutil"
	"github.com/tether-run/tether/journal"
	"github.com/tether-run/tether/provider/daytona"
	"github.com/tether-run/tether/provider/daytona/daytonatest"
	"github.com/tether-run/tether/provider/e2b"
	"github.com/tether-run/tether/provider/e2b/e2btest"
)

// scrapeText reads addr's /metrics and returns each sample line's value by
// its series (name plus labels, as printed).
func scrapeText(t *testing.T, addr string) map[string]float64 {
	t.Helper()
	hc := &http.Client{Timeout: testutil.WaitBound}
	resp, err := hc.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	out := map[string]float64{}
	for _, line := range strings.Split(string(b), "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("metrics line %q: %v", line, err)
		}
		out[line[:i]] = v
	}
	return out
}

// sumSeries adds the series of name whose labels contain every fragment.
func sumSeries(m map[string]float64, name string, fragments ...string) float64 {
	total := 0.0
next:
	for k, v := range m {
		if k != name && !strings.HasPrefix(k, name+"{") {
			continue
		}
		for _, f := range fragments {
			if !strings.Contains(k, f) {
				continue next
			}
		}
		total += v
	}
	return total
}

// TestRunMetricsAfterAReplayWithFaults: tether run --metrics-addr on a
// journal an earlier run left with live intents; the boot replay drains
// them through 429s and 503s, and a scrape of the real binary's endpoint
// matches what the simulated Daytona counted.
func TestRunMetricsAfterAReplayWithFaults(t *testing.T) {
	const n = 12
	t.Parallel()
	srv, _ := testutil.Daytona(t)
	srv.AddKey("metrics-key", daytonatest.DefaultOrg)
	prov := testutil.DaytonaProvider(t, srv, func(c *daytona.Config) { c.APIKey = "metrics-key" })
	dir := shortDir(t, "tmet")
	journalPath := filepath.Join(dir, "journal.db")
	j, err := journal.Open(journalPath, journal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i++ {
		in, _, err := j.Create(t.Context(), intent.Declaration{Provider: prov.Name(), Account: prov.Account()})
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
	j.Close()
	before := srv.Calls()
	srv.SetFaults(daytonatest.Faults{Seed: 11, Rate429: 0.15, Rate5xx: 0.15, RetryAfter: time.Second})

	addr := runWithMetrics(t, dir, journalPath, "DAYTONA_API_URL="+srv.URL, "DAYTONA_API_KEY=metrics-key")

	var m map[string]float64
	testutil.WaitFor(t, "the replay to end", func() bool {
		m = scrapeText(t, addr)
		return m["tether_replay_duration_seconds_count"] == 1
	})
	srv.SetFaults(daytonatest.Faults{})
	after := srv.Calls()
	limited := 0
	for _, v := range srv.Throttle().Refused {
		limited += v
	}
	for _, c := range []struct {
		what      string
		got, want float64
	}{
		{"GET /sandbox/{id} calls", sumSeries(m, "tether_provider_calls_total", `provider="daytona"`, `op="get"`), float64(after[daytonatest.RouteGet] - before[daytonatest.RouteGet])},
		{"DELETE calls", sumSeries(m, "tether_provider_calls_total", `provider="daytona"`, `op="delete"`), float64(after[daytonatest.RouteDelete] - before[daytonatest.RouteDelete])},
		{"429 answers", sumSeries(m, "tether_provider_calls_total", `provider="daytona"`, `outcome="rate_limited"`), float64(limited)},
		{"rate-limit waits", m[`tether_rate_limit_waits_total{provider="daytona"}`], float64(limited)},
		{"gone intents", m[`tether_intents{provider="daytona",state="gone"}`], n},
		{"cleanup debt", sumSeries(m, "tether_unresolved_intents"), 0},
		{"replayed gone", m[`tether_drain_intents_total{provider="daytona",state="gone"}`], n},
	} {
		if c.got != c.want {
			t.Errorf("%s: scraped %v, the simulator or journal says %v", c.what, c.got, c.want)
		}
	}
	if limited == 0 || sumSeries(m, "tether_provider_calls_total", `outcome="unavailable"`) == 0 {
		t.Fatalf("the faults did not bite (429s: %d): the test proves nothing", limited)
	}
	for _, sb := range srv.Sandboxes() {
		if sb.State != "destroyed" {
			t.Errorf("sandbox %s is %s after the replay", sb.ID, sb.State)
		}
	}
}

// runWithMetrics starts tether run --metrics-addr on journal with env
// added (the providers' variables) and a child that sleeps, and returns
// the endpoint's address.
func runWithMetrics(t *testing.T, dir, journalPath string, env ...string) string {
	t.Helper()
	cmd := exec.Command(bin.tether, "run", "--journal", journalPath, "--socket", filepath.Join(dir, "t.sock"),
		"--spool", filepath.Join(dir, "spool"), "--daytona-proxy=false", "--daytona-autostop", "15",
		"--metrics-addr", "127.0.0.1:0", "--", "sleep", "600")
	cmd.Env = append(append(os.Environ(), env...), "TETHER_LOG_FORMAT=text")
	p := testutil.Start(t, cmd)
	t.Cleanup(func() { p.Stop(syscall.SIGTERM) })
	addrRE := regexp.MustCompile(`msg="serving metrics" addr=(\S+)`)
	addr := ""
	testutil.WaitFor(t, "tether to say where it serves metrics", func() bool {
		if m := addrRE.FindStringSubmatch(p.Stderr.String()); m != nil {
			addr = m[1]
		}
		return addr != "" || p.Exited()
	})
	if addr == "" {
		t.Fatalf("tether exited without serving metrics:\n%s", p.Stderr)
	}
	return addr
}

// TestRunMetricsSplitByProvider: tether run guarding both clouds, on a
// journal an earlier run left with live intents of each; E2B answers 429
// twice, then 401 to every kill (its key no longer allowed to), Daytona
// answers well. The scrape after the boot replay shows each cloud apart:
// E2B's 429s and 401s and its intents left live are E2B's, Daytona's
// intents are gone and none of its calls failed; each provider's calls are
// what its own simulator saw.
func TestRunMetricsSplitByProvider(t *testing.T) {
	const n = 3
	t.Parallel()
	dsrv, day := testutil.Daytona(t)
	esrv, ep := testutil.E2B(t)
	dir := shortDir(t, "tmsp")
	journalPath := filepath.Join(dir, "journal.db")
	j, err := journal.Open(journalPath, journal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for range n {
		for _, name := range []string{daytona.ProviderName, e2b.ProviderName} {
			acct := day.Account()
			if name == e2b.ProviderName {
				acct = ep.Account()
			}
			in, _, err := j.Create(t.Context(), intent.Declaration{Provider: name, Account: acct})
			if err != nil {
				t.Fatal(err)
			}
			var id string
			if name == e2b.ProviderName {
				sb, err := ep.Create(t.Context(), in.Name, in.Labels, e2b.CreateOptions{Timeout: 50 * time.Minute})
				if err != nil {
					t.Fatal(err)
				}
				id = sb.ID
			} else {
				sb, err := day.Create(t.Context(), in.Name, in.Labels, nil)
				if err != nil {
					t.Fatal(err)
				}
				id = sb.ID
			}
			if _, err := j.Observe(in.ID, id); err != nil {
				t.Fatal(err)
			}
		}
	}
	j.Close()
	dBefore, eBefore := dsrv.Calls(), esrv.Calls()
	const limited = 2
	esrv.Inject(e2btest.RouteKill, limited, e2btest.Scripted{Status: http.StatusTooManyRequests, RetryAfter: time.Second})
	esrv.Inject(e2btest.RouteKill, 100, e2btest.Scripted{Status: http.StatusUnauthorized, Message: "Invalid API key"})

	addr := runWithMetrics(t, dir, journalPath, append(testutil.DaytonaEnv(dsrv), testutil.E2BEnv(esrv)...)...)
	var m map[string]float64
	testutil.WaitFor(t, "the replay to end and each provider's check", func() bool {
		m = scrapeText(t, addr)
		return m["tether_replay_duration_seconds_count"] == 1 &&
			sumSeries(m, "tether_provider_calls_total", `provider="daytona"`, `op="check"`) == 1 &&
			sumSeries(m, "tether_provider_calls_total", `provider="e2b"`, `op="check"`) == 1
	})
	dAfter, eAfter := dsrv.Calls(), esrv.Calls()
	total := func(before, after map[string]int) float64 {
		n := 0
		for route, k := range after {
			n += k - before[route]
		}
		return float64(n)
	}
	dSaw := func(route string) float64 { return float64(dAfter[route] - dBefore[route]) }
	eSaw := func(route string) float64 { return float64(eAfter[route] - eBefore[route]) }
	calls := func(fragments ...string) float64 { return sumSeries(m, "tether_provider_calls_total", fragments...) }
	for _, c := range []struct {
		what      string
		got, want float64
	}{
		{"every Daytona call", calls(`provider="daytona"`), total(dBefore, dAfter)},
		{"every E2B call", calls(`provider="e2b"`), total(eBefore, eAfter)},
		{"Daytona GET /sandbox/{id}", calls(`provider="daytona"`, `op="get"`), dSaw(daytonatest.RouteGet)},
		{"Daytona DELETE", calls(`provider="daytona"`, `op="delete"`), dSaw(daytonatest.RouteDelete)},
		{"Daytona calls not ok", calls(`provider="daytona"`) - calls(`provider="daytona"`, `outcome="ok"`) - calls(`provider="daytona"`, `outcome="not_found"`), 0},
		{"E2B GET /sandboxes/{id}", calls(`provider="e2b"`, `op="get"`), eSaw(e2btest.RouteGet)},
		{"E2B DELETE (kill)", calls(`provider="e2b"`, `op="delete"`), eSaw(e2btest.RouteKill)},
		{"E2B 429s", calls(`provider="e2b"`, `outcome="rate_limited"`), limited},
		{"E2B 401s", calls(`provider="e2b"`, `outcome="unauthorized"`), eSaw(e2btest.RouteKill) - limited},
		{"E2B rate-limit waits", m[`tether_rate_limit_waits_total{provider="e2b"}`], limited},
		{"Daytona rate-limit waits", m[`tether_rate_limit_waits_total{provider="daytona"}`], 0},
		{"Daytona's intents gone", m[`tether_drain_intents_total{provider="daytona",state="gone"}`], n},
		{"E2B's intents gone", m[`tether_drain_intents_total{provider="e2b",state="gone"}`], 0},
		{"E2B's intents left live", m[`tether_drain_intents_total{provider="e2b",state="live"}`], n},
		{"Daytona's cleanup debt", m[`tether_unresolved_intents{provider="daytona"}`], 0},
		{"E2B's cleanup debt", m[`tether_unresolved_intents{provider="e2b"}`], n},
		{"E2B's live intents in the journal", m[`tether_intents{provider="e2b",state="pending"}`] + m[`tether_intents{provider="e2b",state="observed"}`] + m[`tether_intents{provider="e2b",state="releasing"}`], n},
		{"E2B's gone intents in the journal", m[`tether_intents{provider="e2b",state="gone"}`], 0},
		{"Daytona's gone intents in the journal", m[`tether_intents{provider="daytona",state="gone"}`], n},
	} {
		if c.got != c.want {
			t.Errorf("%s: scraped %v, the simulator or journal says %v", c.what, c.got, c.want)
		}
	}
	if calls(`provider="e2b"`, `outcome="unauthorized"`) == 0 {
		t.Fatal("no E2B call was refused: the test proves nothing")
	}
	for _, sb := range dsrv.Sandboxes() {
		if sb.State != "destroyed" {
			t.Errorf("Daytona sandbox %s is %s after the replay", sb.ID, sb.State)
		}
	}
	if live := esrv.Live(); live != n {
		t.Errorf("E2B runs %d sandboxes, want the %d its refused kills left", live, n)
	}
}

// TestRunMetricsE2BKeyExpired: tether run with Daytona's key good and
// E2B's unknown to E2B (expired): the check at start shows E2B refusing
// it, as E2B's, and Daytona's check as passed.
func TestRunMetricsE2BKeyExpired(t *testing.T) {
	t.Parallel()
	dsrv, _ := testutil.Daytona(t)
	esrv, _ := testutil.E2B(t)
	esrv.RemoveKey(e2btest.DefaultKey)
	dir := shortDir(t, "tmex")
	addr := runWithMetrics(t, dir, filepath.Join(dir, "journal.db"),
		append(testutil.DaytonaEnv(dsrv), testutil.E2BEnv(esrv)...)...)
	refused := `tether_provider_calls_total{provider="e2b",op="check",outcome="unauthorized"}`
	var m map[string]float64
	testutil.WaitFor(t, "E2B's check to be counted", func() bool {
		m = scrapeText(t, addr)
		return m[refused] > 0
	})
	if m[refused] != float64(esrv.Calls()[e2btest.RouteList]) {
		t.Errorf("E2B refused %v checks; the simulator saw %d lists", m[refused], esrv.Calls()[e2btest.RouteList])
	}
	if got := sumSeries(m, "tether_provider_calls_total", `provider="daytona"`, `outcome="unauthorized"`); got != 0 {
		t.Errorf("Daytona's calls refused: %v; its key is good", got)
	}
	testutil.WaitFor(t, "Daytona's check to be counted", func() bool {
		m = scrapeText(t, addr)
		return m[`tether_provider_calls_total{provider="daytona",op="check",outcome="ok"}`] == 1
	})
}
