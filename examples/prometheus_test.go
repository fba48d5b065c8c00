package examples_test

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tether-run/tether/internal/testutil"
	"github.com/tether-run/tether/provider/daytona/daytonatest"
)

// The alerting rules of examples/prometheus are tested twice: by
// promtool's own unit tests (alerts_test.yml), and by a real Prometheus
// scraping a real `tether run` that leaks. Both need Debian's prometheus
// package; CI installs it and sets TETHER_REQUIRE_PROMETHEUS, so there a
// missing binary fails instead of skipping.

func requireTool(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err == nil {
		return p
	}
	if os.Getenv("TETHER_REQUIRE_PROMETHEUS") != "" {
		t.Fatalf("%s is not installed (Debian: apt-get install prometheus) and TETHER_REQUIRE_PROMETHEUS is set", name)
	}
	t.Skipf("SKIP: %s is not installed (Debian: apt-get install prometheus): the alerting rules were not tested", name)
	return ""
}

// TestAlertingRules: promtool checks the configuration and the rules and
// runs the rules' unit tests.
func TestAlertingRules(t *testing.T) {
	t.Parallel()
	promtool := requireTool(t, "promtool")
	for _, args := range [][]string{
		{"check", "config", "prometheus.yml"},
		{"test", "rules", "alerts_test.yml"},
	} {
		cmd := exec.Command(promtool, args...)
		cmd.Dir = "prometheus"
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// leakFor is the `for:` of TetherSandboxesLeftLive in alerts.yml, which
// the test reads rather than assumes.
func leakFor(t *testing.T) time.Duration {
	t.Helper()
	b, err := os.ReadFile("prometheus/alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	m := leakForRule.FindSubmatch(b)
	if m == nil {
		t.Fatal("alerts.yml: no for: in TetherSandboxesLeftLive")
	}
	d, err := time.ParseDuration(string(m[2]))
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// leakForRule finds TetherSandboxesLeftLive's for: in alerts.yml.
var leakForRule = regexp.MustCompile(`(?s)(alert: TetherSandboxesLeftLive\n.*?\n\s+for: )(\S+)\n`)

// testLeakFor is the for: the real-Prometheus test gives the leak alert:
// its expression and labels are the shipped rule's, read from alerts.yml;
// its window is shorter, so the test waits seconds, not a minute. The
// shipped window itself is held by promtool's unit tests (alerts_test.yml),
// which run the rule as shipped on a simulated clock.
const testLeakFor = 10 * time.Second

// rulesWithLeakFor writes alerts.yml into dir with TetherSandboxesLeftLive's
// for: set to d, and returns its path.
func rulesWithLeakFor(t *testing.T, dir string, d time.Duration) string {
	t.Helper()
	b, err := os.ReadFile("prometheus/alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	if leakForRule.Find(b) == nil {
		t.Fatal("alerts.yml: no for: in TetherSandboxesLeftLive")
	}
	b = leakForRule.ReplaceAll(b, []byte("${1}"+d.String()+"\n"))
	path := filepath.Join(dir, "alerts.yml")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestPrometheusSeesALeak: a runner under the real tether holds 3
// sandboxes of an organization whose delete quota (sandbox-lifecycle) is
// spent for an hour after one delete, as a fleet's rollout leaves it. Its
// SIGTERM drains one sandbox; the other two are refused (429, Retry-After
// an hour) until the drain's deadline, and tether exits with them left
// live after lingering for the scrape. A real Prometheus scraping it every
// second with the shipped alerts.yml (the leak alert's for: shortened to testLeakFor): no leak alert while tether runs;
// TetherSandboxesLeftLive pending once it is gone, and firing within its
// for: window, naming the provider, the tether and the 2 left — the 2
// the simulator's record still has running.
func TestPrometheusSeesALeak(t *testing.T) {
	t.Parallel()
	prom := requireTool(t, "prometheus")
	if shipped := leakFor(t); shipped <= testLeakFor {
		t.Fatalf("the shipped leak alert's for: %s is no longer than the test's %s", shipped, testLeakFor)
	}
	forWindow := testLeakFor
	w := newWorld(t, daytonatest.WithRateLimit(daytonatest.ThrottlerSandboxLifecycle, 1, time.Hour))
	w.env = append(w.env, "TETHER_LOG_FORMAT=text")
	w.flags = []string{"--metrics-addr", "127.0.0.1:0", "--metrics-linger", "5s", "--drain-timeout", "3s"}
	p := w.start("tether", "demo", "runner", "--sandboxes", "3", "--label", "leak")
	if got := p.ready(); got != 3 {
		t.Fatalf("the runner created %d sandboxes, want 3; stderr:\n%s", got, p.stderr)
	}
	m := regexp.MustCompile(`msg="serving metrics" addr=(\S+)`).FindStringSubmatch(p.stderr.String())
	if m == nil {
		t.Fatalf("tether does not say where it serves metrics:\n%s", p.stderr)
	}
	target := m[1]

	api := startPrometheus(t, prom, target)
	query := func(q string) []promSample {
		var r struct {
			Data struct {
				Result []promSample `json:"result"`
			} `json:"data"`
		}
		promGet(t, api+"/api/v1/query?query="+q, &r)
		return r.Data.Result
	}
	testutil.Eventually(t, "Prometheus to scrape tether", func() (bool, string) {
		up := query("up")
		return len(up) == 1 && up[0].Value[1] == "1", fmt.Sprintf("up = %v", up)
	})
	if a := leakAlerts(t, api); len(a) != 0 {
		t.Fatalf("leak alert while tether runs with nothing left live: %+v", a)
	}

	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	p.wait()
	exited := time.Now()
	if !strings.Contains(p.stderr.String(), "2 left live") {
		t.Fatalf("tether's drain did not leave 2 live:\n%s", p.stderr)
	}
	live := 0
	for _, sb := range w.sim.Sandboxes() {
		if sb.Labels["run"] == "leak" && !sb.DeleteRequested {
			live++
		}
	}
	if live != 2 {
		t.Fatalf("the simulator has %d sandboxes of the run still running, want 2 (the leak)", live)
	}

	// Firing within for: of the first evaluation that sees the target
	// gone: a scrape interval and an evaluation interval (1 s each) after
	// the exit, and the load's slack.
	bound := exited.Add(forWindow + 30*time.Second)
	var firing promAlert
	for {
		a := leakAlerts(t, api)
		if len(a) == 1 && a[0].State == "firing" {
			firing = a[0]
			break
		}
		if time.Now().After(bound) {
			t.Fatalf("TetherSandboxesLeftLive not firing %s after tether exited (for: %s): %+v", time.Since(exited).Round(time.Second), forWindow, a)
		}
		time.Sleep(500 * time.Millisecond)
	}
	if time.Since(exited) < forWindow {
		t.Fatalf("fired %s after the exit, before its for: %s", time.Since(exited), forWindow)
	}
	if firing.Labels["provider"] != "daytona" || firing.Labels["instance"] != target || firing.Labels["severity"] != "page" {
		t.Errorf("alert labels %v: want provider daytona, instance %s, severity page", firing.Labels, target)
	}
	if want := fmt.Sprintf("%s exited with 2 daytona intents left live", target); firing.Annotations["summary"] != want {
		t.Errorf("summary %q, want %q", firing.Annotations["summary"], want)
	}
	t.Logf("fired %s after tether exited (for: %s)", time.Since(exited).Round(100*time.Millisecond), forWindow)
}

type promSample struct {
	Metric map[string]string `json:"metric"`
	Value  [2]any            `json:"value"`
}

type promAlert struct {
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
	State       string            `json:"state"`
	Value       string            `json:"value"`
}

func leakAlerts(t *testing.T, api string) []promAlert {
	t.Helper()
	var r struct {
		Data struct {
			Alerts []promAlert `json:"alerts"`
		} `json:"data"`
	}
	promGet(t, api+"/api/v1/alerts", &r)
	var out []promAlert
	for _, a := range r.Data.Alerts {
		if a.Labels["alertname"] == "TetherSandboxesLeftLive" {
			out = append(out, a)
		}
	}
	return out
}

func promGet(t *testing.T, url string, v any) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", url, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
}

// startPrometheus runs prometheus scraping target every second under job
// "tether", with the shipped alerts.yml (the leak alert's for: shortened
// to testLeakFor) evaluated every second, and returns its API's base URL.
func startPrometheus(t *testing.T, bin, target string) string {
	t.Helper()
	dir := t.TempDir()
	rules := rulesWithLeakFor(t, dir, testLeakFor)
	cfg := fmt.Sprintf(`global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files: [%q]
scrape_configs:
  - job_name: tether
    static_configs:
      - targets: [%q]
`, rules, target)
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	cmd := exec.Command(bin, "--config.file="+filepath.Join(dir, "prometheus.yml"), "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr, "--log.level=warn")
	var logs testutil.Buffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
		if t.Failed() {
			t.Logf("prometheus:\n%s", logs.String())
		}
	})
	api := "http://" + addr
	testutil.Eventually(t, "Prometheus to be ready", func() (bool, string) {
		select {
		case <-done:
			t.Fatalf("prometheus exited:\n%s", logs.String())
		default:
		}
		resp, err := http.Get(api + "/-/ready")
		if err != nil {
			return false, err.Error()
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, resp.Status
	})
	return api
}
