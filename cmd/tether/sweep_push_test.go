package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tether-run/tether/intent"
	"github.com/tether-run/tether/provider/daytona/daytonatest"
)

// pushgateway is a stand-in for a Prometheus Pushgateway: it keeps each
// PUT's path, content type and body.
type pushgateway struct {
	*httptest.Server
	mu     sync.Mutex
	pushes []push
	status int // answered; 0: 200
}

type push struct{ method, path, contentType, body string }

func newPushgateway(t *testing.T) *pushgateway {
	pg := &pushgateway{}
	pg.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		pg.mu.Lock()
		pg.pushes = append(pg.pushes, push{r.Method, r.URL.Path, r.Header.Get("Content-Type"), string(b)})
		status := pg.status
		pg.mu.Unlock()
		if status != 0 {
			http.Error(w, "pushed metrics are invalid or inconsistent", status)
		}
	}))
	t.Cleanup(pg.Close)
	return pg
}

func (pg *pushgateway) last(t *testing.T) push {
	t.Helper()
	pg.mu.Lock()
	defer pg.mu.Unlock()
	if len(pg.pushes) == 0 {
		t.Fatal("nothing was pushed")
	}
	return pg.pushes[len(pg.pushes)-1]
}

// TestSweepPushesItsOutcome: `tether sweep --metrics-push` PUTs what it
// found to the Pushgateway, in its provider's group, in the text format
// (checked by promtool when installed), for the alerts of
// examples/prometheus/alerts.yml: a dry run's stale sandbox (deleted
// nothing, dry_run 1), then --yes (deleted 1, complete 1); a sweep that
// cannot list the account pushes complete 0; a push refused is logged and
// does not change the sweep's exit.
func TestSweepPushesItsOutcome(t *testing.T) {
	var clock struct {
		sync.Mutex
		off time.Duration
	}
	now := func() time.Time { clock.Lock(); defer clock.Unlock(); return time.Now().Add(clock.off) }
	srv := daytonatest.NewServer(daytonatest.WithClock(now))
	defer srv.Close()
	env := []string{"DAYTONA_API_URL=" + srv.URL, "DAYTONA_API_KEY=" + daytonatest.DefaultKey, "DAYTONA_JWT_TOKEN="}
	clock.Lock()
	clock.off = -3 * 24 * time.Hour
	clock.Unlock()
	stale, _ := srv.AddSandbox(daytonatest.DefaultOrg, daytonatest.SeedSandbox{Name: "tether-stale", Labels: map[string]string{intent.LabelOwner: "01owner", intent.LabelIntent: "a"}})
	clock.Lock()
	clock.off = 0
	clock.Unlock()

	pg := newPushgateway(t)
	job := pg.URL + "/metrics/job/tether_sweep"
	sweep := func(extra ...string) (string, int) {
		_, errOut, code := tetherCmd(t, env, append([]string{"sweep", "--older-than", "24h", "--idle-for", "1h", "--metrics-push", job}, extra...)...)
		return errOut, code
	}
	want := func(p push, values map[string]string) {
		t.Helper()
		if p.method != http.MethodPut || p.path != "/metrics/job/tether_sweep/provider/daytona" || !strings.HasPrefix(p.contentType, "text/plain; version=0.0.4") {
			t.Fatalf("push %s %s (%s), want PUT /metrics/job/tether_sweep/provider/daytona in the text format", p.method, p.path, p.contentType)
		}
		got := map[string]string{}
		for _, l := range strings.Split(p.body, "\n") {
			if f := strings.Fields(l); len(f) == 2 && !strings.HasPrefix(l, "#") {
				got[f[0]] = f[1]
			}
		}
		for k, v := range values {
			if got[k] != v {
				t.Errorf("%s = %q, want %q; body:\n%s", k, got[k], v, p.body)
			}
		}
		if ts := got["tether_sweep_last_run_timestamp_seconds"]; !strings.HasPrefix(ts, "1.") || !strings.Contains(ts, "e+09") {
			t.Errorf("last run timestamp %q: want the Unix time in seconds", ts)
		}
		checkMetricsText(t, p.body)
	}

	if errOut, code := sweep(); code != 0 {
		t.Fatalf("dry run: exit %d: %s", code, errOut)
	}
	want(pg.last(t), map[string]string{"tether_sweep_stale_sandboxes": "1", "tether_sweep_deleted_sandboxes": "0",
		"tether_sweep_failed_sandboxes": "0", "tether_sweep_dry_run": "1", "tether_sweep_complete": "1", "tether_sweep_listed_sandboxes": "1"})
	if sb, _ := srv.Sandbox(stale.ID); sb.DeleteRequested {
		t.Fatal("the dry run deleted the stale sandbox")
	}

	if errOut, code := sweep("--yes"); code != 0 {
		t.Fatalf("--yes: exit %d: %s", code, errOut)
	}
	want(pg.last(t), map[string]string{"tether_sweep_stale_sandboxes": "1", "tether_sweep_deleted_sandboxes": "1",
		"tether_sweep_failed_sandboxes": "0", "tether_sweep_dry_run": "0", "tether_sweep_complete": "1"})

	// The account cannot be listed: the sweep fails, and says so.
	srv.RemoveKey(daytonatest.DefaultKey)
	if _, code := sweep("--yes"); code == 0 {
		t.Fatal("a sweep with a revoked key exited 0")
	}
	want(pg.last(t), map[string]string{"tether_sweep_complete": "0", "tether_sweep_stale_sandboxes": "0"})

	// A Pushgateway that refuses the push: logged, the sweep's exit is its own.
	srv.AddKey(daytonatest.DefaultKey, daytonatest.DefaultOrg)
	pg.mu.Lock()
	pg.status = http.StatusBadRequest
	pg.mu.Unlock()
	errOut, code := sweep()
	if code != 0 || !strings.Contains(errOut, "metrics push failed") || !strings.Contains(errOut, "HTTP 400") {
		t.Fatalf("refused push: exit %d, stderr:\n%s", code, errOut)
	}

	// Not a Pushgateway job URL: a usage error before anything is listed.
	before := srv.Calls()[daytonatest.RouteList]
	_, errOut, code = tetherCmd(t, env, "sweep", "--metrics-push", "http://user:secret@pushgateway:9091/metrics")
	if code != exitCodeUsage || !strings.Contains(errOut, "--metrics-push") || strings.Contains(errOut, "secret") {
		t.Fatalf("bad push URL: exit %d, stderr:\n%s", code, errOut)
	}
	if srv.Calls()[daytonatest.RouteList] != before {
		t.Fatal("a sweep with a bad --metrics-push listed the account")
	}
}

// checkMetricsText runs `promtool check metrics` on body when promtool is
// installed (CI installs it): the Pushgateway refuses what it cannot parse.
func checkMetricsText(t *testing.T, body string) {
	t.Helper()
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("TETHER_REQUIRE_PROMETHEUS") != "" {
			t.Fatal("promtool is not installed (Debian: apt-get install prometheus) and TETHER_REQUIRE_PROMETHEUS is set")
		}
		return
	}
	cmd := exec.Command(promtool, "check", "metrics")
	cmd.Stdin = strings.NewReader(body)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("promtool check metrics: %v: %s\nbody:\n%s", err, out, body)
	}
}
