package doctor_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tether-run/tether/internal/doctor"
	"github.com/tether-run/tether/provider/daytona/daytonatest"
	"github.com/tether-run/tether/provider/e2b/e2btest"
)

// e2bSim is a simulated E2B team, and the E2B environment that names it.
func e2bSim(t *testing.T) (*e2btest.Server, map[string]string) {
	t.Helper()
	srv := e2btest.NewServer()
	t.Cleanup(srv.Close)
	return srv, map[string]string{"E2B_API_KEY": e2btest.DefaultKey, "E2B_API_URL": srv.URL}
}

// runE2B is run with E2B's environment env over the process's (tether's
// own E2B settings, TETHER_E2B_*, from the process's: sim clears them).
func runE2B(t *testing.T, live bool, env map[string]string) doctor.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	getenv := func(k string) string {
		if v, ok := env[k]; ok {
			return v
		}
		return os.Getenv(k)
	}
	return doctor.Run(ctx, doctor.Options{Journal: filepath.Join(t.TempDir(), "state", "journal.db"), Live: live,
		LiveTimeout: 30 * time.Second, CleanupTimeout: 10 * time.Second, CallTimeout: 5 * time.Second, Getenv: getenv})
}

func names(res doctor.Result) []string {
	var out []string
	for _, s := range res.Steps {
		out = append(out, s.Name)
	}
	return out
}

// TestDoctorE2B: beside a healthy Daytona, a healthy E2B team: its key,
// URL, one authenticated read and tether's settings, each its own line
// after Daytona's; by the simulator's record, one list and nothing else.
func TestDoctorE2B(t *testing.T) {
	dsrv := sim(t)
	dsrv.AddKey(key, daytonatest.DefaultOrg)
	srv, env := e2bSim(t)
	res := runE2B(t, false, env)
	if res.Failed() {
		t.Fatalf("failed: %+v", res.Steps)
	}
	want := "credentials,api url,tls,api,permissions,rate limits,e2b key,e2b api url,e2b api,e2b settings,journal"
	if got := strings.Join(names(res), ","); got != want {
		t.Errorf("steps %s, want %s", got, want)
	}
	for _, w := range []struct{ name, says string }{
		{"e2b key", "E2B_API_KEY (e2b_"},
		{"e2b api url", srv.URL + " (E2B_API_URL)"},
		{"e2b api", "an authenticated list"},
		{"e2b settings", "--e2b-max-timeout 1h0m0s"},
	} {
		if s := step(t, res, w.name); s.Verdict != doctor.Pass || !strings.Contains(s.Detail, w.says) {
			t.Errorf("%s: %s %q, want ok saying %q", w.name, s.Verdict, s.Detail, w.says)
		}
	}
	if s := step(t, res, "e2b api"); s.Latency <= 0 {
		t.Error("e2b api: no latency")
	}
	calls := srv.Calls()
	if calls[e2btest.RouteList] != 1 || len(srv.Sandboxes()) != 0 {
		t.Errorf("the E2B team after the doctor: calls %v, %d sandboxes", calls, len(srv.Sandboxes()))
	}
}

