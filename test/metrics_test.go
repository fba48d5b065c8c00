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

	"github.com/tether-run/tether/internal/testutil"
	"github.com/tether-run/tether/provider/daytona"
	"github.com/tether-run/tether/provider/daytona/daytonatest"
	"github.com/tether-run/tether/spool"
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
	srv := daytonatest.NewServer()
	t.Cleanup(srv.Close)
	srv.AddKey("metrics-key", daytonatest.DefaultOrg)
	prov := testutil.DaytonaProvider(t, srv, func(c *daytona.Config) { c.APIKey = "metrics-key" })
	dir := shortDir(t, "tmet")
	journal := filepath.Join(dir, "journal.db")
	j, err := spool.Open(journal, spool.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i++ {
		in, _, err := j.Create(t.Context(), spool.NewIntent{Provider: prov.Name(), Account: prov.Account()})
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

	cmd := exec.Command(bin.tether, "run", "--journal", journal, "--socket", filepath.Join(dir, "t.sock"),
		"--spool", filepath.Join(dir, "spool"), "--daytona-proxy=false", "--daytona-autostop", "15",
		"--metrics-addr", "127.0.0.1:0", "--", "sleep", "600")
	cmd.Env = append(os.Environ(), "DAYTONA_API_URL="+srv.URL, "DAYTONA_API_KEY=metrics-key", "TETHER_LOG_FORMAT=text")
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
		{"GET /sandbox/{id} calls", sumSeries(m, "tether_provider_calls_total", `op="get"`), float64(after[daytonatest.RouteGet] - before[daytonatest.RouteGet])},
		{"DELETE calls", sumSeries(m, "tether_provider_calls_total", `op="delete"`), float64(after[daytonatest.RouteDelete] - before[daytonatest.RouteDelete])},
		{"429 answers", sumSeries(m, "tether_provider_calls_total", `outcome="rate_limited"`), float64(limited)},
		{"rate-limit waits", m["tether_rate_limit_waits_total"], float64(limited)},
		{"gone intents", m[`tether_intents{state="gone"}`], n},
		{"cleanup debt", m["tether_unresolved_intents"], 0},
		{"replayed gone", m[`tether_drain_intents_total{state="gone"}`], n},
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