// TestDoctorE2BFailures: each broken E2B setup fails on its own line and
// says what kind of failure it is, the Daytona lines as they were.
func TestDoctorE2BFailures(t *testing.T) {
	dsrv := sim(t)
	dsrv.AddKey(key, daytonatest.DefaultOrg)
	dead := e2btest.NewServer()
	deadURL := dead.URL
	dead.Close()
	for _, c := range []struct {
		name      string
		env       func(map[string]string)
		prepare   func(*e2btest.Server)
		settings  string // TETHER_E2B_MAX_TIMEOUT
		step      string
		verdict   doctor.Verdict
		says      string
		noListing bool
	}{
		{name: "a key E2B refuses (401)", env: func(e map[string]string) { e["E2B_API_KEY"] = "e2b_revoked_0123456789" },
			step: "e2b api", verdict: doctor.Fail, says: "the credentials are refused"},
		{name: "unreachable", env: func(e map[string]string) { e["E2B_API_URL"] = deadURL },
			step: "e2b api", verdict: doctor.Fail, says: "unreachable", noListing: true},
		{name: "rate limited (429)", prepare: func(s *e2btest.Server) { s.FailNext(e2btest.RouteList, 429, 1) },
			step: "e2b api", verdict: doctor.Fail, says: "rate limited, try again later"},
		{name: "not a URL", env: func(e map[string]string) { e["E2B_API_URL"] = "ftp://example.com" },
			step: "e2b api url", verdict: doctor.Fail, says: "E2B_API_URL", noListing: true},
		{name: "a domain without a key", env: func(e map[string]string) {
			delete(e, "E2B_API_KEY")
			delete(e, "E2B_API_URL")
			e["E2B_DOMAIN"] = "e2b.example"
		},
			step: "e2b key", verdict: doctor.Fail, says: "set E2B_API_KEY", noListing: true},
		{name: "plain http off this host", env: func(e map[string]string) { e["E2B_API_URL"] = "http://e2b.example:1" },
			step: "e2b api url", verdict: doctor.Warn, says: "plain http", noListing: true},
		{name: "tether's settings refused", settings: "1s",
			step: "e2b settings", verdict: doctor.Fail, says: "at least 15s"},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv, env := e2bSim(t)
			if c.env != nil {
				c.env(env)
			}
			if c.prepare != nil {
				c.prepare(srv)
			}
			if c.settings != "" {
				t.Setenv("TETHER_E2B_MAX_TIMEOUT", c.settings)
			}
			res := runE2B(t, false, env)
			if s := step(t, res, c.step); s.Verdict != c.verdict || !strings.Contains(s.Detail, c.says) {
				t.Errorf("%s: %s %q, want %s saying %q", c.step, s.Verdict, s.Detail, c.verdict, c.says)
			}
			if c.verdict == doctor.Fail && !res.Failed() {
				t.Error("the doctor did not fail")
			}
			if s := step(t, res, "api"); s.Verdict != doctor.Pass {
				t.Errorf("Daytona's api: %s %q", s.Verdict, s.Detail)
			}
			if n := srv.Calls()[e2btest.RouteList]; c.noListing && n != 0 {
				t.Errorf("%d lists of the simulated team, want none", n)
			}
		})
	}
}

// TestDoctorWithoutE2B: no E2B variable, no E2B line: Daytona's checks
// alone, as they always were.
func TestDoctorWithoutE2B(t *testing.T) {
	dsrv := sim(t)
	dsrv.AddKey(key, daytonatest.DefaultOrg)
	res := runE2B(t, false, map[string]string{"E2B_DEBUG": "true"})
	if got := strings.Join(names(res), ","); got != "credentials,api url,tls,api,permissions,rate limits,journal" || res.Failed() {
		t.Fatalf("steps %s (failed %v)", got, res.Failed())
	}
}

// TestDoctorE2BAlone: E2B configured and no Daytona setting: Daytona is
// not checked (tether run guards E2B alone), the round trip is not made,
// and nothing fails.
func TestDoctorE2BAlone(t *testing.T) {
	dsrv := sim(t)
	for _, v := range []string{"DAYTONA_API_KEY", "DAYTONA_API_URL"} {
		t.Setenv(v, "")
	}
	_, env := e2bSim(t)
	res := runE2B(t, true, env)
	if res.Failed() || step(t, res, "credentials").Verdict != doctor.Skip || step(t, res, "live").Verdict != doctor.Skip || step(t, res, "e2b api").Verdict != doctor.Pass {
		t.Fatalf("steps %+v", res.Steps)
	}
	if len(dsrv.Calls()) != 0 {
		t.Errorf("Daytona was called: %v", dsrv.Calls())
	}
}
